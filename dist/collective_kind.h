// What a collective is, as the host backends (dist/gloo_communicator.cc, dist/shm_communicator.cc)
// name it in their headers and error messages, so a rank that calls a different collective than
// its peers is told which ("rank 1 is in broadcast(root 0) #12").
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "dist/communicator.h"

namespace strata::dist::collective {

enum class Kind : uint16_t {
  kConnectCheck = 1,
  kAllToAllV,
  kAllToAll,
  kAllReduce,
  kAllGather,
  kBroadcast,
  kBarrier,
};

inline const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kConnectCheck:
      return "connect check";
    case Kind::kAllToAllV:
      return "all-to-all-v";
    case Kind::kAllToAll:
      return "all-to-all";
    case Kind::kAllReduce:
      return "all-reduce";
    case Kind::kAllGather:
      return "all-gather";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kBarrier:
      return "barrier";
  }
  return "unknown collective";
}

// The argument that must agree across ranks: broadcast root, or all-reduce op and type.
enum : uint32_t { kTypeInt64 = 1, kTypeFloat = 2 };
inline uint32_t ReduceArg(ReduceOp op, uint32_t type) {
  return (type << 8) | static_cast<uint32_t>(op);
}

inline std::string Describe(Kind kind, uint32_t arg) {
  if (kind == Kind::kBroadcast) return absl::StrCat("broadcast(root ", arg, ")");
  if (kind == Kind::kAllReduce) {
    const char* op = (arg & 0xff) == static_cast<uint32_t>(ReduceOp::kSum) ? "sum" : "max";
    return absl::StrCat("all-reduce(", op, ", ", (arg >> 8) == kTypeInt64 ? "int64" : "f32", ")");
  }
  return KindName(kind);
}

}  // namespace strata::dist::collective
