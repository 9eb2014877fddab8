// Plugins that load but hand the host what it must not pass on as it is
// (issue 11): text that is not UTF-8 or not one line, counts and strings
// past the host's bounds, NULL handles returned with BP_OK, and codes no
// runtime call may return. Each gets its exact code, the good plugins
// beside it keep working, and the caller's data is untouched.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backplane/backplane.hpp"
#include "fixtures/fixture_checks.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace backplane;
using namespace backplane::testing;
using namespace backplane::fixtures;

// Valid UTF-8 (nlohmann refuses to write anything else) with no control
// character: what backplane.h promises of every string it hands out.
::testing::AssertionResult one_line_utf8(const std::string &text) {
  try {
    (void)nlohmann::json(text).dump();
  } catch (const nlohmann::json::exception &) {
    return ::testing::AssertionFailure() << "not UTF-8: " << nlohmann::json(text).dump(-1, ' ', true,
                                                                nlohmann::json::error_handler_t::replace);
  }
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7F) return ::testing::AssertionFailure() << "control character " << int(c) << " in '" << text << "'";
  }
  return ::testing::AssertionSuccess();
}

// Every text an error hands out: message, JSON (which must parse) and fields.
void expect_clean_error(const bp_error *error) {
  ASSERT_NE(error, nullptr);
  EXPECT_TRUE(one_line_utf8(bp_error_message(error)));
  EXPECT_TRUE(one_line_utf8(bp_error_json(error)));
  nlohmann::json json = nlohmann::json::parse(bp_error_json(error), nullptr, false);
  ASSERT_TRUE(json.is_object()) << bp_error_json(error);
  for (const auto &[key, value] : json.items()) {
    if (const char *field = bp_error_field(error, key.c_str())) {
      EXPECT_TRUE(one_line_utf8(field)) << key;
    }
  }
}

// A directory with the good mock fixture and `variants` beside it.
struct PluginDir {
  TempDir dir;
  explicit PluginDir(const std::vector<std::string> &variants) {
    dir.copy_in(fixture_path("good"));
    for (const std::string &variant : variants) dir.copy_in(fixture_path(variant));
  }
  Host host() { return make_host({dir.path().string()}); }
};

std::vector<Device> devices_of(Host &host, const std::string &kind, size_t n) {
  std::vector<Device> devices;
  EXPECT_TRUE(find_devices(host, kind, n, devices));
  return devices;
}

// Two ranks of `kind` with one host-wrapped send and recv buffer each.
struct TwoRanks {
  std::vector<std::vector<float>> send_data{{1, 2, 3}, {4, 5, 6}}, recv_data{{-1, -1, -1}, {-1, -1, -1}};
  std::vector<Buffer> buffers;
  std::vector<bp_buffer *> send, recv;
  TwoRanks(const std::vector<Device> &devices) {
    for (size_t r = 0; r < 2; ++r) {
      Result<Buffer> s = Buffer::wrap_host(devices[r], send_data[r].data(), 3 * sizeof(float));
      Result<Buffer> d = Buffer::wrap_host(devices[r], recv_data[r].data(), 3 * sizeof(float));
      EXPECT_TRUE(s && d);
      if (!s || !d) return;
      send.push_back(s->get());
      recv.push_back(d->get());
      buffers.push_back(std::move(s).value());
      buffers.push_back(std::move(d).value());
    }
  }
};

