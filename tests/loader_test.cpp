// The plugin loader against real .so fixtures (tests/fixtures): every broken
// plugin is refused with its exact code, the file and the reason, and the
// good plugins beside it still load and compute. Also the search order,
// file permissions, ABI version skew and which file names count as plugins.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <cstring>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "backplane/backplane.hpp"
#include "backplane/plugin.h"  // the plugin ABI version the host was built with
#include "fixtures/fixture_checks.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace backplane;
using namespace backplane::testing;
using namespace backplane::fixtures;

// cpu devices are fixed so that the checks do not depend on the machine.
constexpr const char *kPluginOptions = R"({"cpu": {"devices": 2}})";
constexpr size_t kCpuDevices = 2;

std::string host_abi() { return std::to_string(BP_PLUGIN_ABI_MAJOR) + "." + std::to_string(BP_PLUGIN_ABI_MINOR); }

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// What the system loader itself says about `file` (dlopen, then dlsym of
// the entry point), without the "path: " prefix; nullopt if both succeed.
std::optional<std::string> system_loader_reason(const fs::path &file) {
  void *handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string message;
  if (!handle) {
    message = dlerror();
  } else {
    dlerror();
    void *entry = dlsym(handle, "bp_plugin_entry");
    if (!entry) message = dlerror();
    dlclose(handle);
    if (entry) return std::nullopt;
  }
  std::string prefix = file.string() + ": ";
  if (message.rfind(prefix, 0) == 0) message.erase(0, prefix.size());
  return message;
}

// The good plugins are loaded and an all-reduce on each gives the right numbers.
void expect_good_plugins_work(Host &host) {
  std::set<std::string> names = plugin_names(host);
  EXPECT_EQ(names.count("mock"), 1u) << "mock fixture not loaded" << describe_refused(host);
  EXPECT_EQ(names.count("cpu"), 1u) << "cpu plugin not loaded" << describe_refused(host);
  EXPECT_EQ(device_count_of_kind(host, "mock"), kMockDevices);
  EXPECT_EQ(device_count_of_kind(host, "cpu"), kCpuDevices);
  EXPECT_TRUE(all_reduce_works(host, "mock", kMockDevices));
  EXPECT_TRUE(all_reduce_works(host, "cpu", kCpuDevices));
}

// The refusal's JSON has the code's name, the message and the file.
void expect_refusal_json(const bp_error *refusal, bp_code code, const fs::path &file) {
  nlohmann::json json = nlohmann::json::parse(bp_error_json(refusal), nullptr, false);
  ASSERT_TRUE(json.is_object()) << bp_error_json(refusal);
  EXPECT_EQ(json.value("code", ""), bp_code_name(code)) << json.dump();
  EXPECT_EQ(json.value("message", ""), bp_error_message(refusal)) << json.dump();
  EXPECT_TRUE(same_file(json.value("file", ""), file)) << json.dump();
}

// Puts fixture `variant` beside the good mock fixture and the cpu plugin in
// a fresh directory, creates a host over it, and checks that exactly the
// broken file is refused, with `code` and its path, and that the good
// plugins still work. `more` checks the refusal further.
void expect_refused_beside_good(const std::string &variant, bp_code code,
                                const std::function<void(const bp_error *, const fs::path &)> &more = {}) {
  SCOPED_TRACE("fixture " + variant);
  TempDir dir;
  dir.copy_in(fixture_path("good"));
  dir.copy_in(plugin_path("cpu"));
  fs::path broken = dir.copy_in(fixture_path(variant));
  Host host = make_host({dir.path().string()}, kPluginOptions);

  EXPECT_EQ(host.refused().size(), 1u) << describe_refused(host);
  const bp_error *refusal = refusal_of(host, broken);
  ASSERT_NE(refusal, nullptr) << broken << " is not among the refused files" << describe_refused(host);
  EXPECT_EQ(bp_error_code(refusal), code) << json_of(refusal);
  EXPECT_FALSE(std::string(bp_error_message(refusal)).empty());
  expect_refusal_json(refusal, code, broken);
  if (more) more(refusal, broken);
  EXPECT_EQ(plugin_names(host), (std::set<std::string>{"cpu", "mock"}));
  expect_good_plugins_work(host);
}

// The message keeps what the system loader said about the file.
void expect_loader_reason(const bp_error *refusal, const fs::path &file) {
  std::optional<std::string> reason = system_loader_reason(file);
  ASSERT_TRUE(reason.has_value()) << file << " loads and has an entry point";
  EXPECT_NE(std::string(bp_error_message(refusal)).find(*reason), std::string::npos)
      << "message lacks the loader's reason '" << *reason << "': " << json_of(refusal);
}


// A host over `dirs` that also reads BACKPLANE_PLUGIN_PATH (but not the
// install directory, which would bring in whatever is installed).
Host make_host_reading_env(const std::vector<std::string> &dirs) {
  HostOptions options;
  options.plugin_dirs = dirs;
  options.flags = BP_HOST_IGNORE_INSTALL_PATH;
  options.plugin_options_json = kPluginOptions;
  Result<Host> host = Host::create(options);
  if (!host) {
    ADD_FAILURE() << "bp_host_create failed: " << host.error().json();
    throw Exception(host.error());
  }
  return std::move(host).value();
}

// Applies `mode` and says whether the file system kept it.
bool chmod_sticks(const fs::path &path, mode_t mode) {
  struct stat info {};
  return ::chmod(path.c_str(), mode) == 0 && ::stat(path.c_str(), &info) == 0 && (info.st_mode & 07777) == mode;
}

std::string plugin_file_of(const Host &host, const std::string &name) {
  for (const PluginInfo &plugin : host.plugins())
    if (plugin.name == name) return plugin.file;
  return "";
}

// ---- the good ones ----------------------------------------------------------

