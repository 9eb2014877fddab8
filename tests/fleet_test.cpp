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
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
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
    // A key twice: JSON readers differ in which one they keep.
    BadFleet("duplicate_key", BP_CONFIG, "/groups/0/devices", R"("devices")").reason_has("appears twice"),
    // Numbers past what the C API can hold are refused, named as written.
    BadFleet("root_above_uint32", BP_CONFIG, "/workload/0/root", "4294967297")
        .reason_has("4294967297 is outside the range 0..4294967295"),
    BadFleet("index_above_uint32", BP_CONFIG, "/devices/0/index", "4294967296")
        .reason_has("4294967296 is outside the range 0..4294967295"),
    BadFleet("huge_integer", BP_CONFIG, "/devices/0/index", "18446744073709551615")
        .reason_has("18446744073709551615 is above 9223372036854775807"),
    BadFleet("probe_not_boolean", BP_CONFIG, "/probe", R"("yes")").reason_has("has the wrong type (string)"),
    BadFleet("pin_too_short", BP_CONFIG, "/plugin_pins/libbackplane_cpu.so",
             R"("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a0")")
        .reason_has("does not match ^[0-9A-Fa-f]{64}$"),
    // A oneOf that fails says what the value may be, in one line.
    BadFleet("sizes_wrong_type", BP_CONFIG, "/workload/0/sizes", "true")
        .reason_has("has the wrong type (boolean): expected a size expression such as \"8B..64MiB x4\", or a list"),
    BadFleet("sizes_list_item_wrong_type", BP_CONFIG, "/workload/0/sizes/1", R"({"bytes": 8})")
        .reason_has("has the wrong type (object): expected a byte count"),
    BadFleet("local_first_unknown", BP_CONFIG, "/groups/0/local_first", R"("sometimes")")
        .reason_has("known: auto, always, never"),
    BadFleet("in_place_not_allowed", BP_CONFIG, "/workload/0/in_place", R"("yes")")
        .reason_has("\"yes\" is not true, false or \"both\""),
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
    // Once the fleet declares devices of a kind, its groups use those.
    BadFleet("group_device_not_declared", BP_CONFIG, "/groups/0/devices/1", R"("cpu:3")")
        .reason_has("not one of the cpu devices the fleet declares (cpu:0 ('a'), cpu:1 ('a'))")
        .hint_has("did you mean 'cpu:0'?"),
    // One spelling of a device name, as bp_host_find_device takes it.
    BadFleet("group_device_leading_zero", BP_CONFIG, "/groups/0/devices/1", R"("cpu:01")")
        .reason_has("the index '01' has a leading zero")
        .hint_has("did you mean 'cpu:1'?"),
    // Fields the collective has no use for.
    BadFleet("barrier_with_dtype", BP_CONFIG, "/workload/0/dtype", R"("f32")").reason_has("a barrier moves no data"),
    BadFleet("barrier_with_sizes", BP_CONFIG, "/workload/0/sizes", R"("1KiB")").reason_has("a barrier moves no data"),
    BadFleet("op_without_reduction", BP_CONFIG, "/workload/0/op", R"("max")").reason_has("all_gather does not reduce"),
    BadFleet("root_without_root", BP_CONFIG, "/workload/0/root", "1").reason_has("all_reduce has no root"),
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

// ---- host options: the same checks as bp_host_create -----------------------

// What a call returned: its code and message, for comparing two calls.
struct Refusal {
  bp_code code = BP_OK;
  std::string message;
  bool operator==(const Refusal &) const = default;
};
std::ostream &operator<<(std::ostream &out, const Refusal &r) { return out << bp_code_name(r.code) << ": " << r.message; }
Refusal refusal_of(bp_error *raw) {
  ErrorPtr error(raw);
  return error ? Refusal{bp_error_code(error.get()), bp_error_message(error.get())} : Refusal{};
}