TEST(PluginRobustness, TextThatIsNotUtf8OrOneLineIsCleanedInEveryListing) {
  PluginDir dir({"bad_text"});
  Host host = dir.host();
  ASSERT_EQ(plugin_names(host), (std::set<std::string>{"bad_text", "mock"})) << describe_refused(host);
  for (const PluginInfo &plugin : host.plugins()) {
    EXPECT_TRUE(one_line_utf8(plugin.version)) << plugin.name;
    EXPECT_TRUE(one_line_utf8(plugin.file)) << plugin.name;
    if (plugin.name == "bad_text") {
      EXPECT_EQ(plugin.version, "0.1.0-\xEF\xBF\xBD\xEF\xBF\xBD next line");
    }
  }
  for (const Device &device : host.devices()) {
    Result<DeviceInfo> info = device.info();
    ASSERT_TRUE(info);
    EXPECT_TRUE(one_line_utf8(info->description)) << info->name;
    for (const auto &[key, value] : info->properties) EXPECT_TRUE(one_line_utf8(key) && one_line_utf8(value));
  }
  Result<DeviceInfo> info = devices_of(host, "bad_text", 1)[0].info();
  ASSERT_TRUE(info);
  // "\xc3\x28" is a lead byte without its continuation; "\xed\xa0\x80" a surrogate.
  EXPECT_EQ(info->description, "bad \xEF\xBF\xBD( bytes  and a second line \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_TRUE(all_reduce_works(host, "mock", kMockDevices));
}

TEST(PluginRobustness, ErrorsOnAPluginWithBadTextKeepTheirCodes) {
  PluginDir dir({"bad_text"});
  Host host = dir.host();
  std::vector<Device> devices = devices_of(host, "bad_text", 2);
  ASSERT_EQ(devices.size(), 2u);
  Result<Group> group = host.create_group(devices);
  ASSERT_TRUE(group) << group.error().json();
  TwoRanks ranks(devices);
  ASSERT_EQ(ranks.send.size(), 2u);

  // The plugin fails with a message of bad bytes and line breaks.
  Status failed = group->broadcast(ranks.send, ranks.recv, 3, BP_F32, 0);
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code(), BP_DEVICE_FAILURE) << failed.error().json();
  expect_clean_error(failed.error().get());
  EXPECT_NE(std::string(failed.error().message()).find("and a second line"), std::string::npos);
  // The host's own refusal names the plugin, version included.
  Status refused = group->all_reduce(ranks.send, ranks.recv, 3, BP_F32, BP_PROD);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), BP_UNSUPPORTED_REDUCE_OP) << refused.error().json();
  expect_clean_error(refused.error().get());
  // And the plugin still computes.
  ASSERT_TRUE(group->all_reduce(ranks.send, ranks.recv, 3, BP_F32, BP_SUM));
  EXPECT_EQ(ranks.recv_data[1], (std::vector<float>{5, 7, 9}));
}

TEST(PluginRobustness, ARefusedPluginWithBadTextKeepsTheHostAndItsReason) {
  PluginDir dir({"bad_text"});
  // A second copy claims the same name: refused, and the refusal carries
  // the version, which is not UTF-8.
  dir.dir.copy_in(fixture_path("bad_text"), "libbackplane_bad_text_copy.so");
  Host host = dir.host();
  ASSERT_EQ(host.refused().size(), 1u) << describe_refused(host);
  EXPECT_EQ(bp_error_code(host.refused()[0]), BP_PLUGIN_CONFLICT) << json_of(host.refused()[0]);
  expect_clean_error(host.refused()[0]);
  EXPECT_EQ(plugin_names(host), (std::set<std::string>{"bad_text", "mock"}));
  EXPECT_TRUE(all_reduce_works(host, "mock", kMockDevices));
}

TEST(PluginRobustness, ADirectoryPathThatIsNotUtf8IsCleanedInTheRefusal) {
  TempDir parent;
  const fs::path odd = parent.path() / "plugins-\xff\xfe";
  fs::create_directory(odd);
  fs::permissions(odd, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                           fs::perms::others_read | fs::perms::others_exec);
  fs::copy_file(fixture_path("garbage"), odd / "libbackplane_garbage.so");
  fs::copy_file(fixture_path("good"), odd / "libbackplane_good.so");
  Host host = make_host({odd.string()});
  ASSERT_EQ(host.refused().size(), 1u) << describe_refused(host);
  EXPECT_EQ(bp_error_code(host.refused()[0]), BP_PLUGIN_LOAD);
  expect_clean_error(host.refused()[0]);
  EXPECT_NE(std::string(bp_error_message(host.refused()[0])).find("plugins-\xEF\xBF\xBD\xEF\xBF\xBD"),
            std::string::npos)
      << bp_error_message(host.refused()[0]);
  ASSERT_EQ(plugin_names(host), (std::set<std::string>{"mock"}));
  EXPECT_TRUE(one_line_utf8(host.plugins()[0].file));
  EXPECT_TRUE(all_reduce_works(host, "mock", kMockDevices));
}

