// Fleet files (configs/schema.json) through the C API: every bad input of
// tests/fleets/bad is refused with its exact code, JSON pointer, value and
// reason; every problem of a file is reported; a failed load changes nothing;
// good fleets bring up their groups and workload; bp_parse_sizes.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backplane/backplane.h"
#include "backplane/backplane.hpp"
#include "fixtures/fixture_checks.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace backplane;
using namespace backplane::testing;
using namespace backplane::fixtures;

// The hosts of these tests see 4 cpu devices, whatever the machine.
constexpr const char *kCpuOptions = R"({"cpu": {"devices": 4}})";

struct ErrorDeleter {
  void operator()(bp_error *error) const { bp_error_destroy(error); }
};
using ErrorPtr = std::unique_ptr<bp_error, ErrorDeleter>;

fs::path bad_fleet(const std::string &name) {
  return fs::path(BACKPLANE_TEST_SOURCE_DIR) / "tests" / "fleets" / "bad" / (name + ".json");
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

bool contains(const std::string &text, const std::string &part) { return text.find(part) != std::string::npos; }

// Whether `reported` names `expected`, which need not exist.
bool names_file(const std::string &reported, const fs::path &expected) {
  std::error_code ignored;
  return !reported.empty() && fs::weakly_canonical(reported, ignored) == fs::weakly_canonical(expected, ignored);
}

std::vector<const bp_error *> problems_of(const bp_error *error) {
  std::vector<const bp_error *> problems;
  for (size_t i = 0; i < bp_error_problem_count(error); ++i) problems.push_back(bp_error_problem(error, i));
  return problems;
}

std::set<std::string> pointers_of(const bp_error *error) {
  std::set<std::string> pointers;
  for (const bp_error *problem : problems_of(error)) pointers.insert(text_field(problem, "pointer"));
  return pointers;
}

// Every problem, one per line, for failure messages.
std::string describe(const bp_error *error) {
  if (!error) return "(no error)";
  std::string text = bp_error_json(error);
  for (const bp_error *problem : problems_of(error)) text += "\n  problem: " + json_of(problem);
  return text;
}

// All the strings inside `value`, joined: what a listing says, whatever its shape.
std::string all_strings(const json &value) {
  if (value.is_string()) return value.get<std::string>() + "\n";
  std::string text;
  if (value.is_structured())
    for (const json &item : value) text += all_strings(item);
  return text;
}

// The parts every problem has: the file, the pointer, the reason, and a
// message that is "POINTER: reason".
void expect_problem_shape(const bp_error *problem, const std::string &file, const std::string &pointer) {
  ASSERT_NE(problem, nullptr);
  std::string reported_file = text_field(problem, "file");
  if (file == "<text>") {
    EXPECT_EQ(reported_file, "<text>") << json_of(problem);
  } else {
    EXPECT_TRUE(names_file(reported_file, file)) << "file is '" << reported_file << "', expected " << file
                                                 << ": " << json_of(problem);
  }
  EXPECT_EQ(text_field(problem, "pointer"), pointer) << json_of(problem);
  std::string reason = text_field(problem, "reason");
  EXPECT_FALSE(reason.empty()) << json_of(problem);
  std::string message = bp_error_message(problem);
  if (!pointer.empty()) {
    EXPECT_EQ(message, pointer + ": " + reason) << json_of(problem);
  } else {
    EXPECT_TRUE(message.size() >= reason.size() && message.ends_with(reason))
        << "message '" << message << "' does not end with the reason '" << reason << "'";
  }
}

// The "value" field: the offending value as JSON text.
void expect_value(const bp_error *problem, const std::string &expected_json) {
  const char *value = bp_error_field(problem, "value");
  ASSERT_NE(value, nullptr) << "no \"value\": " << json_of(problem);
  json parsed = json::parse(value, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << "\"value\" is not JSON text: " << value;
  EXPECT_EQ(parsed, json::parse(expected_json)) << json_of(problem);
}

// Host with 4 cpu devices and the narrow fixture (4 devices; only
// all_reduce f32 sum), each copied into a directory of its own test.
class FleetHost {
 public:
  FleetHost() {
    dir_.copy_in(plugin_path("cpu"));
    dir_.copy_in(fixture_path("narrow"));
    host_ = make_host({dir_.path().string()}, kCpuOptions);
  }
  bp_host *get() const { return host_.get(); }
  Host &host() { return host_; }
  const fs::path &dir() const { return dir_.path(); }

 private:
  TempDir dir_;
  Host host_;
};

// What a failed load must leave as it was.
struct HostCounts {
  size_t plugins, devices, groups, workloads;
  bool operator==(const HostCounts &) const = default;
};
HostCounts counts_of(const bp_host *host) {
  return {bp_host_plugin_count(host), bp_host_device_count(host), bp_host_group_count(host),
          bp_host_workload_count(host)};
}
std::ostream &operator<<(std::ostream &out, const HostCounts &c) {
  return out << "{plugins " << c.plugins << ", devices " << c.devices << ", groups " << c.groups << ", workloads "
             << c.workloads << "}";
}

std::string device_name(bp_device *device) {
  if (!device) return "(null)";
  bp_device_info info{};
  info.struct_size = sizeof info;
  ErrorPtr error(bp_device_get_info(device, &info));
  if (error) return "(info failed: " + json_of(error.get()) + ")";
  return info.name;
}

std::vector<std::string> rank_names(bp_group *group) {
  std::vector<std::string> names;
  for (size_t r = 0; r < bp_group_size(group); ++r) names.push_back(device_name(bp_group_device(group, r)));
  return names;
}

std::vector<std::string> group_names(const bp_host *host) {
  std::vector<std::string> names;
  for (size_t i = 0; i < bp_host_group_count(host); ++i) names.emplace_back(bp_group_name(bp_host_group(host, i)));
  return names;
}

bp_group *find_group(bp_host *host, const char *name) {
  bp_group *group = nullptr;
  ErrorPtr error(bp_host_find_group(host, name, &group));
  EXPECT_EQ(error, nullptr) << "bp_host_find_group(" << name << "): " << json_of(error.get());
  return group;
}

// Host options that search `dirs` only.
struct SearchOnly {
  explicit SearchOnly(std::vector<std::string> dirs_in, const char *plugin_options = nullptr)
      : dirs(std::move(dirs_in)) {
    for (const std::string &dir : dirs) raw_dirs.push_back(dir.c_str());
    options.struct_size = sizeof options;
    options.plugin_dirs = raw_dirs.data();
    options.plugin_dir_count = raw_dirs.size();
    options.flags = BP_HOST_IGNORE_ENV_PATH | BP_HOST_IGNORE_INSTALL_PATH;
    options.plugin_options_json = plugin_options;
  }
  SearchOnly(const SearchOnly &) = delete;
  SearchOnly &operator=(const SearchOnly &) = delete;
  std::vector<std::string> dirs;
  std::vector<const char *> raw_dirs;
  bp_host_options options{};
};

// The working directory for one test, restored afterwards.
class ScopedCwd {
 public:
  explicit ScopedCwd(const fs::path &dir) : old_(fs::current_path()) { fs::current_path(dir); }
  ~ScopedCwd() { fs::current_path(old_); }
  ScopedCwd(const ScopedCwd &) = delete;
  ScopedCwd &operator=(const ScopedCwd &) = delete;

 private:
  fs::path old_;
};

// ---- every bad input, one file each --------------------------------------

// One file of tests/fleets/bad (or, for missing_file, none) and the one
// problem it must be refused with.
struct BadFleet {
  std::string name;
  bp_code code;
  std::string pointer;
  std::string value;  // the "value" as JSON text; empty: not checked (nothing to show)
  std::string reason_part;
  std::string hint_part;
  bool alternatives = false;     // "alternatives" must be a JSON array
  std::string alternative_kind;  // ... that mentions this kind

  BadFleet(std::string name_in, bp_code code_in, std::string pointer_in, std::string value_in)
      : name(std::move(name_in)), code(code_in), pointer(std::move(pointer_in)), value(std::move(value_in)) {}
  BadFleet reason_has(std::string part) const {
    BadFleet copy = *this;
    copy.reason_part = std::move(part);
    return copy;
  }
  BadFleet hint_has(std::string part) const {
    BadFleet copy = *this;
    copy.hint_part = std::move(part);
    return copy;
  }
  BadFleet with_alternatives(std::string kind = "") const {
    BadFleet copy = *this;
    copy.alternatives = true;
    copy.alternative_kind = std::move(kind);
    return copy;
  }
};

std::ostream &operator<<(std::ostream &out, const BadFleet &bad) { return out << bad.name; }

const BadFleet kBadFleets[] = {
    // Files that are not fleets at all.
    BadFleet("missing_file", BP_CONFIG, "", ""),
    BadFleet("empty", BP_CONFIG, "", ""),
    BadFleet("not_json", BP_CONFIG, "", "").reason_has("line 4, column 35"),
    BadFleet("not_an_object", BP_CONFIG, "", R"([{"version": 1}])"),
    // Stage (a): the schema.
    BadFleet("wrong_version", BP_CONFIG, "/version", "2"),
    BadFleet("unknown_top_level_key", BP_CONFIG, "/foo", R"({"bar": 1})"),
    BadFleet("wrong_type_count", BP_CONFIG, "/devices/0/count", R"("4")"),
    BadFleet("wrong_type_devices", BP_CONFIG, "/devices", R"({"name": "cpu", "kind": "cpu"})"),
    BadFleet("negative_count", BP_CONFIG, "/devices/0/count", "-2"),
    BadFleet("negative_index", BP_CONFIG, "/devices/0/index", "-1"),
    BadFleet("group_without_devices", BP_CONFIG, "/groups/0/devices", "[]"),
    // Stage (b): meaning.
    BadFleet("sizes_bad_unit", BP_CONFIG, "/workload/0/sizes", R"("8B..64Mib")").reason_has("Mib"),
    BadFleet("sizes_end_below_start", BP_CONFIG, "/workload/0/sizes", R"("1MiB..1KiB x2")"),
    BadFleet("sizes_list_bad_item", BP_CONFIG, "/workload/0/sizes/1", R"("64Kb")"),
    BadFleet("duplicate_device_name", BP_CONFIG, "/devices/1/name", R"("a")"),
    BadFleet("duplicate_group_name", BP_CONFIG, "/groups/1/name", R"("g")"),
    BadFleet("device_twice_in_group", BP_CONFIG, "/groups/0/devices/2", R"("cpu:0")"),
    BadFleet("device_twice_by_two_names", BP_CONFIG, "/groups/0/devices/2", R"("cpu:1")"),
    BadFleet("root_outside_group", BP_CONFIG, "/workload/0/root", "4"),
    BadFleet("group_unknown_device", BP_CONFIG, "/groups/0/devices/1", R"("cpu_mian")")
        .hint_has("did you mean 'cpu_main'?"),
    BadFleet("workload_unknown_group", BP_CONFIG, "/workload/0/group", R"("all_cpus")")
        .hint_has("did you mean 'all_cpu'?"),
    BadFleet("index_beyond_devices", BP_CONFIG, "/devices/0/index", "4"),
    BadFleet("count_beyond_devices", BP_CONFIG, "/devices/0/count", "3"),
    BadFleet("group_index_beyond_devices", BP_CONFIG, "/groups/0/devices/1", R"("cpu:9")"),
    BadFleet("options_differ_from_host", BP_CONFIG, "/devices/0/options", R"({"devices": 2})"),
    BadFleet("kind_not_provided", BP_PLUGIN_NOT_FOUND, "/devices/0/kind", R"("cpuu")")
        .hint_has("did you mean 'cpu'?"),
    BadFleet("unsupported_dtype", BP_UNSUPPORTED_DTYPE, "/workload/0/dtype", R"("f64")").with_alternatives("cpu"),
    BadFleet("unsupported_reduce_op", BP_UNSUPPORTED_REDUCE_OP, "/workload/0/op", R"("avg")").with_alternatives(),
    BadFleet("unsupported_collective", BP_UNSUPPORTED_COLLECTIVE, "/workload/0/collective", R"("broadcast")")
        .with_alternatives("cpu"),
};

class BadFleetFile : public ::testing::TestWithParam<BadFleet> {};

TEST_P(BadFleetFile, RefusedWithExactCodePointerAndValue) {
  const BadFleet &bad = GetParam();
  const fs::path path = bad_fleet(bad.name);
  ASSERT_EQ(fs::exists(path), bad.name != "missing_file") << path;
  FleetHost host;
  const HostCounts before = counts_of(host.get());

  ErrorPtr error(bp_host_load_fleet_file(host.get(), path.c_str()));
  ASSERT_NE(error, nullptr) << path << " loaded";
  EXPECT_EQ(bp_error_code(error.get()), bad.code) << describe(error.get());
  ASSERT_EQ(bp_error_problem_count(error.get()), 1u) << describe(error.get());
  const bp_error *problem = bp_error_problem(error.get(), 0);
  EXPECT_EQ(bp_error_code(problem), bad.code) << json_of(problem);
  expect_problem_shape(problem, path.string(), bad.pointer);
  if (!bad.value.empty()) expect_value(problem, bad.value);
  if (!bad.reason_part.empty()) {
    EXPECT_TRUE(contains(text_field(problem, "reason"), bad.reason_part))
        << "reason lacks '" << bad.reason_part << "': " << json_of(problem);
  }
  if (!bad.hint_part.empty()) {
    EXPECT_TRUE(contains(text_field(problem, "hint"), bad.hint_part))
        << "hint lacks '" << bad.hint_part << "': " << json_of(problem);
  }
  if (bad.alternatives) {
    json alternatives = json_field(problem, "alternatives");
    ASSERT_TRUE(alternatives.is_array()) << "no \"alternatives\" array: " << json_of(problem);
    if (!bad.alternative_kind.empty()) {
      EXPECT_TRUE(contains(all_strings(alternatives), bad.alternative_kind))
          << "alternatives lack '" << bad.alternative_kind << "': " << alternatives.dump();
    }
  }
  EXPECT_EQ(counts_of(host.get()), before) << "a failed load changed the host";
}

INSTANTIATE_TEST_SUITE_P(Fleets, BadFleetFile, ::testing::ValuesIn(kBadFleets),
                         [](const ::testing::TestParamInfo<BadFleet> &info) { return info.param.name; });

// Every file under tests/fleets/bad is a case above or one of the tests below.
TEST(FleetFile, EveryBadFleetFileIsTested) {
  std::set<std::string> tested = {"three_schema_problems", "three_meaning_problems"};
  for (const BadFleet &bad : kBadFleets) tested.insert(bad.name);
  size_t files = 0;
  for (const fs::directory_entry &entry : fs::directory_iterator(bad_fleet("x").parent_path())) {
    ++files;
    EXPECT_EQ(tested.count(entry.path().stem().string()), 1u) << entry.path() << " is not tested";
  }
  EXPECT_EQ(files + 1, tested.size());  // missing_file has no file
}

// ---- every problem, not just the first ------------------------------------

TEST(FleetFile, EverySchemaProblemIsReported) {
  FleetHost host;
  const fs::path path = bad_fleet("three_schema_problems");
  ErrorPtr error(bp_host_load_fleet_file(host.get(), path.c_str()));
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(bp_error_code(error.get()), BP_CONFIG) << describe(error.get());
  ASSERT_EQ(bp_error_problem_count(error.get()), 3u) << describe(error.get());
  EXPECT_EQ(pointers_of(error.get()), (std::set<std::string>{"/version", "/devices/0/count", "/extra"}))
      << describe(error.get());
  for (const bp_error *problem : problems_of(error.get())) {
    EXPECT_EQ(bp_error_code(problem), BP_CONFIG) << json_of(problem);
    expect_problem_shape(problem, path.string(), text_field(problem, "pointer"));
  }
}

TEST(FleetFile, EveryMeaningProblemIsReported) {
  FleetHost host;
  const fs::path path = bad_fleet("three_meaning_problems");
  ErrorPtr error(bp_host_load_fleet_file(host.get(), path.c_str()));
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(bp_error_code(error.get()), BP_CONFIG) << describe(error.get());
  ASSERT_EQ(bp_error_problem_count(error.get()), 3u) << describe(error.get());
  EXPECT_EQ(pointers_of(error.get()), (std::set<std::string>{"/devices/1/name", "/groups/0/devices/1", "/groups/1/name"}))
      << describe(error.get());
  for (const bp_error *problem : problems_of(error.get())) {
    EXPECT_EQ(bp_error_code(problem), BP_CONFIG) << json_of(problem);
    expect_problem_shape(problem, path.string(), text_field(problem, "pointer"));
  }
}

// The error's code is its first problem's, whatever the mix.
TEST(FleetFile, ErrorCodeIsTheFirstProblems) {
  FleetHost host;
  const std::string text = R"({
    "version": 1,
    "devices": [{"name": "v", "kind": "vulkn"}],
    "groups": [{"name": "g", "devices": ["cpu:0", "cpu:0"]}]
  })";
  ErrorPtr error(bp_host_load_fleet_text(host.get(), text.data(), text.size()));
  ASSERT_NE(error, nullptr);
  ASSERT_EQ(bp_error_problem_count(error.get()), 2u) << describe(error.get());
  EXPECT_EQ(bp_error_code(error.get()), bp_error_code(bp_error_problem(error.get(), 0))) << describe(error.get());
  std::set<bp_code> codes;
  for (const bp_error *problem : problems_of(error.get())) codes.insert(bp_error_code(problem));
  EXPECT_EQ(codes, (std::set<bp_code>{BP_PLUGIN_NOT_FOUND, BP_CONFIG})) << describe(error.get());
  EXPECT_EQ(pointers_of(error.get()), (std::set<std::string>{"/devices/0/kind", "/groups/0/devices/1"}))
      << describe(error.get());
}

