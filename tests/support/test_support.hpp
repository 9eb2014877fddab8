// Shared test helpers: temporary plugin directories, hosts that see only
// the plugins a test puts in front of them, what the system loader says
// about a file, and the built CLI run as a subprocess.
#pragma once

#include <chrono>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "backplane/backplane.hpp"
#include "test_paths.h"

namespace backplane::testing {

// A fresh directory under the system temp dir, removed with everything in
// it when the object goes out of scope. Created with mode 0755.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  const std::filesystem::path &path() const { return path_; }
  // Copies `file` in (as `name` when given) and returns the new path.
  std::filesystem::path copy_in(const std::filesystem::path &file, const std::string &name = "") const;
  // Writes `bytes` to a new file called `name`.
  std::filesystem::path write_file(const std::string &name, const std::string &bytes) const;

 private:
  std::filesystem::path path_;
};

// The regular files directly in `directory`, sorted by name.
std::vector<std::filesystem::path> regular_files_in(const std::filesystem::path &directory);

// The path of a built plugin of this repository, e.g. plugin_path("cpu").
std::filesystem::path plugin_path(const std::string &name);
// The path of a fixture plugin, e.g. fixture_path("good").
std::filesystem::path fixture_path(const std::string &name);

// A host that searches `dirs` only (no BACKPLANE_PLUGIN_PATH, no install
// directory), with optional per-kind plugin options. Fails the test if the
// host cannot be created.
Host make_host(const std::vector<std::string> &dirs, const std::string &plugin_options_json = "");

// A host over the repository's own built plugins only.
Host make_builtin_host(const std::string &plugin_options_json = "");
// A host with the build's cpu plugin alone: for tests that count devices or
// must not depend on which other runtimes (OpenCL, ...) the machine has.
Host make_cpu_host(const std::string &plugin_options_json = "");

// What the system loader (dlopen) says about `file`, without its "path: "
// prefix; empty when the file loads.
std::string system_loader_reason(const std::filesystem::path &file);

// Where a subprocess's stderr goes.
enum class StderrTo {
  test_log,  // inherited: it shows in the test's own output
  out,       // into CommandResult::out, interleaved with stdout (2>&1)
  discard,   // /dev/null
};

// How a subprocess ended and what it printed.
struct CommandResult {
  int exit_code = -1;  // its exit status, 128 + the signal's number if a signal ended it; -1 if it never ran
  std::string out;     // stdout (and stderr with StderrTo::out)
};

// Runs the built `backplane` tool (BACKPLANE_TEST_CLI) with `args`, one
// argv entry each (no shell: nothing to quote), and waits for it to exit.
// Fails the test if it cannot be started.
CommandResult run_cli(const std::vector<std::string> &args, StderrTo stderr_to = StderrTo::test_log);

// What a command printed, parsed as JSON; a discarded value (and a test
// failure showing the output) when it is not JSON.
nlohmann::json parse_output(const CommandResult &ran);
// The lines of `text`, and the words of one line (split at white space).
std::vector<std::string> lines_of(const std::string &text);
std::vector<std::string> words_of(const std::string &line);

// Sets (or, with nullopt, unsets) an environment variable for its
// lifetime, then puts back what was there.
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char *name, std::optional<std::string> value);
  ~ScopedEnvironment();
  ScopedEnvironment(const ScopedEnvironment &) = delete;
  ScopedEnvironment &operator=(const ScopedEnvironment &) = delete;

 private:
  const char *name_;
  std::optional<std::string> old_;
};

// The devices of `kind` among the host's, in its order.
std::vector<Device> devices_of_kind(const Host &host, const std::string &kind);
// Whether BACKPLANE_REQUIRE_<KIND>=1 (CI sets it for opencl and vulkan,
// .ci/run): a missing kind then fails a test instead of skipping it.
bool kind_required(const std::string &kind);
// Skips the test (or fails it, where kind_required) unless `host` has a
// device of each kind listed.
#define BACKPLANE_REQUIRE_KINDS(host, ...)                                                              \
  for (const std::string kind : {__VA_ARGS__}) {                                                       \
    if (!::backplane::testing::devices_of_kind(host, kind).empty()) continue;                          \
    if (::backplane::testing::kind_required(kind)) FAIL() << "no " << kind << " device, and CI requires one"; \
    GTEST_SKIP() << "this machine has no " << kind << " device";                                       \
  }