// bp_host_create_from_fleet_file refuses exactly what bp_host_create
// refuses of the options, before reading the fleet; the host calls after
// it still work.
TEST(FleetFile, CreateFromFleetFileChecksOptionsAsHostCreateDoes) {
  TempDir dir;
  const fs::path path = dir.write_file("fleet.json", kDetailedFleet);
  const char *null_entry[] = {BACKPLANE_TEST_PLUGIN_DIR, nullptr};
  struct BadOptions {
    const char *name;
    const char *const *dirs;
    size_t dir_count;
    const char *plugin_options;
    Refusal expected;
  };
  const BadOptions cases[] = {
      {"dirs NULL with a count", nullptr, 1, nullptr,
       {BP_INVALID_ARGUMENT, "bp_host_options.plugin_dirs is NULL with a count of 1"}},
      {"a NULL entry", null_entry, 2, nullptr, {BP_INVALID_ARGUMENT, "bp_host_options.plugin_dirs[1] is NULL (of 2)"}},
      {"options not JSON", null_entry, 1, "{cpu: 4", {BP_CONFIG, "plugin options are not a JSON object"}},
      {"options not an object", null_entry, 1, "[1]", {BP_CONFIG, "plugin options are not a JSON object"}},
      {"a kind's options not an object", null_entry, 1, R"({"cpu": 4})",
       {BP_CONFIG, "plugin options for device kind 'cpu' are not a JSON object"}},
  };
  for (const BadOptions &bad : cases) {
    SCOPED_TRACE(bad.name);
    bp_host_options options{};
    options.struct_size = sizeof options;
    options.plugin_dirs = bad.dirs;
    options.plugin_dir_count = bad.dir_count;
    options.flags = BP_HOST_IGNORE_ENV_PATH | BP_HOST_IGNORE_INSTALL_PATH;
    options.plugin_options_json = bad.plugin_options;
    bp_host *const untouched = reinterpret_cast<bp_host *>(uintptr_t{0x10});
    bp_host *created = untouched, *from_fleet = untouched;
    EXPECT_EQ(refusal_of(bp_host_create(&options, &created)), bad.expected);
    EXPECT_EQ(refusal_of(bp_host_create_from_fleet_file(path.c_str(), &options, &from_fleet)), bad.expected);
    EXPECT_EQ(created, untouched);
    EXPECT_EQ(from_fleet, untouched);
  }
  SearchOnly search({BACKPLANE_TEST_PLUGIN_DIR}, kCpuOptions);
  bp_host *raw = nullptr;
  ErrorPtr error(bp_host_create_from_fleet_file(path.c_str(), &search.options, &raw));
  ASSERT_EQ(error, nullptr) << describe(error.get());
  Host host(raw);
  EXPECT_EQ(group_names(host.get()), (std::vector<std::string>{"all", "reversed"}));
}

// Options a fleet's device gives that its plugin refuses: CONFIG at the
// device's /options with the plugin's reason, once (not PLUGIN_NOT_FOUND
// "did you mean 'cpu'?" for each use of the kind).
TEST(FleetFile, DeviceOptionsThePluginRefusesAreConfigAtTheOptions) {
  TempDir dir;
  SearchOnly search({BACKPLANE_TEST_PLUGIN_DIR});
  const std::pair<std::string, std::string> cases[] = {
      {R"("many")", R"(cpu options: "devices" must be an integer, got a string)"},
      {"0", R"(cpu options: "devices" is 0, outside 1..1024)"},
      {"100000000", R"(cpu options: "devices" is 100000000, outside 1..1024)"},
  };
  for (const auto &[count, plugin_reason] : cases) {
    SCOPED_TRACE(count);
    const fs::path path = dir.write_file("options.json", R"({
      "version": 1,
      "devices": [{"name": "c", "kind": "cpu", "options": {"devices": )" + count + R"(}}],
      "groups": [{"name": "g", "devices": ["c", "cpu:1"]}]
    })");
    bp_host *out = nullptr;
    ErrorPtr error(bp_host_create_from_fleet_file(path.c_str(), &search.options, &out));
    ASSERT_NE(error, nullptr);
    EXPECT_EQ(out, nullptr);
    EXPECT_EQ(bp_error_code(error.get()), BP_CONFIG) << describe(error.get());
    ASSERT_EQ(bp_error_problem_count(error.get()), 1u) << describe(error.get());
    const bp_error *problem = bp_error_problem(error.get(), 0);
    EXPECT_EQ(bp_error_code(problem), BP_CONFIG) << json_of(problem);
    expect_problem_shape(problem, path.string(), "/devices/0/options");
    expect_value(problem, R"({"devices": )" + count + "}");
    EXPECT_EQ(text_field(problem, "reason"), "plugin 'cpu' configure failed: " + plugin_reason) << json_of(problem);
    EXPECT_TRUE(names_file(text_field(problem, "plugin_file"), plugin_path("cpu"))) << json_of(problem);
  }
  // The same fleet with options the plugin takes comes up.
  const fs::path good = dir.write_file("good.json", R"({
    "version": 1,
    "devices": [{"name": "c", "kind": "cpu", "options": {"devices": 2}}, {"name": "d", "kind": "cpu", "index": 1}],
    "groups": [{"name": "g", "devices": ["c", "cpu:1"]}]
  })");
  bp_host *raw = nullptr;
  ErrorPtr error(bp_host_create_from_fleet_file(good.c_str(), &search.options, &raw));
  ASSERT_EQ(error, nullptr) << describe(error.get());
  Host host(raw);
  EXPECT_EQ(rank_names(find_group(host.get(), "g")), (std::vector<std::string>{"cpu:0", "cpu:1"}));
}

