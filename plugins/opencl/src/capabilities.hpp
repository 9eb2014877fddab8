// What the opencl kind declares (the union of what any OpenCL device can
// run), and the narrower rows of one device, from its features.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backplane/plugin.h"

namespace backplane::opencl {

struct DeviceFeatures;

// The kind's rows, for the descriptor: every collective, every dtype, sum,
// prod, min and max for all of them and avg for the floating types.
const bp_capability *kind_capabilities(std::size_t *count) noexcept;

// The dtypes a device with `features` runs: all but f64 without fp64, f16
// without cl_khr_fp16, i64 and u64 without 64-bit integers.
std::uint32_t device_dtypes(const DeviceFeatures &features) noexcept;

// The device's own rows: empty when it runs everything the kind declares,
// else the kind's rows narrowed to device_dtypes().
std::vector<bp_capability> device_capabilities(const DeviceFeatures &features);

}  // namespace backplane::opencl