TEST(LoaderTest, GoodFixtureAndCpuPluginLoadSideBySide) {
  TempDir dir;
  fs::path good = dir.copy_in(fixture_path("good"));
  dir.copy_in(plugin_path("cpu"));
  Host host = make_host({dir.path().string()}, kPluginOptions);
  EXPECT_EQ(host.refused().size(), 0u) << describe_refused(host);
  EXPECT_EQ(plugin_names(host), (std::set<std::string>{"cpu", "mock"}));
  for (const PluginInfo &plugin : host.plugins()) {
    if (plugin.name != "mock") continue;
    EXPECT_EQ(plugin.version, kFixtureVersion);
    EXPECT_EQ(plugin.abi_major, 1u);
    EXPECT_EQ(plugin.abi_minor, unsigned{BP_PLUGIN_ABI_MINOR});
    EXPECT_TRUE(same_file(plugin.file, good)) << plugin.file;
    EXPECT_EQ(plugin.device_kinds, std::vector<std::string>{"mock"});
  }
  for (uint32_t index = 0; index < kMockDevices; ++index) {
    std::string name = "mock:" + std::to_string(index);
    Result<Device> device = host.find_device(name);
    ASSERT_TRUE(device) << device.error().json();
    Result<DeviceInfo> info = device->info();
    ASSERT_TRUE(info) << info.error().json();
    EXPECT_EQ(info->name, name);
    EXPECT_EQ(info->kind, "mock");
    EXPECT_EQ(info->index, index);
    EXPECT_EQ(info->plugin, "mock");
    EXPECT_EQ(info->flags & BP_DEVICE_HOST_ADDRESSABLE, BP_DEVICE_HOST_ADDRESSABLE);
  }
  expect_good_plugins_work(host);
}

// Two hosts of one process share a plugin's library: a second host that
// refuses the cpu plugin (bad options) while the first holds it, and a host
// made after one of two holders went, still load every other file as itself.
TEST(LoaderTest, HostsSharingALibraryLoadEveryFileAsItself) {
  TempDir dir;
  dir.copy_in(fixture_path("good"));
  dir.copy_in(plugin_path("cpu"));
  Host first = make_host({dir.path().string()}, kPluginOptions);
  ASSERT_EQ(plugin_names(first), (std::set<std::string>{"cpu", "mock"})) << describe_refused(first);
  for (int round = 0; round < 3; ++round) {
    Host refusing = make_host({dir.path().string()}, R"({"cpu": {"devices": "four"}})");
    ASSERT_EQ(refusing.refused().size(), 1u) << describe_refused(refusing);
    EXPECT_EQ(bp_error_code(refusing.refused()[0]), BP_CONFIG) << bp_error_json(refusing.refused()[0]);
    EXPECT_EQ(plugin_names(refusing), std::set<std::string>{"mock"}) << describe_refused(refusing);
  }
  {
    Host second = make_host({dir.path().string()}, kPluginOptions);
    EXPECT_EQ(plugin_names(second), (std::set<std::string>{"cpu", "mock"})) << describe_refused(second);
  }
  Host third = make_host({dir.path().string()}, kPluginOptions);
  EXPECT_EQ(plugin_names(third), (std::set<std::string>{"cpu", "mock"})) << describe_refused(third);
  expect_good_plugins_work(third);
}

TEST(LoaderTest, PluginOptionsReachTheirKind) {
  TempDir dir;
  dir.copy_in(fixture_path("good"));
  dir.copy_in(plugin_path("cpu"));
  Host host = make_host({dir.path().string()}, R"({"mock": {"devices": 2}, "cpu": {"devices": 3}})");
  EXPECT_EQ(host.refused().size(), 0u) << describe_refused(host);
  EXPECT_EQ(device_count_of_kind(host, "mock"), 2u);
  EXPECT_EQ(device_count_of_kind(host, "cpu"), 3u);
  EXPECT_TRUE(all_reduce_works(host, "mock", 2));
  EXPECT_TRUE(all_reduce_works(host, "cpu", 3));
}

// ---- refused: not loadable (BP_PLUGIN_LOAD) ---------------------------------

// Both are refused by the host's ELF check before the system loader sees
// them (elf_check_test.cpp cuts and patches real plugins further).
TEST(LoaderTest, GarbageFileIsRefusedAsNotAnElfFile) {
  expect_refused_beside_good("garbage", BP_PLUGIN_LOAD, [](const bp_error *refusal, const fs::path &) {
    EXPECT_EQ(text_field(refusal, "reason"), "not an ELF file (no ELF magic at its start)") << json_of(refusal);
  });
}

TEST(LoaderTest, TruncatedElfIsRefusedNamingTheMissingBytes) {
  expect_refused_beside_good("truncated", BP_PLUGIN_LOAD, [](const bp_error *refusal, const fs::path &) {
    EXPECT_EQ(text_field(refusal, "reason").rfind("truncated: the program headers need bytes up to ", 0), 0u)
        << json_of(refusal);
    EXPECT_NE(text_field(refusal, "reason").find(", the file has 100"), std::string::npos) << json_of(refusal);
  });
}

TEST(LoaderTest, MissingEntryPointIsRefused) {
  // dlopen succeeds here; only the symbol is missing, which the message names.
  expect_refused_beside_good("missing_entry", BP_PLUGIN_LOAD, [](const bp_error *refusal, const fs::path &) {
    EXPECT_NE(std::string(bp_error_message(refusal)).find("bp_plugin_entry"), std::string::npos)
        << json_of(refusal);
  });
}

TEST(LoaderTest, UnresolvedSymbolIsRefusedWithTheLoadersReason) {
  expect_refused_beside_good("unresolved_symbol", BP_PLUGIN_LOAD, [](const bp_error *refusal, const fs::path &file) {
    std::string message = bp_error_message(refusal);
    EXPECT_NE(message.find("undefined symbol"), std::string::npos) << json_of(refusal);
    EXPECT_NE(message.find("bp_fixture_function_defined_nowhere"), std::string::npos) << json_of(refusal);
    expect_loader_reason(refusal, file);
  });
}

