// `backplane bench` end to end as a subprocess: nccl-tests' rows (checked,
// median times, traffic and %peak on cpu groups), its --json form and
// busbw factors, nccl-tests' type names, refusals and usage errors with
// their exit codes, and `bench all`.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace backplane::testing {
namespace {

// The table rows of some output: the lines that start with a size.
std::vector<std::vector<std::string>> rows_of(const std::string &out) {
  std::vector<std::vector<std::string>> rows;
  for (const std::string &line : lines_of(out)) {
    std::vector<std::string> words = words_of(line);
    if (!words.empty() && words[0].find_first_not_of("0123456789") == std::string::npos) rows.push_back(words);
  }
  return rows;
}

// On a cpu group a row is size count type redop root, then per mode time
// algbw busbw #wrong traffic %peak.
constexpr size_t kCpuRowWords = 5 + 2 * 6;
constexpr size_t kWrongColumns[] = {8, 14};

class CliBenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(BACKPLANE_TEST_CLI))
        << BACKPLANE_TEST_CLI << " is missing: build the backplane_cli target";
  }
};

TEST_F(CliBenchTest, AllReducePrintsCheckedNcclTestsRows) {
  CommandResult ran =
      run_cli({"bench", "all_reduce", "-g", "2", "-b", "8", "-e", "64K", "-f", "4", "-n", "3", "-w", "1"});
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  EXPECT_NE(ran.out.find("# time: median of 3 calls after 1 warmup (nccl-tests prints a mean)"), std::string::npos)
      << ran.out;
  EXPECT_NE(ran.out.find("# memory bandwidth probe: "), std::string::npos) << ran.out;
  EXPECT_NE(ran.out.find(" GB/s read+written (memcpy, "), std::string::npos) << ran.out;
  EXPECT_NE(ran.out.find("# Out of bounds values : 0 OK\n"), std::string::npos) << ran.out;
  EXPECT_NE(ran.out.find("# Avg bus bandwidth    : "), std::string::npos) << ran.out;

  // 8, 32, 128, 512, 2K, 8K, 32K: x4 up to 64K.
  const std::vector<uint64_t> sizes = {8, 32, 128, 512, 2048, 8192, 32768};
  const std::vector<std::vector<std::string>> rows = rows_of(ran.out);
  ASSERT_EQ(rows.size(), sizes.size()) << ran.out;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::vector<std::string> &words = rows[i];
    ASSERT_EQ(words.size(), kCpuRowWords) << ran.out;
    EXPECT_EQ(std::stoull(words[0]), sizes[i]) << ran.out;
    EXPECT_EQ(std::stoull(words[1]), sizes[i] / 4) << ran.out;  // f32
    EXPECT_EQ(words[2], "f32");
    EXPECT_EQ(words[3], "sum");
    EXPECT_EQ(words[4], "-1");  // not rooted
    for (size_t column : kWrongColumns) EXPECT_EQ(words[column], "0") << ran.out;
    for (size_t column : {9u, 10u, 15u, 16u}) EXPECT_GE(std::stod(words[column]), 0) << ran.out;  // traffic, %peak
  }
}