TEST(PluginRobustness, AVersionPastTheBoundIsRefused) {
  PluginDir dir({"long_version"});
  Host host = dir.host();
  ASSERT_EQ(host.refused().size(), 1u) << describe_refused(host);
  EXPECT_EQ(bp_error_code(host.refused()[0]), BP_PLUGIN_INIT);
  EXPECT_NE(std::string(bp_error_message(host.refused()[0])).find("the version is longer than the 4096 bytes"),
            std::string::npos)
      << bp_error_message(host.refused()[0]);
  EXPECT_EQ(plugin_names(host), (std::set<std::string>{"mock"}));
}

TEST(PluginRobustness, UINT32_MAXDevicesIsRefusedWithoutAllocating) {
  PluginDir dir({"huge_device_count"});
  Host host = dir.host();
  ASSERT_EQ(host.refused().size(), 1u) << describe_refused(host);
  const bp_error *refusal = host.refused()[0];
  EXPECT_EQ(bp_error_code(refusal), BP_PLUGIN_INIT) << json_of(refusal);
  EXPECT_NE(std::string(bp_error_message(refusal)).find("reports 4294967295 'huge_device_count' devices"),
            std::string::npos)
      << bp_error_message(refusal);
  EXPECT_EQ(text_field(refusal, "device_count"), "4294967295");
  EXPECT_EQ(plugin_names(host), (std::set<std::string>{"mock"}));
  EXPECT_TRUE(all_reduce_works(host, "mock", kMockDevices));
}

// Each device within its bounds (256 properties of 4095 bytes), but 4096
// of them would be 4 GiB: the host stops at 16 MiB of device text from one
// plugin, at the 16th device.
TEST(PluginRobustness, DeviceTextPastThePluginsBudgetIsRefusedWhereItPasses) {
  PluginDir dir({"wordy_devices"});
  Host host = dir.host();
  ASSERT_EQ(host.refused().size(), 1u) << describe_refused(host);
  const bp_error *refusal = host.refused()[0];
  EXPECT_EQ(bp_error_code(refusal), BP_PLUGIN_INIT) << json_of(refusal);
  EXPECT_NE(std::string(bp_error_message(refusal))
                .find("the names, descriptions and properties of its devices pass 16 MiB at device "
                      "'wordy_devices:15'"),
            std::string::npos)
      << bp_error_message(refusal);
  EXPECT_EQ(plugin_names(host), (std::set<std::string>{"mock"}));
  EXPECT_TRUE(all_reduce_works(host, "mock", kMockDevices));
}

TEST(PluginRobustness, ANullHandleReturnedWithOkIsADeviceFailure) {
  PluginDir dir({"null_handles"});
  Host host = dir.host();
  std::vector<Device> devices = devices_of(host, "null_handles", 2);
  ASSERT_EQ(devices.size(), 2u);

  Result<Buffer> created = Buffer::create(devices[0], 64);
  ASSERT_FALSE(created);
  EXPECT_EQ(created.error().code(), BP_DEVICE_FAILURE) << created.error().json();
  EXPECT_NE(std::string(created.error().message()).find("'null_handles' buffer_create returned BP_OK without a handle"),
            std::string::npos)
      << created.error().message();
  EXPECT_EQ(text_field(created.error().get(), "function"), "buffer_create");

  std::vector<float> memory(16, 3.0f);
  Result<Buffer> wrapped = Buffer::wrap_host(devices[0], memory.data(), memory.size() * sizeof(float));
  ASSERT_FALSE(wrapped);
  EXPECT_EQ(wrapped.error().code(), BP_DEVICE_FAILURE) << wrapped.error().json();
  EXPECT_EQ(text_field(wrapped.error().get(), "function"), "buffer_wrap_host");
  EXPECT_EQ(memory, std::vector<float>(16, 3.0f));

  Result<Group> group = host.create_group(devices);
  ASSERT_FALSE(group);
  EXPECT_EQ(group.error().code(), BP_DEVICE_FAILURE) << group.error().json();
  EXPECT_EQ(text_field(group.error().get(), "function"), "comm_create");
  EXPECT_TRUE(all_reduce_works(host, "mock", kMockDevices));
}