// bp_host_find_device on a kind whose plugin refused its options says so.
TEST(FleetFile, FindDeviceOfAKindWhosePluginRefusedItsOptionsIsConfig) {
  Host host = make_host({BACKPLANE_TEST_PLUGIN_DIR}, R"({"cpu": {"devices": 0}})");
  bp_device *device = nullptr;
  ErrorPtr error(bp_host_find_device(host.get(), "cpu:0", &device));
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(device, nullptr);
  EXPECT_EQ(bp_error_code(error.get()), BP_CONFIG) << describe(error.get());
  EXPECT_EQ(std::string(bp_error_message(error.get())),
            R"(device 'cpu:0' does not exist: plugin 'cpu' configure failed: cpu options: "devices" is 0, outside 1..1024)");
  EXPECT_EQ(text_field(error.get(), "device_kind"), "cpu");
  EXPECT_TRUE(names_file(text_field(error.get(), "file"), plugin_path("cpu"))) << describe(error.get());
  // A kind nobody provides is still PLUGIN_NOT_FOUND.
  error.reset(bp_host_find_device(host.get(), "metal:0", &device));
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(bp_error_code(error.get()), BP_PLUGIN_NOT_FOUND) << describe(error.get());
}

// One spelling of device names for bp_host_find_device and fleets (names.cpp).
TEST(FleetFile, FindDeviceTakesTheSpellingFleetsTake) {
  Host host = make_cpu_host(R"({"cpu": {"devices": 4}})");
  struct Misspelled {
    const char *name, *why, *hint;
  };
  const Misspelled cases[] = {
      {"cpu:01", "the index '01' has a leading zero", "did you mean 'cpu:1'?"},
      {"cpu:00", "the index '00' has a leading zero", "did you mean 'cpu:0'?"},
      {"CPU:1", "the kind 'CPU' is not of [a-z0-9_]", "did you mean 'cpu:1'?"},
      {"cpu:-1", "the index '-1' is not a decimal number", "name a device as kind:index, e.g. cpu:0"},
      {"cpu:4294967296", "the index 4294967296 is above 4294967295", "name a device as kind:index, e.g. cpu:0"},
      {":1", "the kind before ':' is empty", "name a device as kind:index, e.g. cpu:0"},
      {"cpu", "it is not of the form kind:index", "name a device as kind:index, e.g. cpu:0"},
  };
  for (const Misspelled &bad : cases) {
    SCOPED_TRACE(bad.name);
    bp_device *device = nullptr;
    ErrorPtr error(bp_host_find_device(host.get(), bad.name, &device));
    ASSERT_NE(error, nullptr);
    EXPECT_EQ(device, nullptr);
    EXPECT_EQ(bp_error_code(error.get()), BP_INVALID_ARGUMENT) << describe(error.get());
    EXPECT_EQ(std::string(bp_error_message(error.get())),
              "device '" + std::string(bad.name) + "' is not a device name: " + bad.why);
    EXPECT_EQ(text_field(error.get(), "hint"), bad.hint);
  }
  bp_device *device = nullptr;
  ErrorPtr found(bp_host_find_device(host.get(), "cpu:1", &device));
  ASSERT_EQ(found, nullptr) << describe(found.get());
  EXPECT_EQ(device_name(device), "cpu:1");
}

// ---- text a JSON reader would read silently wrong --------------------------

// The parser stops at a NUL as at the end of the text: what follows would
// be ignored. Refused, wherever the text comes from.
TEST(FleetFile, TextWithANulByteIsRefused) {
  const std::string text = std::string(R"({"version": 1})") + '\0' + R"({"devices": [)";
  TempDir dir;
  const fs::path path = dir.write_file("nul.json", text);
  FleetHost host;
  const HostCounts before = counts_of(host.get());
  for (const bool from_file : {true, false}) {
    SCOPED_TRACE(from_file ? "file" : "text");
    ErrorPtr error(from_file ? bp_host_load_fleet_file(host.get(), path.c_str())
                             : bp_host_load_fleet_text(host.get(), text.data(), text.size()));
    ASSERT_NE(error, nullptr) << "a fleet with a NUL byte loaded";
    EXPECT_EQ(bp_error_code(error.get()), BP_CONFIG) << describe(error.get());
    ASSERT_EQ(bp_error_problem_count(error.get()), 1u) << describe(error.get());
    const bp_error *problem = bp_error_problem(error.get(), 0);
    expect_problem_shape(problem, from_file ? path.string() : "<text>", "");
    EXPECT_EQ(text_field(problem, "reason"), "a NUL byte at line 1, column 15: a fleet is JSON text, which has none");
    EXPECT_EQ(json_field(problem, "line"), 1);
    EXPECT_EQ(json_field(problem, "column"), 15);
    EXPECT_EQ(counts_of(host.get()), before);
  }
  // The text before the NUL alone is a fleet.
  ErrorPtr loaded(bp_host_load_fleet_text(host.get(), text.data(), text.find('\0')));
  EXPECT_EQ(loaded, nullptr) << describe(loaded.get());
}

