// configure()'s text: the vulkan kind's options. Keys not listed and
// feature names Vulkan does not have are refused, so a typo never silently
// means "nothing disabled".
#include "options.hpp"

#include "plugin_support/options_object.hpp"

namespace backplane::vulkan {

const char *feature_name(Feature feature) noexcept {
  switch (feature) {
    case Feature::shaderFloat64: return "shaderFloat64";
    case Feature::shaderInt64: return "shaderInt64";
    case Feature::shaderInt16: return "shaderInt16";
    case Feature::shaderFloat16: return "shaderFloat16";
    case Feature::shaderInt8: return "shaderInt8";
    case Feature::storageBuffer16BitAccess: return "storageBuffer16BitAccess";
    case Feature::storageBuffer8BitAccess: return "storageBuffer8BitAccess";
    case Feature::bufferDeviceAddress: return "bufferDeviceAddress";
    case Feature::timelineSemaphore: return "timelineSemaphore";
  }
  return "?";
}

std::optional<Options> parse_options(std::string_view json, std::string *error) {
  const std::optional<plugin_support::OptionsObject> object = plugin_support::OptionsObject::parse(json, error);
  if (!object || !object->only_keys({"ranks_per_device", "disable_features", "validation", "transfers", "reduce_inputs"}, error)) {
    return std::nullopt;
  }
  Options options;
  std::vector<std::string> disabled;
  std::string transfers = "auto";
  std::string reduce_inputs = "auto";
  if (!object->read("ranks_per_device", 1, kMaxRanksPerDevice, options.ranks_per_device, error) ||
      !object->read("disable_features", kFeatureCount, disabled, error) ||
      !object->read("validation", options.validation, error) ||
      !object->read("transfers", {"auto", "staged"}, transfers, error) ||
      !object->read("reduce_inputs", {"auto", "texel_buffers", "addresses"}, reduce_inputs, error)) {
    return std::nullopt;
  }
  options.transfers = transfers == "staged" ? Transfers::staged : Transfers::automatic;
  options.reduce_inputs = reduce_inputs == "texel_buffers" ? ReduceInputs::texel_buffers
                          : reduce_inputs == "addresses"   ? ReduceInputs::addresses
                                                           : ReduceInputs::automatic;
  for (const std::string &name : disabled) {
    bool known = false;
    for (std::uint32_t f = 0; f < kFeatureCount; ++f) {
      if (name != feature_name(static_cast<Feature>(f))) continue;
      options.disabled_features |= feature_bit(static_cast<Feature>(f));
      known = true;
    }
    if (known) continue;
    std::string names;
    for (std::uint32_t f = 0; f < kFeatureCount; ++f) {
      names += (names.empty() ? "" : ", ") + std::string(feature_name(static_cast<Feature>(f)));
    }
    // Shown as JSON would be cut by the host's one-line rule anyway; a name
    // is short, and bounded here so that a long one cannot flood the message.
    *error = "\"disable_features\": unknown feature \"" + name.substr(0, 64) + "\" (known: " + names + ")";
    return std::nullopt;
  }
  return options;
}

}  // namespace backplane::vulkan
