// Process-wide logging: levels, a module tag and key=value fields, on spdlog.
//
//   LOG_INFO("sched", "step={} running={} waiting={}", step, running, waiting);
//   -> 2026-11-29T20:41:03.120 I [sched] step=12 running=31 waiting=4
//
// Arguments are formatted only when the level is enabled, so debug lines cost one branch on
// hot paths. Output goes to stderr (stdout is kept for machine-readable command output). With
// `SetJsonLines(true)` each line is one JSON object {"ts","level","module","msg"}.
#pragma once

#include <string_view>

#include <spdlog/spdlog.h>

namespace strata::log {

enum class Level { kTrace, kDebug, kInfo, kWarn, kError, kOff };

// Parses "trace|debug|info|warn|error|off" (case-insensitive); returns false if unknown.
bool ParseLevel(std::string_view text, Level* level);
void SetLevel(Level level);
Level GetLevel();
void SetJsonLines(bool json);

// The shared logger (created on first use; thread-safe).
spdlog::logger& Logger();

inline bool Enabled(Level level) { return static_cast<int>(level) >= static_cast<int>(GetLevel()); }

void WriteFormatted(Level level, std::string_view module, std::string_view message);

template <typename... Args>
void Write(Level level, std::string_view module, spdlog::format_string_t<Args...> fmt,
           Args&&... args) {
  if (!Enabled(level)) return;
  std::string message = fmt::format(fmt, std::forward<Args>(args)...);
  WriteFormatted(level, module, message);
}

}  // namespace strata::log

#define STRATA_LOG(level, module, ...)                  \
  do {                                                  \
    if (::strata::log::Enabled(level)) {                \
      ::strata::log::Write(level, module, __VA_ARGS__); \
    }                                                   \
  } while (false)
#define LOG_TRACE(module, ...) STRATA_LOG(::strata::log::Level::kTrace, module, __VA_ARGS__)
#define LOG_DEBUG(module, ...) STRATA_LOG(::strata::log::Level::kDebug, module, __VA_ARGS__)
#define LOG_INFO(module, ...) STRATA_LOG(::strata::log::Level::kInfo, module, __VA_ARGS__)
#define LOG_WARN(module, ...) STRATA_LOG(::strata::log::Level::kWarn, module, __VA_ARGS__)
#define LOG_ERROR(module, ...) STRATA_LOG(::strata::log::Level::kError, module, __VA_ARGS__)
