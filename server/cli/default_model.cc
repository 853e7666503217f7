#include "server/cli/default_model.h"

#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "core/log.h"
#include "core/status.h"
#include "engine/demo/checkpoint_generator.h"
#include "engine/demo/demo_tokenizer.h"

namespace strata::cli {
namespace {

// Bump when the demo checkpoint's contents change so stale caches are not reused.
// v2: the directory also holds the demo tokenizer (tiktoken.model, tokenizer_config.json).
// v3: the tokenizer has Kimi K3's control tokens and no chat template (XTML prompts).
// v4: K3 vision tower (vision_tower.*, mm_projector.*, vision_config, preprocessor_config.json).
constexpr char kDemoName[] = "demo-k3-v4";

}  // namespace

std::string CacheDir() {
  if (const char* dir = std::getenv("STRATA_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return std::string(xdg) + "/strata";
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::string(home) + "/.cache/strata";
  }
  return ".cache/strata";
}

absl::StatusOr<std::string> EnsureDefaultModel() {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(CacheDir()) / kDemoName;
  std::error_code ec;
  if (fs::exists(dir / "config.json", ec)) return dir.string();
  fs::create_directories(dir.parent_path(), ec);
  if (ec) {
    return absl::PermissionDeniedError("cannot create cache directory " +
                                       dir.parent_path().string() + ": " + ec.message());
  }
  const fs::path tmp = dir.string() + ".tmp." + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  LOG_INFO("cli", "generating the embedded demo model (random weights) into {}", dir.string());
  engine::demo::GeneratorOptions options;
  options.family = "k3";
  options.preset = "demo";
  RETURN_IF_ERROR(engine::demo::GenerateCheckpoint(options, tmp.string()).status());
  RETURN_IF_ERROR(
      engine::demo::WriteDemoTokenizer(tmp.string(), engine::demo::DemoChatFormat::kKimiK3));
  fs::rename(tmp, dir, ec);
  if (ec && !fs::exists(dir / "config.json")) {  // another process may have won the race
    return absl::InternalError("cannot move " + tmp.string() + " to " + dir.string() + ": " +
                               ec.message());
  }
  fs::remove_all(tmp, ec);
  return dir.string();
}

absl::StatusOr<std::string> ResolveModelDir(const std::string& flag_value) {
  if (!flag_value.empty()) return flag_value;
  return EnsureDefaultModel();
}

}  // namespace strata::cli
