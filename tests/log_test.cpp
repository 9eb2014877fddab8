// Logging through a captured sink: at loader:debug the loader says, for every
// file it looked at, what it did and why; levels and categories filter; a
// BACKPLANE_LOG setting that does not parse is refused and changes nothing;
// a sink may call bp_log_configure and bp_log_set_sink without deadlock.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backplane/backplane.h"
#include "backplane/backplane.hpp"
#include "backplane/plugin.h"  // bp_log_level
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace backplane;
using namespace backplane::testing;

bool any_line_has(const std::vector<LogLine> &lines, const std::string &part) {
  for (const LogLine &line : lines)
    if (line.message.find(part) != std::string::npos) return true;
  return false;
}

// A plugin directory with one plugin, one garbage file named like a plugin,
// and one file not named like a plugin at all.
class PluginDirectory {
 public:
  PluginDirectory() {
    cpu = dir_.copy_in(plugin_path("cpu"));
    bogus = dir_.copy_in(fixture_path("garbage"), "libbackplane_bogus.so");
    readme = dir_.write_file("README.txt", "not a plugin\n");
  }
  std::string path() const { return dir_.path().string(); }
  fs::path cpu, bogus, readme;

 private:
  TempDir dir_;
};

TEST(Log, LoaderAtDebugSaysWhatItDidWithEveryFile) {
  PluginDirectory dir;
  CapturedLog log;
  ASSERT_TRUE(bp_log_configure("loader:debug"));
  {
    Host host = make_host({dir.path()});
    ASSERT_EQ(host.refused().size(), 1u);
  }

  std::vector<LogLine> about_cpu = log.mentioning(dir.cpu.string());
  EXPECT_TRUE(any_line_has(about_cpu, "loaded")) << "no line says the cpu plugin was loaded:" << log.all();

  std::vector<LogLine> about_bogus = log.mentioning(dir.bogus.string());
  // The host's ELF check refuses it before the system loader sees it.
  const std::string reason = "not an ELF file (no ELF magic at its start)";
  EXPECT_TRUE(any_line_has(about_bogus, reason))
      << "no line gives the refusal of " << dir.bogus << " with the reason '" << reason << "':" << log.all();
  EXPECT_TRUE(any_line_has(about_bogus, "refus") || any_line_has(about_bogus, "cannot load"))
      << "no line says " << dir.bogus << " was refused:" << log.all();

  std::vector<LogLine> about_readme = log.mentioning(dir.readme.string());
  EXPECT_TRUE(any_line_has(about_readme, "skipping") &&
              any_line_has(about_readme, "not named libbackplane_<name>.so"))
      << "no line says README.txt was skipped and why:" << log.all();

  for (const LogLine &line : log.lines()) {
    EXPECT_GE(line.level, int32_t{BP_LOG_ERROR}) << line.message;
    EXPECT_LE(line.level, int32_t{BP_LOG_DEBUG}) << line.message;
  }
  for (const std::vector<LogLine> *lines : {&about_cpu, &about_bogus, &about_readme})
    for (const LogLine &line : *lines) EXPECT_EQ(line.category, "loader") << line.message;
}

// info shows what was loaded and refused but not the files skipped (debug);
// error shows none of it.
TEST(Log, LevelFilters) {
  PluginDirectory dir;
  CapturedLog log;
  ASSERT_TRUE(bp_log_configure("info"));
  { Host host = make_host({dir.path()}); }
  for (const LogLine &line : log.lines()) EXPECT_LE(line.level, int32_t{BP_LOG_INFO}) << line.message;
  EXPECT_FALSE(log.mentioning(dir.cpu.string()).empty()) << log.all();
  EXPECT_FALSE(log.mentioning(dir.bogus.string()).empty()) << log.all();
  EXPECT_TRUE(log.mentioning(dir.readme.string()).empty()) << log.all();

  log.clear();
  ASSERT_TRUE(bp_log_configure("error"));
  { Host host = make_host({dir.path()}); }
  for (const LogLine &line : log.lines()) EXPECT_EQ(line.level, int32_t{BP_LOG_ERROR}) << line.message;
  EXPECT_TRUE(log.mentioning(dir.cpu.string()).empty()) << log.all();
  EXPECT_TRUE(log.mentioning(dir.bogus.string()).empty()) << log.all();
  EXPECT_TRUE(log.mentioning(dir.readme.string()).empty()) << log.all();
}

// A level for one category leaves the others at the default (warn).
TEST(Log, CategoryFilters) {
  PluginDirectory dir;
  CapturedLog log;
  ASSERT_TRUE(bp_log_configure("dispatch:debug"));
  { Host host = make_host({dir.path()}); }
  for (const LogLine &line : log.lines()) {
    if (line.category == "loader") {
      EXPECT_LE(line.level, int32_t{BP_LOG_WARN}) << line.message;
    }
  }
  EXPECT_TRUE(log.mentioning(dir.readme.string()).empty()) << log.all();

  log.clear();
  ASSERT_TRUE(bp_log_configure("warn,loader:debug"));
  { Host host = make_host({dir.path()}); }
  EXPECT_FALSE(log.mentioning(dir.readme.string()).empty()) << log.all();
}

TEST(Log, SettingsThatDoNotParseAreRefusedAndChangeNothing) {
  PluginDirectory dir;
  CapturedLog log;
  ASSERT_TRUE(bp_log_configure("loader:debug"));
  for (const char *spec : {"nonsense:::", "loud", "loader:loud", "loader:", ":debug"})
    EXPECT_FALSE(bp_log_configure(spec)) << spec;
  // Still loader:debug.
  { Host host = make_host({dir.path()}); }
  EXPECT_FALSE(log.mentioning(dir.readme.string()).empty()) << log.all();
}