// ---- refused: ABI major mismatch (BP_PLUGIN_ABI) -----------------------------

TEST(LoaderTest, AbiMajorTooNewIsRefusedNamingBothVersions) {
  expect_refused_beside_good("abi_too_new", BP_PLUGIN_ABI, [](const bp_error *refusal, const fs::path &) {
    EXPECT_EQ(text_field(refusal, "plugin_abi"), "2.0") << json_of(refusal);
    EXPECT_EQ(text_field(refusal, "host_abi"), host_abi()) << json_of(refusal);
    // A plugin newer than the host: the host is the side to upgrade.
    std::string advice = lower(std::string(bp_error_message(refusal)) + " " + text_field(refusal, "hint"));
    EXPECT_TRUE(std::regex_search(advice, std::regex("(upgrade|update)[^.;]*(host|backplane)")))
        << "does not say to upgrade the host: " << json_of(refusal);
  });
}

TEST(LoaderTest, AbiMajorTooOldIsRefusedNamingBothVersions) {
  expect_refused_beside_good("abi_too_old", BP_PLUGIN_ABI, [](const bp_error *refusal, const fs::path &) {
    EXPECT_EQ(text_field(refusal, "plugin_abi"), "0.0") << json_of(refusal);
    EXPECT_EQ(text_field(refusal, "host_abi"), host_abi()) << json_of(refusal);
    // A plugin older than the host: the plugin is the side to upgrade.
    std::string advice = lower(std::string(bp_error_message(refusal)) + " " + text_field(refusal, "hint"));
    EXPECT_TRUE(std::regex_search(advice, std::regex("(upgrade|update|rebuild)[^.;]*plugin")))
        << "does not say to upgrade the plugin: " << json_of(refusal);
  });
}

// ---- refused: the plugin's own initialisation (BP_PLUGIN_INIT) --------------

TEST(LoaderTest, EntryRefusalKeepsThePluginsReason) {
  expect_refused_beside_good("refuses", BP_PLUGIN_INIT, [](const bp_error *refusal, const fs::path &) {
    EXPECT_NE(std::string(bp_error_message(refusal)).find("no licence"), std::string::npos) << json_of(refusal);
  });
}

TEST(LoaderTest, ExceptionFromEntryIsRefusedNotFatal) {
  expect_refused_beside_good("throws", BP_PLUGIN_INIT);
}

TEST(LoaderTest, NullDescriptorIsRefused) { expect_refused_beside_good("null_descriptor", BP_PLUGIN_INIT); }

TEST(LoaderTest, ZeroStructSizeDescriptorIsRefused) {
  expect_refused_beside_good("zero_struct_size", BP_PLUGIN_INIT);
}


// plugin.h: a host tolerates the future. A plugin built against a later
// minor declares a collective (42) and dtype, op and flag bits this host
// does not know: it loads, what the host knows runs, the rest is refused as
// unsupported, and the host says at info what it ignored.
TEST(LoaderTest, RowsFromALaterMinorLoadAndTheirKnownPartsRun) {
  TempDir dir;
  const fs::path file = dir.copy_in(fixture_path("future_values"));
  CapturedLog log("loader:info");
  Host host = make_host({dir.path().string()});
  ASSERT_EQ(host.refused().size(), 0u) << describe_refused(host);
  ASSERT_EQ(plugin_names(host).count("future_values"), 1u);
  EXPECT_TRUE(all_reduce_works(host, "future_values", 4));

  std::vector<LogLine> ignored = log.mentioning("does not know, ignored");
  ASSERT_EQ(ignored.size(), 1u) << "expected one info line on what was ignored" << log.all();
  EXPECT_EQ(ignored[0].level, int32_t{BP_LOG_INFO}) << ignored[0].message;
  EXPECT_EQ(ignored[0].category, "loader") << ignored[0].message;
  const std::string file_name = file.filename().string();
  for (const std::string &part : {std::string("row 3 (collective 42)"), std::string("element type bits 0x100000"),
                                  std::string("reduce op bits 0x200"), std::string("flag bits 0x80"), file_name})
    EXPECT_NE(ignored[0].message.find(part), std::string::npos) << "missing '" << part << "' in: " << ignored[0].message;

  // The table holds exactly the known part: f32 and i32 with sum and max,
  // both modes; nothing of the future bits.
  size_t all_reduce_entries = 0;
  for (const CapabilityInfo &row : host.capabilities()) {
    if (std::string(row.device_kind) != "future_values") continue;
    EXPECT_LT(row.collective, static_cast<uint32_t>(BP_COLLECTIVE_COUNT));
    EXPECT_EQ(row.dtypes & ~((1u << BP_DTYPE_COUNT) - 1), 0u);
    EXPECT_EQ(row.flags, BP_CAPABILITY_IN_PLACE | BP_CAPABILITY_OUT_OF_PLACE);
    if (row.collective != BP_ALL_REDUCE) continue;
    ++all_reduce_entries;
    EXPECT_EQ(row.reduce_ops, (1u << BP_SUM) | (1u << BP_MAX)) << "dtype mask " << row.dtypes;
  }
  EXPECT_EQ(all_reduce_entries, 2u);

  std::vector<Device> devices;
  ASSERT_TRUE(find_devices(host, "future_values", 2, devices));
  Result<Group> group = host.create_group(devices);
  ASSERT_TRUE(group) << group.error().json();
  Status f64 = group->check(BP_ALL_REDUCE, BP_F64, BP_SUM);
  ASSERT_FALSE(f64);
  EXPECT_EQ(f64.error().code(), BP_UNSUPPORTED_DTYPE) << f64.error().json();
  Status prod = group->check(BP_ALL_REDUCE, BP_F32, BP_PROD);
  ASSERT_FALSE(prod);
  EXPECT_EQ(prod.error().code(), BP_UNSUPPORTED_REDUCE_OP) << prod.error().json();
  Status gather = group->check(BP_GATHER, BP_F32, BP_SUM);
  ASSERT_FALSE(gather);
  EXPECT_EQ(gather.error().code(), BP_UNSUPPORTED_COLLECTIVE) << gather.error().json();
}