// Every key that appears twice is a problem of its own, nested ones too.
TEST(FleetFile, EveryKeyThatAppearsTwiceIsReported) {
  FleetHost host;
  const std::string text = R"({"version": 1, "devices": [{"name": "a", "kind": "cpu", "options": {"devices": 4, "devices": 4}}],
                              "version": 1})";
  ErrorPtr error(bp_host_load_fleet_text(host.get(), text.data(), text.size()));
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(bp_error_code(error.get()), BP_CONFIG) << describe(error.get());
  EXPECT_EQ(pointers_of(error.get()), (std::set<std::string>{"/devices/0/options/devices", "/version"}))
      << describe(error.get());
  for (const bp_error *problem : problems_of(error.get())) {
    expect_problem_shape(problem, "<text>", text_field(problem, "pointer"));
    EXPECT_TRUE(contains(text_field(problem, "reason"), "appears twice in one object")) << json_of(problem);
  }
}

// ---- bounded validation ------------------------------------------------------

// A fleet file under the size cap is checked in bounded time and memory,
// whatever it holds: limits are refused with CONFIG, checking stops after
// 100 problems, "did you mean" is worked out for 20 of them. Each case
// prints how long it took; the bound asserted is only a sanity bound.
class PathologicalFleet : public ::testing::Test {
 protected:
  // Under AddressSanitizer every allocation carries redzones and freed
  // memory waits in a quarantine (256 MiB by default) before it is reused:
  // the sanity bound there is four times as loose.
#if defined(__SANITIZE_ADDRESS__)
  static constexpr long kPeakMemoryBoundKib = 4 * 512 * 1024;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  static constexpr long kPeakMemoryBoundKib = 4 * 512 * 1024;
#else
  static constexpr long kPeakMemoryBoundKib = 512 * 1024;
#endif
#else
  static constexpr long kPeakMemoryBoundKib = 512 * 1024;
#endif

  // Loads `text` from a file into a host (4 cpu devices, or what its own
  // options ask for), returning the error.
  ErrorPtr load(const std::string &label, const std::string &text) {
    const fs::path path = dir_.write_file(label + ".json", text);
    SearchOnly search({BACKPLANE_TEST_PLUGIN_DIR}, text.find("\"options\"") == std::string::npos ? kCpuOptions : nullptr);
    const long rss_before = max_rss_kib();
    const auto start = std::chrono::steady_clock::now();
    bp_host *raw = nullptr;
    ErrorPtr error(bp_host_create_from_fleet_file(path.c_str(), &search.options, &raw));
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    Host host(raw);
    std::cout << "[ TIMING   ] " << label << ": " << text.size() << " bytes, " << elapsed.count() << " s, peak RSS +"
              << (max_rss_kib() - rss_before) / 1024 << " MiB\n";
    EXPECT_LT(elapsed, std::chrono::seconds(20)) << label;
    EXPECT_LT(max_rss_kib() - rss_before, kPeakMemoryBoundKib) << label << ": KiB of peak memory grew";
    if (!error) loaded_groups_ = bp_host_group_count(raw);
    return error;
  }
  // The first problem, checked to be CONFIG at `pointer` with `reason`.
  static void expect_first(const bp_error *error, const std::string &pointer, const std::string &reason) {
    ASSERT_NE(error, nullptr);
    EXPECT_EQ(bp_error_code(error), BP_CONFIG) << describe(error);
    ASSERT_GE(bp_error_problem_count(error), 1u);
    const bp_error *problem = bp_error_problem(error, 0);
    EXPECT_EQ(text_field(problem, "pointer"), pointer) << json_of(problem);
    EXPECT_EQ(text_field(problem, "reason"), reason) << json_of(problem);
  }
  // 100 problems, then one saying checking stopped.
  static void expect_stopped(const bp_error *error) {
    ASSERT_EQ(bp_error_problem_count(error), 101u) << describe(error);
    const bp_error *last = bp_error_problem(error, 100);
    EXPECT_EQ(bp_error_code(last), BP_CONFIG);
    EXPECT_EQ(text_field(last, "pointer"), "");
    EXPECT_EQ(text_field(last, "reason"), "checking stopped after the first 100 problems; there may be more");
    EXPECT_TRUE(contains(bp_error_message(error), ": at least 100 problems; first: ")) << bp_error_message(error);
  }

  TempDir dir_;
  size_t loaded_groups_ = 0;
};

std::string random_name(std::mt19937 &random, size_t length) {
  std::string name = "d";
  while (name.size() < length) name += static_cast<char>('a' + random() % 26);
  return name;
}

json devices_named(const std::vector<std::string> &names) {
  json devices = json::array();
  for (const std::string &name : names) devices.push_back({{"name", name}, {"kind", "cpu"}});
  return devices;
}

TEST_F(PathologicalFleet, FiveHundredUnknownReferencesAmongFiveHundredNames) {
  std::vector<std::string> names, unknown;
  for (int i = 0; i < 500; ++i) names.push_back("device_name_" + std::to_string(1000 + i));
  for (int i = 0; i < 500; ++i) unknown.push_back("unknown_ref_" + std::to_string(1000 + i));
  const json fleet = {{"version", 1}, {"devices", devices_named(names)}, {"groups", {{{"name", "g"}, {"devices", unknown}}}}};
  ErrorPtr error = load("unknown_500x500", fleet.dump());
  expect_first(error.get(), "/groups/0/devices/0", "unknown device 'unknown_ref_1000'");
  expect_stopped(error.get());
}

