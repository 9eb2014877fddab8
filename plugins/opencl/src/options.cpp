// configure()'s text: the opencl kind's options, e.g.
// {"platform": "NVIDIA", "device_type": "gpu", "build_options": "-cl-mad-enable"}.
// Keys not listed are refused, so a typo never silently means "all".
#include "options.hpp"

#include "plugin_support/options_object.hpp"

namespace backplane::opencl {
namespace {

constexpr const char *kDeviceTypes = "\"all\", \"cpu\", \"gpu\", \"accelerator\"";

std::optional<DeviceTypeFilter> device_type_filter(const std::string &name) {
  for (DeviceTypeFilter filter :
       {DeviceTypeFilter::all, DeviceTypeFilter::cpu, DeviceTypeFilter::gpu, DeviceTypeFilter::accelerator}) {
    if (name == device_type_filter_name(filter)) return filter;
  }
  return std::nullopt;
}

}  // namespace

const char *device_type_filter_name(DeviceTypeFilter filter) noexcept {
  switch (filter) {
    case DeviceTypeFilter::all: return "all";
    case DeviceTypeFilter::cpu: return "cpu";
    case DeviceTypeFilter::gpu: return "gpu";
    case DeviceTypeFilter::accelerator: return "accelerator";
  }
  return "all";
}

std::optional<Options> parse_options(std::string_view json, std::string *error) {
  const std::optional<plugin_support::OptionsObject> object = plugin_support::OptionsObject::parse(json, error);
  if (!object || !object->only_keys({"platform", "device_type", "build_options"}, error)) return std::nullopt;
  Options options;
  std::string device_type = device_type_filter_name(options.device_type);
  if (!object->read("platform", options.platform, error) || !object->read("device_type", device_type, error) ||
      !object->read("build_options", options.build_options, error)) {
    return std::nullopt;
  }
  const std::optional<DeviceTypeFilter> filter = device_type_filter(device_type);
  if (!filter) {
    *error = "\"device_type\" is \"" + device_type + "\", not one of " + kDeviceTypes;
    return std::nullopt;
  }
  options.device_type = *filter;
  return options;
}

}  // namespace backplane::opencl