TEST_F(CliBenchTest, JsonRowsCarryNcclTestsBusBandwidthAndTraffic) {
  CommandResult ran =
      run_cli({"bench", "all_reduce", "-g", "4", "-b", "1K", "-e", "256K", "-f", "16", "-n", "3", "-w", "1", "--json"});
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  nlohmann::json out = parse_output(ran);
  ASSERT_TRUE(out.is_object()) << out.dump(2);
  EXPECT_EQ(out["collective"], "all_reduce");
  EXPECT_EQ(out["dtype"], "f32");
  EXPECT_EQ(out["reduce_op"], "sum");
  EXPECT_EQ(out["ranks"], 4);
  EXPECT_EQ(out["devices"], nlohmann::json({"cpu:0", "cpu:1", "cpu:2", "cpu:3"}));
  EXPECT_EQ(out["time"], "median");
  EXPECT_GT(out["machine"]["memory_bandwidth_gbps"].get<double>(), 0) << out["machine"].dump();
  EXPECT_EQ(out["machine"]["probe"]["method"], "memcpy");
  EXPECT_GE(out["machine"]["probe"]["bytes"].get<uint64_t>(), uint64_t{64} << 20);
  const double peak = out["machine"]["memory_bandwidth_gbps"];

  ASSERT_EQ(out["rows"].size(), 3u) << out.dump(2);  // 1K, 16K, 256K
  double busbw_sum = 0;
  size_t modes = 0;
  for (const nlohmann::json &row : out["rows"]) {
    EXPECT_EQ(row["type"], "f32");
    EXPECT_EQ(row["redop"], "sum");
    EXPECT_TRUE(row["root"].is_null());
    for (const char *mode : {"out_of_place", "in_place"}) {
      const nlohmann::json &cell = row[mode];
      ASSERT_TRUE(cell.is_object() && cell.contains("busbw")) << row.dump();
      EXPECT_EQ(cell["wrong"], 0) << row.dump();
      const double time = cell["time_us"], algbw = cell["algbw"], busbw = cell["busbw"];
      ASSERT_GT(time, 0) << row.dump();
      EXPECT_NEAR(algbw, row["size"].get<double>() / (time * 1e3), algbw * 1e-9) << row.dump();
      EXPECT_NEAR(busbw, algbw * 2 * 3 / 4, busbw * 1e-9) << row.dump();  // 2(n-1)/n
      // all_reduce on the cpu plugin: n inputs read, n outputs written.
      const double traffic = cell["traffic_gbps"];
      EXPECT_NEAR(traffic, 2 * 4 * row["size"].get<double>() / (time * 1e3), traffic * 1e-9) << row.dump();
      EXPECT_NEAR(cell["peak_percent"].get<double>(), traffic / peak * 100, traffic / peak * 1e-7) << row.dump();
      busbw_sum += busbw;
      ++modes;
    }
  }
  EXPECT_NEAR(out["avg_busbw"].get<double>(), busbw_sum / static_cast<double>(modes), busbw_sum * 1e-9);
}

// On an opencl or vulkan group every row gets a copy moving the same bytes
// on the same device (a copy kernel; vkCmdCopyBuffer): its median time and
// the collective's share of its speed.
void expect_rows_compared_with_a_copy(const std::string &kind, const char *required_variable,
                                      const std::string &device_entry, const char *copy_label) {
  TempDir dir;
  const std::filesystem::path fleet = dir.write_file(
      kind + ".json", R"({"version": 1, "devices": [{"name": "gpu", "kind": ")" + kind + R"(", )" + device_entry +
                          R"(}], "groups": [{"name": "them", "devices": ["gpu"]}]})");
  CommandResult devices = run_cli({"devices", "--json"});
  ASSERT_EQ(devices.exit_code, 0) << devices.out;
  if (devices.out.find("\"" + kind + ":0\"") == std::string::npos) {
    const char *required = std::getenv(required_variable);
    ASSERT_FALSE(required && std::string(required) == "1") << "no " << kind << " device, and " << required_variable << "=1";
    GTEST_SKIP() << "no " << kind << " device on this machine";
  }
  CommandResult text = run_cli({"bench", "all_reduce", "--fleet", fleet.string(), "-b", "4K", "-e", "4K", "-n", "2"});
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_NE(text.out.find(std::string("# copy reference: ") + copy_label), std::string::npos) << text.out;
  CommandResult ran = run_cli({"bench", "all_reduce", "--fleet", fleet.string(), "-b", "4K", "-e", "64K", "-f", "16",
                               "-n", "3", "-w", "1", "--json"});
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  nlohmann::json out = parse_output(ran);
  ASSERT_EQ(out["rows"].size(), 2u) << out.dump(2);  // 4K, 64K
  for (const nlohmann::json &row : out["rows"]) {
    for (const char *mode : {"out_of_place", "in_place"}) {
      const nlohmann::json &cell = row[mode];
      if (cell.is_null()) continue;  // a mode the plugin does not declare
      ASSERT_TRUE(cell.contains("copy_us")) << row.dump();
      EXPECT_EQ(cell["wrong"], 0) << row.dump();
      const double time = cell["time_us"], copy = cell["copy_us"];
      EXPECT_GT(copy, 0) << row.dump();
      EXPECT_NEAR(cell["copy_percent"].get<double>(), copy / time * 100, copy / time * 1e-7) << row.dump();
      EXPECT_FALSE(cell.contains("peak_percent")) << "no memcpy probe on a device: " << row.dump();
    }
  }
}