TEST(PluginRobustness, CodesAPluginMayNotReturnBecomeDeviceFailureNamingTheValue) {
  PluginDir dir({"odd_codes"});
  Host host = dir.host();
  std::vector<Device> devices = devices_of(host, "odd_codes", 2);
  ASSERT_EQ(devices.size(), 2u);
  Result<Group> group = host.create_group(devices);
  ASSERT_TRUE(group) << group.error().json();
  TwoRanks ranks(devices);
  ASSERT_EQ(ranks.send.size(), 2u);
  const auto before = ranks.recv_data;

  struct Case {
    const char *what;
    Status status;
    const char *named;
  };
  std::vector<Case> cases;
  cases.push_back({"outside bp_code", group->all_reduce(ranks.send, ranks.recv, 3, BP_F32, BP_SUM), "with code 99,"});
  cases.push_back({"load-time code", group->broadcast(ranks.send, ranks.recv, 3, BP_F32, 0),
                   "with code PLUGIN_LOAD (9),"});
  cases.push_back({"INTERNAL", group->all_reduce(ranks.send, ranks.recv, 3, BP_F32, BP_MAX),
                   "with code INTERNAL (17),"});
  for (const Case &c : cases) {
    SCOPED_TRACE(c.what);
    ASSERT_FALSE(c.status);
    EXPECT_EQ(c.status.error().code(), BP_DEVICE_FAILURE) << c.status.error().json();
    EXPECT_NE(std::string(c.status.error().message()).find(c.named), std::string::npos) << c.status.error().message();
    EXPECT_NE(std::string(c.status.error().message()).find("odd code"), std::string::npos);
  }
  EXPECT_EQ(ranks.recv_data, before);
  // The plugin keeps working: i32 all-reduce runs.
  std::vector<std::vector<int32_t>> ints{{1, 2, 3}, {4, 5, 6}}, sums(2, std::vector<int32_t>(3, -1));
  std::vector<Buffer> int_buffers;
  std::vector<bp_buffer *> int_send, int_recv;
  for (size_t r = 0; r < 2; ++r) {
    Result<Buffer> s = Buffer::wrap_host(devices[r], ints[r].data(), 3 * sizeof(int32_t));
    Result<Buffer> d = Buffer::wrap_host(devices[r], sums[r].data(), 3 * sizeof(int32_t));
    ASSERT_TRUE(s && d);
    int_send.push_back(s->get());
    int_recv.push_back(d->get());
    int_buffers.push_back(std::move(s).value());
    int_buffers.push_back(std::move(d).value());
  }
  ASSERT_TRUE(group->all_reduce(int_send, int_recv, 3, BP_I32, BP_SUM));
  EXPECT_EQ(sums[1], (std::vector<int32_t>{5, 7, 9}));
  EXPECT_TRUE(all_reduce_works(host, "mock", kMockDevices));
}

