// The `backplane` CLI over fleet files, end to end as a subprocess: validate
// (problems as FILE:POINTER: reason), run (nccl-tests rows, checked) and
// explain (would it run, or the structured refusal), with their exit codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace backplane::testing {
namespace {

const std::string kDefaultFleet = std::string(BACKPLANE_TEST_SOURCE_DIR) + "/configs/default.json";

// `backplane explain [--json] configs/default.json REQUEST...`.
CommandResult explain(const std::vector<std::string> &request, bool json = false,
                      StderrTo stderr_to = StderrTo::test_log) {
  std::vector<std::string> args = {"explain"};
  if (json) args.push_back("--json");
  args.push_back(kDefaultFleet);
  args.insert(args.end(), request.begin(), request.end());
  return run_cli(args, stderr_to);
}

// Two problems of meaning, found by the second stage: a kind no plugin
// provides (a typo), and a name used twice.
constexpr const char *kBadFleet = R"({
  "version": 1,
  "devices": [
    {"name": "gpu", "kind": "vulkn"},
    {"name": "gpu", "kind": "cpu"}
  ]
})";

class CliFleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(BACKPLANE_TEST_CLI))
        << BACKPLANE_TEST_CLI << " is missing: build the backplane_cli target";
  }
};

// ---- validate ----------------------------------------------------------

TEST_F(CliFleetTest, ValidateAcceptsTheDefaultFleet) {
  CommandResult ran = run_cli({"validate", kDefaultFleet});
  EXPECT_EQ(ran.exit_code, 0) << ran.out;
  EXPECT_EQ(ran.out, kDefaultFleet + ": ok (4 devices, 1 group, 10 workload entries)\n");
}

TEST_F(CliFleetTest, ValidatePrintsEachProblemAsFilePointerReason) {
  TempDir dir;
  const std::string fleet = dir.write_file("bad.json", kBadFleet).string();
  CommandResult ran = run_cli({"validate", fleet});
  EXPECT_EQ(ran.exit_code, 1) << ran.out;
  const std::vector<std::string> lines = lines_of(ran.out);
  auto has_line_starting = [&](const std::string &start) {
    for (const std::string &line : lines)
      if (line.rfind(start, 0) == 0) return true;
    return false;
  };
  EXPECT_TRUE(has_line_starting(fleet + ":/devices/0/kind: unknown device kind 'vulkn'")) << ran.out;
  EXPECT_TRUE(has_line_starting(fleet + ":/devices/1/name: duplicate device name 'gpu'")) << ran.out;
  // Every line is a problem or a hint below one.
  for (const std::string &line : lines)
    EXPECT_TRUE(line.rfind(fleet + ":/", 0) == 0 || line.rfind("  hint: ", 0) == 0) << line;
}

TEST_F(CliFleetTest, ValidateSchemaProblemsComeWithTheirHint) {
  TempDir dir;
  const std::string fleet =
      dir.write_file("typo.json", R"({"version": 1, "workload": [{"group": "g", "collective": "al_reduce"}]})")
          .string();
  CommandResult ran = run_cli({"validate", fleet});
  EXPECT_EQ(ran.exit_code, 1) << ran.out;
  EXPECT_EQ(ran.out.rfind(fleet + ":/workload/0/collective: ", 0), 0u) << ran.out;
  EXPECT_NE(ran.out.find("\n  hint: "), std::string::npos) << ran.out;
  EXPECT_NE(ran.out.find("'all_reduce'"), std::string::npos) << ran.out;
}