TEST_F(CliBenchTest, OpenclGroupIsComparedWithACopyKernelOnItsDevice) {
  expect_rows_compared_with_a_copy("opencl", "BACKPLANE_REQUIRE_OPENCL", R"("count": 1)", "copy kernel out[i] = in[i] on ");
}

TEST_F(CliBenchTest, VulkanGroupIsComparedWithVkCmdCopyBufferOnItsDevice) {
  expect_rows_compared_with_a_copy("vulkan", "BACKPLANE_REQUIRE_VULKAN", R"("count": 2, "options": {"ranks_per_device": 2})",
                                   "vkCmdCopyBuffer on ");
}

TEST_F(CliBenchTest, AcceptsNcclTestsTypeNames) {
  // Sizes in either case, as nccl-tests reads them.
  CommandResult ran = run_cli({"bench", "all_reduce", "-g", "2", "-d", "half", "-b", "1k", "-e", "1K", "-n", "2"});
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  const std::vector<std::vector<std::string>> rows = rows_of(ran.out);
  ASSERT_EQ(rows.size(), 1u) << ran.out;
  EXPECT_EQ(rows[0][1], "512") << ran.out;  // 1K of 2-byte elements
  EXPECT_EQ(rows[0][2], "f16") << ran.out;

  ran = run_cli({"bench", "reduce", "-g", "3", "-d", "bfloat16", "-o", "max", "-r", "2", "-b", "64", "-e", "64", "-n",
                 "1", "-w", "0", "--json"});
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  nlohmann::json out = parse_output(ran);
  EXPECT_EQ(out["dtype"], "bf16");
  EXPECT_EQ(out["root"], 2);
  ASSERT_EQ(out["rows"].size(), 1u);
  EXPECT_EQ(out["rows"][0]["root"], 2);
  EXPECT_EQ(out["rows"][0]["redop"], "max");
  EXPECT_EQ(out["rows"][0]["out_of_place"]["busbw"], out["rows"][0]["out_of_place"]["algbw"]);  // factor 1
}

TEST_F(CliBenchTest, RefusalIsExitOneWithTheStructuredError) {
  CommandResult ran =
      run_cli({"bench", "all_reduce", "-g", "2", "-d", "int32", "-o", "avg", "-b", "8", "-e", "8"}, StderrTo::out);
  EXPECT_EQ(ran.exit_code, 1) << ran.out;
  EXPECT_NE(ran.out.find("refused: "), std::string::npos) << ran.out;
  EXPECT_NE(ran.out.find("  code: UNSUPPORTED_REDUCE_OP"), std::string::npos) << ran.out;
  EXPECT_NE(ran.out.find("  hint: "), std::string::npos) << ran.out;
  EXPECT_TRUE(rows_of(ran.out).empty()) << ran.out;  // nothing ran
  EXPECT_EQ(ran.out.find("# memory bandwidth probe"), std::string::npos) << ran.out;  // nor was probed

  ran = run_cli({"bench", "all_reduce", "-g", "2", "-d", "int32", "-o", "avg", "-b", "8", "-e", "8", "--json"});
  EXPECT_EQ(ran.exit_code, 1) << ran.out;
  nlohmann::json out = parse_output(ran);
  EXPECT_EQ(out["refused"]["code"], "UNSUPPORTED_REDUCE_OP") << out.dump(2);
  EXPECT_TRUE(out["rows"].empty());
}

TEST_F(CliBenchTest, BadNamesAreUsageErrorsWithASuggestion) {
  CommandResult ran = run_cli({"bench", "all_reduce", "-d", "floot"}, StderrTo::out);
  EXPECT_EQ(ran.exit_code, 2) << ran.out;
  EXPECT_NE(ran.out.find("unknown element type 'floot'; did you mean 'float'?"), std::string::npos) << ran.out;

  ran = run_cli({"bench", "all_reduc"}, StderrTo::out);
  EXPECT_EQ(ran.exit_code, 2) << ran.out;
  EXPECT_NE(ran.out.find("did you mean 'all_reduce'?"), std::string::npos) << ran.out;

  ran = run_cli({"bench", "all_reduce", "-o", "summ"}, StderrTo::out);
  EXPECT_EQ(ran.exit_code, 2) << ran.out;
  EXPECT_NE(ran.out.find("did you mean 'sum'?"), std::string::npos) << ran.out;

  EXPECT_EQ(run_cli({"bench", "all_reduce", "-b", "1M", "-e", "1K"}, StderrTo::discard).exit_code, 2);
  EXPECT_EQ(run_cli({"bench", "all_reduce", "-b", "lots"}, StderrTo::discard).exit_code, 2);
  EXPECT_EQ(run_cli({"bench", "reduce", "-g", "2", "-r", "2"}, StderrTo::discard).exit_code, 2);
}