// The options the host was given reach bp_plugin_entry (ABI 1.2), before
// the plugin declares its rows: the entry_options fixture narrows its rows
// to f32 when its kind's options say so.
TEST(LoaderTest, PluginOptionsReachTheEntryBeforeRowsAreDeclared) {
  TempDir dir;
  dir.copy_in(fixture_path("entry_options"));
  for (bool f32_only : {false, true}) {
    Host host = make_host({dir.path().string()},
                          f32_only ? R"({"entry_options": {"f32_only": true}})" : R"({"entry_options": {}})");
    ASSERT_EQ(host.refused().size(), 0u) << describe_refused(host);
    uint32_t all_reduce_dtypes = 0;
    for (const CapabilityInfo &row : host.capabilities())
      if (std::string(row.device_kind) == "entry_options" && row.collective == BP_ALL_REDUCE)
        all_reduce_dtypes |= row.dtypes;
    EXPECT_EQ(all_reduce_dtypes, f32_only ? (1u << BP_F32) : (1u << BP_F32) | (1u << BP_I32)) << f32_only;
    EXPECT_TRUE(all_reduce_works(host, "entry_options", 2));
  }
}

TEST(LoaderTest, EmptyKindNameIsRefused) { expect_refused_beside_good("empty_kind", BP_PLUGIN_INIT); }

// ---- refused: a kind already owned (BP_PLUGIN_CONFLICT) ---------------------

TEST(LoaderTest, SecondPluginClaimingAKindIsAConflictAndTheFirstKeepsWorking) {
  TempDir dir;
  dir.copy_in(fixture_path("good"));
  dir.copy_in(plugin_path("cpu"));
  TempDir extra;
  fs::path duplicate = extra.copy_in(fixture_path("duplicate_kind"), "libbackplane_mock_dup.so");
  Host host = make_host({dir.path().string()}, kPluginOptions);
  ASSERT_EQ(host.refused().size(), 0u) << describe_refused(host);

  Status status = host.load_plugin(duplicate.string());
  ASSERT_FALSE(status.ok()) << "a second owner of kind 'mock' was accepted";
  EXPECT_EQ(status.error().code(), BP_PLUGIN_CONFLICT) << status.error().json();
  EXPECT_TRUE(same_file(status.error().field("file"), duplicate)) << status.error().json();
  std::string message(status.error().message());
  EXPECT_NE(message.find("mock"), std::string::npos) << "message does not name the kind: " << message;

  const bp_error *listed = refusal_of(host, duplicate);
  ASSERT_NE(listed, nullptr) << describe_refused(host);
  EXPECT_EQ(bp_error_code(listed), BP_PLUGIN_CONFLICT) << json_of(listed);
  EXPECT_EQ(plugin_names(host), (std::set<std::string>{"cpu", "mock"}));
  for (uint32_t index = 0; index < kMockDevices; ++index) {
    Result<Device> device = host.find_device("mock:" + std::to_string(index));
    ASSERT_TRUE(device) << device.error().json();
    Result<DeviceInfo> info = device->info();
    ASSERT_TRUE(info) << info.error().json();
    EXPECT_EQ(info->plugin, "mock") << "mock:" << index << " changed owner";
  }
  expect_good_plugins_work(host);
}

// In one directory the load order decides which is first; whichever it is,
// exactly one owner of "mock" remains, and the other is the conflict.
TEST(LoaderTest, TwoOwnersOfAKindInOneDirectoryLeaveExactlyOne) {
  TempDir dir;
  fs::path good = dir.copy_in(fixture_path("good"));
  fs::path duplicate = dir.copy_in(fixture_path("duplicate_kind"), "libbackplane_mock_dup.so");
  dir.copy_in(plugin_path("cpu"));
  Host host = make_host({dir.path().string()}, kPluginOptions);
  ASSERT_EQ(host.refused().size(), 1u) << describe_refused(host);
  const bp_error *refusal = host.refused()[0];
  EXPECT_EQ(bp_error_code(refusal), BP_PLUGIN_CONFLICT) << json_of(refusal);
  std::string file = text_field(refusal, "file");
  EXPECT_TRUE(same_file(file, good) || same_file(file, duplicate)) << json_of(refusal);
  std::set<std::string> names = plugin_names(host);
  EXPECT_EQ(names.count("mock") + names.count("mock_dup"), 1u);
  EXPECT_EQ(device_count_of_kind(host, "mock"), kMockDevices);
  EXPECT_TRUE(all_reduce_works(host, "mock", kMockDevices));
}

// ---- everything broken at once ----------------------------------------------

