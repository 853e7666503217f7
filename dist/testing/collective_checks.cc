#include "dist/testing/collective_checks.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace strata::dist::testing {
namespace {

// ---- inputs every rank can compute for every other rank -----------------------------------

// Bytes rank `from` sends to rank `to` in the all-to-all-v test: uneven, zero for some pairs
// (including some self pairs), and some larger than the per-round part of a 4 KiB buffer.
int64_t PartBytes(int from, int to, int64_t scale) {
  if ((from + 2 * to) % 3 == 0) return 0;
  return (1 + (from * 37 + to * 11) % 53) * scale;
}
char PartByte(int from, int to, int64_t i) {
  return static_cast<char>(from * 31 + to * 17 + i + i / 251);
}

int64_t IntInput(int rank, int64_t i) { return (rank + 1) * 1000003 + (rank % 2 ? -i : i * 3); }
float FloatInput(int rank, int64_t i) {
  return static_cast<float>((rank * 131 + i * 7) % 1000) / 7.0f - 50.0f + 1e-3f * rank;
}

}  // namespace

// Failure description for the rank's report ("" when fine).
std::string Describe(const absl::Status& status, const char* what) {
  return status.ok() ? "" : absl::StrCat(what, ": ", status.ToString(), "\n");
}

std::string CheckAllToAllV(Communicator& comm, int64_t scale) {
  const int n = comm.world_size();
  const int self = comm.rank();
  std::vector<int64_t> send_bytes(n), recv_bytes(n);
  std::vector<char> send, expected;
  for (int p = 0; p < n; ++p) {
    send_bytes[p] = PartBytes(self, p, scale);
    recv_bytes[p] = PartBytes(p, self, scale);
    for (int64_t i = 0; i < send_bytes[p]; ++i) send.push_back(PartByte(self, p, i));
    for (int64_t i = 0; i < recv_bytes[p]; ++i) expected.push_back(PartByte(p, self, i));
  }
  std::vector<char> recv(expected.size() + 1, '\x7f');
  std::string error =
      Describe(comm.AllToAllV(send.data(), send_bytes.data(), recv.data(), recv_bytes.data()),
               "all-to-all-v");
  if (!error.empty()) return error;
  if (std::memcmp(recv.data(), expected.data(), expected.size()) != 0) {
    return absl::StrCat("all-to-all-v scale ", scale, ": received bytes differ\n");
  }
  if (recv.back() != '\x7f') return "all-to-all-v wrote past the received bytes\n";
  return "";
}

std::string CheckAllToAll(Communicator& comm, int64_t bytes) {
  const int n = comm.world_size();
  std::vector<char> send(n * bytes), recv(n * bytes + 1, '\x7f');
  for (int p = 0; p < n; ++p) {
    for (int64_t i = 0; i < bytes; ++i) send[p * bytes + i] = PartByte(comm.rank(), p, i);
  }
  std::string error = Describe(comm.AllToAll(send.data(), recv.data(), bytes), "all-to-all");
  if (!error.empty()) return error;
  for (int p = 0; p < n; ++p) {
    for (int64_t i = 0; i < bytes; ++i) {
      if (recv[p * bytes + i] != PartByte(p, comm.rank(), i)) {
        return absl::StrCat("all-to-all ", bytes, ": wrong byte ", i, " from rank ", p, "\n");
      }
    }
  }
  if (recv.back() != '\x7f') return "all-to-all wrote past the end\n";
  return "";
}

std::string CheckAllReduceInt(Communicator& comm, int64_t count, ReduceOp op) {
  std::vector<int64_t> data(count);
  for (int64_t i = 0; i < count; ++i) data[i] = IntInput(comm.rank(), i);
  std::string error = Describe(comm.AllReduce(data.data(), count, op), "all-reduce int64");
  if (!error.empty()) return error;
  for (int64_t i = 0; i < count; ++i) {
    int64_t expected = IntInput(0, i);
    for (int r = 1; r < comm.world_size(); ++r) {
      expected =
          op == ReduceOp::kSum ? expected + IntInput(r, i) : std::max(expected, IntInput(r, i));
    }
    if (data[i] != expected) {
      return absl::StrCat("all-reduce int64 count ", count, ": element ", i, " is ", data[i],
                          ", expected ", expected, "\n");
    }
  }
  return "";
}