// ---- files too large or too deep ------------------------------------------

long max_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

TEST(FleetFile, HundredMegabyteFileIsRefusedQuicklyInBoundedMemory) {
  TempDir dir;
  const fs::path path = dir.path() / "huge.json";
  {
    // Valid JSON, 100 MB of it: only its size is wrong.
    std::ofstream out(path, std::ios::binary);
    out << R"({"version": 1,)";
    const std::string spaces(1 << 20, ' ');
    for (int i = 0; i < 100; ++i) out << spaces;
    out << R"("devices": []})";
    ASSERT_TRUE(out.good());
  }
  ASSERT_GT(fs::file_size(path), 100u << 20);
  FleetHost host;
  const HostCounts before = counts_of(host.get());
  const long rss_before = max_rss_kib();

  const auto start = std::chrono::steady_clock::now();
  ErrorPtr error(bp_host_load_fleet_file(host.get(), path.c_str()));
  const auto elapsed = std::chrono::steady_clock::now() - start;

  ASSERT_NE(error, nullptr) << "a 100 MB fleet loaded";
  EXPECT_LT(elapsed, std::chrono::seconds(5));
  EXPECT_LT(max_rss_kib() - rss_before, 64 * 1024) << "KiB of peak memory grew while refusing the file";
  EXPECT_EQ(bp_error_code(error.get()), BP_CONFIG) << describe(error.get());
  ASSERT_EQ(bp_error_problem_count(error.get()), 1u) << describe(error.get());
  const bp_error *problem = bp_error_problem(error.get(), 0);
  expect_problem_shape(problem, path.string(), "");
  const std::string reason = lower(text_field(problem, "reason"));
  EXPECT_TRUE(contains(reason, "limit") || contains(reason, "too large") || contains(reason, "larger than"))
      << "reason does not mention the size limit: " << json_of(problem);
  EXPECT_EQ(counts_of(host.get()), before);
}

