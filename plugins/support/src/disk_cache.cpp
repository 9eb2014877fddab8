// The plugins' on-disk cache (disk_cache.hpp).
#include "plugin_support/disk_cache.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "plugin_support/host_link.hpp"

namespace backplane::plugin_support {
namespace {

const char *environment(const char *name) {
  const char *value = secure_getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

// FNV-1a, 64 bits, over `text` and a separator.
std::uint64_t fnv1a(std::uint64_t hash, const std::string &text) {
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  hash ^= 0xff;  // a byte no part contains, so ("ab","c") and ("a","bc") differ
  return hash * 0x100000001b3ull;
}

}  // namespace

std::string cache_directory(const bp_host_services *services, const char *category, const char *cache,
                            const char *consequence) {
  std::filesystem::path directory;
  if (const char *explicit_directory = environment("BACKPLANE_CACHE_DIR")) {
    directory = explicit_directory;
  } else if (const char *xdg = environment("XDG_CACHE_HOME")) {
    directory = std::filesystem::path(xdg) / "backplane";
  } else if (const char *home = environment("HOME")) {
    directory = std::filesystem::path(home) / ".cache" / "backplane";
  } else {
    log(services, BP_LOG_INFO, category, "no %s: none of BACKPLANE_CACHE_DIR, XDG_CACHE_HOME and HOME is set; %s",
        cache, consequence);
    return {};
  }
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error || access(directory.c_str(), W_OK) != 0) {
    log(services, BP_LOG_WARN, category, "no %s: cannot create or write '%s' (%s); %s", cache, directory.c_str(),
        error ? error.message().c_str() : "not writable", consequence);
    return {};
  }
  return directory.string();
}

std::string cache_key(const std::vector<std::string> &parts) {
  std::uint64_t first = 0xcbf29ce484222325ull;
  std::uint64_t second = 0x84222325cbf29ce4ull;
  for (const std::string &part : parts) {
    first = fnv1a(first, part);
    second = fnv1a(second, part + "\x01");
  }
  char text[33];
  std::snprintf(text, sizeof text, "%016llx%016llx", static_cast<unsigned long long>(first),
                static_cast<unsigned long long>(second));
  return text;
}

std::optional<std::vector<unsigned char>> read_cache_file(const bp_host_services *services, const char *category,
                                                          const std::string &file) {
  std::error_code error;
  const std::uintmax_t size = std::filesystem::file_size(file, error);
  if (error) return std::nullopt;  // the usual case: nothing cached yet
  if (size == 0 || size > kMaxCacheFileBytes) {
    log(services, BP_LOG_DEBUG, category, "cache file %s has %ju bytes (at most %zu are read); ignored", file.c_str(),
        size, kMaxCacheFileBytes);
    return std::nullopt;
  }
  std::ifstream in(file, std::ios::binary);
  std::vector<unsigned char> bytes(static_cast<std::size_t>(size));
  in.read(reinterpret_cast<char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!in || in.gcount() != static_cast<std::streamsize>(bytes.size())) {
    log(services, BP_LOG_DEBUG, category, "cannot read the cache file %s; ignored", file.c_str());
    return std::nullopt;
  }
  return bytes;
}

bool write_cache_file(const bp_host_services *services, const char *category, const std::string &file,
                      const void *bytes, std::size_t size) {
  // Unique per process and call: several threads or processes may store
  // the same file at once.
  static std::atomic<unsigned> stores{0};
  const std::string temporary = file + ".tmp" + std::to_string(getpid()) + "." + std::to_string(stores++);
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(static_cast<const char *>(bytes), static_cast<std::streamsize>(size));
    if (!out) {
      log(services, BP_LOG_WARN, category, "cannot write the cache file %s; going on without it", temporary.c_str());
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      return false;
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, file, error);
  if (error) {
    log(services, BP_LOG_WARN, category, "cannot rename %s to %s (%s); going on without it", temporary.c_str(),
        file.c_str(), error.message().c_str());
    std::filesystem::remove(temporary, error);
    return false;
  }
  return true;
}

}  // namespace backplane::plugin_support
