// libFuzzer target: /v1/responses bodies (built by tests/fuzz/run_fuzz.sh). Input: the
// body. See request_fuzz.h for what is checked.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tests/fuzz/request_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::FuzzBody(std::string_view(reinterpret_cast<const char*>(data), size),
                         [](const strata::frontend::Json& body) {
                           return strata::frontend::ParseResponsesRequest(
                               body, strata::fuzz::FuzzLimits());
                         });
  return 0;
}
