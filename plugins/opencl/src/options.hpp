// The opencl kind's options: {"platform": "Portable", "device_type": "gpu",
// "build_options": "-cl-mad-enable"}.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace backplane::opencl {

enum class DeviceTypeFilter { all, cpu, gpu, accelerator };

struct Options {
  // Only platforms whose CL_PLATFORM_NAME contains this (case-sensitive);
  // empty: every platform.
  std::string platform;
  DeviceTypeFilter device_type = DeviceTypeFilter::all;
  // Appended to the plugin's own options of every clBuildProgram (and so
  // part of the program cache's key).
  std::string build_options;

  bool operator==(const Options &) const = default;
};

const char *device_type_filter_name(DeviceTypeFilter filter) noexcept;

// The options of `json`, a JSON object; keys left out take their defaults.
// On failure returns nullopt with *error saying what and where.
std::optional<Options> parse_options(std::string_view json, std::string *error);

}  // namespace backplane::opencl