TEST_F(CliFleetTest, ValidateJsonListsEachProblemAsAnError) {
  TempDir dir;
  const std::string fleet = dir.write_file("bad.json", kBadFleet).string();
  CommandResult ran = run_cli({"validate", "--json", fleet});
  EXPECT_EQ(ran.exit_code, 1) << ran.out;
  nlohmann::json out = parse_output(ran);
  EXPECT_EQ(out["file"], fleet);
  EXPECT_EQ(out["valid"], false);
  ASSERT_TRUE(out["problems"].is_array()) << out.dump(2);
  std::set<std::string> pointers;
  for (const nlohmann::json &problem : out["problems"]) {
    EXPECT_EQ(problem["file"], fleet) << problem.dump(2);
    EXPECT_TRUE(problem["code"].is_string()) << problem.dump(2);
    EXPECT_TRUE(problem["reason"].is_string()) << problem.dump(2);
    pointers.insert(problem["pointer"].get<std::string>());
    if (problem["pointer"] == "/devices/0/kind") {
      EXPECT_EQ(problem["code"], "PLUGIN_NOT_FOUND");
      EXPECT_EQ(problem["value"], "vulkn");
    }
  }
  EXPECT_TRUE(pointers.count("/devices/0/kind")) << out.dump(2);
  EXPECT_TRUE(pointers.count("/devices/1/name")) << out.dump(2);

  CommandResult good = run_cli({"validate", "--json", kDefaultFleet});
  EXPECT_EQ(good.exit_code, 0) << good.out;
  nlohmann::json ok = parse_output(good);
  EXPECT_EQ(ok["valid"], true);
  EXPECT_EQ(ok["problems"], nlohmann::json::array());
  EXPECT_EQ(ok["groups"], 1);
  EXPECT_EQ(ok["workload_entries"], 10);
}

TEST_F(CliFleetTest, ValidateOfAMissingFileIsAProblemToo) {
  TempDir dir;
  const std::string fleet = (dir.path() / "missing.json").string();
  CommandResult ran = run_cli({"validate", fleet});
  EXPECT_EQ(ran.exit_code, 1) << ran.out;
  EXPECT_EQ(ran.out.rfind(fleet + ": ", 0), 0u) << ran.out;
}

// ---- run ---------------------------------------------------------------

TEST_F(CliFleetTest, RunTheDefaultFleetChecksEveryRow) {
  CommandResult ran = run_cli({"run", kDefaultFleet});
  EXPECT_EQ(ran.exit_code, 0) << ran.out;
  // One block per workload entry, each with its header and a clean footer.
  for (const char *header : {"# all_reduce(f32, sum) on group all_cpu: cpu:0, cpu:1, cpu:2, cpu:3 (plugin cpu ",
                             "# all_reduce(bf16, avg) on group all_cpu", "# reduce_scatter(f32, sum) on group",
                             "# all_gather(f32) on group", "# broadcast(i32) on group", "# reduce(f64, max) on group",
                             "# all_to_all(u8) on group", "# gather(i64) on group", "# scatter(f16) on group",
                             "# barrier on group"})
    EXPECT_NE(ran.out.find(header), std::string::npos) << header << "\n" << ran.out;
  size_t footers = 0;
  for (size_t at = ran.out.find("# Out of bounds values : 0 OK\n"); at != std::string::npos;
       at = ran.out.find("# Out of bounds values : 0 OK\n", at + 1))
    ++footers;
  EXPECT_EQ(footers, 10u) << ran.out;

  // Rows: size count type redop root, then time algbw busbw #wrong out of
  // place and in place; every checked #wrong is 0.
  size_t rows = 0;
  for (const std::string &line : lines_of(ran.out)) {
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> words = words_of(line);
    ASSERT_EQ(words.size(), 13u) << line;
    ++rows;
    const bool barrier = words[2] == "none";
    for (size_t column : {8u, 12u}) {
      if (barrier)
        EXPECT_TRUE(words[column] == "N/A" || words[column] == "-") << line;
      else
        EXPECT_EQ(words[column], "0") << line;
    }
    if (!barrier) {
      const double size = std::stod(words[0]), count = std::stod(words[1]);
      EXPECT_GT(count, 0) << line;
      EXPECT_EQ(std::fmod(size, count), 0.0) << line;  // size is count whole elements
    }
  }
  // all_reduce f32 8B..64MiB x4 alone has 12 rows.
  EXPECT_GE(rows, 30u) << ran.out;
  EXPECT_NE(ran.out.find(": 0 out of bounds values, 0 errors: OK\n"), std::string::npos) << ran.out;
}

