// The `backplane` CLI: the reference it checks with (tools/reference:
// encodings, generator, layouts, collectives, comparison) directly, then
// the built tool end to end as a subprocess, checking its output (parsed
// as JSON where it prints JSON) and exit codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "backplane/plugin.h"  // the plugin ABI the in-tree plugins are built with
#include "backplane_reference/collective_reference.hpp"
#include "test_support.hpp"

namespace backplane::testing {
namespace {

namespace ref = backplane::reference;
using ref::CollectiveCase;

// ---- the reference ----------------------------------------------------

TEST(CliReference, HalfConversionsRoundTripAndRoundToNearestEven) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const bool nan = (h & 0x7C00) == 0x7C00 && (h & 0x03FF);
    if (nan) continue;
    ASSERT_EQ(ref::Half::encode(ref::Half::decode(h)), h) << std::hex << bits;
    ASSERT_EQ(ref::BFloat16::encode(ref::BFloat16::decode(h)), h) << std::hex << bits;
  }
  EXPECT_EQ(ref::Half::encode(1.0 + 1.0 / 2048), 0x3C00);       // tie: down to even
  EXPECT_EQ(ref::Half::encode(1.0 + 3.0 / 2048), 0x3C02);       // tie: up to even
  EXPECT_EQ(ref::Half::encode(65520.0), 0x7C00);                // rounds past the largest half
  EXPECT_EQ(ref::Half::encode(std::ldexp(1.0, -24)), 0x0001);   // smallest subnormal
  EXPECT_EQ(ref::BFloat16::encode(1.0 + 1.0 / 256), 0x3F80);    // tie: down to even
  EXPECT_EQ(ref::BFloat16::encode(1.0 + 3.0 / 256), 0x3F82);    // tie: up to even
}

// Element `index` of an array of `dtype`, as a double (exact for every
// value the generator makes but the widest integers').
double value_at(bp_dtype dtype, const std::vector<std::byte> &bytes, size_t index) {
  return ref::with_dtype(dtype, [&](auto traits) {
    using E = decltype(traits);
    if constexpr (E::is_float)
      return E::to_double(ref::load<E>(bytes.data(), index));
    else
      return static_cast<double>(ref::load<E>(bytes.data(), index));
  });
}

// The generator's promise: every float sum stays exact, every avg is a
// whole number, every float product is ±1, ±2 or ±0.5, for any group size.
TEST(CliReference, GeneratedValuesKeepEveryReductionExact) {
  const std::map<bp_dtype, double> exact = {{BP_F16, 2048}, {BP_BF16, 256},     {BP_F32, 1 << 24},
                                            {BP_F64, std::ldexp(1.0, 53)},     {BP_U8, 255},
                                            {BP_I8, 127},   {BP_I32, INT32_MAX}};
  for (const auto &[dtype, limit] : exact)
    for (size_t ranks : {1, 2, 3, 4, 7, 16})
      for (bp_reduce_op op : {BP_SUM, BP_PROD, BP_MIN, BP_MAX, BP_AVG}) {
        // Integers other than avg draw from their full range (below).
        if (!ref::is_float_dtype(dtype) && op != BP_AVG) continue;
        const CollectiveCase c{BP_ALL_REDUCE, dtype, op, 500, ranks, 0, false};
        std::vector<std::vector<std::byte>> in;
        for (size_t r = 0; r < ranks; ++r) in.push_back(ref::make_contribution(c, r));
        for (size_t i = 0; i < c.count; ++i) {
          double sum = 0, product = 1;
          for (size_t r = 0; r < ranks; ++r) {
            const double v = value_at(dtype, in[r], i);
            if (op == BP_SUM || op == BP_AVG) {
              ASSERT_EQ(v, std::trunc(v));
            }
            sum += v;  // whole numbers within 2^53: exact in double
            product *= v;
          }
          SCOPED_TRACE(std::string(bp_dtype_name(dtype)) + " " + bp_reduce_op_name(op) + " ranks " +
                       std::to_string(ranks) + " element " + std::to_string(i));
          if (op == BP_SUM || op == BP_AVG) {
            ASSERT_LE(std::fabs(sum), limit);
          }
          if (op == BP_AVG) {
            ASSERT_EQ(std::fmod(sum, static_cast<double>(ranks)), 0);
          }
          if (op == BP_PROD) {
            const double magnitude = std::fabs(product);
            ASSERT_TRUE(magnitude == 1 || magnitude == 2 || magnitude == 0.5) << product;
          }
        }
      }
}

