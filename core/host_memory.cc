#include "core/host_memory.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

namespace strata {
namespace {

std::optional<std::string> ReadFile(const char* path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The number after `key` at the start of a line of `text` ("key value ...").
std::optional<int64_t> Field(std::string_view text, std::string_view key) {
  std::istringstream lines{std::string(text)};
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string name;
    int64_t value = 0;
    if (fields >> name && name == key && fields >> value) return value;
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> ParseMemAvailableBytes(std::string_view meminfo) {
  const std::optional<int64_t> kib = Field(meminfo, "MemAvailable:");
  if (!kib || *kib < 0) return std::nullopt;
  return *kib * 1024;
}

std::optional<int64_t> CgroupAvailableBytes(std::string_view memory_max,
                                            std::string_view memory_stat) {
  std::istringstream text{std::string(memory_max)};
  int64_t limit = 0;
  if (!(text >> limit)) return std::nullopt;  // "max": no limit
  const std::optional<int64_t> anon = Field(memory_stat, "anon");
  return std::max<int64_t>(0, limit - anon.value_or(0));
}

std::optional<int64_t> AvailableHostMemoryBytes() {
  std::optional<int64_t> available;
  if (std::optional<std::string> meminfo = ReadFile("/proc/meminfo")) {
    available = ParseMemAvailableBytes(*meminfo);
  }
  std::optional<std::string> max = ReadFile("/sys/fs/cgroup/memory.max");
  std::optional<std::string> stat = ReadFile("/sys/fs/cgroup/memory.stat");
  if (max && stat) {
    if (std::optional<int64_t> cgroup = CgroupAvailableBytes(*max, *stat)) {
      available = available ? std::min(*available, *cgroup) : *cgroup;
    }
  }
  return available;
}

}  // namespace strata
