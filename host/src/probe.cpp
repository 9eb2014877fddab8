// Probing (probe.hpp): running backplane-probe on one plugin file with a
// clean pipe for its report and one for its output, reading both until it
// ends or the timeout passes (then SIGKILL), always reaping it; turning how
// it ended into a refusal; and the cache of files that passed.
#include "probe.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <optional>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "backplane/plugin.h"
#include "host.hpp"
#include "log.hpp"
#include "probe_report.hpp"
#include "text.hpp"

extern char **environ;  // the helper runs in the host's environment, as the plugin would

namespace backplane {
namespace fs = std::filesystem;
namespace report = probe_report;

namespace {

// Where the helper finds its report pipe and the plugin file (tools/probe).
constexpr int kChildReportFd = 3;
constexpr int kChildPluginFd = 4;
// What is kept of the helper's output (stdout and stderr together): its
// last lines, within the last bytes.
constexpr size_t kOutputTailLines = 20;
constexpr size_t kOutputTailBytes = 4096;
// A report longer than this is not the helper's (the plugin wrote into it).
constexpr size_t kMaxReportBytes = 64 * 1024;
// Entries kept in the cache file: the most recently probed.
constexpr size_t kMaxCacheEntries = 256;
constexpr const char *kCacheFileName = "probe-cache.json";
constexpr int kCacheFormat = 1;

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd &&other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd &operator=(UniqueFd &&other) noexcept {
    reset(std::exchange(other.fd_, -1));
    return *this;
  }
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// The longest BACKPLANE_PROBE_TIMEOUT_MS taken: ten minutes.
constexpr int64_t kMaxTimeoutMilliseconds = 600000;

// A variable as this process may take it: secure_getenv's view, non-empty,
// saying at info when one is set but ignored because the process runs with
// elevated privileges (setuid, setgid or capabilities).
const char *trusted_environment(const char *name) {
  const char *value = ::secure_getenv(name);
  if (!value && std::getenv(name)) {
    log(BP_LOG_INFO, "loader", std::string("ignoring ") + name +
                                   ": this process runs with elevated privileges (setuid, setgid or capabilities)");
  }
  return value && *value ? value : nullptr;
}

// BACKPLANE_PROBE: "1" on, "0" off (nullopt when unset, or not one of them:
// then said at warn).
std::optional<bool> probe_switch() {
  const char *value = trusted_environment("BACKPLANE_PROBE");
  if (!value) return std::nullopt;
  if (std::strcmp(value, "1") == 0) return true;
  if (std::strcmp(value, "0") == 0) return false;
  log(BP_LOG_WARN, "loader", std::string("ignoring BACKPLANE_PROBE='") + value + "': it is neither 1 nor 0");
  return std::nullopt;
}

// BACKPLANE_PROBE_TIMEOUT_MS: whole milliseconds from 1 to ten minutes.
std::chrono::milliseconds probe_timeout() {
  const char *value = trusted_environment("BACKPLANE_PROBE_TIMEOUT_MS");
  if (!value) return kDefaultProbeTimeout;
  int64_t milliseconds = 0;
  const char *end = value + std::strlen(value);
  const auto [stop, error] = std::from_chars(value, end, milliseconds);
  if (error == std::errc() && stop == end && milliseconds >= 1 && milliseconds <= kMaxTimeoutMilliseconds)
    return std::chrono::milliseconds(milliseconds);
  log(BP_LOG_WARN, "loader", std::string("ignoring BACKPLANE_PROBE_TIMEOUT_MS='") + value +
                                 "': not a whole number of milliseconds from 1 to " +
                                 std::to_string(kMaxTimeoutMilliseconds) + "; the timeout stays " +
                                 std::to_string(kDefaultProbeTimeout.count()) + " ms");
  return kDefaultProbeTimeout;
}

// The same folder the OpenCL plugin keeps its program binaries in
// (plugins/opencl/src/program_cache.cpp), resolved the same way; none in a
// privileged process, which then probes at every start.
fs::path cache_directory() {
  auto variable = [](const char *name) {
    const char *value = ::secure_getenv(name);
    return value && *value ? value : nullptr;
  };
  if (const char *given = variable("BACKPLANE_CACHE_DIR")) return given;
  if (const char *xdg = variable("XDG_CACHE_HOME")) return fs::path(xdg) / "backplane";
  if (const char *home = variable("HOME")) return fs::path(home) / ".cache" / "backplane";
  return {};
}

fs::path helper_path() {
  if (const char *given = trusted_environment("BACKPLANE_PROBE_HELPER")) return given;
  const fs::path library_directory = host_library_directory();
  return library_directory.empty() ? fs::path() : library_directory / BACKPLANE_PROBE_RELATIVE_PATH;
}

// ---- the cache -------------------------------------------------------------

// What a passed probe holds for: the very file (device, inode, size, both
// times, so a rewrite, a touch or a chmod invalidates it), the options the
// entry got and this host's plugin ABI.
nlohmann::json file_identity(const struct stat &status, const std::string &plugin_options_json) {
  auto nanoseconds = [](const struct timespec &time) {
    return static_cast<int64_t>(time.tv_sec) * 1000000000 + time.tv_nsec;
  };
  return {{"device", static_cast<uint64_t>(status.st_dev)},
          {"inode", static_cast<uint64_t>(status.st_ino)},
          {"size", static_cast<int64_t>(status.st_size)},
          {"mtime_ns", nanoseconds(status.st_mtim)},
          {"ctime_ns", nanoseconds(status.st_ctim)},
          {"plugin_abi", std::to_string(BP_PLUGIN_ABI_MAJOR) + "." + std::to_string(BP_PLUGIN_ABI_MINOR)},
          {"plugin_options", plugin_options_json}};
}

// The cache's entries by plugin path; empty when the file is missing, and
// when it is not a cache of this format (a corrupt file is only ignored).
nlohmann::json read_cache(const fs::path &file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return nlohmann::json::object();
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  nlohmann::json cache = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (cache.is_object() && cache.value("format", 0) == kCacheFormat && cache.contains("passed") &&
      cache["passed"].is_object())
    return std::move(cache["passed"]);
  log(BP_LOG_DEBUG, "loader", "ignoring the probe cache '" + file.string() + "': not a probe cache of format " +
                                  std::to_string(kCacheFormat));
  return nlohmann::json::object();
}

// The cache's key for a plugin path: JSON holds only UTF-8, so bytes that
// are not are replaced. Two paths may then share a key; the entry's identity
// (device and inode among it) still says which file passed.
std::string cache_key(const std::string &path) { return one_line_utf8(path); }

bool cache_says_passed(const fs::path &directory, const std::string &path, const nlohmann::json &identity) {
  if (directory.empty()) return false;
  const nlohmann::json passed = read_cache(directory / kCacheFileName);
  const auto entry = passed.find(cache_key(path));
  return entry != passed.end() && entry->is_object() && entry->value("file", nlohmann::json()) == identity;
}

// Adds the file to the cache: read, merged and written to a temporary name
// then renamed, so that a concurrent host reads the old cache or the new one,
// never half of one (two hosts storing at once may lose one entry, which is
// then probed again). Failing to store is not a failure of the probe.
void remember_passed(const fs::path &directory, const std::string &path, nlohmann::json identity) {
  if (directory.empty()) return;
  std::error_code error;
  fs::create_directories(directory, error);
  const fs::path file = directory / kCacheFileName;
  nlohmann::json passed = read_cache(file);
  passed[cache_key(path)] = {{"file", std::move(identity)}, {"probed_at", static_cast<int64_t>(std::time(nullptr))}};
  while (passed.size() > kMaxCacheEntries) {
    auto oldest = passed.begin();
    for (auto entry = passed.begin(); entry != passed.end(); ++entry)
      if (entry->value("probed_at", int64_t{0}) < oldest->value("probed_at", int64_t{0})) oldest = entry;
    passed.erase(oldest);
  }
  static std::atomic<unsigned> stores{0};
  const fs::path temporary =
      file.string() + ".tmp" + std::to_string(::getpid()) + "." + std::to_string(stores.fetch_add(1));
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << nlohmann::json{{"format", kCacheFormat}, {"passed", std::move(passed)}}.dump() << '\n';
    if (!out) {
      log(BP_LOG_INFO, "loader", "cannot write the probe cache in '" + directory.string() +
                                     "'; plugins are probed again at the next start");
      fs::remove(temporary, error);
      return;
    }
  }
  fs::rename(temporary, file, error);
  if (error) {
    log(BP_LOG_INFO, "loader", "cannot rename '" + temporary.string() + "' to '" + file.string() + "' (" +
                                   error.message() + "); plugins are probed again at the next start");
    fs::remove(temporary, error);
  }
}

// ---- running the helper ----------------------------------------------------

struct HelperRun {
  std::string report;
  std::string output;  // its last bytes of stdout and stderr
  int wait_status = 0;
  bool status_known = true;  // false when someone else reaped it (SIGCHLD ignored, a handler)
  bool timed_out = false;
  std::chrono::steady_clock::duration took{};
};

// Reads what is there now; false at end of file (or an error that ends it).
bool drain(int fd, std::string &into, size_t keep_bytes, bool keep_the_end) {
  char chunk[4096];
  for (;;) {
    const ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got > 0) {
      if (keep_the_end) {
        into.append(chunk, static_cast<size_t>(got));
        if (into.size() > 2 * keep_bytes) into.erase(0, into.size() - keep_bytes);
      } else if (into.size() < keep_bytes) {
        into.append(chunk, std::min(static_cast<size_t>(got), keep_bytes - into.size()));
      }
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    return got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

// A descriptor number of 10 or more, close-on-exec: the spawn's dup2s onto
// 0..4 can then never overwrite a source they have yet to copy.
Expected<UniqueFd> high_duplicate(int fd) {
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
  if (copy < 0) return Error(BP_PLUGIN_LOAD, std::string("cannot duplicate a descriptor: ") + std::strerror(errno));
  return UniqueFd(copy);
}

Status open_pipe(UniqueFd &read_end, UniqueFd &write_end) {
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) return Error(BP_PLUGIN_LOAD, std::string("pipe2: ") + std::strerror(errno));
  read_end.reset(ends[0]);
  write_end.reset(ends[1]);
  // The parent polls; the helper's end stays blocking, so the plugin's
  // writes to stderr never fail with EAGAIN.
  ::fcntl(read_end.get(), F_SETFL, ::fcntl(read_end.get(), F_GETFL) | O_NONBLOCK);
  return {};
}

void reap(pid_t pid, HelperRun &run) {
  while (::waitpid(pid, &run.wait_status, 0) < 0) {
    if (errno == EINTR) continue;
    run.status_known = false;  // ECHILD: reaped elsewhere
    return;
  }
}

Expected<HelperRun> run_helper(const ProbeOptions &options, const std::string &path, int fd,
                               const std::string &plugin_options_json) {
  const auto started = std::chrono::steady_clock::now();
  UniqueFd report_read, report_write, output_read, output_write;
  if (Status status = open_pipe(report_read, report_write); !status) return status.take_error();
  if (Status status = open_pipe(output_read, output_write); !status) return status.take_error();
  Expected<UniqueFd> plugin = high_duplicate(fd);
  Expected<UniqueFd> report_target = high_duplicate(report_write.get());
  Expected<UniqueFd> output_target = high_duplicate(output_write.get());
  if (!plugin) return plugin.take_error();
  if (!report_target) return report_target.take_error();
  if (!output_target) return output_target.take_error();

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, output_target->get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, output_target->get(), STDERR_FILENO);
  posix_spawn_file_actions_adddup2(&actions, report_target->get(), kChildReportFd);
  posix_spawn_file_actions_adddup2(&actions, plugin->get(), kChildPluginFd);
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 34)
  // Nothing else of the host's reaches the plugin's code, not even what the
  // application left inheritable.
  posix_spawn_file_actions_addclosefrom_np(&actions, kChildPluginFd + 1);
#endif
  // The host's blocked and ignored signals are not the helper's: a plugin
  // that raises SIGSEGV or SIGABRT must die of it.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t signals;
  sigemptyset(&signals);
  posix_spawnattr_setsigmask(&attributes, &signals);
  sigfillset(&signals);
  posix_spawnattr_setsigdefault(&attributes, &signals);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<std::string> words = {options.helper.string(), "--report-fd", std::to_string(kChildReportFd),
                                    "--plugin-fd", std::to_string(kChildPluginFd), "--options-json",
                                    plugin_options_json, "--", path};
  std::vector<char *> argv;
  for (std::string &word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, argv[0], &actions, &attributes, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (spawned != 0) {
    return Error(BP_PLUGIN_LOAD, "probing is on but the probe helper '" + options.helper.string() +
                                     "' cannot be started: " + std::strerror(spawned))
        .with("helper", options.helper.string());
  }
  // The helper holds its own copies: end of file comes when it (and whatever
  // it started) is gone.
  report_write.reset();
  output_write.reset();
  report_target->reset();
  output_target->reset();

  HelperRun run;
  // A pidfd says when the helper ended even if a process the plugin started
  // keeps the pipes open; without one (Linux before 5.3), the pipes' end does.
#ifdef SYS_pidfd_open
  UniqueFd exited(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
#else
  UniqueFd exited;
#endif
  const auto deadline = started + options.timeout;
  bool report_open = true, output_open = true;
  while (report_open || output_open) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      run.timed_out = true;
      break;
    }
    pollfd watched[3];
    nfds_t count = 0;
    if (report_open) watched[count++] = {report_read.get(), POLLIN, 0};
    if (output_open) watched[count++] = {output_read.get(), POLLIN, 0};
    if (exited.get() >= 0) watched[count++] = {exited.get(), POLLIN, 0};
    const int ready = ::poll(watched, count, static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    if (report_open) report_open = drain(report_read.get(), run.report, kMaxReportBytes, false);
    if (output_open) output_open = drain(output_read.get(), run.output, kOutputTailBytes, true);
    if (exited.get() >= 0 && (watched[count - 1].revents & POLLIN)) break;  // gone; what it wrote is read
  }
  // Without a pidfd, a process the plugin started may hold the pipes open
  // past the helper's end: that is no timeout of the helper.
  if (run.timed_out && ::waitpid(pid, &run.wait_status, WNOHANG) == pid) {
    run.timed_out = false;
    run.took = std::chrono::steady_clock::now() - started;
    return run;
  }
  if (run.timed_out) {
    ::kill(pid, SIGKILL);
    drain(report_read.get(), run.report, kMaxReportBytes, false);
    drain(output_read.get(), run.output, kOutputTailBytes, true);
  }
  reap(pid, run);
  run.took = std::chrono::steady_clock::now() - started;
  return run;
}

// ---- what the run says ----------------------------------------------------

// What the report says: the last step begun, whether it got to the end, and
// what it noted or found on the way.
struct Report {
  std::string stage, kind;  // stage empty: the helper never began loading
  bool done = false;
  std::string error;
  std::vector<std::string> notes, found;
};

Report read_report(const std::string &text) {
  Report parsed;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) break;  // a line cut short by the end is no line
    const report::Line line = report::split(std::string_view(text).substr(start, end - start));
    start = end + 1;
    if (line.word == report::kStep) {
      const report::Line step = report::split(line.text);
      parsed.stage = step.word;
      parsed.kind = step.text;
    } else if (line.word == report::kDone) {
      parsed.done = true;
    } else if (line.word == report::kError) {
      parsed.error = line.text;
    } else if (line.word == report::kNote) {
      parsed.notes.emplace_back(line.text);
    } else if (line.word == report::kPlugin || line.word == report::kKind) {
      parsed.found.push_back(std::string(line.word) + " " + std::string(line.text));
    }
  }
  return parsed;
}

