// libFuzzer target: ParseSafetensors on arbitrary bytes (built by tests/fuzz/run_fuzz.sh).
//
// Beyond "no crash, no sanitizer report", checks the parser's contract: every returned view
// lies inside the input, its size matches shape and dtype, and writing the tensors back with
// the writer and parsing again gives the same tensors.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/check.h"
#include "engine/checkpoint.h"
#include "engine/safetensors_writer.h"

namespace {

using strata::engine::ParseSafetensors;
using strata::engine::TensorInfo;
using strata::engine::TensorToWrite;

void CheckRoundTrip(const std::map<std::string, TensorInfo>& tensors) {
  std::vector<TensorToWrite> to_write;
  for (const auto& [name, info] : tensors) {
    to_write.push_back(TensorToWrite{name, info.dtype, info.shape,
                                     std::vector<uint8_t>(info.data, info.data + info.num_bytes)});
  }
  const std::vector<uint8_t> file = strata::engine::SerializeSafetensors(to_write, {});
  auto reparsed = ParseSafetensors(file.data(), file.size(), "roundtrip");
  CHECK(reparsed.ok()) << reparsed.status();
  CHECK_EQ(reparsed->size(), tensors.size());
  for (const auto& [name, info] : tensors) {
    const TensorInfo& again = reparsed->at(name);
    CHECK(again.dtype == info.dtype && again.shape == info.shape);
    CHECK_EQ(again.num_bytes, info.num_bytes);
    CHECK(std::equal(info.data, info.data + info.num_bytes, again.data));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = ParseSafetensors(data, size, "fuzz.safetensors");
  if (!parsed.ok()) {
    CHECK(!parsed.status().message().empty());
    return 0;
  }
  for (const auto& [name, info] : *parsed) {
    CHECK(info.num_bytes == 0 || (info.data >= data && info.data + info.num_bytes <= data + size));
    CHECK_EQ(info.num_bytes,
             static_cast<size_t>(strata::NumElements(info.shape)) * strata::DTypeSize(info.dtype));
  }
  CheckRoundTrip(*parsed);
  return 0;
}
