// The vulkan kind's capability rows and each device's narrowing of them.
// The kind declares what some Vulkan device can run, so that the host names
// vulkan as an alternative for f64 or i8 even where a device lacks them;
// each device declares what its features let it run, and the host refuses
// the rest before the plugin is called.
#include "capabilities.hpp"

#include "plugin_support/capability_rows.hpp"

namespace backplane::vulkan {

namespace {
const char *const kDtypeNames[BP_DTYPE_COUNT] = {"f16", "bf16", "f32", "f64", "i8", "u8", "i32", "u32", "i64", "u64"};
}  // namespace

const char *dtype_name(std::uint32_t dtype) noexcept { return dtype < BP_DTYPE_COUNT ? kDtypeNames[dtype] : "?"; }

std::vector<bp_capability> kind_capabilities(std::uint32_t host_minor) {
  return plugin_support::rows_for_host(plugin_support::kEveryCollectiveRows, host_minor);
}

FeatureSet dtype_features(std::uint32_t dtype) noexcept {
  switch (dtype) {
    case BP_F16: return feature_bit(Feature::shaderFloat16) | feature_bit(Feature::storageBuffer16BitAccess);
    case BP_BF16: return feature_bit(Feature::storageBuffer16BitAccess);
    case BP_F64: return feature_bit(Feature::shaderFloat64);
    case BP_I8:
    case BP_U8: return feature_bit(Feature::shaderInt8) | feature_bit(Feature::storageBuffer8BitAccess);
    case BP_I64:
    case BP_U64: return feature_bit(Feature::shaderInt64);
    default: return 0;
  }
}

std::uint32_t device_dtypes(FeatureSet features) noexcept {
  std::uint32_t dtypes = 0;
  for (std::uint32_t d = 0; d < BP_DTYPE_COUNT; ++d) {
    const FeatureSet needed = dtype_features(d);
    if ((features & needed) == needed) dtypes |= 1u << d;
  }
  return dtypes;
}

std::string missing_dtypes_text(FeatureSet features) {
  std::string text;
  for (std::uint32_t d = 0; d < BP_DTYPE_COUNT; ++d) {
    const FeatureSet missing = dtype_features(d) & ~features;
    if (missing == 0) continue;
    std::string names;
    for (std::size_t f = 0; f < kFeatureCount; ++f) {
      if (missing & feature_bit(static_cast<Feature>(f))) {
        names += (names.empty() ? "" : " + ") + std::string(feature_name(static_cast<Feature>(f)));
      }
    }
    text += (text.empty() ? "" : ", ") + std::string(kDtypeNames[d]) + " (needs " + names + ")";
  }
  return text;
}

std::vector<bp_capability> device_capabilities(std::span<const bp_capability> kind_rows, FeatureSet features,
                                               std::uint64_t max_allocation_bytes) {
  return plugin_support::device_rows(kind_rows, device_dtypes(features), max_allocation_bytes);
}

}  // namespace backplane::vulkan
