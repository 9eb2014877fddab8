// `backplane run [FLEET.json]`: brings a fleet up and runs each entry of its
// workload over its sizes, one row per size in nccl-tests' columns (out of
// place, then in place), each result checked against the reference
// (tools/reference); `--json` for machines. The runner and the rows are
// collective_rows.hpp, shared with `bench`. `run --sweep` is cmd_sweep.cpp.
#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli.hpp"
#include "collective_rows.hpp"

namespace backplane::cli {

using Json = nlohmann::ordered_json;

int run_run(const GlobalOptions &options, const std::string &fleet_file, bool json, bool sweep) {
  if (sweep) {
    if (!fleet_file.empty() || json) {
      print_usage_error(std::string("--sweep runs on cpu:0..cpu:3 and prints a table; it takes ") +
                        (json ? "no --json" : "no fleet file ('" + fleet_file + "')"));
      return kExitUsage;
    }
    return run_sweep(options);
  }
  std::optional<Error> failure;
  std::optional<Host> host = open_fleet(options, fleet_file, &failure);
  if (!host) {
    // Machines reading stdout get the refusal there too, with every problem.
    if (json) {
      Json out = {{"fleet", fleet_file.empty() ? Json(nullptr) : Json(fleet_file)},
                  {"ok", false},
                  {"error", failure ? Json::parse(failure->json(), nullptr, false) : Json(nullptr)}};
      // The path as given may not be UTF-8; the error's text already is.
      std::printf("%s\n", out.dump(2, ' ', false, Json::error_handler_t::replace).c_str());
    }
    return kExitFailure;
  }
  Result<std::vector<WorkloadInfo>> entries = host->workloads();
  if (!entries) {
    print_error(entries.error());
    return kExitFailure;
  }

  Json out_entries = Json::array();
  Tally total;
  size_t rows_run = 0;
  if (!json) std::printf("# fleet: %s\n", fleet_label(fleet_file).c_str());
  if (entries->empty() && !json) std::printf("# the fleet has no workload: nothing to run\n");

  for (const WorkloadInfo &entry : *entries) {
    GroupView group = entry.group;
    Json out = {{"group", std::string(group.name())}, {"operation", bp_collective_name(entry.collective)}};
    if (entry.collective != BP_BARRIER) out["dtype"] = bp_dtype_name(entry.dtype);
    if (is_reducing(entry.collective)) out["reduce_op"] = bp_reduce_op_name(entry.reduce_op);
    if (is_rooted(entry.collective)) out["root"] = entry.root;
    out["iterations"] = entry.iterations;
    out["warmup"] = entry.warmup;
    out["check"] = entry.check && entry.collective != BP_BARRIER;

    auto entry_failed = [&](const Error &error) {
      print_error(error);
      ++total.errors;
      out["error"] = Json::parse(error.json(), nullptr, false);
      out_entries.push_back(std::move(out));
    };
    Result<GroupDescription> described = describe_group(*host, group);
    if (!described) {
      entry_failed(described.error());
      continue;
    }
    std::vector<Device> ranks;
    for (size_t r = 0; r < group.size(); ++r) ranks.push_back(group.device(r));
    CollectiveRunner runner(*host, entry, ranks);
    out["devices"] = described->devices;
    if (!described->plugins.empty())
      out["plugin"] = {{"name", described->plugins[0].name}, {"version", described->plugins[0].version}};

    if (!json) {
      std::printf("#\n# %s on group %s: %s (plugin %s)\n", runner.describe().c_str(), std::string(group.name()).c_str(),
                  described->device_text().c_str(), described->plugin_text().c_str());
      print_timing_note(entry);
      print_column_header(/*traffic=*/false);
    }

    const bool barrier = entry.collective == BP_BARRIER;
    Result<std::vector<Row>> ran = run_rows(runner, [&](const Row &row) {
      if (json) return;
      // Printed as it completes: a long run shows its progress.
      std::printf("%s\n", row_line(entry, row, /*traffic=*/false).c_str());
      std::fflush(stdout);
    });
    if (!ran) {
      entry_failed(ran.error());
      continue;
    }
    const std::vector<Row> &rows = *ran;
    Tally tally;
    tally.add(rows, barrier);
    Json out_rows = Json::array();
    for (const Row &row : rows) out_rows.push_back(row_json(entry, row));
    rows_run += rows.size();
    total.wrong += tally.wrong;
    total.errors += tally.errors;
    out["rows"] = std::move(out_rows);
    out["out_of_bounds"] = tally.wrong;
    out["errors"] = tally.errors;
    out["avg_busbw"] = barrier ? Json(nullptr) : Json(tally.avg_busbw());
    bp_group_counters counters{};
    counters.struct_size = sizeof counters;
    if (Status read(bp_group_get_counters(group.get(), &counters)); read) {
      out["group_counters"] = {{"native_calls", counters.native_calls},
                               {"staged_calls", counters.staged_calls},
                               {"refused_calls", counters.refused_calls},
                               {"staged_bytes", counters.staged_bytes}};
    }
    out_entries.push_back(std::move(out));
    if (!json) {
      print_footer(tally, barrier);
      // The group's own count so far: every call of its entries, warm-up and checks included.
      std::printf("# group %s so far: %" PRIu64 " call%s native, %" PRIu64 " staged through host memory (%" PRIu64
                  " bytes copied), %" PRIu64 " refused\n",
                  std::string(group.name()).c_str(), counters.native_calls, counters.native_calls == 1 ? "" : "s",
                  counters.staged_calls, counters.staged_bytes, counters.refused_calls);
    }
  }

  const bool ok = total.wrong == 0 && total.errors == 0;
  if (json) {
    Json out = {{"fleet", fleet_file.empty() ? Json(nullptr) : Json(fleet_file)},
                {"entries", std::move(out_entries)},
                {"out_of_bounds", total.wrong},
                {"errors", total.errors},
                {"ok", ok}};
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("#\n# %zu workload entr%s, %zu row%s: %zu out of bounds value%s, %zu error%s: %s\n", entries->size(),
                entries->size() == 1 ? "y" : "ies", rows_run, rows_run == 1 ? "" : "s", total.wrong,
                total.wrong == 1 ? "" : "s", total.errors, total.errors == 1 ? "" : "s", ok ? "OK" : "FAILED");
  }
  return ok ? kExitOk : kExitFailure;
}

}  // namespace backplane::cli