std::string read_text(const fs::path &file) {
  std::ifstream in(file);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// ---- a privileged process ---------------------------------------------------

// A setuid copy of privileged_host (owned by nobody, run by root) is a
// process with elevated privileges: secure_getenv gives it nothing, so it
// must not take plugins from BACKPLANE_PLUGIN_PATH, and must say so.
TEST(PrivilegedProcess, IgnoresThePluginPathAndSaysSo) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a setuid program of another user";
  TempDir dir;
  const fs::path program = dir.copy_in(BACKPLANE_TEST_PRIVILEGED_HOST, "privileged_host");
  TempDir plugins;
  plugins.copy_in(fixture_path("good"));
  constexpr uid_t kNobody = 65534;
  ASSERT_EQ(::chown(program.c_str(), kNobody, kNobody), 0) << std::strerror(errno);
  ASSERT_EQ(::chmod(program.c_str(), 04755), 0) << std::strerror(errno);
  const std::string output_file = (dir.path() / "out.txt").string();
  // Without privileges first: the same program does read the path.
  const std::string plain = "BACKPLANE_PLUGIN_PATH='" + plugins.path().string() + "' '" +
                            BACKPLANE_TEST_PRIVILEGED_HOST + "' > '" + output_file + "'";
  ASSERT_EQ(std::system(plain.c_str()), 0);
  std::string unprivileged = read_text(output_file);
  EXPECT_NE(unprivileged.find("plugin mock\n"), std::string::npos) << unprivileged;

  const std::string setuid = "BACKPLANE_PLUGIN_PATH='" + plugins.path().string() + "' '" + program.string() +
                             "' > '" + output_file + "'";
  const int status = std::system(setuid.c_str());
  std::string privileged = read_text(output_file);
  if (status != 0 && privileged.empty()) GTEST_SKIP() << "the temp directory does not allow setuid programs";
  EXPECT_EQ(privileged.find("plugin mock"), std::string::npos) << privileged;
  EXPECT_NE(privileged.find("ignoring BACKPLANE_PLUGIN_PATH: this process runs with elevated privileges"),
            std::string::npos)
      << privileged;
}

// ---- pins -------------------------------------------------------------------

std::string sha256_of(const fs::path &file) {
  TempDir out;
  const std::string command = "sha256sum '" + file.string() + "' > '" + (out.path() / "sum").string() + "'";
  if (std::system(command.c_str()) != 0) return "";
  std::ifstream in(out.path() / "sum");
  std::string digest;
  in >> digest;
  return digest;
}

Result<Host> host_with_pins(const TempDir &dir, const std::string &pins) {
  HostOptions options;
  options.plugin_dirs = {dir.path().string()};
  options.flags = BP_HOST_IGNORE_ENV_PATH | BP_HOST_IGNORE_INSTALL_PATH;
  options.plugin_pins_json = pins;
  return Host::create(options);
}

TEST(PluginPins, EveryLoadedPluginListsTheSha256OfItsFile) {
  PluginDir dir({});
  Host host = dir.host();
  ASSERT_EQ(host.plugins().size(), 1u);
  EXPECT_EQ(host.plugins()[0].sha256, sha256_of(fixture_path("good")));
  EXPECT_EQ(host.plugins()[0].sha256.size(), 64u);
}

TEST(PluginPins, AMatchingPinLoadsInEitherCase) {
  PluginDir dir({"narrow"});
  std::string digest = sha256_of(fixture_path("good"));
  std::transform(digest.begin(), digest.end(), digest.begin(), [](unsigned char c) { return std::toupper(c); });
  Result<Host> host = host_with_pins(dir.dir, R"({"libbackplane_good.so": ")" + digest + "\"}");
  ASSERT_TRUE(host) << host.error().json();
  EXPECT_EQ(plugin_names(*host), (std::set<std::string>{"mock", "narrow"})) << describe_refused(*host);
  EXPECT_TRUE(all_reduce_works(*host, "mock", kMockDevices));
}