// Integer sums use the type's whole range, so they wrap, and the reference
// wraps as the type's own arithmetic does; copies move bit patterns no
// arithmetic would keep (NaNs).
TEST(CliReference, IntegerSumsWrapAndCopiesCarryAnyBitPattern) {
  const CollectiveCase sum{BP_ALL_REDUCE, BP_I8, BP_SUM, 500, 4, 0, false};
  std::vector<std::vector<std::byte>> in;
  for (size_t r = 0; r < sum.ranks; ++r) in.push_back(ref::make_contribution(sum, r));
  const std::vector<std::byte> result = ref::reference_result(sum, in, 0);
  size_t wrapped = 0;
  for (size_t i = 0; i < sum.count; ++i) {
    int exact = 0;
    for (size_t r = 0; r < sum.ranks; ++r) exact += ref::load<ref::I8>(in[r].data(), i);
    wrapped += exact < INT8_MIN || exact > INT8_MAX;
    ASSERT_EQ(ref::load<ref::I8>(result.data(), i), static_cast<int8_t>(exact)) << "element " << i;
  }
  EXPECT_GT(wrapped, sum.count / 4);

  const CollectiveCase u64{BP_ALL_REDUCE, BP_U64, BP_MAX, 64, 2, 0, false};
  const std::vector<std::byte> wide = ref::make_contribution(u64, 1);
  size_t high = 0;
  for (size_t i = 0; i < u64.count; ++i) high += ref::load<ref::U64>(wide.data(), i) >> 63;
  EXPECT_GT(high, 0u) << "no u64 input uses the top bit";

  const CollectiveCase copy{BP_BROADCAST, BP_F32, BP_SUM, 4096, 2, 0, false};
  const std::vector<std::byte> moved = ref::make_contribution(copy, 0);
  size_t nans = 0;
  for (size_t i = 0; i < copy.count; ++i) nans += std::isnan(ref::load<ref::F32>(moved.data(), i));
  EXPECT_GT(nans, 0u) << "no copy input is a NaN";
  EXPECT_EQ(ref::result_equality(BP_BROADCAST), ref::Equality::bits);
  EXPECT_EQ(ref::result_equality(BP_REDUCE_SCATTER), ref::Equality::value);
}

TEST(CliReference, InPlaceAppliesToRanksThatUseBothSides) {
  CollectiveCase gather{BP_GATHER, BP_F32, BP_SUM, 10, 4, 2, true};
  ref::RankLayout root = ref::rank_layout(gather, 2), other = ref::rank_layout(gather, 1);
  EXPECT_TRUE(root.in_place);
  EXPECT_EQ(root.send, 40u);
  EXPECT_EQ(root.input_offset, 20u);  // its own block of the gathered result
  EXPECT_EQ(root.result, 40u);
  EXPECT_FALSE(other.in_place);
  EXPECT_TRUE(other.has_send);
  EXPECT_FALSE(other.has_recv);  // NULL: non-root ranks receive nothing
  EXPECT_EQ(other.input_offset, 0u);

  CollectiveCase reduce_scatter{BP_REDUCE_SCATTER, BP_I32, BP_SUM, 10, 4, 0, true};
  ref::RankLayout rank3 = ref::rank_layout(reduce_scatter, 3);
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
    std::vector<std::byte> got = ref::reference_result(c, in, rank);
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
  const auto value = ref::Equality::value, bits = ref::Equality::bits;
  CollectiveCase c{BP_ALL_REDUCE, BP_BF16, BP_SUM, 64, 4, 0, false};
  std::vector<std::vector<std::byte>> in;
  for (size_t r = 0; r < 4; ++r) in.push_back(ref::make_contribution(c, r));
  std::vector<std::byte> expected = ref::reference_result(c, in, 0), got = expected;
  EXPECT_EQ(ref::compare(BP_BF16, got, expected, value).wrong, 0u);
  // The lowest mantissa bit of elements 7 and 9 (little-endian): a
  // different value whatever the element was, zero included.
  got[2 * 7] ^= std::byte{0x01};
  got[2 * 9] ^= std::byte{0x01};
  ref::Comparison comparison = ref::compare(BP_BF16, got, expected, value);
  EXPECT_EQ(comparison.wrong, 2u);
  EXPECT_EQ(comparison.first_index, 7u);
  EXPECT_NE(comparison.got, comparison.expected);
  // By value, -0 equals +0 and a NaN any NaN; by bits, neither.
  const uint16_t zeros[2] = {0x0000, 0x8000}, nans[2] = {0x7FC0, 0x7FC1};
  for (const uint16_t *pair : {zeros, nans}) {
    const auto a = std::as_bytes(std::span(pair, 1)), b = std::as_bytes(std::span(pair + 1, 1));
    EXPECT_EQ(ref::compare(BP_BF16, a, b, value).wrong, 0u) << std::hex << pair[0];
    EXPECT_EQ(ref::compare(BP_BF16, a, b, bits).wrong, 1u) << std::hex << pair[0];
  }
  // A short result counts what is missing as wrong.
  EXPECT_EQ(ref::compare(BP_BF16, std::span(expected).first(2 * 60), expected, value).wrong, 4u);
}

