#include "core/log.h"

#include <atomic>
#include <cctype>
#include <string>

#include <spdlog/sinks/stdout_sinks.h>
#include <nlohmann/json.hpp>

namespace strata::log {
namespace {

std::atomic<Level> g_level{Level::kInfo};
std::atomic<bool> g_json{false};

spdlog::level::level_enum ToSpd(Level level) {
  switch (level) {
    case Level::kTrace:
      return spdlog::level::trace;
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
    case Level::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

const char* LevelName(Level level) {
  switch (level) {
    case Level::kTrace:
      return "trace";
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
    case Level::kOff:
      return "off";
  }
  return "info";
}

}  // namespace

spdlog::logger& Logger() {
  static spdlog::logger* logger = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    auto* l = new spdlog::logger("strata", sink);
    l->set_pattern("%Y-%m-%dT%H:%M:%S.%e %L %v");
    l->set_level(spdlog::level::trace);  // filtering happens in Enabled()
    l->flush_on(spdlog::level::trace);
    return l;
  }();
  return *logger;
}

bool ParseLevel(std::string_view text, Level* level) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static constexpr Level kAll[] = {Level::kTrace, Level::kDebug, Level::kInfo,
                                   Level::kWarn,  Level::kError, Level::kOff};
  for (Level l : kAll) {
    if (lower == LevelName(l)) {
      *level = l;
      return true;
    }
  }
  return false;
}

void SetLevel(Level level) { g_level.store(level, std::memory_order_relaxed); }
Level GetLevel() { return g_level.load(std::memory_order_relaxed); }

void SetJsonLines(bool json) {
  g_json.store(json);
  Logger().set_pattern(json ? "%v" : "%Y-%m-%dT%H:%M:%S.%e %L %v");
}

void WriteFormatted(Level level, std::string_view module, std::string_view message) {
  if (g_json.load(std::memory_order_relaxed)) {
    nlohmann::json line = {{"ts_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::system_clock::now().time_since_epoch())
                                         .count()},
                           {"level", LevelName(level)},
                           {"module", module},
                           {"msg", message}};
    Logger().log(ToSpd(level), "{}",
                 line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    return;
  }
  Logger().log(ToSpd(level), "[{}] {}", module, message);
}

}  // namespace strata::log