TEST(PluginPins, AFileWhoseContentDiffersFromItsPinIsRefusedNamingBothHashes) {
  PluginDir dir({"narrow"});
  const std::string wrong(64, 'a');
  Result<Host> host = host_with_pins(dir.dir, R"({"libbackplane_narrow.so": ")" + wrong + "\"}");
  ASSERT_TRUE(host) << host.error().json();
  ASSERT_EQ(host->refused().size(), 1u) << describe_refused(*host);
  const bp_error *refusal = host->refused()[0];
  EXPECT_EQ(bp_error_code(refusal), BP_PLUGIN_LOAD) << json_of(refusal);
  const std::string actual = sha256_of(fixture_path("narrow"));
  EXPECT_EQ(text_field(refusal, "sha256"), actual);
  EXPECT_EQ(text_field(refusal, "pinned_sha256"), wrong);
  const std::string message = bp_error_message(refusal);
  EXPECT_NE(message.find(actual), std::string::npos) << message;
  EXPECT_NE(message.find(wrong), std::string::npos) << message;
  EXPECT_EQ(plugin_names(*host), (std::set<std::string>{"mock"}));
  EXPECT_TRUE(all_reduce_works(*host, "mock", kMockDevices));
}

TEST(PluginPins, AMismatchIsRefusedBeforeThePluginsCodeRuns) {
  // The throws fixture's entry throws: had it run, the refusal would be
  // PLUGIN_INIT. Pinned to another file's hash, it is PLUGIN_LOAD by the pin.
  TempDir dir;
  dir.copy_in(fixture_path("good"));
  dir.copy_in(fixture_path("throws"));
  const std::string pin = sha256_of(fixture_path("good"));
  Result<Host> host = host_with_pins(dir, R"({"libbackplane_throws.so": ")" + pin + "\"}");
  ASSERT_TRUE(host) << host.error().json();
  ASSERT_EQ(host->refused().size(), 1u) << describe_refused(*host);
  EXPECT_EQ(bp_error_code(host->refused()[0]), BP_PLUGIN_LOAD) << json_of(host->refused()[0]);
  EXPECT_EQ(text_field(host->refused()[0], "pinned_sha256"), pin);
  EXPECT_EQ(text_field(host->refused()[0], "sha256"), sha256_of(fixture_path("throws")));
}

TEST(PluginPins, MalformedPinsAreAConfigError) {
  PluginDir dir({});
  for (const std::string &pins :
       {std::string("[1]"), std::string("{"), std::string(R"({"libbackplane_good.so": 7})"),
        std::string(R"({"libbackplane_good.so": "abc"})"), std::string(R"({"libbackplane_good.so": ")") +
                                                               std::string(63, 'a') + "g\"}",
        std::string(R"({"good.so": ")") + std::string(64, 'a') + "\"}"}) {
    SCOPED_TRACE(pins);
    Result<Host> host = host_with_pins(dir.dir, pins);
    ASSERT_FALSE(host);
    EXPECT_EQ(host.error().code(), BP_CONFIG) << host.error().json();
    EXPECT_EQ(text_field(host.error().get(), "pointer"), "/plugin_pins_json");
  }
}

// Fleet files pin plugins too ("plugin_pins"), beside the host options.
struct PinnedFleet {
  PluginDir plugins{{"narrow"}};
  TempDir dir;
  // A fleet over the plugin directory with `pins` (a JSON object) and a
  // group of two mock devices when `with_group`.
  std::string write(const std::string &pins, bool with_group = true, const std::string &kind = "mock") {
    nlohmann::json fleet = {{"version", 1},
                            {"plugin_dirs", {plugins.dir.path().string()}},
                            {"plugin_pins", nlohmann::json::parse(pins)}};
    if (with_group) fleet["groups"] = {{{"name", "pair"}, {"devices", {kind + ":0", kind + ":1"}}}};
    return dir.write_file("fleet.json", fleet.dump()).string();
  }
  static HostOptions options(const std::string &pins = "") {
    HostOptions options;
    options.flags = BP_HOST_IGNORE_ENV_PATH | BP_HOST_IGNORE_INSTALL_PATH;
    options.plugin_pins_json = pins;
    return options;
  }
};

std::string pin_of(const std::string &file, const std::string &sha256) {
  return nlohmann::json{{file, sha256}}.dump();
}

std::vector<std::string> pointers_of(const Error &error) {
  std::vector<std::string> pointers;
  for (const bp_error *problem : error.problems()) pointers.push_back(text_field(problem, "pointer"));
  return pointers;
}