// 100000 nested arrays inside an otherwise valid fleet.
std::string deeply_nested_fleet(size_t depth) {
  return R"({"version": 1, "devices": [)" + std::string(depth, '[') + std::string(depth, ']') + "]}";
}

void expect_too_deep(const bp_error *error, const std::string &file) {
  ASSERT_NE(error, nullptr) << "a deeply nested fleet loaded";
  EXPECT_EQ(bp_error_code(error), BP_CONFIG) << describe(error);
  ASSERT_EQ(bp_error_problem_count(error), 1u) << describe(error);
  const bp_error *problem = bp_error_problem(error, 0);
  expect_problem_shape(problem, file, "");
  const std::string reason = lower(text_field(problem, "reason"));
  EXPECT_TRUE(contains(reason, "nest") || contains(reason, "depth"))
      << "reason does not mention the nesting depth: " << json_of(problem);
}

TEST(FleetFile, DeeplyNestedFileIsRefused) {
  TempDir dir;
  const fs::path path = dir.write_file("deep.json", deeply_nested_fleet(100000));
  FleetHost host;
  const HostCounts before = counts_of(host.get());
  const auto start = std::chrono::steady_clock::now();
  ErrorPtr error(bp_host_load_fleet_file(host.get(), path.c_str()));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  expect_too_deep(error.get(), path.string());
  EXPECT_EQ(counts_of(host.get()), before);
}

