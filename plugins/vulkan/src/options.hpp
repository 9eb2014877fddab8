// The vulkan kind's options: {"ranks_per_device": 4, "disable_features":
// ["shaderFloat64"], "validation": true, "transfers": "staged",
// "reduce_inputs": "addresses"}.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace backplane::vulkan {

// The device features the plugin's element types depend on, by their names
// in VkPhysicalDeviceFeatures and VkPhysicalDeviceVulkan11/12Features, and
// the two it cannot run without.
enum class Feature : std::uint32_t {
  shaderFloat64,
  shaderInt64,
  shaderInt16,
  shaderFloat16,
  shaderInt8,
  storageBuffer16BitAccess,
  storageBuffer8BitAccess,
  bufferDeviceAddress,  // required: every shader addresses its buffers by address
  timelineSemaphore,    // required: requests complete through one
};
inline constexpr std::size_t kFeatureCount = 9;
const char *feature_name(Feature feature) noexcept;
// A set of features, bit i = Feature(i).
using FeatureSet = std::uint32_t;
constexpr FeatureSet feature_bit(Feature feature) { return FeatureSet{1} << static_cast<std::uint32_t>(feature); }

enum class Transfers {
  automatic,  // map the buffers where the device shares host memory (CPU, integrated), else stage
  staged,     // always through a staging buffer and vkCmdCopyBuffer (diagnostic)
};

// How reduce.comp reads its inputs (the shader's header says why there are two).
enum class ReduceInputs {
  automatic,      // texel buffers on CPU devices (lavapipe) where supported, else addresses
  texel_buffers,  // uniform texel buffers wherever the device can (diagnostic, benchmarks)
  addresses,      // device addresses always (diagnostic, benchmarks)
};

struct Options {
  // Logical devices per physical device, each with its own buffers: several
  // ranks of one group on one GPU.
  std::uint64_t ranks_per_device = 1;
  // Features treated as absent (a diagnostic option: the refusals of a
  // device without them can be seen on one that has them).
  FeatureSet disabled_features = 0;
  // VK_LAYER_KHRONOS_validation with a debug-utils messenger that logs every
  // warning and error at BP_LOG_ERROR ("validation: ...").
  bool validation = false;
  Transfers transfers = Transfers::automatic;
  ReduceInputs reduce_inputs = ReduceInputs::automatic;

  bool operator==(const Options &) const = default;
};

inline constexpr std::uint64_t kMaxRanksPerDevice = 64;

// The options of `json`, a JSON object; keys left out take their defaults.
// On failure returns nullopt with *error saying what and where.
std::optional<Options> parse_options(std::string_view json, std::string *error);

}  // namespace backplane::vulkan
