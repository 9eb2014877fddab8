// The conformance suite (DESIGN.md, "Conformance"): one plugin file loaded
// alone, every capability it declares run on its devices and checked against
// the reference, every one it does not declare required to be refused with
// the UNSUPPORTED_* code the capability table implies. Used by
// `backplane conform` and by tests/conformance_test.cpp.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace backplane::conformance {

struct ConformanceOptions {
  // Fewer groups (2 ranks and the largest) and counts (0, 7; 1000 on the
  // largest group): a pass in seconds even in sanitizer builds.
  bool quick = false;
  // The largest group tried: groups of 1, 2, 3 and this many ranks (or the
  // kind's device count, when smaller).
  size_t max_group = 4;
  // Options per device kind for the host, as bp_host_options takes them
  // ({"cpu": {"devices": 4}}); empty: none.
  std::string plugin_options_json;
};

// One row per (kind, collective, dtype, op, mode). Every call run and
// checked (a group × count × root) counts passed or failed; every refusal
// of a combination the table does not declare, with the right code and the
// caller's buffers untouched, counts skipped (one per group).
struct ConformanceRow {
  std::string kind;                               // device kind; "-" on the load row
  std::string collective;                         // bp_collective_name, or "load" when the file was refused
  std::string dtype = "-", op = "-", mode = "-";  // "-" where it does not apply; mode "in-place"/"out-of-place"
  size_t passed = 0, failed = 0, skipped = 0;
  std::vector<std::string> failures;  // the first few failures, one line each
  std::string skip_reason;            // why the first skip was one ("UNSUPPORTED_DTYPE: ...")
  // The first failure (and how many more), else the skip reason, else "".
  std::string note() const;
};

// What was run for one device kind.
struct KindSummary {
  std::string kind;
  size_t devices = 0;
  std::vector<std::vector<std::string>> groups;  // the groups' device names, rank order
};

struct ConformanceReport {
  std::string file;             // as given
  std::string plugin, version;  // empty when the file was refused
  // When the file was refused: the host's error ("PLUGIN_LOAD", its
  // message and hint, if any); all empty otherwise.
  std::string refused_code, refused_message, refused_hint;
  std::vector<KindSummary> kinds;
  std::vector<ConformanceRow> rows;
  size_t passed = 0, failed = 0, skipped = 0;  // totals over the rows
  double seconds = 0;
  bool ok() const { return failed == 0; }
};

// Creates a host that searches nothing, loads exactly `plugin_file` and runs
// the suite over every device kind it provides. A refused file is one failed
// case (row "load") carrying the host's code and message.
ConformanceReport run_conformance(const std::string &plugin_file, const ConformanceOptions &options = {});

// The report as a JSON object: file, plugin, version, refused (code,
// message, hint; when refused), kinds, rows (with note and failures),
// totals, seconds, ok.
std::string to_json(const ConformanceReport &report, int indent = 2);

}  // namespace backplane::conformance