// Where the plugin was, in words, for the refusal.
std::string where(const Report &report) {
  if (report.done) return "at exit (in its exit handlers or static destructors)";
  const std::string &stage = report.stage;
  if (stage == report::kStageLoad) return "while being loaded (in its constructors or the system loader)";
  if (stage == report::kStageEntry) return "in " BP_PLUGIN_ENTRY_SYMBOL;
  if (stage == report::kStageDescriptor) return "while its descriptor was read";
  if (stage == report::kStageDestroy) return "in destroy";
  if (stage == report::kStageUnload) return "while being unloaded (in its destructors)";
  return "in " + stage + (report.kind.empty() ? "" : " of kind '" + report.kind + "'");
}

// The last lines of the output, empty ones left out.
std::vector<std::string> tail_lines(const std::string &output) {
  const std::string_view tail =
      std::string_view(output).substr(output.size() > kOutputTailBytes ? output.size() - kOutputTailBytes : 0);
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= tail.size()) {
    size_t end = tail.find('\n', start);
    if (end == std::string_view::npos) end = tail.size();
    std::string_view line = tail.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) lines.emplace_back(line);
    start = end + 1;
  }
  if (lines.size() > kOutputTailLines) lines.erase(lines.begin(), lines.end() - kOutputTailLines);
  return lines;
}

