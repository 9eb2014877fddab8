// Narrowing capability rows to what the host's ABI minor knows.
#include "plugin_support/capability_rows.hpp"

namespace backplane::plugin_support {

std::vector<bp_capability> rows_for_host(std::span<const bp_capability> rows, std::uint32_t host_minor) {
  const std::uint32_t dtypes = known_dtypes(host_minor), ops = known_reduce_ops(host_minor),
                      flags = known_capability_flags(host_minor);
  std::vector<bp_capability> known;
  known.reserve(rows.size());
  for (bp_capability row : rows) {
    if (!collective_known(row.collective, host_minor)) continue;
    row.dtypes &= dtypes;
    row.reduce_ops &= ops;
    row.flags &= flags;
    if (row.collective != BP_BARRIER && row.dtypes == 0) continue;
    known.push_back(row);
  }
  return known;
}

std::vector<bp_capability> device_rows(std::span<const bp_capability> rows, std::uint32_t dtypes,
                                       std::uint64_t max_bytes) {
  std::vector<bp_capability> narrowed;
  narrowed.reserve(rows.size());
  for (bp_capability row : rows) {
    if (row.collective != BP_BARRIER) {
      row.dtypes &= dtypes;
      if (row.dtypes == 0) continue;
    }
    row.max_bytes = max_bytes;
    narrowed.push_back(row);
  }
  return narrowed;
}

}  // namespace backplane::plugin_support
