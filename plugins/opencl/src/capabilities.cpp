// The opencl kind's capability rows and each device's narrowing of them.
// The kind declares what some OpenCL device can run, so that the host can
// name opencl as an alternative for f64 or f16 even on a machine whose
// devices lack them; each device then declares what it runs itself, and the
// host refuses the rest with UNSUPPORTED_DEVICE.
#include "capabilities.hpp"

#include "plugin_state.hpp"

namespace backplane::opencl {
namespace {

constexpr std::uint32_t kAllDtypes = (1u << BP_DTYPE_COUNT) - 1;
constexpr std::uint32_t kFloatDtypes = (1u << BP_F16) | (1u << BP_BF16) | (1u << BP_F32) | (1u << BP_F64);
constexpr std::uint32_t kArithmeticOps = (1u << BP_SUM) | (1u << BP_PROD) | (1u << BP_MIN) | (1u << BP_MAX);
constexpr std::uint32_t kAvg = 1u << BP_AVG;

constexpr bp_capability row(std::uint32_t collective, std::uint32_t dtypes, std::uint32_t reduce_ops) {
  return bp_capability{sizeof(bp_capability), nullptr, 0, collective, dtypes, reduce_ops,
                       BP_CAPABILITY_IN_PLACE | BP_CAPABILITY_OUT_OF_PLACE};
}

// Avg is declared for float types only, as the cpu plugin does: an integer
// mean would have to pick a rounding.
const bp_capability kKindCapabilities[] = {
    row(BP_ALL_REDUCE, kAllDtypes, kArithmeticOps),
    row(BP_ALL_REDUCE, kFloatDtypes, kAvg),
    row(BP_REDUCE, kAllDtypes, kArithmeticOps),
    row(BP_REDUCE, kFloatDtypes, kAvg),
    row(BP_REDUCE_SCATTER, kAllDtypes, kArithmeticOps),
    row(BP_REDUCE_SCATTER, kFloatDtypes, kAvg),
    row(BP_BROADCAST, kAllDtypes, 0),
    row(BP_ALL_GATHER, kAllDtypes, 0),
    row(BP_GATHER, kAllDtypes, 0),
    row(BP_SCATTER, kAllDtypes, 0),
    row(BP_ALL_TO_ALL, kAllDtypes, 0),
    row(BP_BARRIER, 0, 0),
};

}  // namespace

const bp_capability *kind_capabilities(std::size_t *count) noexcept {
  *count = sizeof kKindCapabilities / sizeof kKindCapabilities[0];
  return kKindCapabilities;
}

std::uint32_t device_dtypes(const DeviceFeatures &features) noexcept {
  std::uint32_t dtypes = kAllDtypes;
  if (!features.fp64) dtypes &= ~(1u << BP_F64);
  if (!features.fp16) dtypes &= ~(1u << BP_F16);
  if (!features.int64) dtypes &= ~((1u << BP_I64) | (1u << BP_U64));
  return dtypes;
}

std::vector<bp_capability> device_capabilities(const DeviceFeatures &features) {
  const std::uint32_t dtypes = device_dtypes(features);
  std::vector<bp_capability> rows;
  if (dtypes == kAllDtypes) return rows;
  for (const bp_capability &kind_row : kKindCapabilities) {
    bp_capability narrowed = kind_row;
    // Barrier moves no elements, so no dtype narrows it.
    if (kind_row.collective != BP_BARRIER) {
      narrowed.dtypes &= dtypes;
      if (narrowed.dtypes == 0) continue;
    }
    rows.push_back(narrowed);
  }
  return rows;
}

}  // namespace backplane::opencl
