// The opencl kind's capability rows and each device's narrowing of them.
// The kind declares what some OpenCL device can run, so that the host can
// name opencl as an alternative for f64 or f16 even on a machine whose
// devices lack them; each device then declares what it runs itself, and the
// host refuses the rest with UNSUPPORTED_DEVICE.
#include "capabilities.hpp"

#include "plugin_state.hpp"
#include "plugin_support/capability_rows.hpp"

namespace backplane::opencl {

using plugin_support::kAllDtypes;
using plugin_support::kEveryCollectiveRows;

std::vector<bp_capability> kind_capabilities(std::uint32_t host_minor) {
  return plugin_support::rows_for_host(kEveryCollectiveRows, host_minor);
}

std::uint32_t device_dtypes(const DeviceFeatures &features) noexcept {
  std::uint32_t dtypes = kAllDtypes;
  if (!features.fp64) dtypes &= ~(1u << BP_F64);
  if (!features.fp16) dtypes &= ~(1u << BP_F16);
  if (!features.int64) dtypes &= ~((1u << BP_I64) | (1u << BP_U64));
  return dtypes;
}

std::vector<bp_capability> device_capabilities(std::span<const bp_capability> kind_rows,
                                               const DeviceFeatures &features, std::uint64_t max_allocation_bytes) {
  return plugin_support::device_rows(kind_rows, device_dtypes(features), max_allocation_bytes);
}

}  // namespace backplane::opencl
