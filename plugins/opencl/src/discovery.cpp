// The opencl kind's devices: every device of every platform the ICD loader
// reports, in (platform index, device index) order, filtered by the options;
// one context per platform holding all its devices, and one queue per
// device. Also configure, device_count, device_info and kind_info, which
// read what discovery found.
#include <CL/cl_ext.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "capabilities.hpp"
#include "plugin_state.hpp"

namespace backplane::opencl {
namespace {

// OpenCL's strings may end in spaces or NUL padding, and a few drivers put
// newlines in them; a property value is one line.
std::string one_line(std::string text) {
  for (char &c : text) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  const std::size_t last = text.find_last_not_of(std::string(" \0", 2));
  text.erase(last == std::string::npos ? 0 : last + 1);
  const std::size_t first = text.find_first_not_of(' ');
  return first == std::string::npos ? std::string() : text.substr(first);
}

template <typename Info, typename Object>
std::string info_string(Info (*query)(Object, cl_uint, std::size_t, void *, std::size_t *), Object object,
                        cl_uint name) {
  std::size_t size = 0;
  if (query(object, name, 0, nullptr, &size) != CL_SUCCESS || size == 0) return {};
  std::string value(size, '\0');
  if (query(object, name, size, value.data(), nullptr) != CL_SUCCESS) return {};
  return one_line(std::move(value));
}

std::string platform_string(cl_platform_id platform, cl_platform_info name) {
  return info_string(clGetPlatformInfo, platform, name);
}

std::string device_string(cl_device_id device, cl_device_info name) {
  return info_string(clGetDeviceInfo, device, name);
}

// A fixed-size device fact; `fallback` when the query fails (an older
// device that does not know the name).
template <typename T>
T device_value(cl_device_id device, cl_device_info name, T fallback) {
  T value{};
  if (clGetDeviceInfo(device, name, sizeof value, &value, nullptr) != CL_SUCCESS) return fallback;
  return value;
}

bool has_extension(const std::string &extensions, const char *name) {
  std::istringstream words(extensions);
  std::string word;
  while (words >> word) {
    if (word == name) return true;
  }
  return false;
}

const char *device_type_name(cl_device_type type) {
  if (type & CL_DEVICE_TYPE_GPU) return "gpu";
  if (type & CL_DEVICE_TYPE_CPU) return "cpu";
  if (type & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
  return "custom";
}

bool type_matches(DeviceTypeFilter filter, cl_device_type type) {
  switch (filter) {
    case DeviceTypeFilter::all: return true;
    case DeviceTypeFilter::cpu: return (type & CL_DEVICE_TYPE_CPU) != 0;
    case DeviceTypeFilter::gpu: return (type & CL_DEVICE_TYPE_GPU) != 0;
    case DeviceTypeFilter::accelerator: return (type & CL_DEVICE_TYPE_ACCELERATOR) != 0;
  }
  return true;
}

// "OpenCL C 1.2 PoCL" -> 102; 0 when it does not parse.
int opencl_c_version(const std::string &text) {
  const std::string prefix = "OpenCL C ";
  if (text.rfind(prefix, 0) != 0) return 0;
  int major = 0, minor = 0;
  if (std::sscanf(text.c_str() + prefix.size(), "%d.%d", &major, &minor) != 2) return 0;
  return major * 100 + minor;
}

std::string mebibytes(std::uint64_t bytes) {
  char text[32];
  if (bytes >= (std::uint64_t{1} << 30)) {
    std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / static_cast<double>(1u << 30));
  } else {
    std::snprintf(text, sizeof text, "%.0f MiB", static_cast<double>(bytes) / static_cast<double>(1u << 20));
  }
  return text;
}

void add_property(Device &device, const char *key, std::string value) {
  device.property_keys.emplace_back(key);
  device.property_values.push_back(one_line(std::move(value)));
}

// Everything about one device but its queue, its rows narrowed from
// `kind_rows`; nullptr (with `skipped` saying why) for a device the kernels
// cannot run on.
std::unique_ptr<Device> describe_device(cl_device_id id, std::size_t platform_index, const Platform &platform,
                                        std::span<const bp_capability> kind_rows, std::string *skipped) {
  auto device = std::make_unique<Device>();
  device->id = id;
  device->platform = platform_index;
  device->name = device_string(id, CL_DEVICE_NAME);
  if (device->name.empty()) device->name = "unnamed OpenCL device";
  const std::string c_version = device_string(id, CL_DEVICE_OPENCL_C_VERSION);
  if (opencl_c_version(c_version) < 102) {
    *skipped = "'" + device->name + "' (" + (c_version.empty() ? "no OpenCL C version" : c_version) +
               "; the kernels need OpenCL C 1.2)";
    return nullptr;
  }
  if (device_value<cl_bool>(id, CL_DEVICE_AVAILABLE, CL_TRUE) != CL_TRUE) {
    *skipped = "'" + device->name + "' (reported unavailable)";
    return nullptr;
  }

  const std::string extensions = device_string(id, CL_DEVICE_EXTENSIONS);
  const std::string profile = device_string(id, CL_DEVICE_PROFILE);
  const cl_device_type type = device_value<cl_device_type>(id, CL_DEVICE_TYPE, 0);
  device->on_host_cores = (type & CL_DEVICE_TYPE_CPU) != 0;
  device->features.fp64 = has_extension(extensions, "cl_khr_fp64") ||
                          device_value<cl_device_fp_config>(id, CL_DEVICE_DOUBLE_FP_CONFIG, 0) != 0;
  device->features.fp16 = has_extension(extensions, "cl_khr_fp16");
  device->features.int64 = profile == "FULL_PROFILE" || has_extension(extensions, "cles_khr_int64");
  device->global_memory_bytes = device_value<cl_ulong>(id, CL_DEVICE_GLOBAL_MEM_SIZE, 0);
  device->max_allocation_bytes = device_value<cl_ulong>(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, 0);
  const cl_uint compute_units = device_value<cl_uint>(id, CL_DEVICE_MAX_COMPUTE_UNITS, 0);
  const std::string vendor = device_string(id, CL_DEVICE_VENDOR);
  const std::string version = device_string(id, CL_DEVICE_VERSION);
  const std::string driver = device_string(id, CL_DRIVER_VERSION);

  add_property(*device, "platform", platform.name);
  add_property(*device, "platform_version", platform.version);
  add_property(*device, "device", device->name);
  add_property(*device, "vendor", vendor);
  add_property(*device, "version", version);
  add_property(*device, "driver_version", driver);
  add_property(*device, "opencl_c_version", c_version);
  add_property(*device, "profile", profile);
  add_property(*device, "type", device_type_name(type));
  add_property(*device, "compute_units", std::to_string(compute_units));
  add_property(*device, "max_clock_mhz", std::to_string(device_value<cl_uint>(id, CL_DEVICE_MAX_CLOCK_FREQUENCY, 0)));
  add_property(*device, "global_memory_bytes", std::to_string(device->global_memory_bytes));
  add_property(*device, "max_allocation_bytes", std::to_string(device->max_allocation_bytes));
  add_property(*device, "local_memory_bytes", std::to_string(device_value<cl_ulong>(id, CL_DEVICE_LOCAL_MEM_SIZE, 0)));
  add_property(*device, "fp64", device->features.fp64 ? "yes" : "no");
  add_property(*device, "fp16", device->features.fp16 ? "yes" : "no");
  add_property(*device, "extensions", extensions);
  for (std::size_t i = 0; i < device->property_keys.size(); ++i) {
    device->property_key_pointers.push_back(device->property_keys[i].c_str());
    device->property_value_pointers.push_back(device->property_values[i].c_str());
  }

  device->description = (vendor.empty() ? std::string() : vendor + " ") + device_type_name(type) +
                         " device on " + platform.name + " (" + version + ", driver " + driver + ", " +
                         std::to_string(compute_units) + " compute units, " +
                         mebibytes(device->global_memory_bytes) + ")";
  device->capabilities = device_capabilities(kind_rows, device->features, device->max_allocation_bytes);
  return device;
}

std::string list(const std::vector<std::string> &items) {
  std::string text;
  for (const std::string &item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

// Discovery is serialised across the process: PoCL 3.1 crashes (in
// clGetDeviceInfo, inside its own lazy initialisation) when several hosts
// load the plugin on several threads at once, and discovery is rare enough
// that nothing waits long for it. The lock is taken after the state's own
// mutex, and by nothing else.
std::mutex &discovery_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace

void discover(bp_plugin_state &state, const Options &options) {
  std::lock_guard<std::mutex> process_lock(discovery_mutex());
  // Whatever device_info handed out stays valid until destroy (plugin.h):
  // the old devices' strings move to `retired`; their OpenCL objects go.
  for (auto &device : state.devices) {
    device->queue.reset();
    for (ProgramHandle &program : device->programs) program.reset();
    state.retired_devices.push_back(std::move(device));
  }
  state.devices.clear();
  state.platforms.clear();
  state.options = options;
  state.kind_status.clear();

  cl_uint platform_count = 0;
  const cl_int listed = clGetPlatformIDs(0, nullptr, &platform_count);
  if (listed != CL_SUCCESS || platform_count == 0) {
    const char *vendors = std::getenv("OCL_ICD_VENDORS");
    state.kind_status = std::string("no OpenCL platform: clGetPlatformIDs returned ") +
                        (listed == CL_SUCCESS ? std::string("no platforms")
                                              : cl_error_name(listed) + (" (" + std::to_string(listed) + ")")) +
                        "; is an ICD installed in " +
                        (vendors != nullptr && *vendors != '\0' ? std::string(vendors) + " (OCL_ICD_VENDORS)"
                                                                : std::string("/etc/OpenCL/vendors")) +
                        "?";
    log(state.services, BP_LOG_INFO, "%s", state.kind_status.c_str());
    return;
  }
  std::vector<cl_platform_id> platform_ids(platform_count);
  if (const cl_int status = clGetPlatformIDs(platform_count, platform_ids.data(), nullptr); status != CL_SUCCESS) {
    state.kind_status = std::string("no OpenCL platform: clGetPlatformIDs returned ") + cl_error_name(status) +
                        " (" + std::to_string(status) + ") listing " + std::to_string(platform_count) + " platforms";
    return;
  }

  std::vector<std::string> platform_names;        // every platform, for the status line
  std::vector<std::string> left_out;              // devices and platforms not exposed, and why
  std::size_t filtered_by_type = 0;
  for (cl_platform_id platform_id : platform_ids) {
    Platform platform;
    platform.id = platform_id;
    platform.name = platform_string(platform_id, CL_PLATFORM_NAME);
    platform.version = platform_string(platform_id, CL_PLATFORM_VERSION);
    if (platform.name.empty()) platform.name = "unnamed OpenCL platform";
    platform_names.push_back("'" + platform.name + "'");
    if (!options.platform.empty() && platform.name.find(options.platform) == std::string::npos) continue;

    cl_uint device_count = 0;
    const cl_int counted = clGetDeviceIDs(platform_id, CL_DEVICE_TYPE_ALL, 0, nullptr, &device_count);
    if (counted == CL_DEVICE_NOT_FOUND || device_count == 0) continue;
    if (counted != CL_SUCCESS) {
      left_out.push_back("platform '" + platform.name + "' (clGetDeviceIDs: " + cl_error_name(counted) + ")");
      continue;
    }
    std::vector<cl_device_id> device_ids(device_count);
    if (clGetDeviceIDs(platform_id, CL_DEVICE_TYPE_ALL, device_count, device_ids.data(), nullptr) != CL_SUCCESS) {
      left_out.push_back("platform '" + platform.name + "' (clGetDeviceIDs failed listing its devices)");
      continue;
    }

    std::vector<std::unique_ptr<Device>> devices;
    for (cl_device_id device_id : device_ids) {
      if (!type_matches(options.device_type, device_value<cl_device_type>(device_id, CL_DEVICE_TYPE, 0))) {
        ++filtered_by_type;
        continue;
      }
      std::string skipped;
      std::unique_ptr<Device> device =
          describe_device(device_id, state.platforms.size(), platform, state.declared.rows, &skipped);
      if (device) {
        devices.push_back(std::move(device));
      } else {
        left_out.push_back(skipped);
      }
    }
    if (devices.empty()) continue;

    std::vector<cl_device_id> ids;
    for (const auto &device : devices) ids.push_back(device->id);
    const cl_context_properties properties[] = {CL_CONTEXT_PLATFORM,
                                                reinterpret_cast<cl_context_properties>(platform_id), 0};
    cl_int status = CL_SUCCESS;
    platform.context = ContextHandle(
        clCreateContext(properties, static_cast<cl_uint>(ids.size()), ids.data(), nullptr, nullptr, &status));
    if (status != CL_SUCCESS) {
      left_out.push_back("platform '" + platform.name + "' (clCreateContext: " + cl_error_name(status) + ")");
      continue;
    }
    for (auto &device : devices) {
      device->queue = QueueHandle(clCreateCommandQueue(platform.context.get(), device->id, 0, &status));
      if (status != CL_SUCCESS) {
        left_out.push_back("'" + device->name + "' (clCreateCommandQueue: " + cl_error_name(status) + ")");
        continue;
      }
      platform.devices.push_back(state.devices.size());
      state.devices.push_back(std::move(device));
    }
    if (!platform.devices.empty()) state.platforms.push_back(std::move(platform));
  }

  if (state.devices.empty()) {
    std::string why = "no OpenCL device";
    if (!options.platform.empty()) why += " on a platform whose name contains '" + options.platform + "'";
    if (options.device_type != DeviceTypeFilter::all) {
      why += std::string(" of type ") + device_type_filter_name(options.device_type);
    }
    state.kind_status = why + " (platforms: " + list(platform_names) + ")";
  }
  if (!left_out.empty()) {
    state.kind_status += std::string(state.kind_status.empty() ? "" : "; ") + "left out: " + list(left_out);
  }
  if (filtered_by_type != 0 && !state.devices.empty()) {
    log(state.services, BP_LOG_DEBUG, "%zu devices of other types than %s left out", filtered_by_type,
        device_type_filter_name(options.device_type));
  }
  for (std::size_t i = 0; i < state.devices.size(); ++i) {
    const Device &device = *state.devices[i];
    log(state.services, BP_LOG_DEBUG, "opencl:%zu is '%s' on '%s'", i, device.name.c_str(),
        state.platforms[device.platform].name.c_str());
  }
  if (!state.kind_status.empty()) log(state.services, BP_LOG_INFO, "%s", state.kind_status.c_str());
}

std::int32_t Backend::configure(bp_plugin_state &state, const char *options_json, bp_error_sink *sink) {
  std::string error;
  const std::optional<Options> options = parse_options(options_json, &error);
  if (!options) return fail(state.services, sink, BP_CONFIG, "opencl options: %s", error.c_str());

  std::lock_guard<std::mutex> lock(state.mutex);
  if (*options == state.options) return BP_OK;
  if (state.live_objects != 0) {
    return fail(state.services, sink, BP_CONFIG,
                "opencl options: cannot change the options while %zu buffers or groups of "
                "opencl devices exist; configure before creating any",
                state.live_objects);
  }
  discover(state, *options);
  return BP_OK;
}

// Under the state's mutex, with `device_index` among its devices.
std::int32_t Backend::device_info(bp_plugin_state &state, std::uint32_t device_index, bp_plugin_device_info &info,
                                  bp_error_sink *) {
  const Device &device = *state.devices[device_index];
  // The caller's struct may be older (smaller) than ours: write only what
  // fits in its struct_size.
  const std::size_t size = info.struct_size;
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, name)) info.name = device.name.c_str();
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, description)) info.description = device.description.c_str();
  // Buffers live in device memory: nothing wraps the caller's memory.
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, flags))
    info.flags = device.on_host_cores ? BP_DEVICE_ON_HOST_CORES : 0;
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, memory_bytes)) info.memory_bytes = device.global_memory_bytes;
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, capabilities)) {
    info.capabilities = device.capabilities.data();
  }
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, capability_count)) {
    info.capability_count = device.capabilities.size();
  }
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, property_keys)) {
    info.property_keys = device.property_key_pointers.data();
  }
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, property_values)) {
    info.property_values = device.property_value_pointers.data();
  }
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, property_count)) {
    info.property_count = device.property_key_pointers.size();
  }
  return BP_OK;
}

std::int32_t Backend::kind_info(bp_plugin_state &state, bp_plugin_kind_info &info, bp_error_sink *) {
  std::lock_guard<std::mutex> lock(state.mutex);
  if (info.struct_size >= BP_STRUCT_SIZE(bp_plugin_kind_info, status)) {
    info.status = state.kind_status.empty() ? nullptr : state.kind_status.c_str();
  }
  return BP_OK;
}

}  // namespace backplane::opencl
