// Building the kernels, and the on-disk cache of program binaries.
//
// The cache (plugin_support/disk_cache.hpp: where it lives, how files are
// written) holds one file per (kernel source, build options, platform name
// and version, device name and version, driver version), named by a
// 128-bit hash of them. A binary the driver refuses is rebuilt from source
// and replaced.
#include "program_cache.hpp"

#include <chrono>
#include <filesystem>
#include <optional>
#include <vector>

#include "plugin_support/disk_cache.hpp"

namespace backplane::opencl {
namespace {

// Build logs are cut to this many bytes in an error message (the first
// errors are the ones that explain the rest).
constexpr std::size_t kBuildLogBytes = 2000;

// The cache directory; resolved once per state, the caller holds
// state.mutex.
const std::string &cache_directory(bp_plugin_state &state) {
  if (!state.cache_directory_resolved) {
    state.cache_directory = plugin_support::cache_directory(state.services, "opencl", "program cache",
                                                            "kernels are compiled in every process");
    state.cache_directory_resolved = true;
  }
  return state.cache_directory;
}

std::string build_log(cl_program program, cl_device_id device) {
  std::size_t size = 0;
  if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size) != CL_SUCCESS || size == 0) {
    return "(no build log)";
  }
  std::string text(size, '\0');
  if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, text.data(), nullptr) != CL_SUCCESS) {
    return "(no build log)";
  }
  while (!text.empty() && (text.back() == '\0' || text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (text.empty()) return "(empty build log)";
  // One line: the host's messages are one line each.
  for (char &c : text) {
    if (c == '\n') c = '|';
  }
  if (text.size() > kBuildLogBytes) {
    const std::size_t cut = text.size() - kBuildLogBytes;
    text.resize(kBuildLogBytes);
    text += "... (" + std::to_string(cut) + " more bytes)";
  }
  return text;
}

// A program from a cached binary, built; empty when the file is missing or
// the driver refuses it (logged at debug, since rebuilding fixes it).
ProgramHandle load_cached(bp_plugin_state &state, const Device &device, const std::string &file,
                          const std::string &options) {
  const std::optional<std::vector<unsigned char>> binary =
      plugin_support::read_cache_file(state.services, "opencl", file);
  if (!binary) return {};
  const Platform &platform = state.platforms[device.platform];
  const unsigned char *data = binary->data();
  const std::size_t size = binary->size();
  cl_int binary_status = CL_SUCCESS;
  cl_int status = CL_SUCCESS;
  cl_device_id id = device.id;
  ProgramHandle program(
      clCreateProgramWithBinary(platform.context.get(), 1, &id, &size, &data, &binary_status, &status));
  if (status == CL_SUCCESS && binary_status == CL_SUCCESS) {
    status = clBuildProgram(program.get(), 1, &id, options.c_str(), nullptr, nullptr);
  } else if (status == CL_SUCCESS) {
    status = binary_status;
  }
  if (status != CL_SUCCESS) {
    log(state.services, BP_LOG_DEBUG, "cached program binary %s is not usable on '%s' (%s); building from source",
        file.c_str(), device.name.c_str(), cl_error_name(status));
    return {};
  }
  return program;
}

void store_binary(bp_plugin_state &state, const Device &device, cl_program program, const std::string &file) {
  std::size_t size = 0;
  if (clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr) != CL_SUCCESS || size == 0) {
    log(state.services, BP_LOG_DEBUG, "'%s' gives no program binary; nothing cached", device.name.c_str());
    return;
  }
  std::vector<unsigned char> binary(size);
  unsigned char *data = binary.data();
  if (clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof data, &data, nullptr) != CL_SUCCESS) {
    log(state.services, BP_LOG_DEBUG, "'%s' gives no program binary; nothing cached", device.name.c_str());
    return;
  }
  plugin_support::write_cache_file(state.services, "opencl", file, binary.data(), binary.size());
}

}  // namespace

std::string build_options(const DeviceFeatures &features, std::size_t ranks, const std::string &users) {
  std::string options = std::string("-cl-std=CL1.2 -DBP_HAVE_FP64=") + (features.fp64 ? "1" : "0") +
                        " -DBP_HAVE_INT64=" + (features.int64 ? "1" : "0") + " -DBP_RANKS=" + std::to_string(ranks);
  if (!users.empty()) options += " " + users;
  return options;
}

std::int32_t ensure_program(bp_plugin_state &state, Device &device, std::size_t ranks, bp_error_sink *sink) {
  ProgramHandle &slot = device.programs[ranks];
  if (slot) return BP_OK;
  const Platform &platform = state.platforms[device.platform];
  const std::string options = build_options(device.features, ranks, state.options.build_options);
  const auto started = std::chrono::steady_clock::now();

  std::string file;
  if (const std::string &directory = cache_directory(state); !directory.empty()) {
    auto property = [&](const char *key) {
      for (std::size_t i = 0; i < device.property_keys.size(); ++i) {
        if (device.property_keys[i] == key) return device.property_values[i];
      }
      return std::string();
    };
    const std::string key = plugin_support::cache_key({kKernelSource, options, platform.name, platform.version, device.name,
                                       property("version"), property("driver_version")});
    file = (std::filesystem::path(directory) / ("opencl-" + key + ".bin")).string();
    if (ProgramHandle cached = load_cached(state, device, file, options)) {
      slot = std::move(cached);
      log(state.services, BP_LOG_DEBUG, "program for '%s' (%s) loaded from the cache: %s", device.name.c_str(),
          options.c_str(), file.c_str());
      return BP_OK;
    }
  }

  cl_int status = CL_SUCCESS;
  const char *source = kKernelSource;
  ProgramHandle program(clCreateProgramWithSource(platform.context.get(), 1, &source, nullptr, &status));
  if (status != CL_SUCCESS) {
    return fail_cl(state.services, sink, status, "clCreateProgramWithSource", "collectives.cl", device.name.c_str());
  }
  cl_device_id id = device.id;
  status = clBuildProgram(program.get(), 1, &id, options.c_str(), nullptr, nullptr);
  if (status != CL_SUCCESS) {
    const std::string log_text = build_log(program.get(), device.id);
    return fail(state.services, sink, cl_status_code(status),
                "clBuildProgram(collectives.cl, %s) on '%s': %s (%d); build log: %s", options.c_str(),
                device.name.c_str(), cl_error_name(status), static_cast<int>(status), log_text.c_str());
  }
  const double milliseconds =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  if (!file.empty()) store_binary(state, device, program.get(), file);
  log(state.services, BP_LOG_DEBUG, "program for '%s' (%s) built from source in %.0f ms%s%s", device.name.c_str(),
      options.c_str(), milliseconds, file.empty() ? "" : "; cached as ", file.c_str());
  slot = std::move(program);
  return BP_OK;
}

}  // namespace backplane::opencl