TEST(FleetPins, AMatchingPinLoadsTheFleet) {
  PinnedFleet fleet;
  std::string digest = sha256_of(fixture_path("good"));
  std::transform(digest.begin(), digest.end(), digest.begin(), [](unsigned char c) { return std::toupper(c); });
  Result<Host> host = Host::create_from_fleet_file(fleet.write(pin_of("libbackplane_good.so", digest)),
                                                   PinnedFleet::options());
  ASSERT_TRUE(host) << host.error().json();
  EXPECT_EQ(plugin_names(*host), (std::set<std::string>{"mock", "narrow"})) << describe_refused(*host);
  EXPECT_TRUE(host->find_group("pair"));
}

TEST(FleetPins, AMismatchRefusesTheFileAndTheFleetSaysWhy) {
  PinnedFleet fleet;
  const std::string wrong(64, 'b');
  Result<Host> host = Host::create_from_fleet_file(
      fleet.write(pin_of("libbackplane_narrow.so", wrong), true, "narrow"), PinnedFleet::options());
  ASSERT_FALSE(host);
  EXPECT_EQ(host.error().code(), BP_PLUGIN_NOT_FOUND) << host.error().json();
  EXPECT_EQ(pointers_of(host.error()), (std::vector<std::string>{"/groups/0/devices/0", "/groups/0/devices/1"}));
  for (const bp_error *problem : host.error().problems()) {
    const std::string message = bp_error_message(problem);
    EXPECT_NE(message.find("device kind 'narrow': its plugin was refused"), std::string::npos) << message;
    EXPECT_NE(message.find(wrong), std::string::npos) << message;
    EXPECT_NE(message.find(sha256_of(fixture_path("narrow"))), std::string::npos) << message;
    EXPECT_EQ(text_field(problem, "hint").rfind("install the pinned build of libbackplane_narrow.so", 0), 0u)
        << json_of(problem);
  }

  // Without the group the host comes up, with the pinned file refused once
  // and the others loaded.
  Result<Host> without_group = Host::create_from_fleet_file(
      fleet.write(pin_of("libbackplane_narrow.so", wrong), false), PinnedFleet::options());
  ASSERT_TRUE(without_group) << without_group.error().json();
  ASSERT_EQ(without_group->refused().size(), 1u) << describe_refused(*without_group);
  EXPECT_EQ(bp_error_code(without_group->refused()[0]), BP_PLUGIN_LOAD);
  EXPECT_EQ(text_field(without_group->refused()[0], "pinned_sha256"), wrong);
  EXPECT_EQ(plugin_names(*without_group), (std::set<std::string>{"mock"}));
  EXPECT_TRUE(all_reduce_works(*without_group, "mock", kMockDevices));
}

TEST(FleetPins, APinThatDisagreesWithTheHostOptionsIsAConfigProblem) {
  PinnedFleet fleet;
  const std::string digest = sha256_of(fixture_path("good"));
  Result<Host> host = Host::create_from_fleet_file(fleet.write(pin_of("libbackplane_good.so", std::string(64, 'c'))),
                                                   PinnedFleet::options(pin_of("libbackplane_good.so", digest)));
  ASSERT_FALSE(host);
  EXPECT_EQ(host.error().code(), BP_CONFIG) << host.error().json();
  EXPECT_EQ(pointers_of(host.error()), (std::vector<std::string>{"/plugin_pins/libbackplane_good.so"}));
  // Agreeing pins (in another case) load.
  std::string upper = digest;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  Result<Host> agreeing = Host::create_from_fleet_file(fleet.write(pin_of("libbackplane_good.so", upper)),
                                                       PinnedFleet::options(pin_of("libbackplane_good.so", digest)));
  EXPECT_TRUE(agreeing) << agreeing.error().json();
}

