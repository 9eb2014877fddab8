// `backplane conform PLUGIN.so`: the conformance suite (tools/conformance)
// over one plugin file, printed as a passed/failed/skipped table or as JSON.
#include <cstdio>

#include "cli.hpp"
#include "conformance.hpp"
#include "table.hpp"

namespace backplane::cli {

int run_conform(const GlobalOptions &options, const std::string &plugin_file, bool json, bool quick) {
  conformance::ConformanceOptions conform_options;
  conform_options.quick = quick;
  conform_options.plugin_options_json = options.plugin_options_json;
  const conformance::ConformanceReport report = conformance::run_conformance(plugin_file, conform_options);

  if (!report.refused_code.empty()) {
    // The host's own error, as every subcommand prints it.
    std::fprintf(stderr, "error: %s\n", report.refused_message.c_str());
    if (!report.refused_hint.empty()) std::fprintf(stderr, "hint: %s\n", report.refused_hint.c_str());
  }
  if (json) {
    std::printf("%s\n", conformance::to_json(report).c_str());
    return report.ok() ? kExitOk : kExitFailure;
  }

  if (report.refused_code.empty())
    std::printf("plugin %s %s (%s)\n", report.plugin.c_str(), report.version.c_str(), report.file.c_str());
  else
    std::printf("plugin file %s: refused (%s)\n", report.file.c_str(), report.refused_code.c_str());
  for (const conformance::KindSummary &kind : report.kinds) {
    std::string groups;
    for (const std::vector<std::string> &group : kind.groups) {
      std::string names;
      for (const std::string &name : group) names += (names.empty() ? "" : " ") + name;
      groups += (groups.empty() ? "[" : ", [") + names + "]";
    }
    std::printf("kind %s: %zu device%s; groups %s\n", kind.kind.c_str(), kind.devices, kind.devices == 1 ? "" : "s",
                groups.empty() ? "none" : groups.c_str());
  }
  std::printf("\n");

  Table table({{"kind"},
               {"collective"},
               {"dtype"},
               {"op"},
               {"mode"},
               {"passed", Align::right},
               {"failed", Align::right},
               {"skipped", Align::right},
               {"note"}});
  for (const conformance::ConformanceRow &row : report.rows)
    table.add_row({row.kind, row.collective, row.dtype, row.op, row.mode, std::to_string(row.passed),
                   std::to_string(row.failed), std::to_string(row.skipped), row.note()});
  table.print(stdout);
  std::printf("\ntotal: %zu passed, %zu failed, %zu skipped (not declared, refused as required); %.1f s\n",
              report.passed, report.failed, report.skipped, report.seconds);
  if (!report.ok()) std::printf("FAILED: %s does not conform\n", report.file.c_str());
  return report.ok() ? kExitOk : kExitFailure;
}

}  // namespace backplane::cli