// The loaded plugin called `name`, or NULL.
const PluginInfo *find_plugin(const std::vector<PluginInfo> &plugins, const std::string &name);
// The first kind status line of plugin `name` ("" when it has none), or
// "the <name> plugin is not loaded".
std::string plugin_kind_status(const Host &host, const std::string &name);
// A device property's value, or "<missing>".
std::string property(const DeviceInfo &info, const std::string &key);

// Runs `test` of the calling test binary in a child process with `extra`
// ("NAME=value") added to its environment: for what a runtime reads once
// per process at its first call (the OpenCL ICD loader's OCL_ICD_VENDORS,
// the Vulkan loader's VK_DRIVER_FILES). Expects the child to exit 0; its
// failures are in its output.
void run_in_child(const std::string &test, const std::vector<std::string> &extra);

// One line the host logged.
struct LogLine {
  int32_t level;
  std::string category;
  std::string message;
};

// Captures the host's log lines while it lives, after bp_log_configure(spec)
// when a spec is given; back to stderr at warn after.
class CapturedLog {
 public:
  explicit CapturedLog(const char *spec = nullptr);
  ~CapturedLog();
  CapturedLog(const CapturedLog &) = delete;
  CapturedLog &operator=(const CapturedLog &) = delete;
  std::vector<LogLine> lines() const;
  void clear();
  // The lines whose message mentions `part`.
  std::vector<LogLine> mentioning(const std::string &part) const;
  std::string all() const;  // every line, each on its own indented line

 private:
  static void sink(void *context, int32_t level, const char *category, const char *message);
  mutable std::mutex mutex_;
  std::vector<LogLine> lines_;
};

// ---- collectives in flight, for the plugins' async tests ----

// One buffer of `count` elements of T per rank of `devices`, rank r's
// holding `value(r)` everywhere.
template <typename T, typename Value>
std::vector<Buffer> filled_buffers(const std::vector<Device> &devices, size_t count, Value value) {
  std::vector<Buffer> buffers;
  for (size_t r = 0; r < devices.size(); ++r) {
    const std::vector<T> values(count, value(r));
    buffers.push_back(Buffer::create(devices[r], count * sizeof(T)).value());
    EXPECT_TRUE(buffers.back().write(std::span<const T>(values)));
  }
  return buffers;
}

inline std::vector<bp_buffer *> raw_handles(const std::vector<Buffer> &buffers) {
  std::vector<bp_buffer *> raw;
  for (const Buffer &buffer : buffers) raw.push_back(buffer.get());
  return raw;
}

inline Result<Event> all_reduce_async(Group &group, const std::vector<bp_buffer *> &send,
                               const std::vector<bp_buffer *> &recv, size_t count, bp_dtype dtype, bp_reduce_op op) {
  bp_event *raw = nullptr;
  if (bp_error *error = bp_all_reduce_async(group.get(), send.data(), recv.data(), count, dtype, op, &raw)) {
    return Error(error);
  }
  return Event(raw);
}

// How many of `count` elements from `first` of `buffer` differ from
// `expected`, and the first one that does.
template <typename T>
std::string mismatches(const Buffer &buffer, size_t first, size_t count, T expected) {
  std::vector<T> values(count);
  const Status read = buffer.read(first * sizeof(T), values.data(), count * sizeof(T));
  if (!read) return std::string(read.error().message());
  size_t wrong = 0, first_wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    if (values[i] == expected) continue;
    if (wrong++ == 0) first_wrong = i;
  }
  if (wrong == 0) return "";
  std::ostringstream text;
  text << wrong << " of " << count << " elements wrong, first at " << first + first_wrong << ": "
       << values[first_wrong] << " instead of " << expected;
  return text.str();
}

inline double milliseconds(std::chrono::steady_clock::duration duration) {
  return std::chrono::duration<double, std::milli>(duration).count();
}

}  // namespace backplane::testing