TEST(FleetFile, DeeplyNestedTextIsRefused) {
  FleetHost host;
  // Objects this time: no recursion may follow them down. 200 KB, well
  // under any size limit.
  std::string text = R"({"version": 1, "devices": [{"name": "d", "options": )";
  constexpr size_t kDepth = 50000;
  for (size_t i = 0; i < kDepth; ++i) text += R"({"":)";
  text += "1" + std::string(kDepth, '}') + "}]}";
  ErrorPtr error(bp_host_load_fleet_text(host.get(), text.data(), text.size()));
  expect_too_deep(error.get(), "<text>");
}

// ---- creating a host from a fleet file -------------------------------------

TEST(FleetFile, CreateFromMissingFileLeavesOutUntouched) {
  TempDir dir;
  const fs::path path = dir.path() / "absent.json";
  SearchOnly search({dir.path().string()});
  bp_host *const untouched = reinterpret_cast<bp_host *>(uintptr_t{0x10});
  bp_host *out = untouched;
  ErrorPtr error(bp_host_create_from_fleet_file(path.c_str(), &search.options, &out));
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(out, untouched);
  EXPECT_EQ(bp_error_code(error.get()), BP_CONFIG) << describe(error.get());
  ASSERT_EQ(bp_error_problem_count(error.get()), 1u) << describe(error.get());
  expect_problem_shape(bp_error_problem(error.get(), 0), path.string(), "");
}

TEST(FleetFile, CreateFromBadFleetLeavesOutUntouched) {
  const fs::path path = bad_fleet("index_beyond_devices");
  SearchOnly search({BACKPLANE_TEST_PLUGIN_DIR}, kCpuOptions);
  bp_host *const untouched = reinterpret_cast<bp_host *>(uintptr_t{0x10});
  bp_host *out = untouched;
  ErrorPtr error(bp_host_create_from_fleet_file(path.c_str(), &search.options, &out));
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(out, untouched);
  EXPECT_EQ(bp_error_code(error.get()), BP_CONFIG) << describe(error.get());
  EXPECT_EQ(pointers_of(error.get()), (std::set<std::string>{"/devices/0/index"})) << describe(error.get());
}

// A device entry's options reach the plugin before its devices are counted.
TEST(FleetFile, DeviceOptionsReachThePluginBeforeEnumeration) {
  TempDir dir;
  const fs::path path = dir.write_file("trio.json", R"({
    "version": 1,
    "devices": [{"name": "trio", "kind": "cpu", "count": 3, "options": {"devices": 3}}],
    "groups": [{"name": "all", "devices": ["trio"]}]
  })");
  SearchOnly search({BACKPLANE_TEST_PLUGIN_DIR});
  bp_host *raw = nullptr;
  ErrorPtr error(bp_host_create_from_fleet_file(path.c_str(), &search.options, &raw));
  ASSERT_EQ(error, nullptr) << describe(error.get());
  Host host(raw);
  EXPECT_EQ(device_count_of_kind(host, "cpu"), 3u);
  EXPECT_EQ(rank_names(find_group(host.get(), "all")), (std::vector<std::string>{"cpu:0", "cpu:1", "cpu:2"}));

  // ... so that an index past them is a problem of the fleet.
  const fs::path past = dir.write_file("past.json", R"({
    "version": 1,
    "devices": [{"name": "fourth", "kind": "cpu", "index": 3, "options": {"devices": 3}}]
  })");
  bp_host *none = nullptr;
  ErrorPtr refused(bp_host_create_from_fleet_file(past.c_str(), &search.options, &none));
  ASSERT_NE(refused, nullptr);
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(bp_error_code(refused.get()), BP_CONFIG) << describe(refused.get());
  EXPECT_EQ(pointers_of(refused.get()), (std::set<std::string>{"/devices/0/index"})) << describe(refused.get());
}

TEST(FleetFile, ConflictingOptionsForOneKindAreRefused) {
  TempDir dir;
  const fs::path path = dir.write_file("conflict.json", R"({
    "version": 1,
    "devices": [
      {"name": "a", "kind": "cpu", "options": {"devices": 2}},
      {"name": "b", "kind": "cpu", "index": 1, "options": {"devices": 6}}
    ]
  })");
  SearchOnly search({BACKPLANE_TEST_PLUGIN_DIR});
  bp_host *none = nullptr;
  ErrorPtr error(bp_host_create_from_fleet_file(path.c_str(), &search.options, &none));
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(bp_error_code(error.get()), BP_CONFIG) << describe(error.get());
  EXPECT_EQ(pointers_of(error.get()), (std::set<std::string>{"/devices/1/options"})) << describe(error.get());
}

