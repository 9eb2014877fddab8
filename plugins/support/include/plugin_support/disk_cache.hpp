// The on-disk cache plugins share for what their drivers compile (OpenCL
// program binaries, Vulkan pipeline caches), so that later processes skip
// the compiler.
//
// It lives in BACKPLANE_CACHE_DIR, else $XDG_CACHE_HOME/backplane, else
// ~/.cache/backplane (read with secure_getenv: a privileged process takes
// no directory, whose binaries it would hand its driver, from its caller).
// A cache that cannot be created or written is logged and done without;
// files are written to a temporary name and renamed, so a concurrent
// process never reads half of one; files above a size bound are not read,
// so a planted file cannot make a plugin allocate without limit.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "backplane/plugin.h"

namespace backplane::plugin_support {

// The biggest cache file read back (the largest OpenCL binary or pipeline
// cache seen here is a few MiB).
inline constexpr std::size_t kMaxCacheFileBytes = 64u << 20;

// The cache directory, created if needed; empty when there is none to use,
// logged in `category` at info or warning level as "no <cache>: <why>;
// <consequence>" (e.g. "program cache", "kernels are compiled in every
// process").
std::string cache_directory(const bp_host_services *services, const char *category, const char *cache,
                            const char *consequence);

// A file name part that names `parts` together: 128 bits of two FNV-1a
// streams as 32 hex digits, so that distinct inputs (which would load the
// wrong binary) do not collide in practice.
std::string cache_key(const std::vector<std::string> &parts);

// The file's bytes; nullopt when it is missing, unreadable, empty or above
// kMaxCacheFileBytes (logged at debug level).
std::optional<std::vector<unsigned char>> read_cache_file(const bp_host_services *services, const char *category,
                                                          const std::string &file);

// Writes `bytes` to `file` through a temporary name and a rename; false
// when that failed (logged as a warning, no temporary left behind).
bool write_cache_file(const bp_host_services *services, const char *category, const std::string &file,
                      const void *bytes, std::size_t size);

}  // namespace backplane::plugin_support