TEST(LoaderTest, EveryBrokenFixtureInOneDirectoryIsRefusedWithItsOwnCode) {
  const std::map<std::string, bp_code> broken = {
      {"garbage", BP_PLUGIN_LOAD},         {"truncated", BP_PLUGIN_LOAD},
      {"missing_entry", BP_PLUGIN_LOAD},   {"unresolved_symbol", BP_PLUGIN_LOAD},
      {"abi_too_new", BP_PLUGIN_ABI},      {"abi_too_old", BP_PLUGIN_ABI},
      {"refuses", BP_PLUGIN_INIT},         {"throws", BP_PLUGIN_INIT},
      {"null_descriptor", BP_PLUGIN_INIT}, {"zero_struct_size", BP_PLUGIN_INIT},
      {"empty_kind", BP_PLUGIN_INIT}};
  TempDir dir;
  dir.copy_in(fixture_path("good"));
  dir.copy_in(plugin_path("cpu"));
  std::map<std::string, fs::path> copied;
  for (const auto &[variant, code] : broken) copied[variant] = dir.copy_in(fixture_path(variant));
  Host host = make_host({dir.path().string()}, kPluginOptions);

  EXPECT_EQ(host.refused().size(), broken.size()) << describe_refused(host);
  for (const auto &[variant, code] : broken) {
    const bp_error *refusal = refusal_of(host, copied[variant]);
    ASSERT_NE(refusal, nullptr) << variant << " not refused" << describe_refused(host);
    EXPECT_EQ(bp_error_code(refusal), code) << variant << ": " << json_of(refusal);
  }
  EXPECT_EQ(plugin_names(host), (std::set<std::string>{"cpu", "mock"}));
  expect_good_plugins_work(host);
}

// ---- bp_host_load_plugin ----------------------------------------------------

TEST(LoaderTest, LoadPluginReturnsTheRefusalAndListsIt) {
  TempDir empty;
  Host host = make_host({empty.path().string()});
  ASSERT_EQ(host.plugins().size(), 0u);

  fs::path garbage = fixture_path("garbage");
  Status refused = host.load_plugin(garbage.string());
  ASSERT_FALSE(refused.ok()) << "garbage was accepted";
  EXPECT_EQ(refused.error().code(), BP_PLUGIN_LOAD) << refused.error().json();
  EXPECT_TRUE(same_file(refused.error().field("file"), garbage)) << refused.error().json();
  ASSERT_EQ(host.refused().size(), 1u) << describe_refused(host);
  EXPECT_EQ(bp_error_code(host.refused()[0]), BP_PLUGIN_LOAD) << json_of(host.refused()[0]);
  EXPECT_EQ(refused.error().json(), bp_error_json(host.refused()[0]));

  Status too_new = host.load_plugin(fixture_path("abi_too_new").string());
  ASSERT_FALSE(too_new.ok()) << "abi_too_new was accepted";
  EXPECT_EQ(too_new.error().code(), BP_PLUGIN_ABI) << too_new.error().json();
  EXPECT_EQ(too_new.error().field("plugin_abi"), "2.0") << too_new.error().json();
  EXPECT_EQ(host.refused().size(), 2u) << describe_refused(host);

  Status good = host.load_plugin(fixture_path("good").string());
  ASSERT_TRUE(good.ok()) << good.error().json();
  EXPECT_EQ(plugin_names(host), std::set<std::string>{"mock"});
  EXPECT_EQ(device_count_of_kind(host, "mock"), kMockDevices);
  EXPECT_TRUE(all_reduce_works(host, "mock", kMockDevices));
}

// ---- version skew -----------------------------------------------------------

// Everything the capability table says about `kind`, merged per collective.
struct KindCapabilities {
  std::map<uint32_t, uint32_t> dtypes, reduce_ops, flags;
  std::set<std::string> plugins;
};
KindCapabilities capabilities_of(const Host &host, const std::string &kind) {
  KindCapabilities merged;
  for (const CapabilityInfo &row : host.capabilities()) {
    if (!row.device_kind || row.device_kind != kind) continue;
    merged.dtypes[row.collective] |= row.dtypes;
    merged.reduce_ops[row.collective] |= row.reduce_ops;
    merged.flags[row.collective] |= row.flags;
    merged.plugins.insert(row.plugin ? row.plugin : "");
  }
  return merged;
}

// A fixture with the good mock's capabilities, loaded under another name and
// kind, must read back exactly as declared and compute correctly: proof the
// host read its (longer or shorter) structs by their struct_size.
void expect_mock_equivalent_loads(const std::string &variant, const std::string &plugin, const std::string &kind,
                                  uint32_t abi_minor) {
  SCOPED_TRACE("fixture " + variant);
  TempDir dir;
  fs::path file = dir.copy_in(fixture_path(variant));
  dir.copy_in(plugin_path("cpu"));
  Host host = make_host({dir.path().string()}, kPluginOptions);
  EXPECT_EQ(host.refused().size(), 0u) << describe_refused(host);
  ASSERT_EQ(plugin_names(host), (std::set<std::string>{"cpu", plugin})) << describe_refused(host);
  for (const PluginInfo &info : host.plugins()) {
    if (info.name != plugin) continue;
    EXPECT_EQ(info.abi_major, 1u);
    EXPECT_EQ(info.abi_minor, abi_minor);
    EXPECT_EQ(info.version, kFixtureVersion);
    EXPECT_TRUE(same_file(info.file, file)) << info.file;
    EXPECT_EQ(info.device_kinds, std::vector<std::string>{kind});
  }

  KindCapabilities caps = capabilities_of(host, kind);
  const uint32_t f32_i32 = (1u << BP_F32) | (1u << BP_I32);
  const uint32_t both = BP_CAPABILITY_IN_PLACE | BP_CAPABILITY_OUT_OF_PLACE;
  EXPECT_EQ(caps.plugins, std::set<std::string>{plugin});
  EXPECT_EQ(caps.dtypes[BP_ALL_REDUCE], f32_i32);
  EXPECT_EQ(caps.reduce_ops[BP_ALL_REDUCE], (1u << BP_SUM) | (1u << BP_MAX));
  EXPECT_EQ(caps.flags[BP_ALL_REDUCE], both);
  EXPECT_EQ(caps.dtypes[BP_BROADCAST], f32_i32);
  EXPECT_EQ(caps.flags[BP_BROADCAST], both);
  for (const auto &[collective, dtypes] : caps.dtypes)
    EXPECT_TRUE(collective == BP_ALL_REDUCE || collective == BP_BROADCAST || collective == BP_BARRIER)
        << "undeclared collective " << collective << " with dtypes " << dtypes;

  std::vector<Device> devices;
  ASSERT_TRUE(find_devices(host, kind, kMockDevices, devices));
  Result<Group> group = host.create_group(devices);
  ASSERT_TRUE(group) << group.error().json();
  EXPECT_TRUE(group->check(BP_ALL_REDUCE, BP_I32, BP_MAX).ok());
  EXPECT_TRUE(group->check(BP_BROADCAST, BP_F32).ok());
  EXPECT_TRUE(group->check(BP_BARRIER, BP_F32).ok());
  Status f64 = group->check(BP_ALL_REDUCE, BP_F64, BP_SUM);
  ASSERT_FALSE(f64.ok()) << "all_reduce f64 accepted on " << kind;
  EXPECT_EQ(f64.error().code(), BP_UNSUPPORTED_DTYPE) << f64.error().json();
  EXPECT_TRUE(all_reduce_works(host, kind, kMockDevices));
}

