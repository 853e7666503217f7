// How much memory this process can still take on this host: the kernel's MemAvailable
// (/proc/meminfo: free memory plus what reclaim can give back), capped by a cgroup v2 limit
// when the process runs under one (a Kubernetes pod: memory.max minus the cgroup's anonymous
// memory, since its page cache is reclaimed before the OOM killer runs).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace strata {

// nullopt when neither source can be read.
std::optional<int64_t> AvailableHostMemoryBytes();

// The parsing steps (tests): MemAvailable of a /proc/meminfo text; memory.max minus the "anon"
// of memory.stat (nullopt for "max", i.e. no limit, or unreadable text).
std::optional<int64_t> ParseMemAvailableBytes(std::string_view meminfo);
std::optional<int64_t> CgroupAvailableBytes(std::string_view memory_max,
                                            std::string_view memory_stat);

}  // namespace strata