// References one typo away from 1024 names of 60 characters: the first 20
// problems say "did you mean", the rest are reported without.
TEST_F(PathologicalFleet, SuggestionsAreWorkedOutForTwentyProblems) {
  std::mt19937 random(7);
  std::vector<std::string> names;
  for (int i = 0; i < 1024; ++i) names.push_back(random_name(random, 60));
  json groups = json::array();
  for (int g = 0; g < 1024; ++g) {
    json members = json::array();
    for (int k = 0; k < 100; ++k) {
      std::string typo = names[(g * 100 + k) % names.size()];
      typo[30] = typo[30] == 'x' ? 'y' : 'x';
      members.push_back(typo);
    }
    groups.push_back({{"name", "g" + std::to_string(g)}, {"devices", members}});
  }
  const json fleet = {{"version", 1}, {"devices", devices_named(names)}, {"groups", groups}};
  ErrorPtr error = load("typos_of_60_char_names", fleet.dump());
  ASSERT_NE(error, nullptr);
  expect_stopped(error.get());
  for (size_t i = 0; i < 100; ++i) {
    const bp_error *problem = bp_error_problem(error.get(), i);
    const std::string expected = i < 20 ? "did you mean '" + names[i] + "'?" : "";
    EXPECT_EQ(text_field(problem, "hint"), expected) << json_of(problem);
  }
}

TEST_F(PathologicalFleet, LongStringsAreRefusedBeforeTheSchema) {
  // The schema's patterns run std::regex, which recurses once per character.
  const json fleet = {{"version", 1}, {"devices", {{{"name", std::string(1 << 20, 'a')}, {"kind", "cpu"}}}}};
  ErrorPtr error = load("one_mebibyte_name", fleet.dump());
  expect_first(error.get(), "/devices/0/name", "a string of 1048576 bytes, longer than the 4096 a fleet takes");
  ASSERT_EQ(bp_error_problem_count(error.get()), 1u) << describe(error.get());
  expect_value(bp_error_problem(error.get(), 0), json(std::string(64, 'a') + "...").dump());
}

// 3500-character references, each under the string limit: unknown, and
// too long to suggest a name for.
TEST_F(PathologicalFleet, LongReferencesAreReportedWithoutSuggestions) {
  std::mt19937 random(11);
  json groups = json::array();
  for (int g = 0; g < 1000; ++g)
    groups.push_back({{"name", "g" + std::to_string(g)}, {"devices", {random_name(random, 3500), random_name(random, 3500)}}});
  const json fleet = {{"version", 1}, {"groups", groups}};
  ErrorPtr error = load("long_references", fleet.dump());
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(text_field(bp_error_problem(error.get(), 0), "pointer"), "/groups/0/devices/0");
  expect_stopped(error.get());
  EXPECT_EQ(bp_error_field(bp_error_problem(error.get(), 0), "hint"), nullptr);
}

TEST_F(PathologicalFleet, SizesAreBoundedAcrossTheFile) {
  json workload = json::array();
  for (int w = 0; w < 1024; ++w)
    workload.push_back({{"group", "g"}, {"collective", "all_reduce"}, {"sizes", json::array()}});
  for (json &entry : workload)
    for (int k = 0; k < 32; ++k) entry["sizes"].push_back("1B..4KiB +1B");  // 4096 sizes each
  const json fleet = {{"version", 1}, {"groups", {{{"name", "g"}, {"devices", {"cpu:0"}}}}}, {"workload", workload}};
  ErrorPtr error = load("huge_size_ranges", fleet.dump());
  // 16 ranges of 4096 are the 65536; the 17th goes past.
  expect_first(error.get(), "/workload/0/sizes/16",
               "these 4096 size(s) take the workload past 65536 sizes in all, the most a fleet takes");
  EXPECT_EQ(bp_error_problem_count(error.get()), 1u) << describe(error.get());
}

TEST_F(PathologicalFleet, CountsAreBounded) {
  std::vector<std::string> names;
  for (int i = 0; i < 2000; ++i) names.push_back("d" + std::to_string(i));
  ErrorPtr error = load("2000_devices", json{{"version", 1}, {"devices", devices_named(names)}}.dump());
  expect_first(error.get(), "/devices", "a list of 2000 entries, more than the 1024 a fleet takes");
  expect_value(bp_error_problem(error.get(), 0), "null");

  const json members(std::vector<std::string>(70000, "cpu:0"));
  error = load("70000_members", json{{"version", 1}, {"groups", {{{"name", "g"}, {"devices", members}}}}}.dump());
  expect_first(error.get(), "/groups/0/devices", "a list of 70000 items, more than the 65536 a fleet takes");
}