TEST(LoaderTest, NewerMinorWithLongerStructsLoads) {
  expect_mock_equivalent_loads("good_v1_1", "good_v1_1", "mock_v1_1", 7);
}

TEST(LoaderTest, FirstReleaseSizedStructsLoad) {
  expect_mock_equivalent_loads("short_struct", "short_struct", "mock_short", 0);
}

// ---- what a plugin says beyond ABI 1.0 ----------------------------------------

// The 1.1 fields travel from the plugin through the C API: device
// properties, a kind's status and a group's route.
TEST(LoaderTest, DevicePropertiesKindStatusAndRouteReachTheApi) {
  TempDir dir;
  dir.copy_in(fixture_path("good"));
  Host host = make_host({dir.path().string()}, R"({"mock": {"devices": 2}})");
  std::vector<Device> devices;
  ASSERT_TRUE(find_devices(host, "mock", 2, devices));
  Result<DeviceInfo> info = devices[1].info();
  ASSERT_TRUE(info) << info.error().json();
  using Property = std::pair<std::string, std::string>;
  EXPECT_EQ(info->properties, (std::vector<Property>{{"fixture_index", "1"}, {"backing", "host memory"}}));

  const std::vector<PluginInfo> plugins = host.plugins();
  ASSERT_EQ(plugins.size(), 1u);
  EXPECT_EQ(plugins[0].kind_status, std::vector<std::string>{""}) << "nothing to say with devices present";

  Result<Group> group = host.create_group(devices);
  ASSERT_TRUE(group) << group.error().json();
  EXPECT_EQ(bp_group_route(group->get()), std::string("mock route: 2 ranks in host memory"));
}

TEST(LoaderTest, KindWithoutDevicesSaysWhy) {
  TempDir dir;
  dir.copy_in(fixture_path("good"));
  Host host = make_host({dir.path().string()}, R"({"mock": {"devices": 0}})");
  EXPECT_EQ(device_count_of_kind(host, "mock"), 0u);
  const std::vector<PluginInfo> plugins = host.plugins();
  ASSERT_EQ(plugins.size(), 1u);
  EXPECT_EQ(plugins[0].kind_status, std::vector<std::string>{"no mock devices: the options asked for 0"});
  bp_device *device = nullptr;
  bp_error *error = bp_host_find_device(host.get(), "mock:0", &device);
  ASSERT_NE(error, nullptr);
  bp_error_destroy(error);
}

// A 1.0 plugin's function table ends before kind_info and comm_info (the
// fixture sets both past its struct_size): the host must not call them, and
// says nothing rather than garbage.
TEST(LoaderTest, FirstReleaseFunctionTableHasNoStatusOrRoute) {
  TempDir dir;
  dir.copy_in(fixture_path("short_struct"));
  Host host = make_host({dir.path().string()}, R"({"mock_short": {"devices": 2}})");
  EXPECT_EQ(host.refused().size(), 0u) << describe_refused(host);
  const std::vector<PluginInfo> plugins = host.plugins();
  ASSERT_EQ(plugins.size(), 1u);
  EXPECT_EQ(plugins[0].kind_status, std::vector<std::string>{""});
  std::vector<Device> devices;
  ASSERT_TRUE(find_devices(host, "mock_short", 2, devices));
  Result<Group> group = host.create_group(devices);
  ASSERT_TRUE(group) << group.error().json();
  EXPECT_STREQ(bp_group_route(group->get()), "");
}

// ---- which files count as plugins ---------------------------------------------

TEST(LoaderTest, FilesNotNamedLikePluginsAreSkippedSilently) {
  TempDir dir;
  dir.copy_in(fixture_path("good"));
  dir.copy_in(plugin_path("cpu"));
  // Each would be refused with BP_PLUGIN_LOAD if the host tried to load it.
  for (const char *name : {"README.txt", "libfoo.so", "backplane_mock.so", "libbackplane_mock.so.1",
                           "libbackplane_mock.so.bak", "libbackplane_mock.so~", "libbackplane_mock.txt",
                           "libBACKPLANE_mock.so", "mock.so"})
    dir.copy_in(fixture_path("garbage"), name);
  Host host = make_host({dir.path().string()}, kPluginOptions);
  EXPECT_EQ(host.refused().size(), 0u) << describe_refused(host);
  EXPECT_EQ(plugin_names(host), (std::set<std::string>{"cpu", "mock"}));
  expect_good_plugins_work(host);
}

// ---- permissions --------------------------------------------------------------

