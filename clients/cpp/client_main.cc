// strata-client: a command-line client of the strata.v1 gRPC API.
//
//   strata-client generate --target HOST:PORT (--prompt TEXT | --prompt-ids 1,2,3)
//                 [--max-tokens N] [--stream] [--temperature T] [--top-p P] [--top-k K]
//                 [--seed S] [--n N] [--stop STR] [--request-id ID] [--timeout SECONDS]
//                 [--image PATH ...]
//       The generated text on stdout (as it streams with --stream), then, on the last line, the
//       generated token ids as one JSON array (an array of arrays when n > 1). The finish
//       reason and usage go to stderr.
//   strata-client tokenize --target HOST:PORT --text TEXT     ids as a JSON array
//   strata-client info --target HOST:PORT                      model info and loads
// Every command also takes --api-key and --help (core/command_line.h). Exit status: 0 on success,
// 1 on an RPC error (the gRPC code and message on stderr), 2 on bad usage.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/command_line.h"
#include "strata/v1/control.grpc.pb.h"
#include "strata/v1/inference.grpc.pb.h"

namespace strata::client {
namespace {

// The flags every command takes.
const FlagSpec kTargetFlag = {"target", true,
                              "the server's gRPC address (default localhost:50051)"};
const FlagSpec kApiKeyFlag = {
    "api-key", true,
    "for a server run with --api-key: sent as a bearer token (default $STRATA_API_KEY)"};

int RpcError(const grpc::Status& status) {
  std::fprintf(stderr, "strata-client: rpc error %d: %s\n", static_cast<int>(status.error_code()),
               status.error_message().c_str());
  return 1;
}

// The client sends numbers as given; the server checks their ranges.
absl::StatusOr<std::optional<int64_t>> GetInt(const Flags& flags, const std::string& name) {
  if (!flags.Has(name)) return std::optional<int64_t>();
  absl::StatusOr<int64_t> value = flags.GetInt(name, 0, INT64_MIN, INT64_MAX);
  if (!value.ok()) return value.status();
  return std::optional<int64_t>(*value);
}

absl::StatusOr<std::optional<double>> GetDouble(const Flags& flags, const std::string& name) {
  return flags.GetDouble(name, -std::numeric_limits<double>::infinity(),
                         std::numeric_limits<double>::infinity());
}

// "1,2,3" → ids.
absl::StatusOr<std::vector<int32_t>> GetIds(const Flags& flags, const std::string& name) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(flags.GetOr(name, ""), ',', absl::SkipEmpty())) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " must be comma-separated token ids"));
    }
    ids.push_back(id);
  }
  return ids;
}

std::shared_ptr<grpc::Channel> Connect(const Flags& flags) {
  return grpc::CreateChannel(flags.Get("target").value_or("localhost:50051"),
                             grpc::InsecureChannelCredentials());
}

// `authorization: Bearer KEY` metadata from --api-key or $STRATA_API_KEY (none when neither).
void Authorize(const Flags& flags, grpc::ClientContext* context) {
  std::string key = flags.Get("api-key").value_or("");
  if (key.empty()) {
    if (const char* env = std::getenv("STRATA_API_KEY"); env != nullptr) key = env;
  }
  if (!key.empty()) context->AddMetadata("authorization", "Bearer " + key);
}

// Bytes of a file the server will check (its own limit is 20 MiB a file); bigger than this is
// refused here without reading it.
constexpr std::streamoff kMaxImageFileBytes = std::streamoff{64} << 20;

absl::StatusOr<std::string> ReadImageFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--image ", path, ": cannot open it"));
  const std::streamoff size = in.tellg();
  if (size > kMaxImageFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat("--image ", path, ": ", size,
                                                   " bytes, over the client's limit of ",
                                                   kMaxImageFileBytes, " bytes"));
  }
  in.seekg(0);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    return absl::InvalidArgumentError(absl::StrCat("--image ", path, ": read failed"));
  }
  return bytes;
}