TEST_F(CliFleetTest, RunJsonRoundsSizesAsNcclTestsDoes) {
  TempDir dir;
  const std::string fleet = dir.write_file("three.json", R"({
    "version": 1,
    "devices": [{"name": "cpu", "kind": "cpu", "count": 3}],
    "groups": [{"name": "trio", "devices": ["cpu:2", "cpu:0", "cpu:1"]}],
    "workload": [
      {"group": "trio", "collective": "all_gather", "dtype": "f32", "sizes": [100, "4KiB"],
       "iterations": 3, "warmup": 1, "in_place": true},
      {"group": "trio", "collective": "reduce", "dtype": "i32", "op": "min", "root": 2, "sizes": "64B",
       "iterations": 2, "check": false}
    ]})").string();
  CommandResult ran = run_cli({"run", "--json", fleet});
  EXPECT_EQ(ran.exit_code, 0) << ran.out;
  nlohmann::json out = parse_output(ran);
  EXPECT_EQ(out["ok"], true);
  EXPECT_EQ(out["out_of_bounds"], 0);
  ASSERT_EQ(out["entries"].size(), 2u) << out.dump(2);

  // all_gather on 3 ranks: the largest buffer holds 3 blocks of f32, so
  // 100 B becomes 96 B (24 elements) and 4096 B becomes 4092 B.
  const nlohmann::json &gather = out["entries"][0];
  EXPECT_EQ(gather["operation"], "all_gather");
  EXPECT_EQ(gather["devices"], nlohmann::json::array({"cpu:2", "cpu:0", "cpu:1"}));
  EXPECT_EQ(gather["plugin"]["name"], "cpu");
  ASSERT_EQ(gather["rows"].size(), 2u) << gather.dump(2);
  EXPECT_EQ(gather["rows"][0]["size"], 96);
  EXPECT_EQ(gather["rows"][0]["count"], 24);
  EXPECT_EQ(gather["rows"][1]["size"], 4092);
  for (const nlohmann::json &row : gather["rows"]) {
    EXPECT_TRUE(row["out_of_place"].is_null()) << row.dump();  // in place only
    const nlohmann::json &in_place = row["in_place"];
    EXPECT_EQ(in_place["wrong"], 0) << row.dump();
    EXPECT_GT(in_place["time_us"].get<double>(), 0) << row.dump();
    // busbw = algbw (n-1)/n for all_gather
    EXPECT_NEAR(in_place["busbw"].get<double>(), in_place["algbw"].get<double>() * 2 / 3, 1e-9) << row.dump();
  }

  const nlohmann::json &reduce = out["entries"][1];
  EXPECT_EQ(reduce["root"], 2);
  EXPECT_EQ(reduce["check"], false);
  ASSERT_EQ(reduce["rows"].size(), 1u) << reduce.dump(2);
  for (const char *mode : {"out_of_place", "in_place"}) {
    const nlohmann::json &cell = reduce["rows"][0][mode];
    EXPECT_TRUE(cell["wrong"].is_null()) << cell.dump();  // not checked
    EXPECT_EQ(cell["busbw"], cell["algbw"]) << cell.dump();  // factor 1 for reduce
  }
}

TEST_F(CliFleetTest, RunOfAFleetThatDoesNotLoadFailsWithItsProblems) {
  TempDir dir;
  const std::string fleet = dir.write_file("bad.json", kBadFleet).string();
  CommandResult ran = run_cli({"run", fleet}, StderrTo::out);
  EXPECT_EQ(ran.exit_code, 1) << ran.out;
  EXPECT_NE(ran.out.find(fleet + ":/devices/0/kind: "), std::string::npos) << ran.out;
}

// With --json, machines reading stdout get the refusal there, as JSON.
TEST_F(CliFleetTest, RunJsonOfAFleetThatDoesNotLoadPrintsTheErrorAsJson) {
  TempDir dir;
  const std::string fleet = dir.write_file("bad.json", kBadFleet).string();
  CommandResult ran = run_cli({"run", fleet, "--json"}, StderrTo::discard);
  EXPECT_EQ(ran.exit_code, 1) << ran.out;
  nlohmann::json out = parse_output(ran);
  EXPECT_EQ(out["fleet"], fleet) << out.dump(2);
  EXPECT_EQ(out["ok"], false) << out.dump(2);
  EXPECT_EQ(out["error"]["code"], "PLUGIN_NOT_FOUND") << out.dump(2);
  std::set<std::string> pointers;
  for (const nlohmann::json &problem : out["error"]["problems"]) pointers.insert(problem["pointer"].get<std::string>());
  EXPECT_EQ(pointers, (std::set<std::string>{"/devices/0/kind", "/devices/1/name"})) << out.dump(2);
}