// A plugin file anyone but its owner (or root) may rewrite is code anyone may
// inject: refused, whatever else the file is.
TEST(LoaderTest, PluginFileWritableByGroupOrOthersIsRefused) {
  for (mode_t mode : {mode_t{0666}, mode_t{0777}, mode_t{0775}, mode_t{0757}, mode_t{0646}}) {
    SCOPED_TRACE("mode " + std::to_string(mode >> 6) + std::to_string((mode >> 3) & 7) + std::to_string(mode & 7));
    TempDir dir;
    fs::path good = dir.copy_in(fixture_path("good"));
    dir.copy_in(plugin_path("cpu"));
    if (!chmod_sticks(good, mode)) GTEST_SKIP() << "this file system ignores chmod";
    Host host = make_host({dir.path().string()}, kPluginOptions);
    ASSERT_EQ(host.refused().size(), 1u) << describe_refused(host);
    const bp_error *refusal = refusal_of(host, good);
    ASSERT_NE(refusal, nullptr) << describe_refused(host);
    EXPECT_EQ(bp_error_code(refusal), BP_PLUGIN_LOAD) << json_of(refusal);
    EXPECT_NE(lower(bp_error_message(refusal)).find("writable"), std::string::npos)
        << "message does not say why: " << json_of(refusal);
    EXPECT_EQ(plugin_names(host), std::set<std::string>{"cpu"});
    EXPECT_TRUE(all_reduce_works(host, "cpu", kCpuDevices));
  }
}

TEST(LoaderTest, PluginFileWritableByOwnerOnlyLoads) {
  for (mode_t mode : {mode_t{0755}, mode_t{0700}, mode_t{0555}, mode_t{0644}}) {
    SCOPED_TRACE("mode " + std::to_string(mode >> 6) + std::to_string((mode >> 3) & 7) + std::to_string(mode & 7));
    TempDir dir;
    fs::path good = dir.copy_in(fixture_path("good"));
    if (!chmod_sticks(good, mode)) GTEST_SKIP() << "this file system ignores chmod";
    Host host = make_host({dir.path().string()});
    EXPECT_EQ(host.refused().size(), 0u) << describe_refused(host);
    EXPECT_EQ(plugin_names(host), std::set<std::string>{"mock"});
  }
}

// A directory others may write to lets them swap plugins in: nothing in it
// loads, every candidate is refused, and the other directories still load.
TEST(LoaderTest, PluginDirectoryWritableByGroupOrOthersIsRefused) {
  for (mode_t mode : {mode_t{0777}, mode_t{0775}, mode_t{0757}}) {
    SCOPED_TRACE("mode " + std::to_string(mode >> 6) + std::to_string((mode >> 3) & 7) + std::to_string(mode & 7));
    TempDir writable;
    writable.copy_in(fixture_path("good"));
    TempDir safe;
    safe.copy_in(plugin_path("cpu"));
    if (!chmod_sticks(writable.path(), mode)) GTEST_SKIP() << "this file system ignores chmod";
    Host host = make_host({writable.path().string(), safe.path().string()}, kPluginOptions);
    EXPECT_EQ(plugin_names(host), std::set<std::string>{"cpu"}) << describe_refused(host);
    ASSERT_GE(host.refused().size(), 1u) << "nothing refused in a writable directory";
    for (const bp_error *refusal : host.refused()) {
      EXPECT_EQ(bp_error_code(refusal), BP_PLUGIN_LOAD) << json_of(refusal);
      fs::path file = text_field(refusal, "file");
      EXPECT_TRUE(same_file(file, writable.path()) || same_file(file.parent_path().string(), writable.path()))
          << "refusal names neither the directory nor a file in it: " << json_of(refusal);
    }
    EXPECT_TRUE(all_reduce_works(host, "cpu", kCpuDevices));
    ::chmod(writable.path().c_str(), 0755);
  }
}

// A symlink in a safe directory whose target sits in a directory others can
// write: the target's directory decides, not the link's.
TEST(LoaderTest, SymlinkIntoAWritableDirectoryIsRefused) {
  TempDir writable;
  fs::path target = writable.copy_in(fixture_path("good"));
  if (!chmod_sticks(writable.path(), 0777)) GTEST_SKIP() << "this file system ignores chmod";
  TempDir safe;
  safe.copy_in(plugin_path("cpu"));
  fs::create_symlink(target, safe.path() / "libbackplane_good.so");
  Host host = make_host({safe.path().string()}, kPluginOptions);
  EXPECT_EQ(plugin_names(host), std::set<std::string>{"cpu"}) << describe_refused(host);
  ASSERT_EQ(host.refused().size(), 1u) << describe_refused(host);
  const bp_error *refusal = host.refused()[0];
  EXPECT_EQ(bp_error_code(refusal), BP_PLUGIN_LOAD) << json_of(refusal);
  EXPECT_NE(std::string(bp_error_message(refusal)).find(writable.path().filename().string()), std::string::npos)
      << "refusal does not name the target's directory: " << json_of(refusal);
  ::chmod(writable.path().c_str(), 0755);
}

// A plugin file another ordinary user owns is that user's code.
TEST(LoaderTest, PluginFileOwnedByAnotherUserIsRefused) {
  TempDir dir;
  fs::path good = dir.copy_in(fixture_path("good"));
  dir.copy_in(plugin_path("cpu"));
  constexpr uid_t kSomeoneElse = 54321;
  if (::geteuid() != 0 || ::chown(good.c_str(), kSomeoneElse, static_cast<gid_t>(-1)) != 0)
    GTEST_SKIP() << "changing a file's owner needs root";
  Host host = make_host({dir.path().string()}, kPluginOptions);
  ASSERT_EQ(host.refused().size(), 1u) << describe_refused(host);
  const bp_error *refusal = refusal_of(host, good);
  ASSERT_NE(refusal, nullptr) << describe_refused(host);
  EXPECT_EQ(bp_error_code(refusal), BP_PLUGIN_LOAD) << json_of(refusal);
  EXPECT_EQ(text_field(refusal, "owner_uid"), std::to_string(kSomeoneElse)) << json_of(refusal);
  EXPECT_TRUE(all_reduce_works(host, "cpu", kCpuDevices));
}

