// Capability rows as the in-tree plugins declare them (plugin.h has the
// row's meaning): masks of element types and reduce ops, one row builder,
// and the table of a kind that runs everything.
#pragma once

#include <array>
#include <cstdint>

#include "backplane/plugin.h"

namespace backplane::plugin_support {

inline constexpr std::uint32_t kAllDtypes = (1u << BP_DTYPE_COUNT) - 1;
inline constexpr std::uint32_t kFloatDtypes = (1u << BP_F16) | (1u << BP_BF16) | (1u << BP_F32) | (1u << BP_F64);
inline constexpr std::uint32_t kArithmeticOps = (1u << BP_SUM) | (1u << BP_PROD) | (1u << BP_MIN) | (1u << BP_MAX);
inline constexpr std::uint32_t kAvg = 1u << BP_AVG;

// A row for both modes (in place and out of place).
constexpr bp_capability capability_row(std::uint32_t collective, std::uint32_t dtypes, std::uint32_t reduce_ops) {
  return bp_capability{sizeof(bp_capability), nullptr, 0, collective, dtypes, reduce_ops,
                       BP_CAPABILITY_IN_PLACE | BP_CAPABILITY_OUT_OF_PLACE};
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

}  // namespace backplane::plugin_support