// An exception no subcommand expected ends it with one line and exit code
// 1, not abort(): here the JSON writer's, on a path that is not UTF-8.
TEST_F(CliFleetTest, AnUnexpectedExceptionIsOneLineAndExitCodeOne) {
  CommandResult ran = run_cli({"validate", "/nonexistent/\xff.json", "--json"}, StderrTo::out);
  EXPECT_EQ(ran.exit_code, 1) << ran.out;
  const std::vector<std::string> lines = lines_of(ran.out);
  ASSERT_EQ(lines.size(), 1u) << ran.out;
  EXPECT_EQ(lines[0], "error: [json.exception.type_error.316] invalid UTF-8 byte at index 13: 0xFF") << ran.out;
}

// ---- explain -----------------------------------------------------------

TEST_F(CliFleetTest, ExplainSaysWhereARequestWouldRun) {
  const std::vector<std::string> request = {"--group", "all_cpu", "--collective", "all_reduce", "--dtype", "f32",
                                            "--op", "sum"};
  CommandResult ran = explain(request);
  EXPECT_EQ(ran.exit_code, 0) << ran.out;
  EXPECT_EQ(ran.out.rfind(
                "would run: all_reduce(f32, sum) on group all_cpu (cpu:0, cpu:1, cpu:2, cpu:3) by plugin cpu ", 0),
            0u)
      << ran.out;

  CommandResult json = explain(request, /*json=*/true);
  EXPECT_EQ(json.exit_code, 0) << json.out;
  nlohmann::json out = parse_output(json);
  EXPECT_EQ(out["runs"], true);
  EXPECT_EQ(out["operation"], "all_reduce");
  EXPECT_EQ(out["plugin"]["name"], "cpu");
  EXPECT_EQ(out["devices"].size(), 4u);
}

TEST_F(CliFleetTest, ExplainGivesTheRefusalWithItsCodeAndHint) {
  const std::vector<std::string> request = {"--group", "all_cpu", "--collective", "all_reduce", "--dtype", "i32",
                                            "--op", "avg"};
  CommandResult ran = explain(request);
  EXPECT_EQ(ran.exit_code, 1) << ran.out;
  EXPECT_EQ(ran.out.rfind("refused: all_reduce(i32, avg) ", 0), 0u) << ran.out;
  EXPECT_NE(ran.out.find("\n  code: UNSUPPORTED_REDUCE_OP\n"), std::string::npos) << ran.out;
  EXPECT_NE(ran.out.find("\n  alternatives:"), std::string::npos) << ran.out;
  EXPECT_NE(ran.out.find("\n  hint: "), std::string::npos) << ran.out;

  CommandResult json = explain(request, /*json=*/true);
  EXPECT_EQ(json.exit_code, 1) << json.out;
  nlohmann::json out = parse_output(json);
  EXPECT_EQ(out["runs"], false);
  EXPECT_EQ(out["code"], "UNSUPPORTED_REDUCE_OP");
  EXPECT_EQ(out["reduce_op"], "avg");
  EXPECT_TRUE(out["alternatives"].is_array()) << out.dump(2);
  EXPECT_TRUE(out["hint"].is_string()) << out.dump(2);
}