// -g N asks the cpu plugin for N devices; past what it takes, its own
// reason is the error (not "no plugin provides cpu").
TEST_F(CliBenchTest, DevicesThePluginRefusesGiveItsReason) {
  CommandResult ran = run_cli({"bench", "all_reduce", "-g", "100000"}, StderrTo::out);
  EXPECT_EQ(ran.exit_code, 1) << ran.out;
  EXPECT_NE(ran.out.find(R"(error: device 'cpu:0' does not exist: plugin 'cpu' configure failed: cpu options: )"
                         R"("devices" is 100000, outside 1..1024)"),
            std::string::npos)
      << ran.out;
}

// Each timed call keeps its time: -n is bounded (as a fleet's iterations).
TEST_F(CliBenchTest, IterationsAreBounded) {
  CommandResult ran = run_cli({"bench", "all_reduce", "-n", "1000000000"}, StderrTo::out);
  EXPECT_EQ(ran.exit_code, 2) << ran.out;
  EXPECT_NE(ran.out.find("-n 1000000000: at most 1000000 timed iterations per size and mode"), std::string::npos)
      << ran.out;
  ran = run_cli({"bench", "all_reduce", "-w", "1000000001"}, StderrTo::out);
  EXPECT_EQ(ran.exit_code, 2) << ran.out;
  EXPECT_NE(ran.out.find("-w 1000000001: at most 1000000 warmup iterations per size and mode"), std::string::npos)
      << ran.out;
}

TEST_F(CliBenchTest, AllRunsEveryCollectiveOfTheGroup) {
  CommandResult ran = run_cli({"bench", "all", "-g", "3", "-b", "8", "-e", "4K", "-f", "8", "-n", "2", "-w", "1"});
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  for (const char *header : {"# all_reduce(f32, sum) on group cpu:0..2", "# reduce(f32, sum) on group",
                             "# broadcast(f32) on group", "# all_gather(f32) on group",
                             "# reduce_scatter(f32, sum) on group", "# gather(f32) on group", "# scatter(f32) on group",
                             "# all_to_all(f32) on group"})
    EXPECT_NE(ran.out.find(header), std::string::npos) << header << "\n" << ran.out;
  size_t footers = 0;
  for (size_t at = ran.out.find("# Out of bounds values : 0 OK\n"); at != std::string::npos;
       at = ran.out.find("# Out of bounds values : 0 OK\n", at + 1))
    ++footers;
  EXPECT_EQ(footers, 8u) << ran.out;
  for (const std::vector<std::string> &words : rows_of(ran.out)) {
    ASSERT_EQ(words.size(), kCpuRowWords) << ran.out;
    for (size_t column : kWrongColumns) EXPECT_EQ(words[column], "0") << ran.out;
  }
  EXPECT_NE(ran.out.find("# 8 collectives run, 0 refused: 0 out of bounds values, 0 errors: OK\n"), std::string::npos)
      << ran.out;

  ran = run_cli({"bench", "all", "-g", "3", "-b", "96", "-e", "96", "-n", "1", "-w", "0", "--json"});
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  nlohmann::json out = parse_output(ran);
  ASSERT_TRUE(out.is_array()) << out.dump(2);
  ASSERT_EQ(out.size(), 8u) << out.dump(2);
  for (const nlohmann::json &result : out) {
    ASSERT_EQ(result["rows"].size(), 1u) << result.dump(2);
    // 96 bytes of f32 is 8 elements per block for the collectives whose
    // largest buffer holds a block per rank: 8 x 3 = 24 elements, 96 bytes.
    EXPECT_EQ(result["rows"][0]["size"], 96) << result.dump(2);
  }
}

}  // namespace
}  // namespace backplane::testing
