// The `backplane` CLI: its reference (generator, layouts, collectives,
// comparison) directly, then the built tool end to end as a subprocess,
// checking its output (parsed as JSON where it prints JSON) and exit codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "backplane/plugin.h"  // the plugin ABI the in-tree plugins are built with
#include "reference.hpp"
#include "test_support.hpp"

namespace backplane::testing {
namespace {

using cli::CollectiveCase;

// ---- the reference ----------------------------------------------------

TEST(CliReference, HalfConversionsRoundTripAndRoundToNearestEven) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const bool nan = (h & 0x7C00) == 0x7C00 && (h & 0x03FF);
    if (nan) continue;
    ASSERT_EQ(cli::float_to_half(cli::half_to_float(h)), h) << std::hex << bits;
    ASSERT_EQ(cli::float_to_bfloat16(cli::bfloat16_to_float(h)), h) << std::hex << bits;
  }
  EXPECT_EQ(cli::float_to_half(1.0f + 1.0f / 2048), 0x3C00);     // tie: down to even
  EXPECT_EQ(cli::float_to_half(1.0f + 3.0f / 2048), 0x3C02);     // tie: up to even
  EXPECT_EQ(cli::float_to_half(65520.0f), 0x7C00);               // rounds past the largest half
  EXPECT_EQ(cli::float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(cli::float_to_bfloat16(1.0f + 1.0f / 256), 0x3F80);  // tie: down to even
  EXPECT_EQ(cli::float_to_bfloat16(1.0f + 3.0f / 256), 0x3F82);  // tie: up to even
}

// The generator's promise: every sum stays exact, every avg is a whole
// number, every product is ±1 or ±2, for any group size.
TEST(CliReference, GeneratedValuesKeepEveryReductionExact) {
  const std::map<bp_dtype, int64_t> exact = {{BP_F16, 2048}, {BP_BF16, 256}, {BP_F32, 1 << 24},
                                             {BP_U8, 255},   {BP_I8, 127},   {BP_I32, INT32_MAX}};
  for (const auto &[dtype, limit] : exact)
    for (size_t ranks : {1, 2, 3, 4, 7, 16})
      for (bp_reduce_op op : {BP_SUM, BP_PROD, BP_MIN, BP_MAX, BP_AVG}) {
        CollectiveCase c{BP_ALL_REDUCE, dtype, op, 500, ranks, 0, false};
        for (size_t i = 0; i < c.count; ++i) {
          int64_t sum = 0, product = 1;
          for (size_t r = 0; r < ranks; ++r) {
            int64_t v = cli::input_value(c, r, i);
            if (dtype == BP_U8) {
              ASSERT_GE(v, 0);
            }
            sum += v;
            if (op == BP_PROD) product *= v;  // other ops' inputs may overflow a product
          }
          SCOPED_TRACE(std::string(bp_dtype_name(dtype)) + " " + bp_reduce_op_name(op) + " ranks " +
                       std::to_string(ranks) + " element " + std::to_string(i));
          ASSERT_LE(std::abs(sum), limit);
          if (op == BP_AVG) {
            ASSERT_EQ(sum % static_cast<int64_t>(ranks), 0);
          }
          if (op == BP_PROD) {
            ASSERT_LE(std::abs(product), 2);
          }
        }
      }
}

TEST(CliReference, InPlaceAppliesToRanksThatUseBothSides) {
  CollectiveCase gather{BP_GATHER, BP_F32, BP_SUM, 10, 4, 2, true};
  cli::RankLayout root = cli::rank_layout(gather, 2), other = cli::rank_layout(gather, 1);
  EXPECT_TRUE(root.in_place);
  EXPECT_EQ(root.send, 40u);
  EXPECT_EQ(root.input_offset, 20u);  // its own block of the gathered result
  EXPECT_EQ(root.result, 40u);
  EXPECT_FALSE(other.in_place);
  EXPECT_TRUE(other.has_send);
  EXPECT_FALSE(other.has_recv);  // NULL: non-root ranks receive nothing
  EXPECT_EQ(other.input_offset, 0u);

  CollectiveCase reduce_scatter{BP_REDUCE_SCATTER, BP_I32, BP_SUM, 10, 4, 0, true};
  cli::RankLayout rank3 = cli::rank_layout(reduce_scatter, 3);
  EXPECT_TRUE(rank3.in_place);
  EXPECT_EQ(rank3.result_offset, 30u);  // the result lands in block 3 of send
  EXPECT_EQ(rank3.result, 10u);
}

TEST(CliReference, ReferenceComputesEachCollective) {
  auto bytes = [](std::vector<int32_t> values) {
    std::vector<std::byte> out(values.size() * 4);
    std::memcpy(out.data(), values.data(), out.size());
    return out;
  };
  // Two ranks, two elements per block.
  std::vector<std::vector<std::byte>> in = {bytes({1, 2, 3, 4}), bytes({10, 20, 30, 40})};
  auto result = [&](bp_collective collective, bp_reduce_op op, size_t rank) {
    CollectiveCase c{collective, BP_I32, op, 2, 2, 0, false};
    std::vector<std::byte> got = cli::reference_result(c, in, rank);
    std::vector<int32_t> values(got.size() / 4);
    if (!got.empty()) std::memcpy(values.data(), got.data(), got.size());  // a non-root gets nothing
    return values;
  };
  EXPECT_EQ(result(BP_ALL_REDUCE, BP_SUM, 1), (std::vector<int32_t>{11, 22}));
  EXPECT_EQ(result(BP_ALL_REDUCE, BP_MAX, 0), (std::vector<int32_t>{10, 20}));
  EXPECT_EQ(result(BP_ALL_REDUCE, BP_AVG, 0), (std::vector<int32_t>{5, 11}));  // truncated toward zero
  EXPECT_EQ(result(BP_REDUCE_SCATTER, BP_PROD, 1), (std::vector<int32_t>{90, 160}));
  EXPECT_EQ(result(BP_REDUCE, BP_SUM, 1), (std::vector<int32_t>{}));  // not the root
  EXPECT_EQ(result(BP_ALL_GATHER, BP_SUM, 1), (std::vector<int32_t>{1, 2, 10, 20}));
  EXPECT_EQ(result(BP_SCATTER, BP_SUM, 1), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(result(BP_ALL_TO_ALL, BP_SUM, 0), (std::vector<int32_t>{1, 2, 10, 20}));
  EXPECT_EQ(result(BP_ALL_TO_ALL, BP_SUM, 1), (std::vector<int32_t>{3, 4, 30, 40}));
}

TEST(CliReference, CompareCountsWrongElementsAndNamesTheFirst) {
  CollectiveCase c{BP_ALL_REDUCE, BP_BF16, BP_SUM, 64, 4, 0, false};
  std::vector<std::vector<std::byte>> in;
  for (size_t r = 0; r < 4; ++r) in.push_back(cli::make_contribution(c, r));
  std::vector<std::byte> expected = cli::reference_result(c, in, 0), got = expected;
  EXPECT_EQ(cli::compare(BP_BF16, got, expected).wrong, 0u);
  // The lowest mantissa bit of elements 7 and 9 (little-endian): a
  // different value whatever the element was, zero included.
  got[2 * 7] ^= std::byte{0x01};
  got[2 * 9] ^= std::byte{0x01};
  cli::Comparison comparison = cli::compare(BP_BF16, got, expected);
  EXPECT_EQ(comparison.wrong, 2u);
  EXPECT_EQ(comparison.first_index, 7u);
  EXPECT_NE(comparison.got, comparison.expected);
  // Floats compare by value: -0 equals +0.
  const uint16_t zeros[2] = {0x0000, 0x8000};
  EXPECT_EQ(
      cli::compare(BP_BF16, std::as_bytes(std::span(zeros).first(1)), std::as_bytes(std::span(zeros).last(1))).wrong,
      0u);
  // A short result counts what is missing as wrong.
  EXPECT_EQ(cli::compare(BP_BF16, std::span(expected).first(2 * 60), expected).wrong, 4u);
}

// ---- the tool, end to end ---------------------------------------------

nlohmann::json parse(const CommandResult &ran) {
  nlohmann::json parsed = nlohmann::json::parse(ran.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(parsed.is_discarded()) << "not JSON:\n" << ran.out;
  return parsed;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(BACKPLANE_TEST_CLI))
        << BACKPLANE_TEST_CLI << " is missing: build the backplane_cli target";
  }
};

TEST_F(CliTest, PluginsJsonListsLoadedAndRefusedFiles) {
  TempDir dir;
  dir.copy_in(plugin_path("cpu"));
  dir.write_file("libbackplane_bogus.so", "this is not an ELF file, just text long enough to be read\n");
  CommandResult ran = run_cli({"--only-plugin-dirs", "--plugin-dir", dir.path().string(), "plugins", "--json"});
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  nlohmann::json out = parse(ran);

  ASSERT_EQ(out["loaded"].size(), 1u) << out.dump(2);
  const nlohmann::json &cpu = out["loaded"][0];
  EXPECT_EQ(cpu["name"], "cpu");
  EXPECT_EQ(cpu["abi"], std::to_string(BP_PLUGIN_ABI_MAJOR) + "." + std::to_string(BP_PLUGIN_ABI_MINOR));
  EXPECT_EQ(cpu["kind_status"], nlohmann::json::object()) << "the cpu kind always has its devices";
  EXPECT_EQ(cpu["device_kinds"], nlohmann::json::array({"cpu"}));
  EXPECT_EQ(std::filesystem::path(cpu["file"].get<std::string>()).parent_path(), dir.path());
  EXPECT_FALSE(cpu["version"].get<std::string>().empty());

  ASSERT_EQ(out["refused"].size(), 1u) << out.dump(2);
  const nlohmann::json &bogus = out["refused"][0];
  EXPECT_EQ(bogus["code"], "PLUGIN_LOAD");
  EXPECT_EQ(std::filesystem::path(bogus["file"].get<std::string>()).filename(), "libbackplane_bogus.so");
  // The host's ELF check refuses it before the system loader sees it.
  std::string message = bogus["message"].get<std::string>();
  EXPECT_NE(message.find("not an ELF file (no ELF magic at its start)"), std::string::npos) << message;
}

TEST_F(CliTest, PluginsTableNamesTheRefusedFileAndItsCode) {
  TempDir dir;
  dir.copy_in(plugin_path("cpu"));
  dir.write_file("libbackplane_bogus.so", "garbage");
  CommandResult ran = run_cli({"--only-plugin-dirs", "--plugin-dir", dir.path().string(), "plugins"});
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  EXPECT_NE(ran.out.find("libbackplane_cpu.so"), std::string::npos) << ran.out;
  EXPECT_NE(ran.out.find("libbackplane_bogus.so"), std::string::npos) << ran.out;
  EXPECT_NE(ran.out.find("PLUGIN_LOAD"), std::string::npos) << ran.out;
}

TEST_F(CliTest, FindsTheBuiltPluginsWithNoFlags) {
  CommandResult ran = run_cli({"plugins", "--json"});
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  nlohmann::json out = parse(ran);
  bool cpu = false;
  for (const nlohmann::json &plugin : out["loaded"]) cpu |= plugin["name"] == "cpu";
  EXPECT_TRUE(cpu) << out.dump(2);
}

TEST_F(CliTest, DevicesJsonListsCpuDevices) {
  CommandResult ran = run_cli({"devices", "--json"});
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  nlohmann::json out = parse(ran);
  std::vector<std::string> cpus;
  for (const nlohmann::json &device : out)
    if (device["kind"] == "cpu") {
      cpus.push_back(device["name"]);
      EXPECT_EQ(device["plugin"], "cpu");
      EXPECT_EQ(device["flags"], nlohmann::json::array({"host-addressable"}));
    }
  ASSERT_GE(cpus.size(), 4u) << out.dump(2);
  for (size_t i = 0; i < cpus.size(); ++i) EXPECT_EQ(cpus[i], "cpu:" + std::to_string(i));
}

TEST_F(CliTest, PluginOptionsReachThePlugin) {
  CommandResult ran = run_cli({"--plugin-options", R"({"cpu":{"devices":6}})", "devices", "--json"});
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  size_t cpus = 0;
  for (const nlohmann::json &device : parse(ran)) cpus += device["kind"] == "cpu";
  EXPECT_EQ(cpus, 6u) << ran.out;
}

TEST_F(CliTest, CapsJsonHasAllReduceF32Sum) {
  CommandResult ran = run_cli({"caps", "--json"});
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  bool found = false;
  for (const nlohmann::json &row : parse(ran))
    if (row["device_kind"] == "cpu" && row["collective"] == "all_reduce" && row["dtype"] == "f32") {
      found = true;
      EXPECT_EQ(row["plugin"], "cpu");
      EXPECT_NE(std::find(row["reduce_ops"].begin(), row["reduce_ops"].end(), "sum"), row["reduce_ops"].end())
          << row.dump();
      EXPECT_TRUE(row["in_place"].get<bool>() || row["out_of_place"].get<bool>()) << row.dump();
    }
  EXPECT_TRUE(found) << ran.out;
}

TEST_F(CliTest, CapsTableShowsEveryCollective) {
  CommandResult ran = run_cli({"caps"});
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  EXPECT_NE(ran.out.find("cpu (plugin cpu)"), std::string::npos) << ran.out;
  for (const char *collective : {"all_reduce", "reduce_scatter", "all_to_all", "barrier"})
    EXPECT_NE(ran.out.find(collective), std::string::npos) << collective << "\n" << ran.out;
}

TEST_F(CliTest, RunSweepChecksEveryCaseOnTheDefaultFleet) {
  CommandResult ran = run_cli({"run", "--sweep"});
  EXPECT_EQ(ran.exit_code, 0) << ran.out;
  EXPECT_NE(ran.out.find("fleet: cpu:0 cpu:1 cpu:2 cpu:3"), std::string::npos) << ran.out;
  EXPECT_EQ(ran.out.find("WRONG"), std::string::npos) << ran.out;
  // Rows for a reducing, a rooted and a gathering collective, each checked.
  for (const char *row : {"all_reduce", "reduce", "broadcast", "all_gather", "all_to_all"})
    EXPECT_NE(ran.out.find(row), std::string::npos) << row;
  size_t ok_rows = 0;
  for (size_t at = ran.out.find("  ok\n"); at != std::string::npos; at = ran.out.find("  ok\n", at + 1)) ++ok_rows;
  EXPECT_GT(ok_rows, 100u) << ran.out;
  EXPECT_NE(ran.out.find(" 0 wrong, 0 failed to run"), std::string::npos) << ran.out;
}

// With no fleet file, `run` runs the built-in configs/default.json
// (tests/cli_fleet_test.cpp runs fleet files).
TEST_F(CliTest, RunWithNoFileRunsTheBuiltInDefaultFleet) {
  CommandResult ran = run_cli({"run"});
  EXPECT_EQ(ran.exit_code, 0) << ran.out;
  EXPECT_NE(ran.out.find("# fleet: built-in default fleet"), std::string::npos) << ran.out;
  EXPECT_NE(ran.out.find("# all_reduce(f32, sum) on group all_cpu: cpu:0, cpu:1, cpu:2, cpu:3"), std::string::npos)
      << ran.out;
  EXPECT_EQ(ran.out.find("FAILED"), std::string::npos) << ran.out;
  EXPECT_NE(ran.out.find(" 0 out of bounds values, 0 errors: OK\n"), std::string::npos) << ran.out;
}

TEST_F(CliTest, RunSweepTakesNoFleetFileAndNoJson) {
  TempDir dir;
  auto fleet = dir.write_file("fleet.json", R"({"version": 1})");
  EXPECT_EQ(run_cli({"run", "--sweep", fleet.string()}).exit_code, 2);
  EXPECT_EQ(run_cli({"run", "--sweep", "--json"}).exit_code, 2);
}

TEST_F(CliTest, BadUsageExitsTwo) {
  EXPECT_EQ(run_cli({"frobnicate"}).exit_code, 2);
  EXPECT_EQ(run_cli({}).exit_code, 2);  // a subcommand is required
  EXPECT_EQ(run_cli({"plugins", "--no-such-flag"}).exit_code, 2);
  EXPECT_EQ(run_cli({"--plugin-options", "{bad", "plugins"}).exit_code, 2);
  EXPECT_EQ(run_cli({"--plugin-options", "[1,2]", "plugins"}).exit_code, 2);
}

TEST_F(CliTest, HelpExitsZero) {
  CommandResult ran = run_cli({"--help"});
  EXPECT_EQ(ran.exit_code, 0);
  EXPECT_NE(ran.out.find("plugins"), std::string::npos) << ran.out;
}

}  // namespace
}  // namespace backplane::testing