// ---- relative paths and text -----------------------------------------------

TEST(FleetFile, RelativePluginDirsResolveAgainstTheFleetFilesFolder) {
  TempDir fleet_dir;
  fs::create_directory(fleet_dir.path() / "plugins");
  fs::copy_file(fixture_path("narrow"), fleet_dir.path() / "plugins" / "libbackplane_narrow.so");
  const fs::path path = fleet_dir.write_file("fleet.json", R"({
    "version": 1,
    "plugin_dirs": ["plugins"],
    "groups": [{"name": "narrow_pair", "devices": ["narrow:0", "narrow:1"]}]
  })");
  TempDir elsewhere;  // the working directory has no plugins/
  ScopedCwd cwd(elsewhere.path());
  SearchOnly search({});
  bp_host *raw = nullptr;
  ErrorPtr error(bp_host_create_from_fleet_file(path.c_str(), &search.options, &raw));
  ASSERT_EQ(error, nullptr) << describe(error.get());
  Host host(raw);
  EXPECT_EQ(plugin_names(host), (std::set<std::string>{"narrow"})) << describe_refused(host);
  EXPECT_EQ(rank_names(find_group(host.get(), "narrow_pair")), (std::vector<std::string>{"narrow:0", "narrow:1"}));
}

TEST(FleetFile, RelativePluginDirsInTextResolveAgainstTheWorkingDirectory) {
  TempDir work;
  fs::create_directory(work.path() / "plugins");
  fs::copy_file(fixture_path("narrow"), work.path() / "plugins" / "libbackplane_narrow.so");
  Host host = make_builtin_host(kCpuOptions);
  ScopedCwd cwd(work.path());
  const std::string text = R"({
    "version": 1,
    "plugin_dirs": ["plugins"],
    "groups": [{"name": "narrow_pair", "devices": ["narrow:0", "narrow:1"]}]
  })";
  ErrorPtr error(bp_host_load_fleet_text(host.get(), text.data(), text.size()));
  ASSERT_EQ(error, nullptr) << describe(error.get());
  EXPECT_EQ(plugin_names(host).count("narrow"), 1u) << describe_refused(host);
  EXPECT_EQ(rank_names(find_group(host.get(), "narrow_pair")), (std::vector<std::string>{"narrow:0", "narrow:1"}));
}

TEST(FleetFile, ProblemsInTextNameTheText) {
  FleetHost host;
  const std::string text = R"({"version": 1, "devices": [{"name": "c", "kind": "cpu", "count": 0}]})";
  ErrorPtr error(bp_host_load_fleet_text(host.get(), text.data(), text.size()));
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(bp_error_code(error.get()), BP_CONFIG) << describe(error.get());
  ASSERT_EQ(bp_error_problem_count(error.get()), 1u) << describe(error.get());
  expect_problem_shape(bp_error_problem(error.get(), 0), "<text>", "/devices/0/count");
  expect_value(bp_error_problem(error.get(), 0), "0");
}

// The text is `length` bytes, not up to a NUL: what follows is not read.
TEST(FleetFile, TextIsReadToItsLengthOnly) {
  FleetHost host;
  const std::string text = R"({"version": 1, "groups": [{"name": "pair", "devices": ["cpu:0", "cpu:1"]}]} trailing garbage)";
  const size_t length = text.find(" trailing");
  ErrorPtr error(bp_host_load_fleet_text(host.get(), text.data(), length));
  ASSERT_EQ(error, nullptr) << describe(error.get());
  EXPECT_EQ(rank_names(find_group(host.get(), "pair")), (std::vector<std::string>{"cpu:0", "cpu:1"}));
}

// ---- kinds no plugin provides ----------------------------------------------

// "known_kinds" as a set; {"(not an array of strings)"} otherwise.
std::set<std::string> known_kinds(const bp_error *problem) {
  json known = json_field(problem, "known_kinds");
  std::set<std::string> kinds;
  if (!known.is_array()) return {"(not an array of strings)"};
  for (const json &kind : known) {
    if (!kind.is_string()) return {"(not an array of strings)"};
    kinds.insert(kind.get<std::string>());
  }
  return kinds;
}

TEST(FleetFile, PluginNotFoundListsRefusedFilesAndKnownKinds) {
  TempDir dir;
  dir.copy_in(plugin_path("cpu"));
  const fs::path garbage = dir.copy_in(fixture_path("garbage"));
  const fs::path too_new = dir.copy_in(fixture_path("abi_too_new"));
  Host host = make_host({dir.path().string()}, kCpuOptions);
  ASSERT_EQ(host.refused().size(), 2u) << describe_refused(host);

  const fs::path path = bad_fleet("kind_not_provided");
  ErrorPtr error(bp_host_load_fleet_file(host.get(), path.c_str()));
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(bp_error_code(error.get()), BP_PLUGIN_NOT_FOUND) << describe(error.get());
  ASSERT_EQ(bp_error_problem_count(error.get()), 1u) << describe(error.get());
  const bp_error *problem = bp_error_problem(error.get(), 0);
  EXPECT_EQ(bp_error_code(problem), BP_PLUGIN_NOT_FOUND);
  expect_problem_shape(problem, path.string(), "/devices/0/kind");
  expect_value(problem, R"("cpuu")");
  EXPECT_TRUE(contains(text_field(problem, "hint"), "did you mean 'cpu'?")) << json_of(problem);

  EXPECT_EQ(known_kinds(problem), (std::set<std::string>{"cpu"})) << json_of(problem);

  // Every refused file, and why: never a silent "0 devices".
  json refused = json_field(problem, "refused");
  ASSERT_TRUE(refused.is_array()) << json_of(problem);
  EXPECT_EQ(refused.size(), 2u) << refused.dump();
  const std::string listed = all_strings(refused);
  EXPECT_TRUE(contains(listed, garbage.filename().string())) << refused.dump();
  EXPECT_TRUE(contains(listed, too_new.filename().string())) << refused.dump();
  // The host's ELF check refuses it before the system loader sees it.
  const std::string loader_reason = "not an ELF file (no ELF magic at its start)";
  EXPECT_TRUE(contains(listed, loader_reason)) << "the garbage file's reason '" << loader_reason
                                               << "' is not listed: " << refused.dump();
}