TEST_F(CliFleetTest, ExplainWithBadNamesIsUsageAndSuggestsTheClosest) {
  CommandResult collective =
      explain({"--group", "all_cpu", "--collective", "al_reduce", "--dtype", "f32"}, false, StderrTo::out);
  EXPECT_EQ(collective.exit_code, 2) << collective.out;
  EXPECT_NE(collective.out.find("did you mean 'all_reduce'?"), std::string::npos) << collective.out;
  CommandResult dtype =
      explain({"--group", "all_cpu", "--collective", "all_reduce", "--dtype", "f31"}, false, StderrTo::out);
  EXPECT_EQ(dtype.exit_code, 2) << dtype.out;
  EXPECT_NE(dtype.out.find("did you mean 'f32'?"), std::string::npos) << dtype.out;
  CommandResult op = explain({"--group", "all_cpu", "--collective", "all_reduce", "--dtype", "f32", "--op", "summ"},
                             false, StderrTo::out);
  EXPECT_EQ(op.exit_code, 2) << op.out;
  EXPECT_NE(op.out.find("did you mean 'sum'?"), std::string::npos) << op.out;
  CommandResult group =
      explain({"--group", "all_cpux", "--collective", "all_reduce", "--dtype", "f32"}, false, StderrTo::out);
  EXPECT_EQ(group.exit_code, 2) << group.out;
  EXPECT_NE(group.out.find("all_cpu"), std::string::npos) << group.out;
  EXPECT_EQ(explain({"--group", "all_cpu", "--collective", "all_reduce"}).exit_code, 2);  // no --dtype
  EXPECT_EQ(explain({"--collective", "all_reduce", "--dtype", "f32"}).exit_code, 2);      // no --group
}

// ---- layered devices -------------------------------------------------

// A fleet of 2 cpu devices, both under the trace layer, its file beside the fleet.
constexpr const char *kTracedFleet = R"({
  "version": 1,
  "devices": [
    {"name": "cpu", "kind": "cpu", "count": 2},
    {"name": "t", "over": "cpu", "layers": ["trace"], "options": {"trace": {"file": "out-trace.json"}}}
  ],
  "groups": [{"name": "traced", "devices": ["t"]}, {"name": "half", "devices": ["t.0", "cpu:1"]}],
  "workload": [{"group": "traced", "collective": "all_reduce", "dtype": "f32", "op": "sum",
                "sizes": [64, 1024], "iterations": 3, "warmup": 1, "check": true}]
})";

TEST_F(CliFleetTest, PluginsListLayerKindsWithTheirRules) {
  const CommandResult plugins = run_cli({"plugins"});
  ASSERT_EQ(plugins.exit_code, 0) << plugins.out;
  EXPECT_NE(plugins.out.find("layer kinds (a chain holds at most 8 layers):"), std::string::npos) << plugins.out;
  bool trace_row = false;
  for (const std::string &line : lines_of(plugins.out)) {
    const std::vector<std::string> words = words_of(line);
    if (words.size() > 4 && words[0] == "trace" && words[1] == "trace") {
      trace_row = true;
      EXPECT_NE(line.find("no (once a chain)"), std::string::npos) << line;
      EXPECT_NE(line.find("every kind"), std::string::npos) << line;
      EXPECT_NE(line.find("file,ring_events,max_bytes"), std::string::npos) << line;
    }
  }
  EXPECT_TRUE(trace_row) << plugins.out;
  const nlohmann::json json = parse_output(run_cli({"plugins", "--json"}));
  bool listed = false;
  for (const nlohmann::json &kind : json["layer_kinds"])
    if (kind["name"] == "trace") listed = kind["stackable"] == false && kind["options"].contains("file");
  EXPECT_TRUE(listed) << json.dump(2);
}