// Float sums must equal the sum folded in rank order 0..n-1 exactly, and (checked with an
// all-gather of the results) be bitwise identical on every rank.
std::string CheckAllReduceFloat(Communicator& comm, int64_t count, ReduceOp op) {
  std::vector<float> data(count);
  for (int64_t i = 0; i < count; ++i) data[i] = FloatInput(comm.rank(), i);
  std::string error = Describe(comm.AllReduce(data.data(), count, op), "all-reduce f32");
  if (!error.empty()) return error;
  for (int64_t i = 0; i < count; ++i) {
    float expected = FloatInput(0, i);
    for (int r = 1; r < comm.world_size(); ++r) {
      expected =
          op == ReduceOp::kSum ? expected + FloatInput(r, i) : std::max(expected, FloatInput(r, i));
    }
    if (std::memcmp(&data[i], &expected, sizeof(float)) != 0) {
      return absl::StrCat("all-reduce f32 count ", count, ": element ", i, " is ", data[i],
                          ", expected ", expected, "\n");
    }
  }
  const int64_t bytes = count * static_cast<int64_t>(sizeof(float));
  std::vector<char> all(comm.world_size() * bytes);
  error = Describe(comm.AllGather(data.data(), bytes, all.data()), "all-gather of results");
  if (!error.empty()) return error;
  for (int r = 0; r < comm.world_size(); ++r) {
    if (std::memcmp(all.data() + r * bytes, data.data(), bytes) != 0) {
      return absl::StrCat("all-reduce f32 count ", count, ": rank ", r, "'s result differs\n");
    }
  }
  return "";
}

std::string CheckAllGather(Communicator& comm, int64_t bytes) {
  const int n = comm.world_size();
  std::vector<char> send(bytes), recv(n * bytes + 1, '\x7f');
  for (int64_t i = 0; i < bytes; ++i) send[i] = PartByte(comm.rank(), 0, i);
  std::string error = Describe(comm.AllGather(send.data(), bytes, recv.data()), "all-gather");
  if (!error.empty()) return error;
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < bytes; ++i) {
      if (recv[r * bytes + i] != PartByte(r, 0, i)) {
        return absl::StrCat("all-gather ", bytes, ": wrong byte ", i, " of rank ", r, "\n");
      }
    }
  }
  if (recv.back() != '\x7f') return "all-gather wrote past the end\n";
  return "";
}

std::string CheckBroadcast(Communicator& comm, int root, int64_t bytes) {
  std::vector<char> data(bytes);
  for (int64_t i = 0; i < bytes; ++i) {
    data[i] = comm.rank() == root ? PartByte(root, 9, i) : '\0';
  }
  std::string error = Describe(comm.Broadcast(data.data(), bytes, root), "broadcast");
  if (!error.empty()) return error;
  for (int64_t i = 0; i < bytes; ++i) {
    if (data[i] != PartByte(root, 9, i)) {
      return absl::StrCat("broadcast ", bytes, " from ", root, ": wrong byte ", i, "\n");
    }
  }
  return "";
}

// Many short collectives back to back: a fast rank reusing a half too early would corrupt a
// slower rank's result.
std::string CheckBackToBack(Communicator& comm) {
  for (int iteration = 0; iteration < 300; ++iteration) {
    int64_t values[3] = {comm.rank() + iteration, 1, -comm.rank()};
    std::string error = Describe(comm.AllReduce(values, 3, ReduceOp::kSum), "all-reduce");
    if (!error.empty()) return error;
    const int64_t n = comm.world_size();
    if (values[0] != n * (n - 1) / 2 + n * iteration || values[1] != n ||
        values[2] != -n * (n - 1) / 2) {
      return absl::StrCat("back-to-back all-reduce ", iteration, ": wrong sums\n");
    }
    int64_t token = comm.rank() == iteration % n ? iteration : -1;
    error = Describe(comm.Broadcast(&token, sizeof(token), iteration % n), "broadcast");
    if (!error.empty()) return error;
    if (token != iteration) return absl::StrCat("back-to-back broadcast ", iteration, "\n");
  }
  return "";
}

std::string CheckEveryCollective(Communicator& comm) {
  Communicator& c = comm;
  const int world_size = c.world_size();
  std::string errors;
  errors += CheckAllToAllV(c, 1);
  errors += CheckAllToAllV(c, 97);  // parts up to 5 KiB: several rounds
  errors += CheckAllToAll(c, 24);
  errors += CheckAllToAll(c, 3001);
  errors += CheckAllToAll(c, 0);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    errors += CheckAllReduceInt(c, 7, op);
    errors += CheckAllReduceInt(c, 2011, op);  // 16 KiB: 8 rounds of 2 KiB halves
    errors += CheckAllReduceFloat(c, 5, op);
    errors += CheckAllReduceFloat(c, 7168, op);
  }
  errors += CheckAllReduceInt(c, 0, ReduceOp::kSum);
  errors += CheckAllReduceFloat(c, 1, ReduceOp::kSum);  // fewer elements than ranks
  errors += CheckAllGather(c, 13);
  errors += CheckAllGather(c, 5000);
  errors += CheckAllGather(c, 0);
  for (int root = 0; root < world_size; ++root) errors += CheckBroadcast(c, root, 1000);
  errors += CheckBroadcast(c, world_size - 1, 9000);
  errors += CheckBroadcast(c, 0, 0);
  errors += Describe(c.Barrier(), "barrier");
  errors += CheckAllToAllV(c, 3);  // again: steps and halves keep calls apart
  errors += CheckBackToBack(c);
  return errors;
}

}  // namespace strata::dist::testing
