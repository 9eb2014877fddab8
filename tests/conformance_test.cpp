// The conformance suite (tools/conformance) over every plugin this repository
// builds and over the mock fixtures, checked against what each declares; a
// refused file; and `backplane conform`'s exit codes.
#include "conformance.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "test_support.hpp"

namespace backplane::testing {
namespace {

using conformance::ConformanceOptions;
using conformance::ConformanceReport;
using conformance::ConformanceRow;

// The full suite: a few seconds per plugin in an optimised build, about
// 15 s for the cpu plugin under AddressSanitizer.
ConformanceReport conform(const std::filesystem::path &file) { return conformance::run_conformance(file.string()); }

// Every failure line of the report, for a failed expectation's message.
std::string failures(const ConformanceReport &report) {
  std::string text;
  for (const ConformanceRow &row : report.rows)
    for (const std::string &failure : row.failures)
      text += row.kind + " " + row.collective + " " + row.dtype + " " + row.op + " " + row.mode + ": " + failure + "\n";
  return text;
}

std::string row_name(const ConformanceRow &row) {
  return row.kind + " " + row.collective + " " + row.dtype + " " + row.op + " " + row.mode;
}

const ConformanceRow *find_row(const ConformanceReport &report, const std::string &collective, const std::string &dtype,
                               const std::string &op, const std::string &mode) {
  for (const ConformanceRow &row : report.rows)
    if (row.collective == collective && row.dtype == dtype && row.op == op && row.mode == mode) return &row;
  return nullptr;
}

// What the plugin file declares, read from a host of its own the way any
// application would: (kind, collective, dtype, op, mode) as the rows name them.
std::set<std::string> declared_rows(const std::filesystem::path &file) {
  HostOptions options;
  options.flags = BP_HOST_IGNORE_ENV_PATH | BP_HOST_IGNORE_INSTALL_PATH;
  Host host = Host::create(options).value();
  host.load_plugin(file.string()).value();
  std::set<std::string> rows;
  for (const CapabilityInfo &cap : host.capabilities()) {
    const auto collective = static_cast<bp_collective>(cap.collective);
    const bool reduces = collective == BP_ALL_REDUCE || collective == BP_REDUCE || collective == BP_REDUCE_SCATTER;
    if (collective == BP_BARRIER) {
      rows.insert(std::string(cap.device_kind) + " barrier - - -");
      continue;
    }
    for (uint32_t d = 0; d < BP_DTYPE_COUNT; ++d) {
      if (!(cap.dtypes & (1u << d))) continue;
      for (uint32_t o = 0; o < BP_REDUCE_OP_COUNT; ++o) {
        if (reduces && !(cap.reduce_ops & (1u << o))) continue;
        if (!reduces && o > 0) break;
        for (const auto &[flag, mode] :
             {std::pair{BP_CAPABILITY_OUT_OF_PLACE, "out-of-place"}, std::pair{BP_CAPABILITY_IN_PLACE, "in-place"}})
          if (cap.flags & flag)
            rows.insert(std::string(cap.device_kind) + " " + bp_collective_name(collective) + " " +
                        bp_dtype_name(static_cast<bp_dtype>(d)) + " " +
                        (reduces ? bp_reduce_op_name(static_cast<bp_reduce_op>(o)) : "-") + " " + mode);
      }
    }
  }
  return rows;
}

// The suite's promise for a plugin whose every device declares what its
// kind does: declared rows pass on every group and skip nothing; the others
// run nothing and are skipped once per group, with a reason.
void expect_conforms_as_declared(const std::filesystem::path &file) {
  SCOPED_TRACE(file.string());
  const ConformanceReport report = conform(file);
  ASSERT_TRUE(report.refused_code.empty()) << report.refused_code << ": " << report.refused_message;
  EXPECT_EQ(report.failed, 0u) << failures(report);
  EXPECT_TRUE(report.ok());
  EXPECT_GT(report.passed, 0u);
  ASSERT_FALSE(report.kinds.empty());
  const std::set<std::string> declared = declared_rows(file);
  size_t undeclared_rows = 0, device_skips = 0;
  for (const ConformanceRow &row : report.rows) {
    SCOPED_TRACE(row_name(row));
    ASSERT_NE(row.collective, "setup") << row.note();
    size_t groups = 0;
    for (const conformance::KindSummary &kind : report.kinds)
      if (kind.kind == row.kind) groups = kind.groups.size();
    if (declared.count(row_name(row))) {
      // The kind declares it; a device may still declare less (PoCL has no
      // f16), which is the only reason a declared row may be skipped.
      EXPECT_GE(row.passed + row.skipped, groups);
      if (row.skipped != 0) {
        const bool narrower_code = row.skip_reason.rfind("UNSUPPORTED_DEVICE: ", 0) == 0 ||
                                   row.skip_reason.rfind("UNSUPPORTED_DTYPE: ", 0) == 0 ||
                                   row.skip_reason.rfind("UNSUPPORTED_REDUCE_OP: ", 0) == 0;
        EXPECT_TRUE(narrower_code) << row.skip_reason;
        EXPECT_NE(row.skip_reason.find(" declares less than its kind"), std::string::npos) << row.skip_reason;
      }
      device_skips += row.skipped;
    } else {
      ++undeclared_rows;
      EXPECT_EQ(row.passed, 0u);
      EXPECT_EQ(row.skipped, groups);
      EXPECT_EQ(row.skip_reason.rfind("UNSUPPORTED_", 0), 0u) << row.skip_reason;
    }
  }
  if (report.kinds.size() == 1) {
    EXPECT_EQ(report.skipped, undeclared_rows * report.kinds[0].groups.size() + device_skips);
  }
}

// ---- every plugin this repository builds ------------------------------

TEST(Conformance, EveryBuiltPluginConforms) {
  size_t plugins = 0;
  for (const auto &entry : std::filesystem::directory_iterator(BACKPLANE_TEST_PLUGIN_DIR)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("libbackplane_", 0) != 0 || entry.path().extension() != ".so") continue;
    // A layer-only plugin (trace, validate) or a transport (mpi) has no
    // device to conform on; layers_test runs collectives under each layer,
    // tests/mpi every collective across processes.
    Host probe = make_host({});
    ASSERT_TRUE(probe.load_plugin(entry.path().string()));
    const std::vector<PluginInfo> loaded = probe.plugins();
    ASSERT_EQ(loaded.size(), 1u);
    if (loaded[0].device_kinds.empty()) {
      EXPECT_TRUE(!loaded[0].layer_kinds.empty() || !loaded[0].transport.empty())
          << name << " declares neither device kinds, layer kinds nor a transport";
      continue;
    }
    ++plugins;
    expect_conforms_as_declared(entry.path());
  }
  EXPECT_GE(plugins, 1u) << "no plugins in " << BACKPLANE_TEST_PLUGIN_DIR;
}

// The full suite ran on the cpu plugin above; the skips are the same in
// the quick one.
TEST(Conformance, CpuPluginSkipsIntegerAvgOnly) {
  ConformanceOptions options;
  options.quick = true;
  const ConformanceReport report = conformance::run_conformance(plugin_path("cpu").string(), options);
  ASSERT_TRUE(report.refused_code.empty()) << report.refused_message;
  EXPECT_EQ(report.plugin, "cpu");
  EXPECT_EQ(report.failed, 0u) << failures(report);
  ASSERT_EQ(report.kinds.size(), 1u);
  const size_t groups = report.kinds[0].groups.size();
  EXPECT_EQ(report.kinds[0].groups,
            (std::vector<std::vector<std::string>>{{"cpu:0", "cpu:1"}, {"cpu:0", "cpu:1", "cpu:2", "cpu:3"}}));
  // Undeclared: avg of the 6 integer types, for 3 reducing collectives, 2 modes.
  EXPECT_EQ(report.skipped, 6u * 3u * 2u * groups);
  for (const ConformanceRow &row : report.rows) {
    if (row.skipped == 0) continue;
    EXPECT_EQ(row.op, "avg") << row_name(row);
    EXPECT_TRUE(row.dtype.front() == 'i' || row.dtype.front() == 'u') << row_name(row);
    EXPECT_EQ(row.skip_reason, "UNSUPPORTED_REDUCE_OP: no avg for " + row.collective + " of " + row.dtype);
  }
  const ConformanceRow *barrier = find_row(report, "barrier", "-", "-", "-");
  ASSERT_NE(barrier, nullptr);
  EXPECT_EQ(barrier->passed, groups);
}

// ---- the fixtures ----------------------------------------------------

TEST(Conformance, GoodMockFixtureConforms) { expect_conforms_as_declared(fixture_path("good")); }

// partial: devices narrower than their kind by dtype, by op and by an empty
// op mask. The suite's expectations must match the host's answers exactly
// (a mismatch is a failure), and each narrowing shows as its own code.
TEST(Conformance, PartialFixtureSkipsWithTheCodeOfWhatEachDeviceLacks) {
  const ConformanceReport report = conform(fixture_path("partial"));
  ASSERT_TRUE(report.refused_code.empty()) << report.refused_message;
  EXPECT_EQ(report.failed, 0u) << failures(report);
  const ConformanceRow *i32_sum = find_row(report, "all_reduce", "i32", "sum", "out-of-place");
  ASSERT_NE(i32_sum, nullptr);
  EXPECT_GT(i32_sum->skipped, 0u);
  EXPECT_EQ(i32_sum->skip_reason.rfind("UNSUPPORTED_DTYPE: partial:1 declares less than its kind", 0), 0u)
      << i32_sum->skip_reason;
  const ConformanceRow *f32_max = find_row(report, "all_reduce", "f32", "max", "out-of-place");
  ASSERT_NE(f32_max, nullptr);
  EXPECT_EQ(f32_max->skip_reason.rfind("UNSUPPORTED_REDUCE_OP: partial:2 declares less than its kind", 0), 0u)
      << f32_max->skip_reason;
  EXPECT_GT(f32_max->passed, 0u);  // groups without partial:2 and partial:3 run it
}

// narrow: all_reduce f32 sum out of place only; narrow:3 declares nothing.
TEST(Conformance, NarrowFixtureSkipsWhatItDoesNotDeclare) {
  const ConformanceReport report = conform(fixture_path("narrow"));
  ASSERT_TRUE(report.refused_code.empty()) << report.refused_message;
  EXPECT_EQ(report.failed, 0u) << failures(report);
  EXPECT_TRUE(report.ok());
  ASSERT_EQ(report.kinds.size(), 1u);
  const conformance::KindSummary &kind = report.kinds[0];
  EXPECT_EQ(kind.kind, "narrow");
  EXPECT_EQ(kind.devices, 4u);
  // The device that declares less than its kind gets a group of its own.
  ASSERT_FALSE(kind.groups.empty());
  EXPECT_EQ(kind.groups.back(), std::vector<std::string>{"narrow:3"});
  size_t with_narrow3 = 0;
  for (const std::vector<std::string> &group : kind.groups)
    with_narrow3 += std::find(group.begin(), group.end(), "narrow:3") != group.end();
  const size_t groups = kind.groups.size(), without_narrow3 = groups - with_narrow3;
  ASSERT_GT(without_narrow3, 0u);

  const ConformanceRow *declared = find_row(report, "all_reduce", "f32", "sum", "out-of-place");
  ASSERT_NE(declared, nullptr);
  EXPECT_GE(declared->passed, without_narrow3);
  EXPECT_EQ(declared->skipped, with_narrow3);
  EXPECT_EQ(declared->skip_reason, "UNSUPPORTED_DEVICE: narrow:3 declares less than its kind");

  const ConformanceRow *in_place = find_row(report, "all_reduce", "f32", "sum", "in-place");
  ASSERT_NE(in_place, nullptr);
  EXPECT_EQ(in_place->passed, 0u);
  EXPECT_EQ(in_place->skipped, groups);
  EXPECT_EQ(in_place->skip_reason, "UNSUPPORTED_DEVICE: all_reduce is not declared in place");

  auto reason = [&](const std::string &collective, const std::string &dtype, const std::string &op) {
    const ConformanceRow *row = find_row(report, collective, dtype, op, collective == "barrier" ? "-" : "out-of-place");
    EXPECT_NE(row, nullptr) << collective << " " << dtype << " " << op;
    return row ? row->skip_reason : std::string();
  };
  EXPECT_EQ(reason("all_reduce", "f32", "max"), "UNSUPPORTED_REDUCE_OP: no max for all_reduce of f32");
  EXPECT_EQ(reason("all_reduce", "f64", "sum"), "UNSUPPORTED_DTYPE: no f64 for all_reduce");
  EXPECT_EQ(reason("broadcast", "f32", "-"), "UNSUPPORTED_COLLECTIVE: narrow declares no broadcast");
  EXPECT_EQ(reason("barrier", "-", "-"), "UNSUPPORTED_COLLECTIVE: narrow declares no barrier");

  // Everything else is skipped once per group; nothing else passes.
  for (const ConformanceRow &row : report.rows) {
    if (&row == declared) continue;
    EXPECT_EQ(row.passed, 0u) << row_name(row);
    EXPECT_EQ(row.skipped, groups) << row_name(row);
  }
  EXPECT_EQ(report.skipped, report.rows.size() * groups - without_narrow3);
  EXPECT_EQ(report.passed, declared->passed);
}

// ---- refused files ---------------------------------------------------

TEST(Conformance, GarbageFileIsOneFailedLoad) {
  const ConformanceReport report = conform(fixture_path("garbage"));
  EXPECT_EQ(report.refused_code, "PLUGIN_LOAD");
  EXPECT_FALSE(report.refused_message.empty());
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(report.failed, 1u);
  EXPECT_EQ(report.passed + report.skipped, 0u);
  ASSERT_EQ(report.rows.size(), 1u);
  EXPECT_EQ(report.rows[0].collective, "load");
  EXPECT_EQ(report.rows[0].note().rfind("PLUGIN_LOAD: ", 0), 0u) << report.rows[0].note();

  const nlohmann::json json = nlohmann::json::parse(conformance::to_json(report));
  EXPECT_EQ(json["refused"]["code"], "PLUGIN_LOAD");
  EXPECT_EQ(json["totals"]["failed"], 1);
  EXPECT_EQ(json["ok"], false);
}

TEST(Conformance, MissingFileIsAFailedLoad) {
  TempDir dir;
  const ConformanceReport report = conform(dir.path() / "libbackplane_missing.so");
  EXPECT_EQ(report.refused_code, "PLUGIN_LOAD");
  EXPECT_EQ(report.failed, 1u);
}

// ---- `backplane conform` ---------------------------------------------

TEST(ConformCommand, NarrowFixturePassesWithSkips) {
  const CommandResult ran = run_cli({"conform", "--quick", fixture_path("narrow").string()});
  EXPECT_EQ(ran.exit_code, 0) << ran.out;
  EXPECT_NE(ran.out.find("UNSUPPORTED_DEVICE: narrow:3 declares less than its kind"), std::string::npos) << ran.out;
  EXPECT_NE(ran.out.find(" 0 failed"), std::string::npos) << ran.out;
}

TEST(ConformCommand, JsonMatchesTheLibrary) {
  const CommandResult ran = run_cli({"conform", "--quick", "--json", fixture_path("good").string()});
  ASSERT_EQ(ran.exit_code, 0) << ran.out;
  const nlohmann::json json = nlohmann::json::parse(ran.out, nullptr, false);
  ASSERT_FALSE(json.is_discarded()) << ran.out;
  EXPECT_EQ(json["plugin"], "mock");
  EXPECT_EQ(json["ok"], true);
  EXPECT_EQ(json["totals"]["failed"], 0);
  EXPECT_GT(json["totals"]["passed"].get<size_t>(), 0u);
  EXPECT_GT(json["totals"]["skipped"].get<size_t>(), 0u);
}

TEST(ConformCommand, RefusedFileExitsOneAndBadUsageTwo) {
  EXPECT_EQ(run_cli({"conform", fixture_path("garbage").string()}, StderrTo::discard).exit_code, 1);
  EXPECT_EQ(run_cli({"conform", "/nonexistent/libbackplane_none.so"}, StderrTo::discard).exit_code, 1);
  EXPECT_EQ(run_cli({"conform"}, StderrTo::discard).exit_code, 2);
}

}  // namespace
}  // namespace backplane::testing