TEST(Log, EveryLevelAndCategoryFormParses) {
  CapturedLog log;  // restores warn
  for (const char *spec : {"error", "warn", "info", "debug", "loader:debug", "loader:debug,dispatch:info",
                           "info,loader:error"})
    EXPECT_TRUE(bp_log_configure(spec)) << spec;
}

// Back to stderr: the sink no longer sees anything.
TEST(Log, SinkCanBeRemoved) {
  PluginDirectory dir;
  std::vector<LogLine> seen;
  {
    CapturedLog log;
    ASSERT_TRUE(bp_log_configure("loader:debug"));
    { Host host = make_host({dir.path()}); }
    ASSERT_FALSE(log.lines().empty());
    bp_log_set_sink(nullptr, nullptr);
    log.clear();
    // Lines go to stderr now, not to the removed sink.
    { Host host = make_host({dir.path()}); }
    seen = log.lines();
  }
  EXPECT_TRUE(seen.empty()) << seen.size() << " lines reached a removed sink";
}

// ---- sinks that call back into logging --------------------------------------

// Runs `body` on a thread of its own and waits for it. A deadlock fails the
// test and ends the process: a thread stuck on a lock cannot be joined.
void runs_without_deadlock(const std::function<void()> &body) {
  std::packaged_task<void()> task(body);
  std::future<void> done = task.get_future();
  std::thread thread(std::move(task));
  if (done.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    std::fprintf(stderr, "FAILED: a log sink that called into logging deadlocked (no return in 60 s)\n");
    std::_Exit(1);
  }
  thread.join();
  done.get();
}

// What the sinks below saw and did; the first line makes them act.
struct ReentrantSink {
  std::atomic<int> lines{0};
  std::atomic<int> depth{0}, deepest{0};
  bool configured = false;
  std::atomic<int> replacement_lines{0};
  std::string plugin_dir;

  void enter() {
    deepest = std::max(deepest.load(), ++depth);
  }

  static void configures(void *context, int32_t, const char *, const char *) {
    auto *self = static_cast<ReentrantSink *>(context);
    self->enter();
    if (self->lines++ == 0) self->configured = bp_log_configure("error");
    --self->depth;
  }
  static void replaces_itself(void *context, int32_t, const char *, const char *) {
    auto *self = static_cast<ReentrantSink *>(context);
    self->enter();
    if (self->lines++ == 0) bp_log_set_sink(&ReentrantSink::replacement, self);
    --self->depth;
  }
  static void replacement(void *context, int32_t, const char *, const char *) {
    ++static_cast<ReentrantSink *>(context)->replacement_lines;
  }
  // Creates a host (which logs at loader:debug) from inside the sink.
  static void logs_itself(void *context, int32_t, const char *, const char *) {
    auto *self = static_cast<ReentrantSink *>(context);
    self->enter();
    if (self->lines++ == 0) {
      bp_host_options options{};
      options.struct_size = sizeof options;
      const char *dirs[] = {self->plugin_dir.c_str()};
      options.plugin_dirs = dirs;
      options.plugin_dir_count = 1;
      options.flags = BP_HOST_IGNORE_ENV_PATH | BP_HOST_IGNORE_INSTALL_PATH;
      bp_host *host = nullptr;
      bp_error_destroy(bp_host_create(&options, &host));
      bp_host_destroy(host);
    }
    --self->depth;
  }
};

// Back to stderr at warn, whatever a test left.
struct RestoreLogging {
  ~RestoreLogging() {
    bp_log_set_sink(nullptr, nullptr);
    bp_log_configure("warn");
  }
};

// The sink runs outside the lock of the settings, so it may change them.
TEST(Log, SinkMayConfigureLogging) {
  PluginDirectory dir;
  RestoreLogging restore;
  ReentrantSink sink;
  runs_without_deadlock([&] {
    bp_log_set_sink(&ReentrantSink::configures, &sink);
    ASSERT_TRUE(bp_log_configure("loader:debug"));
    Host host = make_host({dir.path()});
  });
  EXPECT_TRUE(sink.configured) << "bp_log_configure from a sink refused";
  // After the first line the setting is "error": the loader's debug lines stop.
  EXPECT_EQ(sink.lines.load(), 1);
}

// A sink may replace itself (or remove itself); the new sink gets the rest.
TEST(Log, SinkMayReplaceItself) {
  PluginDirectory dir;
  RestoreLogging restore;
  ReentrantSink sink;
  runs_without_deadlock([&] {
    bp_log_set_sink(&ReentrantSink::replaces_itself, &sink);
    ASSERT_TRUE(bp_log_configure("loader:debug"));
    Host host = make_host({dir.path()});
  });
  EXPECT_EQ(sink.lines.load(), 1);
  EXPECT_GT(sink.replacement_lines.load(), 0) << "the replacement sink saw nothing";
}

// A line logged while a sink runs on the same thread goes to stderr, not
// into the sink again (which could recurse without end).
TEST(Log, LinesLoggedInsideASinkGoToStderr) {
  PluginDirectory dir;
  RestoreLogging restore;
  ReentrantSink sink;
  sink.plugin_dir = dir.path();
  runs_without_deadlock([&] {
    bp_log_set_sink(&ReentrantSink::logs_itself, &sink);
    ASSERT_TRUE(bp_log_configure("loader:debug"));
    Host host = make_host({dir.path()});
  });
  EXPECT_EQ(sink.deepest.load(), 1) << "the sink was called from inside itself";
  EXPECT_GT(sink.lines.load(), 1) << "lines after the sink returned did not reach it";
}

}  // namespace
