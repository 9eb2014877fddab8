// Capability rows as the in-tree plugins declare them (plugin.h has the
// row's meaning): masks of element types and reduce ops, one row builder,
// the table of a kind that runs everything, and the narrowing of any table
// to what the host's ABI minor knows.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "backplane/plugin.h"

namespace backplane::plugin_support {

// The plugin ABI minor that introduced each value this header knows. A
// plugin declares only what the host's minor knows (plugin.h, "Extending
// this ABI"): a value appended later is masked out for an older host,
// which would otherwise have to refuse or guess. Every value to date
// exists since 1.0.
inline constexpr std::array<std::uint32_t, BP_COLLECTIVE_COUNT> kCollectiveSinceMinor = {0, 0, 0, 0, 0, 0, 0, 0, 0};
inline constexpr std::array<std::uint32_t, BP_DTYPE_COUNT> kDtypeSinceMinor = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
inline constexpr std::array<std::uint32_t, BP_REDUCE_OP_COUNT> kReduceOpSinceMinor = {0, 0, 0, 0, 0};
// Capability flag bits and the minor of each: in place, out of place.
inline constexpr std::array<std::uint32_t, 2> kCapabilityFlagSinceMinor = {0, 0};

template <std::size_t N>
constexpr std::uint32_t mask_known_to(const std::array<std::uint32_t, N> &since, std::uint32_t host_minor) {
  std::uint32_t mask = 0;
  for (std::size_t value = 0; value < N; ++value)
    if (since[value] <= host_minor) mask |= 1u << value;
  return mask;
}

constexpr std::uint32_t known_dtypes(std::uint32_t host_minor) { return mask_known_to(kDtypeSinceMinor, host_minor); }
constexpr std::uint32_t known_reduce_ops(std::uint32_t host_minor) {
  return mask_known_to(kReduceOpSinceMinor, host_minor);
}
constexpr std::uint32_t known_capability_flags(std::uint32_t host_minor) {
  return mask_known_to(kCapabilityFlagSinceMinor, host_minor);
}
constexpr bool collective_known(std::uint32_t collective, std::uint32_t host_minor) {
  return collective < BP_COLLECTIVE_COUNT && kCollectiveSinceMinor[collective] <= host_minor;
}

// Every element type this header knows: a mask for building tables. What a
// plugin hands a host goes through rows_for_host(), which narrows it.
inline constexpr std::uint32_t kAllDtypes = (1u << BP_DTYPE_COUNT) - 1;
inline constexpr std::uint32_t kFloatDtypes = (1u << BP_F16) | (1u << BP_BF16) | (1u << BP_F32) | (1u << BP_F64);
inline constexpr std::uint32_t kArithmeticOps = (1u << BP_SUM) | (1u << BP_PROD) | (1u << BP_MIN) | (1u << BP_MAX);
inline constexpr std::uint32_t kAvg = 1u << BP_AVG;

// A row for both modes (in place and out of place), without a size limit.
constexpr bp_capability capability_row(std::uint32_t collective, std::uint32_t dtypes, std::uint32_t reduce_ops) {
  return bp_capability{sizeof(bp_capability), nullptr, 0, collective, dtypes, reduce_ops,
                       BP_CAPABILITY_IN_PLACE | BP_CAPABILITY_OUT_OF_PLACE, 0};
}

// Every collective, every element type, in place and out of place; sum,
// prod, min and max for all types and avg for the floating ones only (an
// integer mean would have to pick a rounding, and no caller has asked for
// one). What the cpu kind runs, and what the opencl kind declares.
inline constexpr std::array<bp_capability, 12> kEveryCollectiveRows = {
    capability_row(BP_ALL_REDUCE, kAllDtypes, kArithmeticOps),
    capability_row(BP_ALL_REDUCE, kFloatDtypes, kAvg),
    capability_row(BP_REDUCE, kAllDtypes, kArithmeticOps),
    capability_row(BP_REDUCE, kFloatDtypes, kAvg),
    capability_row(BP_REDUCE_SCATTER, kAllDtypes, kArithmeticOps),
    capability_row(BP_REDUCE_SCATTER, kFloatDtypes, kAvg),
    capability_row(BP_BROADCAST, kAllDtypes, 0),
    capability_row(BP_ALL_GATHER, kAllDtypes, 0),
    capability_row(BP_GATHER, kAllDtypes, 0),
    capability_row(BP_SCATTER, kAllDtypes, 0),
    capability_row(BP_ALL_TO_ALL, kAllDtypes, 0),
    capability_row(BP_BARRIER, 0, 0),
};

// `rows` as a host of plugin ABI minor `host_minor` may read them: rows of
// collectives it does not know dropped, unknown dtype, op and flag bits
// cleared, and a row left with no element type dropped (barrier has none
// to lose).
std::vector<bp_capability> rows_for_host(std::span<const bp_capability> rows, std::uint32_t host_minor);

// One device's rows: a kind's `rows` narrowed to the element types in
// `dtypes` (a row left with none dropped; barrier moves no elements and
// keeps its row), each with max_bytes = `max_bytes` (the device's largest
// allocation: no buffer of a call can span more).
std::vector<bp_capability> device_rows(std::span<const bp_capability> rows, std::uint32_t dtypes,
                                       std::uint64_t max_bytes);

// A plugin's descriptor as one state hands it to its host: the shared
// descriptor, pointing at rows the state narrowed to that host. Lives in
// the state, so it stays valid until destroy, as plugin.h asks.
struct DeclaredDescriptor {
  std::vector<bp_capability> rows;
  bp_plugin_descriptor descriptor{};

  // Takes `shared` (whose own rows are ignored) and `narrowed` rows.
  const bp_plugin_descriptor *declare(const bp_plugin_descriptor &shared, std::vector<bp_capability> narrowed) {
    rows = std::move(narrowed);
    descriptor = shared;
    descriptor.capabilities = rows.data();
    descriptor.capability_count = rows.size();
    return &descriptor;
  }
};

}  // namespace backplane::plugin_support