// Names that expand to many devices, named again and again: one problem
// per repeat until checking stops.
TEST_F(PathologicalFleet, RepeatedNamesOfManyDevices) {
  json groups = json::array();
  for (int g = 0; g < 1024; ++g)
    groups.push_back({{"name", "g" + std::to_string(g)}, {"devices", std::vector<std::string>(700, "all")}});
  const json fleet = {{"version", 1}, {"devices", {{{"name", "all"}, {"kind", "cpu"}, {"count", 4}}}}, {"groups", groups}};
  ErrorPtr error = load("repeated_names", fleet.dump());
  expect_first(error.get(), "/groups/0/devices/1", "device 'cpu:0' appears twice in group 'g0' (also at /groups/0/devices/0)");
  expect_stopped(error.get());
}

// The largest fleet that makes sense: 1024 groups of 700 of 1024 devices,
// 7 MB, under the 8 MiB cap. It loads.
TEST_F(PathologicalFleet, LargestGoodFleetLoads) {
  json groups = json::array();
  for (int g = 0; g < 1024; ++g) {
    std::vector<std::string> members;
    for (int k = 0; k < 700; ++k) members.push_back("cpu:" + std::to_string((g + k) % 1024));
    groups.push_back({{"name", "g" + std::to_string(g)}, {"devices", members}});
  }
  const json fleet = {{"version", 1},
                      {"devices", {{{"name", "all"}, {"kind", "cpu"}, {"count", 1024}, {"options", {{"devices", 1024}}}}}},
                      {"groups", groups}};
  const std::string text = fleet.dump();
  ASSERT_LT(text.size(), size_t{8} << 20);
  ErrorPtr error = load("largest_good_fleet", text);
  ASSERT_EQ(error, nullptr) << describe(error.get());
  EXPECT_EQ(loaded_groups_, 1024u);
}

// ---- collectives on wrapped host memory; enum values out of range ------------

// A host of 4 cpu devices and a group of cpu:0 and cpu:1.
class WrappedHostMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(bp_host_find_device(host_.get(), "cpu:0", &devices_[0]), nullptr);
    ASSERT_EQ(bp_host_find_device(host_.get(), "cpu:1", &devices_[1]), nullptr);
    ErrorPtr error(bp_group_create(host_.get(), devices_, 2, nullptr, &group_));
    ASSERT_EQ(error, nullptr) << describe(error.get());
  }
  void TearDown() override {
    for (bp_buffer *buffer : buffers_) bp_buffer_destroy(buffer);
    bp_group_destroy(group_);
  }
  // A buffer of rank `rank` over floats [first, first + count) of memory_.
  bp_buffer *wrap(size_t rank, size_t first, size_t count) {
    bp_buffer *buffer = nullptr;
    ErrorPtr error(bp_buffer_wrap_host(devices_[rank], memory_.data() + first, count * sizeof(float), &buffer));
    EXPECT_EQ(error, nullptr) << describe(error.get());
    buffers_.push_back(buffer);
    return buffer;
  }
  ErrorPtr all_reduce(bp_buffer *send0, bp_buffer *send1, bp_buffer *recv0, bp_buffer *recv1) {
    bp_buffer *send[] = {send0, send1}, *recv[] = {recv0, recv1};
    return ErrorPtr(bp_all_reduce(group_, send, recv, 4, BP_F32, BP_SUM));
  }

  Host host_ = make_cpu_host(kCpuOptions);
  bp_device *devices_[2] = {};
  bp_group *group_ = nullptr;
  std::vector<float> memory_ = std::vector<float>(64, 1.0f);
  std::vector<bp_buffer *> buffers_;
};

TEST_F(WrappedHostMemory, RangeThatWrapsTheAddressSpaceIsRefused) {
  bp_buffer *const untouched = reinterpret_cast<bp_buffer *>(uintptr_t{0x10});
  bp_buffer *buffer = untouched;
  void *near_the_end = reinterpret_cast<void *>(UINTPTR_MAX - 15);
  ErrorPtr error(bp_buffer_wrap_host(devices_[0], near_the_end, 64, &buffer));
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(buffer, untouched);
  EXPECT_EQ(bp_error_code(error.get()), BP_INVALID_ARGUMENT) << describe(error.get());
  EXPECT_EQ(std::string(bp_error_message(error.get())),
            "bp_buffer_wrap_host: 64 bytes from 0xfffffffffffffff0 run past the end of the address space");
  EXPECT_NE(wrap(0, 0, 4), nullptr);  // the device still wraps memory
}