TEST(FleetPins, MalformedPinsAreSchemaProblemsAtEachEntry) {
  PinnedFleet fleet;
  const std::string hex(64, 'd');
  const std::string pins = nlohmann::json{{"good.so", hex},
                                          {"libbackplane_good.so", "abc"},
                                          {"libbackplane_narrow.so", 7}}
                               .dump();
  Result<Host> host = Host::create_from_fleet_file(fleet.write(pins), PinnedFleet::options());
  ASSERT_FALSE(host);
  EXPECT_EQ(host.error().code(), BP_CONFIG) << host.error().json();
  std::vector<std::string> pointers = pointers_of(host.error());
  std::sort(pointers.begin(), pointers.end());
  EXPECT_EQ(pointers, (std::vector<std::string>{"/plugin_pins/good.so", "/plugin_pins/libbackplane_good.so",
                                                "/plugin_pins/libbackplane_narrow.so"}))
      << host.error().json();
  for (const bp_error *problem : host.error().problems()) {
    const std::string reason = text_field(problem, "reason");
    if (text_field(problem, "pointer") == "/plugin_pins/good.so") {
      EXPECT_EQ(reason, "'good.so' does not name a plugin file");
    }
    if (text_field(problem, "pointer") == "/plugin_pins/libbackplane_good.so") {
      EXPECT_NE(reason.find("\"abc\" does not match"), std::string::npos) << reason;
    }
  }
  Result<Host> not_object = Host::create_from_fleet_file(fleet.write("[]"), PinnedFleet::options());
  ASSERT_FALSE(not_object);
  EXPECT_EQ(not_object.error().code(), BP_CONFIG);
  EXPECT_EQ(pointers_of(not_object.error()), (std::vector<std::string>{"/plugin_pins"}));
}

TEST(FleetPins, LoadingIntoALiveHostChecksThePluginsAlreadyLoaded) {
  PinnedFleet fleet;
  Host host = fleet.plugins.host();
  const size_t plugins_before = host.plugins().size();
  // A pin on a loaded plugin with other content: CONFIG, nothing changes.
  Status refused = host.load_fleet_file(fleet.write(pin_of("libbackplane_good.so", std::string(64, 'e'))));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), BP_CONFIG) << refused.error().json();
  ASSERT_EQ(pointers_of(refused.error()), (std::vector<std::string>{"/plugin_pins/libbackplane_good.so"}));
  const std::string reason = text_field(refused.error().problems()[0], "reason");
  EXPECT_NE(reason.find("libbackplane_good.so is already loaded from"), std::string::npos) << reason;
  EXPECT_NE(reason.find(sha256_of(fixture_path("good"))), std::string::npos) << reason;
  EXPECT_FALSE(host.find_group("pair"));
  EXPECT_EQ(host.plugins().size(), plugins_before);
  // The refused pin was not kept: a fleet pinning the right content loads.
  Status loaded = host.load_fleet_file(fleet.write(pin_of("libbackplane_good.so", sha256_of(fixture_path("good")))));
  ASSERT_TRUE(loaded) << loaded.error().json();
  EXPECT_TRUE(host.find_group("pair"));
  EXPECT_TRUE(all_reduce_works(host, "mock", kMockDevices));
}

TEST(FleetPins, PinsOfALoadedFleetHoldForTheFilesItsDirectoriesAdd) {
  PinnedFleet fleet;
  TempDir later;
  later.copy_in(fixture_path("partial"));
  Host host = fleet.plugins.host();
  nlohmann::json document = {{"version", 1},
                             {"plugin_dirs", {later.path().string()}},
                             {"plugin_pins", {{"libbackplane_partial.so", std::string(64, 'f')}}}};
  Status loaded = host.load_fleet_text(document.dump());
  ASSERT_TRUE(loaded) << loaded.error().json();
  const bp_error *refusal = refusal_of(host, later.path() / "libbackplane_partial.so");
  ASSERT_NE(refusal, nullptr) << describe_refused(host);
  EXPECT_EQ(bp_error_code(refusal), BP_PLUGIN_LOAD) << json_of(refusal);
  EXPECT_EQ(text_field(refusal, "pinned_sha256"), std::string(64, 'f'));
  EXPECT_TRUE(all_reduce_works(host, "mock", kMockDevices));
}

}  // namespace
