// Probing (host/src/probe.cpp, tools/probe): with BP_HOST_PROBE or
// BACKPLANE_PROBE=1 every plugin file is loaded first in backplane-probe, so
// plugins that crash, exit or hang while loading (tests/fixtures/
// crashing_plugin.cpp) are refused with the signal, exit status or timeout,
// where it happened and their last output, and the host and the good plugins
// beside them carry on. Files that passed are cached by identity.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backplane/backplane.hpp"
#include "backplane/plugin.h"  // bp_log_level
#include "fixtures/fixture_checks.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace backplane;
using namespace backplane::testing;
using namespace backplane::fixtures;

constexpr const char *kPluginOptions = R"({"cpu": {"devices": 2}})";
constexpr size_t kCpuDevices = 2;

std::string read_text(const fs::path &file) {
  std::ifstream in(file, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool contains(const std::string &text, const std::string &part) { return text.find(part) != std::string::npos; }

// The processes whose parent is this one (zombies included), from /proc.
std::vector<std::string> child_processes() {
  std::vector<std::string> children;
  for (const fs::directory_entry &entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = read_text(entry.path() / "stat");
    const size_t name_end = stat.rfind(')');  // the name may hold spaces and parentheses
    if (name_end == std::string::npos) continue;
    int parent = 0;
    char state = '?';
    if (std::sscanf(stat.c_str() + name_end + 1, " %c %d", &state, &parent) == 2 && parent == ::getpid())
      children.push_back(stat.substr(0, name_end + 1) + " " + state);
  }
  return children;
}

// How each crashing fixture must be refused: code, what the message says,
// the stage the probe was in, and the line it printed first.
struct Crash {
  bp_code code;
  std::string reason, stage, output;
};
const std::map<std::string, Crash> &crashers() {
  static const std::map<std::string, Crash> expected = {
      {"constructor_segfault",
       {BP_PLUGIN_LOAD, "crashed with SIGSEGV", "load", "crashing fixture: constructor writing through NULL"}},
      {"constructor_hang",
       {BP_PLUGIN_LOAD, "did not finish loading within 1 s", "load",
        "crashing fixture: constructor going to sleep forever"}},
      {"entry_hang",
       {BP_PLUGIN_INIT, "did not finish loading within 1 s", "entry",
        "crashing fixture: bp_plugin_entry going to sleep forever"}},
      {"entry_exit",
       {BP_PLUGIN_INIT, "exit status 3", "entry", "crashing fixture: bp_plugin_entry calling exit(3)"}},
      {"entry_abort",
       {BP_PLUGIN_INIT, "crashed with SIGABRT", "entry", "crashing fixture: bp_plugin_entry calling abort()"}},
  };
  return expected;
}

void expect_refused_as_expected(const Host &host, const fs::path &file, const Crash &expected) {
  const bp_error *refusal = refusal_of(host, file);
  ASSERT_NE(refusal, nullptr) << file << " not refused" << describe_refused(host);
  EXPECT_EQ(bp_error_code(refusal), expected.code) << json_of(refusal);
  const std::string message = bp_error_message(refusal);
  EXPECT_TRUE(contains(message, expected.reason)) << message;
  EXPECT_TRUE(contains(message, expected.output)) << "the last output line is in the message: " << message;
  const nlohmann::json tail = json_field(refusal, "output_tail");
  ASSERT_TRUE(tail.is_array()) << json_of(refusal);
  EXPECT_NE(std::find(tail.begin(), tail.end(), expected.output), tail.end()) << tail.dump();
  const nlohmann::json probe = json_field(refusal, "probe");
  ASSERT_TRUE(probe.is_object()) << json_of(refusal);
  EXPECT_EQ(probe.value("stage", ""), expected.stage) << probe.dump();
}

void expect_good_plugins_work(Host &host) {
  EXPECT_EQ(plugin_names(host), (std::set<std::string>{"cpu", "mock"})) << describe_refused(host);
  EXPECT_EQ(device_count_of_kind(host, "mock"), kMockDevices);
  EXPECT_EQ(device_count_of_kind(host, "cpu"), kCpuDevices);
  EXPECT_TRUE(all_reduce_works(host, "mock", kMockDevices));
  EXPECT_TRUE(all_reduce_works(host, "cpu", kCpuDevices));
}

// Each test gets a cache folder of its own and a one-second timeout, and
// starts with none of the probe's variables set.
class ProbeTest : public ::testing::Test {
 protected:
  Host make_probing_host(uint32_t flags = BP_HOST_PROBE, const std::string &plugin_options = kPluginOptions) {
    HostOptions options;
    options.plugin_dirs = {plugins.path().string()};
    options.flags = BP_HOST_IGNORE_ENV_PATH | BP_HOST_IGNORE_INSTALL_PATH | flags;
    options.plugin_options_json = plugin_options;
    Result<Host> host = Host::create(options);
    if (!host) {
      ADD_FAILURE() << "bp_host_create failed: " << host.error().json();
      throw Exception(host.error());
    }
    return std::move(host).value();
  }
  fs::path cache_file() const { return cache.path() / "probe-cache.json"; }

  TempDir plugins, cache;
  ScopedEnvironment cache_directory{"BACKPLANE_CACHE_DIR", cache.path().string()};
  ScopedEnvironment timeout{"BACKPLANE_PROBE_TIMEOUT_MS", "1000"};
  ScopedEnvironment probe{"BACKPLANE_PROBE", std::nullopt};
  ScopedEnvironment helper{"BACKPLANE_PROBE_HELPER", std::nullopt};
};

TEST_F(ProbeTest, EachCrashingPluginIsRefusedWithItsCodeAndTheGoodOnesWork) {
  std::map<std::string, fs::path> copied;
  for (const auto &[variant, expected] : crashers()) copied[variant] = plugins.copy_in(fixture_path(variant));
  plugins.copy_in(fixture_path("good"));
  plugins.copy_in(plugin_path("cpu"));
  Host host = make_probing_host();
  // Killed or not, every probe process was reaped.
  EXPECT_EQ(child_processes(), std::vector<std::string>{});

  EXPECT_EQ(host.refused().size(), crashers().size()) << describe_refused(host);
  for (const auto &[variant, expected] : crashers()) {
    SCOPED_TRACE(variant);
    expect_refused_as_expected(host, copied[variant], expected);
  }
  expect_good_plugins_work(host);
}

TEST_F(ProbeTest, BackplaneProbeOneTurnsItOnWithoutTheFlag) {
  const fs::path crasher = plugins.copy_in(fixture_path("constructor_segfault"));
  plugins.copy_in(fixture_path("good"));
  ScopedEnvironment on("BACKPLANE_PROBE", "1");
  Host host = make_probing_host(0);  // without probing, the constructor would kill this test
  expect_refused_as_expected(host, crasher, crashers().at("constructor_segfault"));
  EXPECT_EQ(plugin_names(host), std::set<std::string>{"mock"});
}

// A fleet turns probing on with "probe": true: for a host created from it,
// and for the directories it adds to a live host (which keeps probing).
TEST_F(ProbeTest, AFleetWithProbeTrueProbesItsPluginDirectories) {
  const fs::path crasher = plugins.copy_in(fixture_path("entry_abort"));
  plugins.copy_in(fixture_path("good"));
  plugins.copy_in(plugin_path("cpu"));
  TempDir fleet_dir;
  const nlohmann::json fleet = {{"version", 1},
                                {"plugin_dirs", {plugins.path().string()}},
                                {"probe", true},
                                {"devices", {{{"name", "c"}, {"kind", "cpu"}, {"count", 2}, {"options", {{"devices", 2}}}}}},
                                {"groups", {{{"name", "pair"}, {"devices", {"c"}}}}}};
  const fs::path file = fleet_dir.write_file("fleet.json", fleet.dump());
  HostOptions options;
  options.flags = BP_HOST_IGNORE_ENV_PATH | BP_HOST_IGNORE_INSTALL_PATH;  // no BP_HOST_PROBE: the fleet asks
  Result<Host> host = Host::create_from_fleet_file(file.string(), options);
  ASSERT_TRUE(host) << host.error().json();
  expect_refused_as_expected(*host, crasher, crashers().at("entry_abort"));
  expect_good_plugins_work(*host);
  EXPECT_TRUE(host->find_group("pair"));

  // Into a live host that does not probe: the fleet's directory is probed
  // (without it, the constructor would kill this test).
  TempDir good_only, more;
  good_only.copy_in(fixture_path("good"));
  const fs::path segfaulting = more.copy_in(fixture_path("constructor_segfault"));
  HostOptions live_options = options;
  live_options.plugin_dirs = {good_only.path().string()};
  Result<Host> live = Host::create(live_options);
  ASSERT_TRUE(live) << live.error().json();
  const nlohmann::json more_fleet = {{"version", 1}, {"plugin_dirs", {more.path().string()}}, {"probe", true}};
  Status loaded = live->load_fleet_text(more_fleet.dump());
  ASSERT_TRUE(loaded) << loaded.error().json();
  expect_refused_as_expected(*live, segfaulting, crashers().at("constructor_segfault"));
  EXPECT_TRUE(all_reduce_works(*live, "mock", kMockDevices));
}

TEST_F(ProbeTest, BadValuesOfTheVariablesAreIgnoredWithAWarning) {
  plugins.copy_in(fixture_path("good"));
  CapturedLog log("loader:debug");
  {
    ScopedEnvironment bad("BACKPLANE_PROBE", "yes");
    Host host = make_probing_host(0);
    EXPECT_EQ(plugin_names(host), std::set<std::string>{"mock"});
  }
  const std::vector<LogLine> warned = log.mentioning("ignoring BACKPLANE_PROBE='yes': it is neither 1 nor 0");
  ASSERT_EQ(warned.size(), 1u) << log.all();
  EXPECT_EQ(warned[0].level, int32_t{BP_LOG_WARN}) << warned[0].message;
  EXPECT_EQ(warned[0].category, "loader") << warned[0].message;
  EXPECT_TRUE(log.mentioning("probe of").empty()) << "probing stayed off: " << log.all();

  ScopedEnvironment bad_timeout("BACKPLANE_PROBE_TIMEOUT_MS", "1.5s");
  Host host = make_probing_host();
  EXPECT_EQ(log.mentioning("ignoring BACKPLANE_PROBE_TIMEOUT_MS='1.5s'").size(), 1u) << log.all();
  EXPECT_EQ(log.mentioning("probe of").size(), 1u) << "the flag still probes: " << log.all();
  EXPECT_EQ(plugin_names(host), std::set<std::string>{"mock"});
}

TEST_F(ProbeTest, ASecondHostTakesPassedFilesFromTheCacheButProbesCrashersAgain) {
  const fs::path good = plugins.copy_in(fixture_path("good"));
  const fs::path crasher = plugins.copy_in(fixture_path("constructor_segfault"));
  CapturedLog log("loader:debug");
  {
    Host first = make_probing_host();
    EXPECT_EQ(plugin_names(first), std::set<std::string>{"mock"});
  }
  EXPECT_EQ(log.mentioning("probe of '" + good.string() + "' passed").size(), 1u) << log.all();
  EXPECT_TRUE(log.mentioning("probe cache hit").empty()) << log.all();
  EXPECT_TRUE(fs::exists(cache_file()));

  Host second = make_probing_host();
  EXPECT_EQ(log.mentioning("probe cache hit for '" + good.string() + "'").size(), 1u) << log.all();
  EXPECT_EQ(log.mentioning("probe of '" + good.string() + "' passed").size(), 1u) << "probed once only" << log.all();
  EXPECT_TRUE(log.mentioning("probe cache hit for '" + crasher.string() + "'").empty()) << log.all();
  expect_refused_as_expected(second, crasher, crashers().at("constructor_segfault"));
  EXPECT_TRUE(all_reduce_works(second, "mock", kMockDevices));
}

TEST_F(ProbeTest, TouchingOrRewritingTheFileOrNewOptionsProbeItAgain) {
  const fs::path good = plugins.copy_in(fixture_path("good"));
  CapturedLog log("loader:debug");
  const std::string probed = "probe of '" + good.string() + "' passed";
  const std::string hit = "probe cache hit for '" + good.string() + "'";
  { Host host = make_probing_host(); }
  { Host host = make_probing_host(); }
  ASSERT_EQ(log.mentioning(probed).size(), 1u) << log.all();
  ASSERT_EQ(log.mentioning(hit).size(), 1u) << log.all();

  // touch: a later modification time (and so a new change time).
  struct stat status {};
  ASSERT_EQ(::stat(good.c_str(), &status), 0);
  const struct timespec later[2] = {status.st_atim, {status.st_mtim.tv_sec + 10, status.st_mtim.tv_nsec}};
  ASSERT_EQ(::utimensat(AT_FDCWD, good.c_str(), later, 0), 0) << std::strerror(errno);
  { Host host = make_probing_host(); }
  EXPECT_EQ(log.mentioning(probed).size(), 2u) << "touched, so probed again" << log.all();

  plugins.copy_in(fixture_path("good"));  // the same bytes written again
  { Host host = make_probing_host(); }
  EXPECT_EQ(log.mentioning(probed).size(), 3u) << "rewritten, so probed again" << log.all();

  { Host host = make_probing_host(BP_HOST_PROBE, R"({"mock": {}})"); }
  EXPECT_EQ(log.mentioning(probed).size(), 4u) << "other options, so probed again" << log.all();
  { Host host = make_probing_host(BP_HOST_PROBE, R"({"mock": {}})"); }
  EXPECT_EQ(log.mentioning(probed).size(), 4u) << log.all();
  EXPECT_EQ(log.mentioning(hit).size(), 2u) << log.all();
}

TEST_F(ProbeTest, ACorruptCacheIsIgnoredAndReplaced) {
  const fs::path good = plugins.copy_in(fixture_path("good"));
  std::ofstream(cache_file()) << "{\"format\": 1, \"passed\": [tru";
  CapturedLog log("loader:debug");
  {
    Host host = make_probing_host();
    EXPECT_EQ(plugin_names(host), std::set<std::string>{"mock"}) << describe_refused(host);
  }
  EXPECT_EQ(log.mentioning("probe of '" + good.string() + "' passed").size(), 1u) << log.all();
  EXPECT_FALSE(log.mentioning("ignoring the probe cache").empty()) << log.all();
  const nlohmann::json cache = nlohmann::json::parse(read_text(cache_file()), nullptr, false);
  ASSERT_TRUE(cache.is_object()) << read_text(cache_file());
  EXPECT_TRUE(cache["passed"].contains(good.string())) << cache.dump();

  Host again = make_probing_host();
  EXPECT_EQ(log.mentioning("probe cache hit for '" + good.string() + "'").size(), 1u) << log.all();
}

TEST_F(ProbeTest, AMissingHelperRefusesEveryFileAndWarnsOnce) {
  const fs::path good = plugins.copy_in(fixture_path("good"));
  const fs::path narrow = plugins.copy_in(fixture_path("narrow"));
  const std::string missing = (cache.path() / "no-such-backplane-probe").string();
  ScopedEnvironment nowhere("BACKPLANE_PROBE_HELPER", missing);
  CapturedLog log("loader:warn");
  Host host = make_probing_host();
  EXPECT_EQ(log.mentioning("probing is on but backplane-probe was not found at '" + missing + "'").size(), 1u)
      << log.all();
  ASSERT_EQ(host.refused().size(), 2u) << describe_refused(host);
  for (const fs::path &file : {good, narrow}) {
    const bp_error *refusal = refusal_of(host, file);
    ASSERT_NE(refusal, nullptr) << describe_refused(host);
    EXPECT_EQ(bp_error_code(refusal), BP_PLUGIN_LOAD) << json_of(refusal);
    EXPECT_TRUE(contains(bp_error_message(refusal), "probing is on but backplane-probe was not found at '" + missing))
        << json_of(refusal);
  }
}

TEST_F(ProbeTest, AHelperThatFailsBeforeLoadingIsNamedNotThePlugin) {
  const fs::path good = plugins.copy_in(fixture_path("good"));
  ScopedEnvironment wrong("BACKPLANE_PROBE_HELPER", "/bin/false");
  Host host = make_probing_host();
  const bp_error *refusal = refusal_of(host, good);
  ASSERT_NE(refusal, nullptr) << describe_refused(host);
  EXPECT_EQ(bp_error_code(refusal), BP_PLUGIN_LOAD) << json_of(refusal);
  EXPECT_TRUE(contains(bp_error_message(refusal),
                       "the probe helper '/bin/false' failed before loading plugin '" + good.string() +
                           "': it exited with status 1"))
      << json_of(refusal);
}

// A setuid copy of privileged_host (tests/privileged_host_main.c, owned by
// nobody, run by root) runs with elevated privileges: it takes no
// BACKPLANE_PROBE from its environment, and says so at info.
TEST_F(ProbeTest, APrivilegedProcessIgnoresBackplaneProbeAndSaysSo) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a setuid program of another user";
  TempDir dir;
  const fs::path program = dir.copy_in(BACKPLANE_TEST_PRIVILEGED_HOST, "privileged_host");
  constexpr uid_t kNobody = 65534;
  ASSERT_EQ(::chown(program.c_str(), kNobody, kNobody), 0) << std::strerror(errno);
  ASSERT_EQ(::chmod(program.c_str(), 04755), 0) << std::strerror(errno);
  const std::string output_file = (dir.path() / "out.txt").string();
  const std::string ignored = "ignoring BACKPLANE_PROBE: this process runs with elevated privileges";

  const std::string plain = std::string("BACKPLANE_PROBE=1 '") + BACKPLANE_TEST_PRIVILEGED_HOST + "' > '" +
                            output_file + "'";
  ASSERT_EQ(std::system(plain.c_str()), 0);
  EXPECT_FALSE(contains(read_text(output_file), ignored)) << read_text(output_file);

  const std::string setuid = "BACKPLANE_PROBE=1 '" + program.string() + "' > '" + output_file + "'";
  const int status = std::system(setuid.c_str());
  const std::string privileged = read_text(output_file);
  if (status != 0 && privileged.empty()) GTEST_SKIP() << "the temp directory does not allow setuid programs";
  EXPECT_TRUE(contains(privileged, "log " + std::to_string(BP_LOG_INFO) + " loader: " + ignored)) << privileged;
}

// ---- the CLI ------------------------------------------------------------------

TEST_F(ProbeTest, PluginsDashDashProbeListsEachRefusalAndExitsZero) {
  std::map<std::string, fs::path> copied;
  for (const auto &[variant, expected] : crashers()) copied[variant] = plugins.copy_in(fixture_path(variant));
  plugins.copy_in(fixture_path("good"));
  const std::vector<std::string> common = {"--plugin-dir", plugins.path().string(), "--only-plugin-dirs", "plugins",
                                           "--probe"};

  std::vector<std::string> json_args = common;
  json_args.push_back("--json");
  const CommandResult json = run_cli(json_args);
  ASSERT_EQ(json.exit_code, 0) << json.out;
  const nlohmann::json listing = nlohmann::json::parse(json.out, nullptr, false);
  ASSERT_TRUE(listing.is_object()) << json.out;
  ASSERT_EQ(listing["loaded"].size(), 1u) << json.out;
  EXPECT_EQ(listing["loaded"][0].value("name", ""), "mock") << json.out;
  ASSERT_EQ(listing["refused"].size(), crashers().size()) << json.out;
  for (const nlohmann::json &refusal : listing["refused"]) {
    const std::string file = refusal.value("file", "");
    const auto variant = std::find_if(copied.begin(), copied.end(), [&](const auto &entry) {
      return same_file(file, entry.second);
    });
    ASSERT_NE(variant, copied.end()) << refusal.dump();
    const Crash &expected = crashers().at(variant->first);
    EXPECT_EQ(refusal.value("code", ""), bp_code_name(expected.code)) << refusal.dump();
    EXPECT_TRUE(contains(refusal.value("message", ""), expected.reason)) << refusal.dump();
  }

  const CommandResult text = run_cli(common);
  ASSERT_EQ(text.exit_code, 0) << text.out;
  for (const auto &[variant, expected] : crashers()) {
    EXPECT_TRUE(contains(text.out, copied[variant].string())) << variant << text.out;
    EXPECT_TRUE(contains(text.out, "  " + expected.output + "\n")) << "the last output is listed" << text.out;
  }
}

// Issue 11's "done means": one directory holding every kind of broken file
// at once, under a path that is not UTF-8. `backplane plugins --probe`
// lists each as refused with its reason, loads the good one, exits 0, and
// every byte it prints in JSON is valid UTF-8.
TEST_F(ProbeTest, EveryBrokenFileAtOnceIsListedAndTheGoodOneLoads) {
  const fs::path dir = plugins.path() / "caf\xe9";  // Latin-1: not UTF-8
  ASSERT_TRUE(fs::create_directory(dir));
  std::map<std::string, std::pair<bp_code, std::string>> expected;  // file name -> code, part of the message
  for (const auto &[variant, crash] : crashers()) {
    fs::copy_file(fixture_path(variant), dir / ("libbackplane_" + variant + ".so"));
    expected["libbackplane_" + variant + ".so"] = {crash.code, crash.reason};
  }
  fs::copy_file(fixture_path("good"), dir / "libbackplane_good.so");
  const std::string good = read_text(fixture_path("good"));
  auto write = [&](const std::string &name, const std::string &bytes) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
  };
  write("libbackplane_cut.so", good.substr(0, good.size() / 2));
  expected["libbackplane_cut.so"] = {BP_PLUGIN_LOAD, "truncated"};
  std::string arm = good;
  arm[18] = char(183), arm[19] = 0;  // e_machine: EM_AARCH64
  write("libbackplane_arm.so", arm);
  expected["libbackplane_arm.so"] = {BP_PLUGIN_LOAD, "built for aarch64, this host is x86_64"};
  write("libbackplane_garbage.so", "#!/bin/sh\necho not a plugin\n");
  expected["libbackplane_garbage.so"] = {BP_PLUGIN_LOAD, "not an ELF file"};
  ASSERT_EQ(::mkfifo((dir / "libbackplane_fifo.so").c_str(), 0644), 0) << std::strerror(errno);
  expected["libbackplane_fifo.so"] = {BP_PLUGIN_LOAD, "it is not a regular file"};
  fs::copy_file(fixture_path("long_version"), dir / "libbackplane_long_version.so");
  expected["libbackplane_long_version.so"] = {BP_PLUGIN_INIT, "the version is longer than the 4096 bytes"};
  fs::copy_file(fixture_path("huge_device_count"), dir / "libbackplane_huge_device_count.so");
  expected["libbackplane_huge_device_count.so"] = {BP_PLUGIN_INIT, "reports 4294967295"};
  fs::copy_file(fixture_path("narrow"), dir / "libbackplane_narrow.so");
  const std::string wrong_pin(64, '0');
  expected["libbackplane_narrow.so"] = {BP_PLUGIN_LOAD, "is pinned to " + wrong_pin};

  const CommandResult listed =
      run_cli({"--plugin-dir", dir.string(), "--only-plugin-dirs", "--plugin-pins",
               nlohmann::json{{"libbackplane_narrow.so", wrong_pin}}.dump(), "plugins", "--probe", "--json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.out;
  const nlohmann::json listing = nlohmann::json::parse(listed.out, nullptr, false);
  ASSERT_TRUE(listing.is_object()) << "not JSON (or not UTF-8): " << listed.out;
  ASSERT_EQ(listing["loaded"].size(), 1u) << listed.out;
  EXPECT_EQ(listing["loaded"][0].value("name", ""), "mock") << listed.out;
  std::set<std::string> refused_names;
  for (const nlohmann::json &refusal : listing["refused"]) {
    const std::string file = refusal.value("file", "");
    const std::string name = fs::path(file).filename().string();
    refused_names.insert(name);
    SCOPED_TRACE(name);
    EXPECT_NE(file.find("caf\xef\xbf\xbd"), std::string::npos) << "the byte that is not UTF-8 is replaced: " << file;
    const auto wanted = expected.find(name);
    ASSERT_NE(wanted, expected.end()) << refusal.dump();
    EXPECT_EQ(refusal.value("code", ""), bp_code_name(wanted->second.first)) << refusal.dump();
    EXPECT_TRUE(contains(refusal.value("message", ""), wanted->second.second)) << refusal.dump();
  }
  std::set<std::string> expected_names;
  for (const auto &[name, _] : expected) expected_names.insert(name);
  EXPECT_EQ(refused_names, expected_names);
  EXPECT_EQ(child_processes(), std::vector<std::string>{});
}

}  // namespace