TEST_F(WrappedHostMemory, RecvOverlappingAnotherRanksBufferIsRefused) {
  bp_buffer *send0 = wrap(0, 0, 4), *send1 = wrap(1, 4, 4), *recv0 = wrap(0, 8, 4);
  bp_buffer *recv1_over_recv0 = wrap(1, 10, 4), *recv1_over_send0 = wrap(1, 2, 4);
  const std::vector<float> before = memory_;
  struct Overlap {
    bp_buffer *recv1;
    std::string message;
    json ranks;
  };
  auto range = [&](const char *side, size_t rank, size_t first) {
    char text[96];
    std::snprintf(text, sizeof text, "%s[%zu] (host memory %p..%p)", side, rank, static_cast<void *>(memory_.data() + first),
                  static_cast<void *>(memory_.data() + first + 4));
    return std::string(text);
  };
  const Overlap cases[] = {
      {recv1_over_recv0, range("recv", 1, 10) + " overlaps " + range("recv", 0, 8) + " of rank 0", json::array({1, 0})},
      {recv1_over_send0, range("recv", 1, 2) + " overlaps " + range("send", 0, 0) + " of rank 0", json::array({1, 0})},
  };
  for (const Overlap &overlap : cases) {
    ErrorPtr error = all_reduce(send0, send1, recv0, overlap.recv1);
    ASSERT_NE(error, nullptr) << "overlapping recv buffers ran";
    EXPECT_EQ(bp_error_code(error.get()), BP_INVALID_ARGUMENT) << describe(error.get());
    EXPECT_EQ(std::string(bp_error_message(error.get())),
              "all_reduce(f32, sum): " + overlap.message + ": a rank's recv buffer may not overlap another rank's buffers");
    EXPECT_EQ(json_field(error.get(), "ranks"), overlap.ranks) << describe(error.get());
    EXPECT_EQ(memory_, before) << "a refused call wrote";
  }
  // Disjoint buffers run, and the sums are right.
  ErrorPtr ran = all_reduce(send0, send1, recv0, wrap(1, 12, 4));
  ASSERT_EQ(ran, nullptr) << describe(ran.get());
  for (size_t i = 8; i < 16; ++i) EXPECT_EQ(memory_[i], 2.0f) << i;
}

// Sends may share memory, and a rank in place is its own business.
TEST_F(WrappedHostMemory, SharedSendsAndInPlaceRun) {
  bp_buffer *shared0 = wrap(0, 0, 4), *shared1 = wrap(1, 0, 4);
  ErrorPtr ran = all_reduce(shared0, shared1, wrap(0, 8, 4), wrap(1, 12, 4));
  ASSERT_EQ(ran, nullptr) << describe(ran.get());
  EXPECT_EQ(memory_[8], 2.0f);
  bp_buffer *own0 = wrap(0, 16, 4), *own1 = wrap(1, 20, 4);
  ran = all_reduce(own0, own1, own0, own1);
  ASSERT_EQ(ran, nullptr) << describe(ran.get());
  EXPECT_EQ(memory_[16], 2.0f);
  EXPECT_EQ(memory_[20], 2.0f);
}

// Past a few ranks the ranges are ordered and swept: the same answers, in
// whatever order the memory is laid out.
TEST(WrappedHostMemoryOfManyRanks, OverlapsAreFoundInAnyLayout) {
  constexpr size_t kRanks = 8, kCount = 4;
  Host host = make_cpu_host(R"({"cpu": {"devices": 8}})");
  std::vector<bp_device *> devices(kRanks);
  for (size_t r = 0; r < kRanks; ++r)
    ASSERT_EQ(bp_host_find_device(host.get(), ("cpu:" + std::to_string(r)).c_str(), &devices[r]), nullptr);
  bp_group *group = nullptr;
  ASSERT_EQ(bp_group_create(host.get(), devices.data(), kRanks, nullptr, &group), nullptr);
  std::vector<float> memory(4 * kRanks * kCount, 1.0f);
  std::vector<bp_buffer *> owned;
  auto wrap = [&](size_t rank, size_t first) {
    bp_buffer *buffer = nullptr;
    ErrorPtr error(bp_buffer_wrap_host(devices[rank], memory.data() + first, kCount * sizeof(float), &buffer));
    EXPECT_EQ(error, nullptr) << describe(error.get());
    owned.push_back(buffer);
    return buffer;
  };
  // Ranks laid out in reverse: send[r] at block 2 (7 - r), recv[r] just after it.
  std::vector<bp_buffer *> send(kRanks), recv(kRanks);
  for (size_t r = 0; r < kRanks; ++r) {
    send[r] = wrap(r, 2 * (kRanks - 1 - r) * kCount);
    recv[r] = wrap(r, (2 * (kRanks - 1 - r) + 1) * kCount);
  }
  ErrorPtr ran(bp_all_reduce(group, send.data(), recv.data(), kCount, BP_F32, BP_SUM));
  ASSERT_EQ(ran, nullptr) << describe(ran.get());
  EXPECT_EQ(memory[kCount], 8.0f);

  // recv[5] moved half onto send[2]'s block (block 10): refused, naming both ranks.
  bp_buffer *const recv5 = recv[5];
  recv[5] = wrap(5, 2 * (kRanks - 1 - 2) * kCount + kCount / 2);
  ErrorPtr error(bp_all_reduce(group, send.data(), recv.data(), kCount, BP_F32, BP_SUM));
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(bp_error_code(error.get()), BP_INVALID_ARGUMENT) << describe(error.get());
  EXPECT_EQ(json_field(error.get(), "ranks"), json::array({5, 2})) << describe(error.get());
  EXPECT_TRUE(contains(bp_error_message(error.get()), ": a rank's recv buffer may not overlap another rank's buffers"));
  // And two recvs over one another (recv[6] onto recv[1]).
  recv[5] = recv5;
  recv[6] = wrap(6, (2 * (kRanks - 1 - 1) + 1) * kCount + 1);
  error.reset(bp_all_reduce(group, send.data(), recv.data(), kCount, BP_F32, BP_SUM));
  ASSERT_NE(error, nullptr);
  const json ranks = json_field(error.get(), "ranks");
  EXPECT_TRUE(ranks == json::array({6, 1}) || ranks == json::array({1, 6})) << describe(error.get());
  for (bp_buffer *buffer : owned) bp_buffer_destroy(buffer);
  bp_group_destroy(group);
}