TEST(FleetFile, KindFarFromEveryKnownKindGetsNoSuggestion) {
  FleetHost host;
  const std::string text = R"({"version": 1, "devices": [{"name": "q", "kind": "quantum"}]})";
  ErrorPtr error(bp_host_load_fleet_text(host.get(), text.data(), text.size()));
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(bp_error_code(error.get()), BP_PLUGIN_NOT_FOUND) << describe(error.get());
  ASSERT_EQ(bp_error_problem_count(error.get()), 1u) << describe(error.get());
  const bp_error *problem = bp_error_problem(error.get(), 0);
  expect_problem_shape(problem, "<text>", "/devices/0/kind");
  EXPECT_FALSE(contains(text_field(problem, "hint"), "did you mean")) << json_of(problem);
  EXPECT_EQ(known_kinds(problem), (std::set<std::string>{"cpu", "narrow"})) << json_of(problem);
}

// ---- all or nothing --------------------------------------------------------

// Devices, groups and a good workload, then a workload the narrow kind cannot run.
constexpr const char *kAlmostGoodFleet = R"({
  "version": 1,
  "devices": [{"name": "pair", "kind": "cpu", "count": 2}],
  "groups": [
    {"name": "tx_cpu", "devices": ["pair"]},
    {"name": "tx_narrow", "devices": ["narrow:0", "narrow:1"]}
  ],
  "workload": [
    {"group": "tx_cpu", "collective": "all_reduce", "dtype": "f32", "op": "sum", "sizes": "1KiB"},
    {"group": "tx_narrow", "collective": "all_reduce", "dtype": "f64", "op": "sum", "sizes": "1KiB"}
  ]
})";
constexpr const char *kGoodFleet = R"({
  "version": 1,
  "devices": [{"name": "pair", "kind": "cpu", "count": 2}],
  "groups": [
    {"name": "tx_cpu", "devices": ["pair"]},
    {"name": "tx_narrow", "devices": ["narrow:0", "narrow:1"]}
  ],
  "workload": [
    {"group": "tx_cpu", "collective": "all_reduce", "dtype": "f32", "op": "sum", "sizes": "1KiB"}
  ]
})";

TEST(FleetFile, FailedLoadLeavesTheHostAsItWas) {
  FleetHost host;
  TempDir dir;
  const HostCounts before = counts_of(host.get());

  const fs::path almost = dir.write_file("almost.json", kAlmostGoodFleet);
  ErrorPtr error(bp_host_load_fleet_file(host.get(), almost.c_str()));
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(bp_error_code(error.get()), BP_UNSUPPORTED_DTYPE) << describe(error.get());
  EXPECT_EQ(pointers_of(error.get()), (std::set<std::string>{"/workload/1/dtype"})) << describe(error.get());
  EXPECT_EQ(counts_of(host.get()), before);
  EXPECT_TRUE(group_names(host.get()).empty());
  bp_group *group = nullptr;
  ErrorPtr not_found(bp_host_find_group(host.get(), "tx_cpu", &group));
  EXPECT_NE(not_found, nullptr) << "group of a failed load exists";
  EXPECT_EQ(group, nullptr);

  // The good part alone loads afterwards.
  const fs::path good = dir.write_file("good.json", kGoodFleet);
  ErrorPtr loaded(bp_host_load_fleet_file(host.get(), good.c_str()));
  ASSERT_EQ(loaded, nullptr) << describe(loaded.get());
  HostCounts after = before;
  after.groups += 2;
  after.workloads += 1;
  EXPECT_EQ(counts_of(host.get()), after);
  EXPECT_EQ(rank_names(find_group(host.get(), "tx_cpu")), (std::vector<std::string>{"cpu:0", "cpu:1"}));
  EXPECT_EQ(rank_names(find_group(host.get(), "tx_narrow")), (std::vector<std::string>{"narrow:0", "narrow:1"}));
}

// Groups already exist: the same fleet again is a duplicate, not a second copy.
TEST(FleetFile, SameFleetTwiceIsADuplicateGroupName) {
  FleetHost host;
  ErrorPtr first(bp_host_load_fleet_text(host.get(), kGoodFleet, std::char_traits<char>::length(kGoodFleet)));
  ASSERT_EQ(first, nullptr) << describe(first.get());
  const HostCounts loaded = counts_of(host.get());

  ErrorPtr second(bp_host_load_fleet_text(host.get(), kGoodFleet, std::char_traits<char>::length(kGoodFleet)));
  ASSERT_NE(second, nullptr) << "the same fleet loaded twice";
  EXPECT_EQ(bp_error_code(second.get()), BP_CONFIG) << describe(second.get());
  const std::set<std::string> pointers = pointers_of(second.get());
  EXPECT_EQ(pointers.count("/groups/0/name"), 1u) << describe(second.get());
  EXPECT_EQ(pointers.count("/groups/1/name"), 1u) << describe(second.get());
  EXPECT_EQ(counts_of(host.get()), loaded);
}

// ---- good fleets -----------------------------------------------------------

constexpr const char *kDetailedFleet = R"({
  "version": 1,
  "devices": [
    {"name": "quad", "kind": "cpu", "count": 4},
    {"name": "last", "kind": "cpu", "index": 3}
  ],
  "groups": [
    {"name": "all", "devices": ["quad"]},
    {"name": "reversed", "devices": ["last", "cpu:2", "cpu:1", "cpu:0"], "policy": "reject"}
  ],
  "workload": [
    {"group": "all", "collective": "all_reduce", "dtype": "f32", "op": "sum", "sizes": "8B..64MiB x4",
     "iterations": 20, "warmup": 5, "check": true},
    {"group": "reversed", "collective": "broadcast", "dtype": "i32", "root": 3, "sizes": [1024, "64KiB"],
     "in_place": true},
    {"group": "all", "collective": "barrier", "iterations": 100, "in_place": false}
  ]
})";

std::vector<uint64_t> sizes_of(const bp_workload_info &info) { return {info.sizes, info.sizes + info.size_count}; }