TEST_F(CliFleetTest, DevicesExplainAndRunShowTheChainsAndRunWritesTheTrace) {
  TempDir dir;
  const std::string fleet = dir.write_file("traced.json", kTracedFleet).string();

  const CommandResult devices = run_cli({"devices", fleet});
  ASSERT_EQ(devices.exit_code, 0) << devices.out;
  EXPECT_NE(devices.out.find("chain (outermost first)"), std::string::npos) << devices.out;
  bool row = false;
  for (const std::string &line : lines_of(devices.out))
    row = row || (words_of(line).size() >= 4 && words_of(line)[0] == "t.1" && words_of(line)[1] == "cpu:1" &&
                  line.find("trace \u2192 cpu:1") != std::string::npos);
  EXPECT_TRUE(row) << devices.out;
  const nlohmann::json listed = parse_output(run_cli({"devices", "--json", fleet}));
  bool found = false;
  for (const nlohmann::json &device : listed)
    if (device["name"] == "t.0")
      found = device["chain"] == "trace \u2192 cpu:0" && device["base"] == "cpu:0" && device["over"] == "cpu:0" &&
              device["layers"] == nlohmann::json::array({"trace"});
  EXPECT_TRUE(found) << listed.dump(2);

  const CommandResult explained =
      run_cli({"explain", fleet, "--group", "half", "--collective", "all_reduce", "--dtype", "f32"});
  ASSERT_EQ(explained.exit_code, 0) << explained.out;
  EXPECT_NE(explained.out.find("dispatch and its capability check use the base devices"), std::string::npos)
      << explained.out;
  EXPECT_NE(explained.out.find("rank 0  t.0: trace \u2192 cpu:0"), std::string::npos) << explained.out;
  EXPECT_NE(explained.out.find("rank 1  cpu:1: cpu:1"), std::string::npos) << explained.out;
  const nlohmann::json explained_json =
      parse_output(run_cli({"explain", "--json", fleet, "--group", "half", "--collective", "all_reduce", "--dtype", "f32"}));
  EXPECT_EQ(explained_json["chains"], nlohmann::json::array({"trace \u2192 cpu:0", "cpu:1"}));
  EXPECT_EQ(explained_json["base_devices"], nlohmann::json::array({"cpu:0", "cpu:1"}));

  const CommandResult ran = run_cli({"run", fleet});
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  std::ifstream in(dir.path() / "out-trace.json");
  ASSERT_TRUE(in) << "no trace beside the fleet";
  const nlohmann::json trace = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(trace.is_discarded());
  size_t slices = 0;
  for (const nlohmann::json &event : trace["traceEvents"])
    slices += event["ph"] == "X" && event["name"] == "all_reduce";
  // 2 sizes x 2 modes x (1 warmup + 3 timed + the check's call) x 2 ranks, at least.
  EXPECT_GE(slices, 2u * 2u * 4u * 2u) << trace.dump().substr(0, 2000);
}

}  // namespace
// configs/mixed.json: cpu, OpenCL and Vulkan in one group; every entry is
// checked, each group's counters printed, and explain names the path.
TEST_F(CliFleetTest, TheMixedFleetRunsStagedAndExplainSaysSo) {
  const std::string fleet = std::string(BACKPLANE_TEST_SOURCE_DIR) + "/configs/mixed.json";
  const nlohmann::json ran = parse_output(run_cli({"run", "--json", fleet}));
  ASSERT_EQ(ran.value("ok", false), true) << ran.dump(2).substr(0, 4000);
  uint64_t staged = 0, native = 0;
  for (const nlohmann::json &entry : ran["entries"]) {
    staged = std::max<uint64_t>(staged, entry["group_counters"].value("staged_calls", 0));
    if (entry["group"] == "opencl_lenient") native = entry["group_counters"].value("native_calls", 0);
  }
  EXPECT_GT(staged, 0u);
  EXPECT_GT(native, 0u);  // its f32 entry runs on the OpenCL plugin itself
  const CommandResult text = run_cli({"run", fleet});
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_NE(text.out.find("# group cpu_opencl_vulkan so far: 0 calls native, "), std::string::npos) << text.out;

  const CommandResult mixed = run_cli(
      {"explain", fleet, "--group", "cpu_opencl_vulkan", "--collective", "all_reduce", "--dtype", "f32"});
  ASSERT_EQ(mixed.exit_code, 0) << mixed.out;
  EXPECT_NE(mixed.out.find("path: staged through host memory, because the group mixes device kinds"),
            std::string::npos)
      << mixed.out;
  const nlohmann::json fallback = parse_output(
      run_cli({"explain", "--json", fleet, "--group", "opencl_lenient", "--collective", "all_reduce", "--dtype", "f32"}));
  EXPECT_EQ(fallback.value("path", ""), "native");
}

}  // namespace backplane::testing
