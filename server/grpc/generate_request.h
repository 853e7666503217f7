// strata.v1.GenerateRequest → the engine requests of its choices, validated exactly as the
// REST API validates /v1/completions (the same parser, limits and messages: the proto fields
// carry the REST field names; the body: completion_body.h), and absl::Status → grpc::Status.
// Images (GenerateRequest.images) are decoded and checked, their placeholders expanded and the
// vision tower run (once per image) before the choices are built; every choice carries them.
//
// Size: gRPC's default receive limit (4 MiB a message; grpc_server.cc sets no other) bounds a
// request. Within it, json_schema text is parsed with the limits of core/json_limits.h (depth
// 256, ...), and the body is built in time linear in the message (logit_bias: 100,000 entries
// in milliseconds).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/frontend/choice_decoder.h"
#include "server/frontend/openai_request.h"
#include "server/frontend/served_model.h"
#include "strata/v1/inference.pb.h"

namespace strata::rpc {

struct GrpcChoice {
  int index = 0;
  scheduler::Request request;
  frontend::ChoiceOptions options;
};

struct GrpcGeneration {
  std::string request_id;  // the client's, or a generated "grpc-<hex>"
  bool detokenize = true;
  bool return_progress = false;  // Progress messages while the prompts prefill
  std::vector<GrpcChoice> choices;
};

// Validates `request` against `model` and builds its choices (InvalidArgument as REST). With
// images it waits for their rows, polling `cancelled` (may be null): true cancels the images
// not encoded yet and returns Cancelled.
absl::StatusOr<GrpcGeneration> BuildGeneration(const frontend::ServedModel& model,
                                               const frontend::RequestLimits& limits,
                                               const v1::GenerateRequest& request,
                                               const std::function<bool()>& cancelled = nullptr);

// The same code (absl and gRPC codes share their numbering) and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace strata::rpc