TEST(CliReference, ValuesPrintAsNumbersAndFloatsWithTheirBits) {
  const uint16_t one = 0x3F80;
  const int8_t minus_three = -3;
  const uint64_t top = UINT64_MAX;
  EXPECT_EQ(ref::format_value(BP_BF16, reinterpret_cast<const std::byte *>(&one)), "1 (0x3f80)");
  EXPECT_EQ(ref::format_value(BP_I8, reinterpret_cast<const std::byte *>(&minus_three)), "-3");
  EXPECT_EQ(ref::format_value(BP_U64, reinterpret_cast<const std::byte *>(&top)), "18446744073709551615");
}

// ---- the tool, end to end ---------------------------------------------

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
  nlohmann::json out = parse_output(ran);

  ASSERT_EQ(out["loaded"].size(), 1u) << out.dump(2);
  const nlohmann::json &cpu = out["loaded"][0];
  EXPECT_EQ(cpu["name"], "cpu");
  EXPECT_EQ(cpu["abi"], std::to_string(BP_PLUGIN_ABI_MAJOR) + "." + std::to_string(BP_PLUGIN_ABI_MINOR));
  EXPECT_EQ(cpu["kind_status"], nlohmann::json::object()) << "the cpu kind always has its devices";
  EXPECT_EQ(cpu["device_kinds"], nlohmann::json::array({"cpu"}));
  EXPECT_EQ(std::filesystem::path(cpu["file"].get<std::string>()).parent_path(), dir.path());
  EXPECT_FALSE(cpu["version"].get<std::string>().empty());
  // The SHA-256 of the file as loaded, what bp_host_options.plugin_pins_json compares.
  const std::string sha256 = cpu["sha256"].get<std::string>();
  EXPECT_EQ(sha256.size(), 64u) << out.dump(2);
  EXPECT_EQ(sha256.find_first_not_of("0123456789abcdef"), std::string::npos) << sha256;

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
  nlohmann::json out = parse_output(ran);
  bool cpu = false;
  for (const nlohmann::json &plugin : out["loaded"]) cpu |= plugin["name"] == "cpu";
  EXPECT_TRUE(cpu) << out.dump(2);
}

TEST_F(CliTest, DevicesJsonListsCpuDevices) {
  CommandResult ran = run_cli({"devices", "--json"});
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  nlohmann::json out = parse_output(ran);
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
  for (const nlohmann::json &device : parse_output(ran)) cpus += device["kind"] == "cpu";
  EXPECT_EQ(cpus, 6u) << ran.out;
}

TEST_F(CliTest, CapsJsonHasAllReduceF32Sum) {
  CommandResult ran = run_cli({"caps", "--json"});
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  bool found = false;
  for (const nlohmann::json &row : parse_output(ran))
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

// A row's max_bytes (the limits fixture: all_reduce f32 at most 4096 bytes
// per buffer, i32 unlimited) as the number in JSON, 0 for no limit, and
// beside its collective in the table.
TEST_F(CliTest, CapsShowEachRowsMaxBytes) {
  TempDir dir;
  dir.copy_in(fixture_path("limits"));
  const std::vector<std::string> only_limits = {"--only-plugin-dirs", "--plugin-dir", dir.path().string(), "caps"};
  std::vector<std::string> json_args = only_limits;
  json_args.push_back("--json");
  CommandResult ran = run_cli(json_args);
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  std::map<std::string, uint64_t> all_reduce_limits;
  for (const nlohmann::json &row : parse_output(ran)) {
    ASSERT_TRUE(row["max_bytes"].is_number_unsigned()) << row.dump();
    if (row["device_kind"] == "limits" && row["collective"] == "all_reduce")
      all_reduce_limits[row["dtype"].get<std::string>()] = row["max_bytes"].get<uint64_t>();
  }
  EXPECT_EQ(all_reduce_limits, (std::map<std::string, uint64_t>{{"f32", 4096}, {"i32", 0}})) << ran.out;

  ran = run_cli(only_limits);
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  EXPECT_NE(ran.out.find("max bytes"), std::string::npos) << ran.out;
  const size_t row = ran.out.find("\nall_reduce ");
  ASSERT_NE(row, std::string::npos) << ran.out;
  const std::string line = ran.out.substr(row + 1, ran.out.find('\n', row + 1) - row - 1);
  EXPECT_NE(line.find("f32 4 KiB, i32 none"), std::string::npos) << line;
  // A collective the kind does not run has no limit to show.
  const size_t gather = ran.out.find("\nall_gather ");
  ASSERT_NE(gather, std::string::npos) << ran.out;
  const std::string gather_line = ran.out.substr(gather + 1, ran.out.find('\n', gather + 1) - gather - 1);
  EXPECT_EQ(gather_line.back(), '-') << gather_line;
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