TEST(FleetFile, GoodFleetBringsUpItsGroupsAndWorkload) {
  TempDir dir;
  const fs::path path = dir.write_file("fleet.json", kDetailedFleet);
  SearchOnly search({BACKPLANE_TEST_PLUGIN_DIR}, kCpuOptions);
  bp_host *raw = nullptr;
  ErrorPtr error(bp_host_create_from_fleet_file(path.c_str(), &search.options, &raw));
  ASSERT_EQ(error, nullptr) << describe(error.get());
  Host host(raw);

  EXPECT_EQ(group_names(host.get()), (std::vector<std::string>{"all", "reversed"}));
  EXPECT_EQ(bp_host_group(host.get(), 2), nullptr);
  bp_group *all = find_group(host.get(), "all");
  bp_group *reversed = find_group(host.get(), "reversed");
  ASSERT_NE(all, nullptr);
  ASSERT_NE(reversed, nullptr);
  EXPECT_STREQ(bp_group_name(all), "all");
  // A name with a count stands for all of its devices, in order.
  EXPECT_EQ(rank_names(all), (std::vector<std::string>{"cpu:0", "cpu:1", "cpu:2", "cpu:3"}));
  EXPECT_EQ(rank_names(reversed), (std::vector<std::string>{"cpu:3", "cpu:2", "cpu:1", "cpu:0"}));
  EXPECT_EQ(bp_group_device(all, 4), nullptr);

  ASSERT_EQ(bp_host_workload_count(host.get()), 3u);
  bp_workload_info info{};
  info.struct_size = sizeof info;
  ErrorPtr got(bp_host_workload(host.get(), 0, &info));
  ASSERT_EQ(got, nullptr) << describe(got.get());
  EXPECT_EQ(info.group, all);
  EXPECT_EQ(info.collective, uint32_t{BP_ALL_REDUCE});
  EXPECT_EQ(info.dtype, uint32_t{BP_F32});
  EXPECT_EQ(info.reduce_op, uint32_t{BP_SUM});
  EXPECT_EQ(info.iterations, 20u);
  EXPECT_EQ(info.warmup, 5u);
  EXPECT_TRUE(info.check);
  EXPECT_EQ(info.modes, BP_WORKLOAD_OUT_OF_PLACE | BP_WORKLOAD_IN_PLACE);  // "both" by default
  std::vector<uint64_t> expected;
  for (uint64_t size = 8; size <= (64u << 20); size *= 4) expected.push_back(size);
  EXPECT_EQ(sizes_of(info), expected);

  info = {};
  info.struct_size = sizeof info;
  got.reset(bp_host_workload(host.get(), 1, &info));
  ASSERT_EQ(got, nullptr) << describe(got.get());
  EXPECT_EQ(info.group, reversed);
  EXPECT_EQ(info.collective, uint32_t{BP_BROADCAST});
  EXPECT_EQ(info.dtype, uint32_t{BP_I32});
  EXPECT_EQ(info.root, 3u);
  EXPECT_EQ(sizes_of(info), (std::vector<uint64_t>{1024, 65536}));
  EXPECT_EQ(info.modes, BP_WORKLOAD_IN_PLACE);

  info = {};
  info.struct_size = sizeof info;
  got.reset(bp_host_workload(host.get(), 2, &info));
  ASSERT_EQ(got, nullptr) << describe(got.get());
  EXPECT_EQ(info.group, all);
  EXPECT_EQ(info.collective, uint32_t{BP_BARRIER});
  EXPECT_EQ(info.iterations, 100u);
  EXPECT_EQ(info.modes, BP_WORKLOAD_OUT_OF_PLACE);

  got.reset(bp_host_workload(host.get(), 3, &info));
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(bp_error_code(got.get()), BP_INVALID_ARGUMENT) << describe(got.get());
}

// A fleet group is a real group: an all-reduce on it gives the right numbers
// on every rank, and bp_group_destroy leaves it to the host.
TEST(FleetFile, FleetGroupRunsCollectivesAndBelongsToTheHost) {
  TempDir dir;
  const fs::path path = dir.write_file("fleet.json", kDetailedFleet);
  SearchOnly search({BACKPLANE_TEST_PLUGIN_DIR}, kCpuOptions);
  bp_host *raw = nullptr;
  ErrorPtr error(bp_host_create_from_fleet_file(path.c_str(), &search.options, &raw));
  ASSERT_EQ(error, nullptr) << describe(error.get());
  Host host(raw);

  bp_group_destroy(find_group(host.get(), "reversed"));  // does nothing
  bp_group *group = find_group(host.get(), "reversed");
  ASSERT_NE(group, nullptr);
  ASSERT_EQ(bp_group_size(group), 4u);
  ErrorPtr check(bp_group_check(group, BP_ALL_REDUCE, BP_F32, BP_SUM));
  EXPECT_EQ(check, nullptr) << describe(check.get());

  constexpr size_t kCount = 5;
  std::vector<bp_buffer *> send, recv;
  for (size_t r = 0; r < 4; ++r) {
    bp_buffer *s = nullptr, *d = nullptr;
    ErrorPtr made(bp_buffer_create(bp_group_device(group, r), kCount * sizeof(float), &s));
    ASSERT_EQ(made, nullptr) << describe(made.get());
    made.reset(bp_buffer_create(bp_group_device(group, r), kCount * sizeof(float), &d));
    ASSERT_EQ(made, nullptr) << describe(made.get());
    send.push_back(s);
    recv.push_back(d);
    float values[kCount];
    for (size_t i = 0; i < kCount; ++i) values[i] = static_cast<float>(100 * r + i);
    ErrorPtr written(bp_buffer_write(s, 0, values, sizeof values));
    ASSERT_EQ(written, nullptr) << describe(written.get());
  }
  ErrorPtr ran(bp_all_reduce(group, send.data(), recv.data(), kCount, BP_F32, BP_SUM));
  EXPECT_EQ(ran, nullptr) << describe(ran.get());
  for (size_t r = 0; r < 4; ++r) {
    float got[kCount] = {};
    ErrorPtr read(bp_buffer_read(recv[r], 0, got, sizeof got));
    EXPECT_EQ(read, nullptr) << describe(read.get());
    for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(got[i], static_cast<float>(600 + 4 * i)) << "rank " << r << " [" << i << "]";
  }
  for (bp_buffer *buffer : send) bp_buffer_destroy(buffer);
  for (bp_buffer *buffer : recv) bp_buffer_destroy(buffer);
}

// ---- configs/ --------------------------------------------------------------

