// What the opencl kind declares (the union of what any OpenCL device can
// run), and the rows of one device, from its features and allocation limit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "backplane/plugin.h"

namespace backplane::opencl {

struct DeviceFeatures;

// The kind's rows as a host of ABI minor `host_minor` may read them: every
// collective, every dtype, sum, prod, min and max for all of them and avg
// for the floating types, without a size limit. Built once per state, at
// entry (plugin_support::rows_for_host).
std::vector<bp_capability> kind_capabilities(std::uint32_t host_minor);

// The dtypes a device with `features` runs: all but f64 without fp64, f16
// without cl_khr_fp16, i64 and u64 without 64-bit integers.
std::uint32_t device_dtypes(const DeviceFeatures &features) noexcept;

// The device's own rows: `kind_rows` narrowed to device_dtypes(), each
// with max_bytes = `max_allocation_bytes` (CL_DEVICE_MAX_MEM_ALLOC_SIZE:
// no buffer of a call can span more, since none can be allocated larger).
// Every device declares its own rows, since no kind row carries its limit.
std::vector<bp_capability> device_capabilities(std::span<const bp_capability> kind_rows,
                                               const DeviceFeatures &features, std::uint64_t max_allocation_bytes);

}  // namespace backplane::opencl