// A FIFO named like a plugin: opening it for reading would block forever
// (no writer). It is refused as not a regular file, at once.
TEST(LoaderTest, FifoNamedLikeAPluginIsRefusedWithoutBlocking) {
  TempDir dir;
  dir.copy_in(plugin_path("cpu"));
  const fs::path fifo = dir.path() / "libbackplane_fifo.so";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0) << std::strerror(errno);
  Host host = make_host({dir.path().string()}, kPluginOptions);
  ASSERT_EQ(host.refused().size(), 1u) << describe_refused(host);
  const bp_error *refusal = host.refused()[0];
  EXPECT_EQ(text_field(refusal, "file"), fifo.string()) << json_of(refusal);
  EXPECT_EQ(bp_error_code(refusal), BP_PLUGIN_LOAD) << json_of(refusal);
  EXPECT_NE(std::string(bp_error_message(refusal)).find("not a regular file"), std::string::npos) << json_of(refusal);
  EXPECT_TRUE(all_reduce_works(host, "cpu", kCpuDevices));
}

// ---- search order -------------------------------------------------------------

// Which of two owners of kind "mock" wins shows which directory was read first.
TEST(LoaderTest, CallerDirectoriesAreSearchedInOrder) {
  TempDir first, second;
  fs::path good = first.copy_in(fixture_path("good"));
  fs::path duplicate = second.copy_in(fixture_path("duplicate_kind"), "libbackplane_mock_dup.so");
  {
    Host host = make_host({first.path().string(), second.path().string()});
    EXPECT_EQ(plugin_names(host), std::set<std::string>{"mock"}) << describe_refused(host);
    const bp_error *refusal = refusal_of(host, duplicate);
    ASSERT_NE(refusal, nullptr) << describe_refused(host);
    EXPECT_EQ(bp_error_code(refusal), BP_PLUGIN_CONFLICT) << json_of(refusal);
  }
  {
    Host host = make_host({second.path().string(), first.path().string()});
    EXPECT_EQ(plugin_names(host), std::set<std::string>{"mock_dup"}) << describe_refused(host);
    const bp_error *refusal = refusal_of(host, good);
    ASSERT_NE(refusal, nullptr) << describe_refused(host);
    EXPECT_EQ(bp_error_code(refusal), BP_PLUGIN_CONFLICT) << json_of(refusal);
  }
}

TEST(LoaderTest, CallerDirectoriesComeBeforeTheEnvironmentPath) {
  TempDir caller, from_env;
  fs::path good = caller.copy_in(fixture_path("good"));
  fs::path duplicate = from_env.copy_in(fixture_path("duplicate_kind"), "libbackplane_mock_dup.so");
  ScopedEnvironment env("BACKPLANE_PLUGIN_PATH", from_env.path().string());
  Host host = make_host_reading_env({caller.path().string()});
  EXPECT_EQ(plugin_names(host), std::set<std::string>{"mock"}) << describe_refused(host);
  EXPECT_TRUE(same_file(plugin_file_of(host, "mock"), good));
  const bp_error *refusal = refusal_of(host, duplicate);
  ASSERT_NE(refusal, nullptr) << "BACKPLANE_PLUGIN_PATH not searched" << describe_refused(host);
  EXPECT_EQ(bp_error_code(refusal), BP_PLUGIN_CONFLICT) << json_of(refusal);
}

TEST(LoaderTest, EnvironmentPathIsSearchedAfterTheCallerDirectories) {
  TempDir caller, from_env;
  caller.copy_in(plugin_path("cpu"));
  fs::path duplicate = caller.copy_in(fixture_path("duplicate_kind"), "libbackplane_mock_dup.so");
  fs::path good = from_env.copy_in(fixture_path("good"));
  ScopedEnvironment env("BACKPLANE_PLUGIN_PATH", from_env.path().string());
  Host host = make_host_reading_env({caller.path().string()});
  // The caller's mock_dup owns "mock" now; the environment's mock is second.
  EXPECT_EQ(plugin_names(host), (std::set<std::string>{"cpu", "mock_dup"})) << describe_refused(host);
  const bp_error *refusal = refusal_of(host, good);
  ASSERT_NE(refusal, nullptr) << "BACKPLANE_PLUGIN_PATH not searched" << describe_refused(host);
  EXPECT_EQ(bp_error_code(refusal), BP_PLUGIN_CONFLICT) << json_of(refusal);
  EXPECT_TRUE(same_file(plugin_file_of(host, "mock_dup"), duplicate));
}

TEST(LoaderTest, EnvironmentPathIsColonSeparated) {
  TempDir caller, env_first, env_second;
  env_first.copy_in(fixture_path("good"));
  env_second.copy_in(plugin_path("cpu"));
  ScopedEnvironment env("BACKPLANE_PLUGIN_PATH", env_first.path().string() + ":" + env_second.path().string());
  Host host = make_host_reading_env({caller.path().string()});
  EXPECT_EQ(host.refused().size(), 0u) << describe_refused(host);
  EXPECT_EQ(plugin_names(host), (std::set<std::string>{"cpu", "mock"}));
  expect_good_plugins_work(host);
}

TEST(LoaderTest, EnvironmentPathIsIgnoredWithTheFlag) {
  TempDir caller, from_env;
  caller.copy_in(plugin_path("cpu"));
  from_env.copy_in(fixture_path("good"));
  ScopedEnvironment env("BACKPLANE_PLUGIN_PATH", from_env.path().string());
  Host host = make_host({caller.path().string()}, kPluginOptions);  // BP_HOST_IGNORE_ENV_PATH
  EXPECT_EQ(host.refused().size(), 0u) << describe_refused(host);
  EXPECT_EQ(plugin_names(host), std::set<std::string>{"cpu"});
}

}  // namespace