absl::StatusOr<v1::GenerateRequest> GenerateRequestFrom(const Flags& flags) {
  v1::GenerateRequest request;
  if (flags.Has("prompt") == flags.Has("prompt-ids")) {
    return absl::InvalidArgumentError("give exactly one of --prompt and --prompt-ids");
  }
  if (auto text = flags.Get("prompt")) {
    request.set_text(*text);
  } else {
    absl::StatusOr<std::vector<int32_t>> ids = GetIds(flags, "prompt-ids");
    if (!ids.ok()) return ids.status();
    request.mutable_token_ids()->mutable_ids()->Add(ids->begin(), ids->end());
  }
  v1::SamplingParams* s = request.mutable_sampling();
  absl::StatusOr<std::optional<double>> temperature = GetDouble(flags, "temperature");
  absl::StatusOr<std::optional<double>> top_p = GetDouble(flags, "top-p");
  absl::StatusOr<std::optional<int64_t>> top_k = GetInt(flags, "top-k");
  absl::StatusOr<std::optional<int64_t>> seed = GetInt(flags, "seed");
  absl::StatusOr<std::optional<int64_t>> max_tokens = GetInt(flags, "max-tokens");
  absl::StatusOr<std::optional<int64_t>> n = GetInt(flags, "n");
  for (const absl::Status& st : {temperature.status(), top_p.status(), top_k.status(),
                                 seed.status(), max_tokens.status(), n.status()}) {
    if (!st.ok()) return st;
  }
  if (*temperature) s->set_temperature(static_cast<float>(**temperature));
  if (*top_p) s->set_top_p(static_cast<float>(**top_p));
  if (*top_k) s->set_top_k(static_cast<int32_t>(**top_k));
  if (*seed) s->set_seed(static_cast<uint64_t>(**seed));
  if (*max_tokens) request.set_max_tokens(**max_tokens);
  if (*n) request.set_n(static_cast<int32_t>(**n));
  if (auto stop = flags.Get("stop")) request.add_stop(*stop);
  if (auto id = flags.Get("request-id")) request.set_request_id(*id);
  for (const std::string& path : flags.GetAll("image")) {
    absl::StatusOr<std::string> bytes = ReadImageFile(path);
    if (!bytes.ok()) return bytes.status();
    request.add_images(*std::move(bytes));
  }
  return request;
}

const CommandSpec& GenerateSpec() {
  static const CommandSpec spec{
      .program = "strata-client",
      .command = "generate",
      .description = "stream a generation: its text on stdout, then its token ids as a JSON array",
      .flags = {kTargetFlag,
                {"prompt", true, "the prompt text (or --prompt-ids)"},
                {"prompt-ids", true, "the prompt's token ids, comma separated (or --prompt)"},
                {"max-tokens", true, "tokens to generate at most"},
                {"stream", false, "print the text as it arrives"},
                {"temperature", true, "sampling temperature (default: the server's)"},
                {"top-p", true, "nucleus sampling mass"},
                {"top-k", true, "the k most likely tokens only"},
                {"seed", true, "sampling seed"},
                {"n", true, "choices to generate (the ids line becomes an array of arrays)"},
                {"stop", true, "a stop string"},
                {"request-id", true, "the request's id (X-Request-Id)"},
                {"timeout", true, "seconds before the call is abandoned (default: none)"},
                {"image", true,
                 "an image file (PNG, JPEG, WebP, GIF) for the prompt's next media placeholder "
                 "(repeat in prompt order)"},
                kApiKeyFlag},
      .synopsis = "--target HOST:PORT (--prompt TEXT | --prompt-ids 1,2,3) [flags]",
      .notes =
          "The finish reason and usage of each choice go to stderr. With --image, the "
          "prompt names each image with one media placeholder: `<|media_pad|>` in a K3 text "
          "prompt, or the id `strata-client info` shows as media_placeholder_token_id.\n"};
  return spec;
}

int Generate(const std::vector<std::string>& args) {
  CommandLine command_line = ReadCommandLine(GenerateSpec(), args);
  if (command_line.exit_code) return *command_line.exit_code;
  const Flags& flags = command_line.flags;
  absl::StatusOr<v1::GenerateRequest> request = GenerateRequestFrom(flags);
  if (!request.ok()) return UsageError(GenerateSpec(), request.status());
  absl::StatusOr<std::optional<double>> timeout = GetDouble(flags, "timeout");
  if (!timeout.ok()) return UsageError(GenerateSpec(), timeout.status());
  const bool stream = flags.Has("stream");
  auto stub = v1::Inference::NewStub(Connect(flags));
  grpc::ClientContext context;
  Authorize(flags, &context);
  if (*timeout) {
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(static_cast<int64_t>(**timeout * 1000)));
  }
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub->Generate(&context, *request);
  std::map<uint32_t, std::vector<int32_t>> ids;
  std::map<uint32_t, std::string> texts;
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
    if (response.has_chunk()) {
      const v1::Chunk& chunk = response.chunk();
      ids[chunk.index()].insert(ids[chunk.index()].end(), chunk.token_ids().begin(),
                                chunk.token_ids().end());
      texts[chunk.index()] += chunk.text();
      if (stream && chunk.index() == 0) {
        std::fputs(chunk.text().c_str(), stdout);
        std::fflush(stdout);
      }
    } else {
      const v1::Complete& done = response.complete();
      std::fprintf(stderr,
                   "choice %u: finish_reason=%s prompt_tokens=%lld completion_tokens=%lld "
                   "first_token_ms=%.1f\n",
                   done.index(), done.finish_reason().c_str(),
                   static_cast<long long>(done.usage().prompt_tokens()),
                   static_cast<long long>(done.usage().completion_tokens()),
                   done.timings().first_token_ms());
      ids[done.index()];  // a choice with no tokens still prints []
    }
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return RpcError(status);
  if (!stream) std::fputs(texts[0].c_str(), stdout);
  std::vector<std::string> arrays;
  arrays.reserve(ids.size());
  for (const auto& [index, list] : ids) {
    arrays.push_back(absl::StrCat("[", absl::StrJoin(list, ","), "]"));
  }
  const std::string line =
      arrays.size() == 1 ? arrays[0] : absl::StrCat("[", absl::StrJoin(arrays, ","), "]");
  std::fprintf(stdout, "\n%s\n", line.c_str());
  return 0;
}

