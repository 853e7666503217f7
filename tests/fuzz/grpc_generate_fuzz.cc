// libFuzzer target: strata.v1.GenerateRequest messages (built by tests/fuzz/run_fuzz.sh).
// Input: the message's wire bytes. One that decodes becomes its /v1/completions body
// (server/grpc/completion_body.h: logit_bias maps of any size, json_schema text within the
// JSON limits) and goes through the completions parser, as BuildGeneration does (see
// request_fuzz.h for what is checked).
#include <cstddef>
#include <cstdint>

#include <google/protobuf/stubs/logging.h>

#include "server/grpc/completion_body.h"
#include "tests/fuzz/request_fuzz.h"

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);  // no line per message with a bad UTF-8 string
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::v1::GenerateRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  const strata::frontend::Json body = strata::rpc::CompletionBodyFor(request);
  absl::StatusOr<strata::frontend::CompletionRequest> parsed =
      strata::frontend::ParseCompletionRequest(body, strata::fuzz::FuzzLimits());
  if (!parsed.ok()) strata::fuzz::CheckRequestError(parsed.status());
  return 0;
}
