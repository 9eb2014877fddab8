// `backplane caps`: the capability table the host dispatches from, as one
// matrix per device kind (collectives x element types, each cell the ops),
// with the most bytes a buffer may span beside each collective.
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "backplane_reference/collective_reference.hpp"
#include "cli.hpp"
#include "table.hpp"

namespace backplane::cli {
namespace {

using reference::is_reducing;

constexpr uint32_t kAllOps = (1u << BP_REDUCE_OP_COUNT) - 1;

std::vector<std::string> op_names(uint32_t ops) {
  std::vector<std::string> names;
  for (uint32_t op = 0; op < BP_REDUCE_OP_COUNT; ++op)
    if (ops & (1u << op)) names.emplace_back(bp_reduce_op_name(static_cast<bp_reduce_op>(op)));
  return names;
}

// Stands for "no element type" (barrier) where a dtype is expected.
constexpr uint32_t kNoDtype = BP_DTYPE_COUNT;

// One matrix cell: "all" (every op, see the legend), "all but avg" when
// one or two are missing, the ops joined ("sum,max"), or "yes" for
// collectives that reduce nothing; a trailing mark when only one of in
// place / out of place is supported.
std::string cell(bp_collective collective, uint32_t ops, uint32_t flags) {
  std::string text;
  const std::vector<std::string> names = op_names(ops), missing = op_names(kAllOps & ~ops);
  if (!is_reducing(collective)) {
    text = "yes";
  } else if (missing.empty()) {
    text = "all";
  } else if (names.size() >= 3) {
    text = "all but ";
    for (size_t i = 0; i < missing.size(); ++i) text += (i ? "," : "") + missing[i];
  } else {
    for (const std::string &name : names) text += (text.empty() ? "" : ",") + name;
    if (text.empty()) text = "none";  // declared with no op: nothing can run
  }
  bool in_place = flags & BP_CAPABILITY_IN_PLACE, out_of_place = flags & BP_CAPABILITY_OUT_OF_PLACE;
  if (in_place && !out_of_place) text += " (in)";
  if (!in_place && out_of_place) text += " (out)";
  return text;
}

struct Entry {
  std::string plugin;
  uint32_t ops = 0, flags = 0;
  uint64_t max_bytes = 0;  // 0: no limit
};

// A limit as the table shows it.
std::string limit_text(uint64_t max_bytes) { return max_bytes ? format_bytes(max_bytes) : "none"; }

// The "max bytes" column of one collective: "-" where no element type
// runs, the limit when every element type that runs shares it ("none",
// "4 KiB"), else each type's ("f32 4 KiB, i32 none").
std::string limits_cell(const std::map<std::pair<uint32_t, uint32_t>, Entry> &entries, uint32_t collective) {
  std::vector<std::pair<uint32_t, uint64_t>> limits;  // (dtype, max_bytes)
  for (uint32_t dtype = 0; dtype < BP_DTYPE_COUNT; ++dtype)
    if (auto found = entries.find({collective, dtype}); found != entries.end())
      limits.emplace_back(dtype, found->second.max_bytes);
  if (limits.empty()) return "-";
  const bool shared = std::all_of(limits.begin(), limits.end(),
                                  [&](const auto &limit) { return limit.second == limits.front().second; });
  if (shared) return limit_text(limits.front().second);
  std::string text;
  for (const auto &[dtype, max_bytes] : limits)
    text += std::string(text.empty() ? "" : ", ") + bp_dtype_name(static_cast<bp_dtype>(dtype)) + " " +
            limit_text(max_bytes);
  return text;
}

}  // namespace

int run_caps(const GlobalOptions &options, bool json) {
  std::optional<Host> host = open_host(options);
  if (!host) return kExitFailure;
  note_refused(*host);

  // kind -> (collective, dtype) -> entry. The host lists one entry per
  // (kind, collective, dtype), and one with no dtype for barrier; a mask
  // with several dtypes is read too.
  std::map<std::string, std::map<std::pair<uint32_t, uint32_t>, Entry>> kinds;
  for (const CapabilityInfo &row : host->capabilities()) {
    auto add = [&](uint32_t dtype) {
      Entry &entry = kinds[row.device_kind][{row.collective, dtype}];
      entry.plugin = row.plugin;
      entry.ops |= row.reduce_ops;
      entry.flags |= row.flags;
      // Should two rows meet in one entry, the tighter limit is the one
      // that holds for everything the entry says runs.
      if (row.max_bytes && (!entry.max_bytes || row.max_bytes < entry.max_bytes)) entry.max_bytes = row.max_bytes;
    };
    if (row.dtypes == 0) add(kNoDtype);
    for (uint32_t dtype = 0; dtype < BP_DTYPE_COUNT; ++dtype)
      if (row.dtypes & (1u << dtype)) add(dtype);
  }

  if (json) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto &[kind, entries] : kinds)
      for (const auto &[key, entry] : entries) {
        // null for a collective with no element type (barrier)
        nlohmann::ordered_json dtype;
        if (key.second != kNoDtype) dtype = bp_dtype_name(static_cast<bp_dtype>(key.second));
        out.push_back({{"device_kind", kind},
                       {"plugin", entry.plugin},
                       {"collective", bp_collective_name(static_cast<bp_collective>(key.first))},
                       {"dtype", dtype},
                       {"reduce_ops", op_names(entry.ops)},
                       {"in_place", (entry.flags & BP_CAPABILITY_IN_PLACE) != 0},
                       {"out_of_place", (entry.flags & BP_CAPABILITY_OUT_OF_PLACE) != 0},
                       {"max_bytes", entry.max_bytes}});  // 0: no limit
      }
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }

  if (kinds.empty()) {
    std::printf("no capabilities (see `backplane plugins` for what was loaded and refused)\n");
    return kExitOk;
  }
  bool first = true;
  for (const auto &[kind, entries] : kinds) {
    std::printf("%s%s (plugin %s)\n", first ? "" : "\n", kind.c_str(), entries.begin()->second.plugin.c_str());
    first = false;
    std::vector<Column> columns{{"collective"}};
    for (uint32_t dtype = 0; dtype < BP_DTYPE_COUNT; ++dtype)
      columns.push_back({bp_dtype_name(static_cast<bp_dtype>(dtype))});
    columns.push_back({"max bytes"});
    Table table(std::move(columns));
    std::string typeless;  // collectives with no element type (barrier): listed below the matrix
    for (uint32_t collective = 0; collective < BP_COLLECTIVE_COUNT; ++collective) {
      const char *name = bp_collective_name(static_cast<bp_collective>(collective));
      if (collective == BP_BARRIER) {
        typeless += std::string(typeless.empty() ? "" : ", ") + name + ": " +
                    (entries.count({collective, kNoDtype}) ? "yes" : "·");
        continue;
      }
      std::vector<std::string> cells{name};
      for (uint32_t dtype = 0; dtype < BP_DTYPE_COUNT; ++dtype) {
        auto found = entries.find({collective, dtype});
        cells.push_back(found == entries.end()
                            ? "·"
                            : cell(static_cast<bp_collective>(collective), found->second.ops, found->second.flags));
      }
      cells.push_back(limits_cell(entries, collective));
      table.add_row(std::move(cells));
    }
    table.print(stdout);
    std::printf("%s\n", typeless.c_str());
  }
  std::printf(
      "\nall = sum,prod,min,max,avg; yes = supported (nothing to reduce); · = not supported;\n"
      "(in) / (out) = in place only / out of place only;\n"
      "max bytes = the most bytes one buffer of a call may span (none = no limit)\n");
  return kExitOk;
}

}  // namespace backplane::cli