const CommandSpec& TokenizeSpec() {
  static const CommandSpec spec{
      .program = "strata-client",
      .command = "tokenize",
      .description = "print the token ids of --text as a JSON array",
      .flags = {kTargetFlag, {"text", true, "the text to encode"}, kApiKeyFlag},
      .synopsis = "--target HOST:PORT --text TEXT [flags]"};
  return spec;
}

int Tokenize(const std::vector<std::string>& args) {
  CommandLine line = ReadCommandLine(TokenizeSpec(), args);
  if (line.exit_code) return *line.exit_code;
  const Flags& flags = line.flags;
  auto stub = v1::Inference::NewStub(Connect(flags));
  grpc::ClientContext context;
  Authorize(flags, &context);
  v1::TokenizeRequest request;
  request.set_text(flags.Get("text").value_or(""));
  v1::TokenizeResponse response;
  grpc::Status status = stub->Tokenize(&context, request, &response);
  if (!status.ok()) return RpcError(status);
  std::fprintf(stdout, "[%s]\n", absl::StrJoin(response.token_ids(), ",").c_str());
  return 0;
}

const CommandSpec& InfoSpec() {
  static const CommandSpec spec{
      .program = "strata-client",
      .command = "info",
      .description = "print the served model and the server's loads as one JSON object",
      .flags = {kTargetFlag, kApiKeyFlag},
      .synopsis = "--target HOST:PORT [flags]"};
  return spec;
}

int Info(const std::vector<std::string>& args) {
  CommandLine line = ReadCommandLine(InfoSpec(), args);
  if (line.exit_code) return *line.exit_code;
  const Flags& flags = line.flags;
  auto stub = v1::Control::NewStub(Connect(flags));
  v1::ModelInfo model;
  v1::Loads loads;
  grpc::ClientContext c1;
  Authorize(flags, &c1);
  grpc::Status status = stub->GetModelInfo(&c1, v1::GetModelInfoRequest(), &model);
  if (!status.ok()) return RpcError(status);
  grpc::ClientContext c2;
  Authorize(flags, &c2);
  status = stub->GetLoads(&c2, v1::GetLoadsRequest(), &loads);
  if (!status.ok()) return RpcError(status);
  std::fprintf(stdout,
               "{\"model\": \"%s\", \"max_model_len\": %lld, \"vocab_size\": %lld, "
               "\"media_placeholder_token_id\": %d, \"num_running\": %d, \"num_waiting\": %d, "
               "\"num_free_blocks\": %d, \"num_blocks\": %d}\n",
               model.names_size() > 0 ? model.names(0).c_str() : "",
               static_cast<long long>(model.max_model_len()),
               static_cast<long long>(model.vocab_size()), model.media_placeholder_token_id(),
               loads.num_running(), loads.num_waiting(), loads.num_free_blocks(),
               loads.num_blocks());
  return 0;
}

}  // namespace
}  // namespace strata::client

int main(int argc, char** argv) {
  namespace client = strata::client;
  return strata::RunSubcommand("strata-client",
                               {{client::GenerateSpec, client::Generate},
                                {client::TokenizeSpec, client::Tokenize},
                                {client::InfoSpec, client::Info}},
                               std::vector<std::string>(argv + 1, argv + argc),
                               "Exit status: 0, 1 on an RPC error, 2 on bad usage.");
}
