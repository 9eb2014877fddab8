// What the vulkan kind declares (every collective, every element type: the
// union of what any Vulkan device can run), and the rows of one device,
// from the features it has (and those disable_features masks).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backplane/plugin.h"
#include "options.hpp"

namespace backplane::vulkan {

// The kind's rows as a host of ABI minor `host_minor` may read them
// (plugin_support::rows_for_host), without a size limit.
std::vector<bp_capability> kind_capabilities(std::uint32_t host_minor);

// "f16" .. "u64", as the fleet file spells them.
const char *dtype_name(std::uint32_t dtype) noexcept;

// The features the shaders need to move and reduce `dtype`:
//   f16      shaderFloat16 + storageBuffer16BitAccess
//   bf16     storageBuffer16BitAccess (integer arithmetic on the bits)
//   f64      shaderFloat64
//   i8, u8   shaderInt8 + storageBuffer8BitAccess
//   i64, u64 shaderInt64
//   f32, i32, u32: none
FeatureSet dtype_features(std::uint32_t dtype) noexcept;

// The element types a device with `features` runs.
std::uint32_t device_dtypes(FeatureSet features) noexcept;

// "f64 (needs shaderFloat64), i8 (needs shaderInt8)": what a device with
// `features` lacks, by element type and feature name; empty when nothing.
std::string missing_dtypes_text(FeatureSet features);

// The device's own rows: `kind_rows` narrowed to device_dtypes(), each
// with max_bytes = `max_allocation_bytes` (maxMemoryAllocationSize).
std::vector<bp_capability> device_capabilities(std::span<const bp_capability> kind_rows, FeatureSet features,
                                               std::uint64_t max_allocation_bytes);

}  // namespace backplane::vulkan