std::string signal_name(int signal) {
  if (const char *abbreviation = ::sigabbrev_np(signal)) return std::string("SIG") + abbreviation;
  return "signal " + std::to_string(signal);
}

std::string duration_text(std::chrono::milliseconds duration) {
  if (duration.count() % 1000 == 0) return std::to_string(duration.count() / 1000) + " s";
  return std::to_string(duration.count()) + " ms";
}

std::string milliseconds_text(std::chrono::steady_clock::duration duration) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f ms", std::chrono::duration<double, std::milli>(duration).count());
  return text;
}

// The refusal for a run that did not end well; nullopt for one that did.
std::optional<Error> refusal_of(const std::string &path, const ProbeOptions &options, const HelperRun &run,
                                const Report &report) {
  const bool exited = run.status_known && WIFEXITED(run.wait_status);
  const bool signalled = run.status_known && WIFSIGNALED(run.wait_status);
  if (!run.timed_out && report.done && (!run.status_known || (exited && WEXITSTATUS(run.wait_status) == 0)))
    return std::nullopt;

  const std::vector<std::string> tail = tail_lines(run.output);
  const std::string last_output = tail.empty() ? "" : "; its last output: \"" + tail.back() + "\"";
  nlohmann::json probe = {{"helper", options.helper.string()}};
  if (!report.stage.empty()) probe["stage"] = report.done ? std::string("exit") : report.stage;
  if (!report.kind.empty() && !report.done) probe["device_kind"] = report.kind;
  auto finish = [&](bp_code code, const std::string &message, const std::string &hint) {
    return Error(code, message + last_output).with("probe", probe).with("output_tail", tail).hint(hint);
  };
  const std::string rerun = "run it alone to see the failure: '" + options.helper.string() + "' '" + path + "'";

  // Before the helper began loading, or when it says it failed, the
  // helper is at fault, not the plugin.
  if (!report.error.empty() || report.stage.empty()) {
    std::string how = !report.error.empty() ? report.error
                      : run.timed_out       ? "it did not start within " + duration_text(options.timeout)
                      : signalled           ? "it was killed by " + signal_name(WTERMSIG(run.wait_status))
                      : exited              ? "it exited with status " + std::to_string(WEXITSTATUS(run.wait_status))
                                            : "it ended, how is unknown";
    return finish(BP_PLUGIN_LOAD, "the probe helper '" + options.helper.string() + "' failed before loading plugin '" +
                                      path + "': " + how,
                  "check that '" + options.helper.string() + "' is the backplane-probe of this host");
  }
  // From the system loader's return on, the plugin's own code ran.
  const bp_code code = report.stage == report::kStageLoad ? BP_PLUGIN_LOAD : BP_PLUGIN_INIT;
  const std::string plugin = "plugin '" + path + "'";
  if (run.timed_out) {
    probe["timeout_ms"] = options.timeout.count();
    return finish(code, plugin + " did not finish loading within " + duration_text(options.timeout) + ", hanging " +
                            where(report) + "; its probe process was killed",
                  "if it is only slow, raise BACKPLANE_PROBE_TIMEOUT_MS (now " +
                      std::to_string(options.timeout.count()) + "); else " + rerun);
  }
  if (signalled) {
    const int signal = WTERMSIG(run.wait_status);
    probe["signal"] = signal_name(signal);
    const char *description = ::sigdescr_np(signal);
    return finish(code, plugin + " crashed with " + signal_name(signal) +
                            (description ? std::string(" (") + description + ")" : "") + " " + where(report) +
                            ", in its probe process",
                  rerun + " (under gdb --args for a backtrace)");
  }
  if (exited) {
    const int status = WEXITSTATUS(run.wait_status);
    probe["exit_status"] = status;
    return finish(code, plugin + " ended its probe process with exit status " + std::to_string(status) + " " +
                            where(report) + (status == 0 ? ", before it finished loading" : ""),
                  "a plugin must not end the process; " + rerun);
  }
  return finish(code, plugin + " ended its probe process " + where(report) +
                          ", before it finished loading (how is unknown: this process does not wait for its "
                          "children, so the probe's status was lost)",
                rerun);
}

}  // namespace