// The message and context of an enum value out of range name only what was
// asked before it: no made-up collective, type or op.
TEST_F(WrappedHostMemory, EnumOutOfRangeNamesOnlyWhatWasAsked) {
  bp_buffer *send[] = {wrap(0, 0, 4), wrap(1, 4, 4)}, *recv[] = {wrap(0, 8, 4), wrap(1, 12, 4)};
  struct OutOfRange {
    uint32_t collective, dtype, op;
    std::string message;
    std::set<std::string> present, absent;
  };
  const OutOfRange cases[] = {
      {99, BP_F32, BP_SUM, "unknown collective 99", {"devices"}, {"operation", "dtype", "reduce_op"}},
      {BP_ALL_REDUCE, 99, BP_SUM, "all_reduce: unknown element type 99", {"devices", "operation"}, {"dtype", "reduce_op"}},
      {BP_ALL_REDUCE, BP_F32, 99, "all_reduce(f32): unknown reduce op 99", {"devices", "operation", "dtype"}, {"reduce_op"}},
  };
  for (const OutOfRange &bad : cases) {
    SCOPED_TRACE(bad.message);
    bp_collective_request request{};
    request.struct_size = sizeof request;
    request.collective = bad.collective;
    request.dtype = bad.dtype;
    request.reduce_op = bad.op;
    request.count = 4;
    request.send = send;
    request.recv = recv;
    ErrorPtr error(bp_run_collective(group_, &request));
    ASSERT_NE(error, nullptr);
    EXPECT_EQ(bp_error_code(error.get()), BP_INVALID_ARGUMENT) << describe(error.get());
    EXPECT_EQ(std::string(bp_error_message(error.get())), bad.message);
    for (const std::string &field : bad.present) EXPECT_NE(bp_error_field(error.get(), field.c_str()), nullptr) << field;
    for (const std::string &field : bad.absent) EXPECT_EQ(bp_error_field(error.get(), field.c_str()), nullptr) << field;
  }
  ErrorPtr ran(bp_all_reduce(group_, send, recv, 4, BP_F32, BP_SUM));
  EXPECT_EQ(ran, nullptr) << describe(ran.get());
}

// ---- configs/ --------------------------------------------------------------

// Every fleet in configs/ validates (schema and meaning) against the plugins
// this build made. A config for a kind whose plugin this machine did not
// build is skipped with the reason, not passed.
TEST(ConfigsDirectory, EveryFleetValidates) {
  const fs::path configs = fs::path(BACKPLANE_TEST_SOURCE_DIR) / "configs";
  std::vector<fs::path> fleets;
  for (const fs::directory_entry &entry : fs::directory_iterator(configs))
    // Not fleets: the schema, and traces a fleet's trace layer wrote here
    // (configs/layers.json writes layers-trace.json, ignored by git).
    if (entry.path().extension() == ".json" && entry.path().filename() != "schema.json" &&
        !entry.path().filename().string().ends_with("-trace.json"))
      fleets.push_back(entry.path());
  std::sort(fleets.begin(), fleets.end());
  ASSERT_FALSE(fleets.empty()) << "no fleets in " << configs;
  ASSERT_NE(std::find(fleets.begin(), fleets.end(), configs / "default.json"), fleets.end());

  std::vector<std::string> skipped;
  for (const fs::path &path : fleets) {
    SCOPED_TRACE(path.string());
#if defined(__SANITIZE_ADDRESS__)
    // The asan preset builds no mpi plugin (Open MPI in the process leaks
    // from components it unloads, which no suppression can name, and
    // crashes LeakSanitizer's tracer); tests/mpi loads configs/mpi.json in
    // the default preset.
    if (std::ifstream text(path); json::parse(text).contains("transport")) {
      std::cout << "# not under ASan: " << path.filename().string() << " opens a transport\n";
      continue;
    }
#endif
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