// Every fleet in configs/ validates (schema and meaning) against the plugins
// this build made. A config for a kind whose plugin this machine did not
// build is skipped with the reason, not passed.
TEST(ConfigsDirectory, EveryFleetValidates) {
  const fs::path configs = fs::path(BACKPLANE_TEST_SOURCE_DIR) / "configs";
  std::vector<fs::path> fleets;
  for (const fs::directory_entry &entry : fs::directory_iterator(configs))
    if (entry.path().extension() == ".json" && entry.path().filename() != "schema.json") fleets.push_back(entry.path());
  std::sort(fleets.begin(), fleets.end());
  ASSERT_FALSE(fleets.empty()) << "no fleets in " << configs;
  ASSERT_NE(std::find(fleets.begin(), fleets.end(), configs / "default.json"), fleets.end());

  std::vector<std::string> skipped;
  for (const fs::path &path : fleets) {
    SCOPED_TRACE(path.string());
    SearchOnly search({BACKPLANE_TEST_PLUGIN_DIR});
    bp_host *raw = nullptr;
    ErrorPtr error(bp_host_create_from_fleet_file(path.c_str(), &search.options, &raw));
    if (error) {
      // Skip only when every problem is a kind whose plugin was not built here.
      bool unbuilt = true;
      for (const bp_error *problem : problems_of(error.get())) {
        json kind = json_field(problem, "value");
        unbuilt = unbuilt && bp_error_code(problem) == BP_PLUGIN_NOT_FOUND && kind.is_string() &&
                  !fs::exists(plugin_path(kind.get<std::string>()));
      }
      if (unbuilt && bp_error_problem_count(error.get()) > 0) {
        skipped.push_back(path.filename().string() + ": " + bp_error_message(bp_error_problem(error.get(), 0)));
        continue;
      }
      ADD_FAILURE() << path << " does not validate: " << describe(error.get());
      continue;
    }
    Host host(raw);
    std::ifstream in(path);
    json fleet = json::parse(in);
    EXPECT_EQ(bp_host_group_count(host.get()), fleet.value("groups", json::array()).size());
    EXPECT_EQ(bp_host_workload_count(host.get()), fleet.value("workload", json::array()).size());
  }
  ASSERT_LT(skipped.size(), fleets.size()) << "every config was skipped";
  for (const std::string &line : skipped) std::cout << "[  SKIPPED ] " << line << "\n";
}

// ---- bp_parse_sizes --------------------------------------------------------

std::vector<uint64_t> parse_sizes(const char *text) {
  size_t count = 0;
  ErrorPtr error(bp_parse_sizes(text, nullptr, 0, &count));
  EXPECT_EQ(error, nullptr) << text << ": " << describe(error.get());
  std::vector<uint64_t> sizes(count);
  size_t again = 0;
  error.reset(bp_parse_sizes(text, sizes.data(), sizes.size(), &again));
  EXPECT_EQ(error, nullptr) << text << ": " << describe(error.get());
  EXPECT_EQ(again, count);
  return sizes;
}

// The refusal for `text`, checking that *count was left alone.
ErrorPtr refuse_sizes(const char *text) {
  size_t count = 12345;
  uint64_t sizes[4] = {7, 7, 7, 7};
  ErrorPtr error(bp_parse_sizes(text, sizes, 4, &count));
  EXPECT_NE(error, nullptr) << "'" << text << "' parsed";
  EXPECT_EQ(count, 12345u) << text;
  if (error) {
    EXPECT_EQ(bp_error_code(error.get()), BP_CONFIG) << text << ": " << describe(error.get());
  }
  return error;
}

TEST(ParseSizes, RangeWithFactor) {
  // nccl-tests' -b 8 -e 64M -f 4: from 8 while at most 64 MiB; 64 MiB itself is not a power-of-4 step from 8.
  EXPECT_EQ(parse_sizes("8B..64MiB x4"),
            (std::vector<uint64_t>{8, 32, 128, 512, 2048, 8192, 32768, 131072, 524288, 2097152, 8388608, 33554432}));
  EXPECT_EQ(parse_sizes("1KiB..1MiB x32"), (std::vector<uint64_t>{1024, 32768, 1048576}));
}

TEST(ParseSizes, RangeWithStep) {
  EXPECT_EQ(parse_sizes("1K..4K +1K"), (std::vector<uint64_t>{1024, 2048, 3072, 4096}));
}

TEST(ParseSizes, OneSize) {
  EXPECT_EQ(parse_sizes("4KiB"), (std::vector<uint64_t>{4096}));
  EXPECT_EQ(parse_sizes("512B"), (std::vector<uint64_t>{512}));
  EXPECT_EQ(parse_sizes("3M"), (std::vector<uint64_t>{3u << 20}));
  EXPECT_EQ(parse_sizes("2GiB"), (std::vector<uint64_t>{uint64_t{2} << 30}));
  EXPECT_EQ(parse_sizes("1G"), (std::vector<uint64_t>{uint64_t{1} << 30}));
}

TEST(ParseSizes, UnknownUnitIsNamed) {
  ErrorPtr error = refuse_sizes("8B..64Mib");
  ASSERT_NE(error, nullptr);
  EXPECT_TRUE(contains(bp_error_message(error.get()), "'Mib'")) << describe(error.get());
}

TEST(ParseSizes, EndBelowStartIsRefused) {
  ErrorPtr error = refuse_sizes("1M..1K");
  ASSERT_NE(error, nullptr);
  const std::string message = lower(bp_error_message(error.get()));
  EXPECT_TRUE(contains(message, "below") || contains(message, "less than") || contains(message, "smaller than"))
      << describe(error.get());
}

// x1 and +0 would never reach the end.
TEST(ParseSizes, StepsThatNeverAdvanceAreRefused) {
  refuse_sizes("8B..64MiB x1");
  refuse_sizes("8B..64MiB x0");
  refuse_sizes("1K..4K +0B");
}

TEST(ParseSizes, MalformedTextIsRefused) {
  for (const char *text : {"", " ", "..", "8B..", "..8B", "abc", "8B..64MiB x", "8B..64MiB +", "-8B", "4KiBB",
                           "8B...64MiB", "99999999999999999999B"})
    refuse_sizes(text);
}

TEST(ParseSizes, CapacitySmallerThanCount) {
  uint64_t sizes[4] = {7, 7, 7, 7};
  size_t count = 0;
  ErrorPtr error(bp_parse_sizes("1K..4K +1K", sizes, 3, &count));
  ASSERT_EQ(error, nullptr) << describe(error.get());
  EXPECT_EQ(count, 4u);
  EXPECT_EQ(sizes[0], 1024u);
  EXPECT_EQ(sizes[1], 2048u);
  EXPECT_EQ(sizes[2], 3072u);
  EXPECT_EQ(sizes[3], 7u) << "wrote past capacity";

  count = 0;
  error.reset(bp_parse_sizes("8B..64MiB x4", nullptr, 0, &count));
  ASSERT_EQ(error, nullptr) << describe(error.get());
  EXPECT_EQ(count, 12u);
}

}  // namespace