ProbeOptions probe_options(bool requested) {
  ProbeOptions options;
  options.enabled = requested || probe_switch().value_or(false);
  if (!options.enabled) return options;
  options.timeout = probe_timeout();
  options.helper = helper_path();
  struct stat helper {};
  options.helper_found = !options.helper.empty() && ::stat(options.helper.c_str(), &helper) == 0 &&
                         S_ISREG(helper.st_mode) && ::access(options.helper.c_str(), X_OK) == 0;
  if (!options.helper_found) {
    log(BP_LOG_WARN, "loader",
        "probing is on but backplane-probe was not found at '" + options.helper.string() +
            "'; every plugin file is refused until it is installed there (or BACKPLANE_PROBE_HELPER names it)");
  }
  options.cache_directory = cache_directory();
  return options;
}

Status probe_plugin_file(const std::string &path, int fd, const std::string &plugin_options_json,
                         const ProbeOptions &options) {
  if (!options.helper_found) {
    return Error(BP_PLUGIN_LOAD, "refusing plugin '" + path + "': probing is on but backplane-probe was not found at '" +
                                     options.helper.string() + "'")
        .with("helper", options.helper.string())
        .hint("install backplane-probe as '" + options.helper.string() +
              "' (where it is built and installed beside libbackplane.so), name it in BACKPLANE_PROBE_HELPER, or "
              "turn probing off");
  }
  struct stat status {};
  if (::fstat(fd, &status) != 0)
    return Error(BP_PLUGIN_LOAD, "cannot read plugin '" + path + "': " + std::strerror(errno));
  nlohmann::json identity = file_identity(status, plugin_options_json);
  if (cache_says_passed(options.cache_directory, path, identity)) {
    log(BP_LOG_DEBUG, "loader", "probe cache hit for '" + path + "': it passed before, unchanged");
    return {};
  }

  Expected<HelperRun> run = run_helper(options, path, fd, plugin_options_json);
  if (!run) return run.take_error();
  const Report report = read_report(run->report);
  if (std::optional<Error> refusal = refusal_of(path, options, *run, report)) return std::move(*refusal);

  std::string found;
  for (const std::string &item : report.found) found += (found.empty() ? "" : ", ") + item;
  if (!report.notes.empty()) {
    // The in-process load says why, in full; a file that stops early is
    // probed again next time (what stopped it may change).
    log(BP_LOG_DEBUG, "loader", "probe of '" + path + "' stopped early in " + milliseconds_text(run->took) + ": " +
                                    report.notes.front());
    return {};
  }
  log(BP_LOG_DEBUG, "loader", "probe of '" + path + "' passed in " + milliseconds_text(run->took) + ": " + found);
  remember_passed(options.cache_directory, path, std::move(identity));
  return {};
}

}  // namespace backplane
