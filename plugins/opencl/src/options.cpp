// configure()'s text: the opencl kind's options, e.g.
// {"platform": "NVIDIA", "device_type": "gpu", "build_options": "-cl-mad-enable"}.
// Keys not listed are refused, so a typo never silently means "all".
#include "options.hpp"

#include <string>

#include "plugin_support/options_object.hpp"

namespace backplane::opencl {
namespace {

// Longer than any real set of compiler options; a longer one would push the
// build log out of a build failure's message.
constexpr std::size_t kMaxBuildOptionsBytes = 1024;

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
  if (!object->read("platform", options.platform, error) ||
      !object->read("device_type", {"all", "cpu", "gpu", "accelerator"}, device_type, error) ||
      !object->read("build_options", options.build_options, error)) {
    return std::nullopt;
  }
  for (DeviceTypeFilter filter :
       {DeviceTypeFilter::all, DeviceTypeFilter::cpu, DeviceTypeFilter::gpu, DeviceTypeFilter::accelerator}) {
    if (device_type == device_type_filter_name(filter)) options.device_type = filter;
  }
  // clBuildProgram takes a C string: a NUL would silently cut the options.
  if (options.build_options.find('\0') != std::string::npos ||
      options.build_options.size() > kMaxBuildOptionsBytes) {
    *error = "\"build_options\" must be at most " + std::to_string(kMaxBuildOptionsBytes) +
             " bytes without NUL characters";
    return std::nullopt;
  }
  return options;
}

}  // namespace backplane::opencl
