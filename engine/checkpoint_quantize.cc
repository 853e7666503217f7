#include "engine/checkpoint_quantize.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/file.h"
#include "core/int8_quantize.h"
#include "core/log.h"
#include "core/status.h"
#include "engine/checkpoint.h"
#include "engine/quantization_config.h"
#include "engine/safetensors_writer.h"
#include "engine/weight_copy.h"
#include "engine/weight_quantize.h"
#include "kvcache/memory_planner.h"

namespace strata::engine {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr char kIndexFile[] = "model.safetensors.index.json";
constexpr size_t kCopyPieceBytes = size_t{64} << 20;

// What the output holds for an input tensor.
enum class Output {
  kCopy,   // the tensor as it is
  kMxfp4,  // a routed expert's weight: `<module>.weight_packed` + `.weight_scale` (E8M0)
  kInt8,   // `<module>.weight` int8 + `.weight_scale` (bf16)
};

// One input tensor, in file order, and what the output holds for it.
struct Entry {
  std::string name;
  const TensorInfo* info = nullptr;
  Output output = Output::kCopy;
};

// The tensors to quantise, by name.
struct Plan {
  std::set<std::string> mxfp4, int8;
  std::vector<std::string> not_int8;  // Linear modules left as stored (for quantization_config)
  bool mxfp4_experts = false;         // in the output: written here or already in the input
};

// An output file being written; closes (and reports) on Close or destruction.
class OutputFile {
 public:
  static absl::StatusOr<OutputFile> Create(const std::string& path) {
    std::FILE* file = std::fopen(path.c_str(), "wb");
    if (file == nullptr) {
      return absl::InternalError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
    }
    return OutputFile(path, file);
  }
  OutputFile(OutputFile&& o) noexcept : path_(std::move(o.path_)), file_(o.file_) {
    o.file_ = nullptr;
  }
  ~OutputFile() {
    if (file_ != nullptr) std::fclose(file_);
  }
  absl::Status Write(const void* data, size_t bytes) {
    if (std::fwrite(data, 1, bytes, file_) != bytes) {
      return absl::InternalError(absl::StrCat("cannot write ", path_, ": ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }
  absl::Status Close() {
    const int rc = std::fclose(file_);
    file_ = nullptr;
    if (rc != 0) {
      return absl::InternalError(absl::StrCat("cannot write ", path_, ": ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }

 private:
  OutputFile(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  std::FILE* file_;
};

// The routed experts' weight names (prefix included), each checked: bf16 or f32, [out, in] with
// in a multiple of 32.
absl::StatusOr<std::set<std::string>> ExpertTensors(const Checkpoint& ckpt) {
  const ModelConfig& cfg = ckpt.config();
  if (cfg.moe.mxfp4_experts) {
    return absl::InvalidArgumentError(
        ckpt.dir() + ": the routed experts are MXFP4 already (config.json quantization_config)");
  }
  if (cfg.moe.num_experts == 0) {
    return absl::InvalidArgumentError(ckpt.dir() + ": the model has no routed experts");
  }
  const MoeConfig& m = cfg.moe;
  const int64_t width = m.is_latent() ? m.routed_expert_hidden_size : cfg.hidden_size;
  const int64_t inter = m.moe_intermediate_size;
  std::set<std::string> names;
  for (int l = 0; l < cfg.num_layers; ++l) {
    if (!cfg.IsMoe(l)) continue;
    for (int64_t e = 0; e < m.num_experts; ++e) {
      for (auto [part, out, in] :
           {std::tuple{"w1", inter, width}, {"w3", inter, width}, {"w2", width, inter}}) {
        const std::string name = RoutedExpertWeightName(cfg, l, e, part);
        RETURN_IF_ERROR(ckpt.Get(name, Shape{out, in}, {DType::kBF16, DType::kF32}).status());
        RETURN_IF_ERROR(CheckMxfp4Width(name, in));
        names.insert(name);
      }
    }
  }
  return names;
}

std::string Stem(const std::string& weight_name) {  // "<module>.weight" → "<module>"
  return weight_name.substr(0, weight_name.size() - std::string_view(".weight").size());
}

// The Linears `--quantization int8` quantises at load, by tensor name, but those in `experts`
// (MXFP4 here) and a tied LM head (the embedding's tensor, kept). `not_int8` gets the other
// Linear modules. InvalidArgument for one converted at load (stored as f16, f64 or unaligned
// f32): the quantiser here reads bf16 or f32 tensors in place.
absl::Status PlanInt8(const Checkpoint& ckpt, const std::set<std::string>& experts, Plan* plan) {
  ASSIGN_OR_RETURN(ModelWeights weights, LoadModelWeights(ckpt));
  const std::map<const void*, std::string> names = TensorNamesByData(ckpt);
  int64_t kept_odd_width = 0;
  for (const Linear* w : Int8Targets(&weights, {}, &kept_odd_width)) {
    if (w->data == weights.embed.data) continue;  // tied head
    const auto name = names.find(w->data);
    if (name == names.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          ckpt.dir(), ": a ", w->out_features, "x", w->in_features,
          " weight is stored as f16, f64 or unaligned f32; strata quantize reads bf16 or f32 "
          "tensors (quantise this checkpoint at load with --quantization int8 instead)"));
    }
    if (!experts.contains(name->second)) plan->int8.insert(name->second);
  }
  ForEachLinear(weights, [&](const Linear& w, LinearRole) {
    const auto name = names.find(w.data);
    if (name == names.end() || plan->int8.contains(name->second) ||
        experts.contains(name->second) || !absl::EndsWith(name->second, ".weight")) {
      return;
    }
    plan->not_int8.push_back(Stem(name->second));
  });
  std::sort(plan->not_int8.begin(), plan->not_int8.end());
  plan->not_int8.erase(std::unique(plan->not_int8.begin(), plan->not_int8.end()),
                       plan->not_int8.end());
  if (kept_odd_width > 0) {
    LOG_INFO("quantize", "{} weights kept as stored: input width not a multiple of 32",
             kept_odd_width);
  }
  return absl::OkStatus();
}

absl::StatusOr<Plan> MakePlan(const Checkpoint& ckpt, WeightQuantization scheme) {
  Plan plan;
  // mxfp4,int8 over experts that are MXFP4 already writes the int8 part, as at load.
  const bool experts_done = ckpt.config().moe.mxfp4_experts && QuantizesToInt8(scheme);
  if (QuantizesExpertsToMxfp4(scheme) && !experts_done) {
    ASSIGN_OR_RETURN(plan.mxfp4, ExpertTensors(ckpt));
  }
  plan.mxfp4_experts = !plan.mxfp4.empty() || ckpt.config().moe.mxfp4_experts;
  if (QuantizesToInt8(scheme)) RETURN_IF_ERROR(PlanInt8(ckpt, plan.mxfp4, &plan));
  return plan;
}

// The input's tensors grouped by file (file path → entries in data order).
std::map<std::string, std::vector<Entry>> TensorsByFile(const Checkpoint& ckpt, const Plan& plan) {
  std::map<std::string, std::vector<Entry>> files;
  for (const std::string& name : ckpt.TensorNames()) {
    const TensorInfo* info = *ckpt.Find(name);
    const Output output = plan.mxfp4.contains(name)  ? Output::kMxfp4
                          : plan.int8.contains(name) ? Output::kInt8
                                                     : Output::kCopy;
    files[info->file].push_back({name, info, output});
  }
  for (auto& [file, entries] : files) {
    std::sort(entries.begin(), entries.end(),
              [](const Entry& a, const Entry& b) { return a.info->data < b.info->data; });
  }
  return files;
}

std::vector<TensorHeader> OutputHeaders(const std::vector<Entry>& entries) {
  std::vector<TensorHeader> headers;
  for (const Entry& e : entries) {
    if (e.output == Output::kCopy) {  // any shape, scalars included
      headers.push_back({e.name, e.info->dtype, e.info->shape});
      continue;
    }
    const int64_t out = e.info->shape[0], in = e.info->shape[1];  // checked [out, in]
    switch (e.output) {
      case Output::kCopy:
        break;
      case Output::kMxfp4:
        headers.push_back({Stem(e.name) + ".weight_packed", DType::kU8, {out, in / 2}});
        headers.push_back(
            {Stem(e.name) + ".weight_scale", DType::kU8, {out, in / kMxfp4BlockSize}});
        break;
      case Output::kInt8:
        headers.push_back({e.name, DType::kI8, {out, in}});
        headers.push_back(
            {Stem(e.name) + ".weight_scale", DType::kBF16, {out, in / kInt8GroupSize}});
        break;
    }
  }
  return headers;
}

// Writes one output shard; returns its size in bytes.
absl::StatusOr<int64_t> WriteShard(const std::vector<Entry>& entries, const std::string& path,
                                   int64_t* matrices, int64_t* int8_matrices) {
  ASSIGN_OR_RETURN(OutputFile file, OutputFile::Create(path));
  const std::string header = SafetensorsHeaderBytes(OutputHeaders(entries), {{"format", "pt"}});
  RETURN_IF_ERROR(file.Write(header.data(), header.size()));
  int64_t bytes = static_cast<int64_t>(header.size());
  std::vector<uint8_t> codes, scales;
  for (const Entry& e : entries) {
    const TensorInfo& t = *e.info;
    if (e.output != Output::kCopy) {
      const int64_t out = t.shape[0], in = t.shape[1];
      if (e.output == Output::kMxfp4) {
        codes.resize(static_cast<size_t>(out * in / 2));
        scales.resize(static_cast<size_t>(out * in / kMxfp4BlockSize));
        RETURN_IF_ERROR(
            QuantizeMxfp4Matrix(e.name, t.dtype, t.data, out, in, codes.data(), scales.data()));
      } else {
        codes.resize(static_cast<size_t>(out * in));
        scales.resize(static_cast<size_t>(out * in / kInt8GroupSize * 2));
        RETURN_IF_ERROR(QuantizeInt8Matrix(e.name, t.dtype, t.data, out, in,
                                           reinterpret_cast<int8_t*>(codes.data()),
                                           reinterpret_cast<uint16_t*>(scales.data())));
        *int8_matrices += 1;
      }
      RETURN_IF_ERROR(file.Write(codes.data(), codes.size()));
      RETURN_IF_ERROR(file.Write(scales.data(), scales.size()));
      bytes += static_cast<int64_t>(codes.size() + scales.size());
      *matrices += 1;
    } else {
      for (size_t at = 0; at < t.num_bytes; at += kCopyPieceBytes) {
        RETURN_IF_ERROR(file.Write(t.data + at, std::min(kCopyPieceBytes, t.num_bytes - at)));
      }
      bytes += static_cast<int64_t>(t.num_bytes);
    }
    ReleaseMappedPages(t.data, t.num_bytes);  // read once: keep the page cache's, not ours
  }
  RETURN_IF_ERROR(file.Close());
  return bytes;
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  ASSIGN_OR_RETURN(OutputFile file, OutputFile::Create(path));
  RETURN_IF_ERROR(file.Write(text.data(), text.size()));
  return file.Close();
}

absl::StatusOr<Json> ReadJson(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError(path + ": not a JSON object");
  }
  return json;
}

// config.json with quantization_config, where Hugging Face loaders look and, for K3, inside
// text_config too (as the release's).
absl::Status WriteConfig(const std::string& in_dir, const std::string& out_dir, const Plan& plan) {
  ASSIGN_OR_RETURN(Json config, ReadJson(in_dir + "/config.json"));
  const Json q = QuantizationConfig(plan.mxfp4_experts, !plan.int8.empty(), plan.not_int8);
  config["quantization_config"] = q;
  if (auto text = config.find("text_config"); text != config.end() && text->is_object()) {
    (*text)["quantization_config"] = q;
  }
  return WriteText(out_dir + "/config.json", config.dump(2) + "\n");
}

// model.safetensors.index.json with the output's names and total size.
absl::Status WriteIndex(const std::string& in_dir, const std::string& out_dir,
                        const std::map<std::string, std::vector<Entry>>& files,
                        int64_t data_bytes) {
  ASSIGN_OR_RETURN(Json index, ReadJson(in_dir + "/" + kIndexFile));
  Json weight_map = Json::object();
  for (const auto& [file, entries] : files) {
    const std::string shard = fs::path(file).filename().string();
    for (const TensorHeader& h : OutputHeaders(entries)) weight_map[h.name] = shard;
  }
  index["weight_map"] = std::move(weight_map);
  if (!index.contains("metadata") || !index["metadata"].is_object()) {
    index["metadata"] = Json::object();
  }
  index["metadata"]["total_size"] = data_bytes;
  return WriteText(out_dir + "/" + kIndexFile, index.dump(2) + "\n");
}

// Every other top-level regular file (tokenizer, chat template, generation config, code).
absl::Status CopyOtherFiles(const std::string& in_dir, const std::string& out_dir) {
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(in_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name == "config.json" || name == kIndexFile ||
        absl::EndsWith(name, ".safetensors")) {
      continue;
    }
    fs::copy_file(entry.path(), fs::path(out_dir) / name, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot copy ", name, ": ", ec.message()));
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot list ", in_dir, ": ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<CheckpointQuantization> WriteAll(const Checkpoint& ckpt, const std::string& out,
                                                WeightQuantization scheme) {
  ASSIGN_OR_RETURN(const Plan plan, MakePlan(ckpt, scheme));
  if (plan.mxfp4.empty() && plan.int8.empty()) {
    return absl::InvalidArgumentError(ckpt.dir() +
                                      ": nothing to quantise (every weight int8 "
                                      "can take is int8 already or kept as stored)");
  }
  const auto files = TensorsByFile(ckpt, plan);
  CheckpointQuantization result;
  int64_t data_bytes = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const auto& [file, entries] : files) {
    const std::string path = (fs::path(out) / fs::path(file).filename()).string();
    ASSIGN_OR_RETURN(const int64_t bytes,
                     WriteShard(entries, path, &result.matrices, &result.int8_matrices));
    result.output_bytes += bytes;
    result.files += 1;
    for (const TensorHeader& h : OutputHeaders(entries)) {
      data_bytes += NumElements(h.shape) * static_cast<int64_t>(DTypeSize(h.dtype));
    }
    std::error_code ec;
    result.input_bytes += static_cast<int64_t>(fs::file_size(file, ec));
    LOG_INFO("quantize", "{}/{} {}: {} read, {} written, {:.0f} s", result.files, files.size(),
             fs::path(file).filename().string(), kvcache::FormatBytes(result.input_bytes),
             kvcache::FormatBytes(result.output_bytes),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  RETURN_IF_ERROR(WriteConfig(ckpt.dir(), out, plan));
  if (fs::exists(fs::path(ckpt.dir()) / kIndexFile)) {
    RETURN_IF_ERROR(WriteIndex(ckpt.dir(), out, files, data_bytes));
  }
  RETURN_IF_ERROR(CopyOtherFiles(ckpt.dir(), out));
  return result;
}

}  // namespace

absl::StatusOr<CheckpointQuantization> QuantizeCheckpoint(const std::string& model_dir,
                                                          const std::string& out_dir,
                                                          WeightQuantization scheme) {
  if (scheme == WeightQuantization::kNone || scheme == WeightQuantization::kCheckpoint) {
    return absl::InvalidArgumentError("strata quantize needs mxfp4, int8 or mxfp4,int8");
  }
  std::error_code ec;
  if (fs::exists(out_dir, ec)) {
    return absl::AlreadyExistsError(out_dir + " exists; name a new directory for the output");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(model_dir));
  const std::string partial = out_dir + ".partial";
  fs::remove_all(partial, ec);  // left by an interrupted run
  if (!fs::create_directories(partial, ec) || ec) {
    return absl::InternalError(absl::StrCat("cannot create ", partial, ": ", ec.message()));
  }
  absl::StatusOr<CheckpointQuantization> result = WriteAll(*ckpt, partial, scheme);
  if (result.ok()) {
    // The output must load as a checkpoint before it takes its name.
    absl::Status check = Checkpoint::Open(partial).status();
    if (!check.ok())
      result = absl::InternalError("the written checkpoint does not load: " +
                                   std::string(check.message()));
  }
  if (result.ok()) {
    fs::rename(partial, out_dir, ec);
    if (ec)
      result = absl::InternalError(absl::StrCat("cannot rename ", partial, ": ", ec.message()));
  }
  if (!result.ok()) fs::remove_all(partial, ec);
  return result;
}

}  // namespace strata::engine
