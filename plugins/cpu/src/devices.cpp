// The cpu kind's logical devices: the host facts behind them, read at entry,
// and what each reports (name, host CPU model, physical memory). All of
// them share host memory.
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "plugin_state.hpp"

namespace backplane::cpu {
namespace {

// "model name" from /proc/cpuinfo; empty when the file or the field is
// missing (other architectures name it differently, containers may hide it).
std::string read_cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::size_t first = line.find_first_not_of(" \t", colon + 1);
    if (first == std::string::npos) continue;
    const std::size_t last = line.find_last_not_of(" \t\r");
    return line.substr(first, last - first + 1);
  }
  return {};
}

std::uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size);
}

// CPUs this process may run on (taskset, cgroup cpusets), which is what a
// pool can use; the online count when the affinity mask cannot be read.
std::uint32_t available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  long count = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0) count = CPU_COUNT(&set);
  if (count <= 0) count = sysconf(_SC_NPROCESSORS_ONLN);
  if (count <= 0) count = 1;
  return static_cast<std::uint32_t>(count < kMaxThreads ? count : kMaxThreads);
}

// Size of the largest cache level of CPU 0, from sysfs ("32768K"): that is
// the slice this machine (or virtual machine) really has. sysconf's figure
// comes from CPUID, which under a hypervisor may describe the whole host
// socket (384 MiB on the development VM, whose L3 is 32 MiB).
std::size_t sysfs_last_level_cache_bytes() {
  int best_level = 0;
  std::size_t best_bytes = 0;
  for (int index = 0; index < 16; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level");
    std::ifstream size_file(dir + "size");
    int level = 0;
    std::string size;
    if (!(level_file >> level) || !(size_file >> size) || size.empty()) continue;
    std::size_t multiplier = 1;
    if (size.back() == 'K') multiplier = std::size_t{1} << 10;
    if (size.back() == 'M') multiplier = std::size_t{1} << 20;
    if (multiplier != 1) size.pop_back();
    char *end = nullptr;
    const unsigned long long value = std::strtoull(size.c_str(), &end, 10);
    if (end == size.c_str() || *end != '\0' || value == 0) continue;
    if (level > best_level) {
      best_level = level;
      best_bytes = static_cast<std::size_t>(value) * multiplier;
    }
  }
  return best_bytes;
}

std::size_t last_level_cache_bytes() {
  if (const std::size_t bytes = sysfs_last_level_cache_bytes(); bytes != 0) return bytes;
  for (const int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    const long bytes = sysconf(name);
    if (bytes > 0) return static_cast<std::size_t>(bytes);
  }
  return kFallbackLastLevelCacheBytes;
}

}  // namespace

std::unique_ptr<bp_plugin_state> make_state(const bp_host_services *services) {
  auto state = std::make_unique<bp_plugin_state>();
  state->services = services;
  state->cpu_model = read_cpu_model();
  if (state->cpu_model.empty()) state->cpu_model = "an unnamed host CPU";
  state->hardware_threads = sysconf(_SC_NPROCESSORS_ONLN);
  state->memory_bytes = physical_memory_bytes();
  state->available_cpus = available_cpus();
  state->last_level_cache_bytes = last_level_cache_bytes();
  state->threads = state->available_cpus;
  state->parallel_threshold_bytes = kDefaultParallelThresholdBytes;
  state->streaming_threshold_bytes = default_streaming_threshold(state->last_level_cache_bytes);
  state->async_threshold_bytes = kDefaultAsyncThresholdBytes;
  return state;
}

// Under the state's mutex, with `device` among its devices.
std::int32_t Backend::device_info(bp_plugin_state &state, std::uint32_t device, bp_plugin_device_info &info,
                                  bp_error_sink *) {
  const auto key = std::make_pair(state.device_count, device);
  auto found = state.device_strings.find(key);
  if (found == state.device_strings.end()) {
    bp_plugin_state::DeviceStrings made;
    made.name = "cpu logical device " + std::to_string(device);
    made.description = "logical device " + std::to_string(device) + " of " + std::to_string(state.device_count) +
                       " on " + state.cpu_model + " (" + std::to_string(state.hardware_threads) +
                       " hardware threads, host memory)";
    found = state.device_strings.emplace(key, std::move(made)).first;
  }
  const bp_plugin_state::DeviceStrings &strings = found->second;

  // The caller's struct may be older (smaller) than ours: write only what
  // fits in its struct_size.
  const std::size_t size = info.struct_size;
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, name)) info.name = strings.name.c_str();
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, description)) {
    info.description = strings.description.c_str();
  }
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, flags)) info.flags = BP_DEVICE_HOST_ADDRESSABLE | BP_DEVICE_ON_HOST_CORES;
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, memory_bytes)) info.memory_bytes = state.memory_bytes;
  // Every cpu device supports all its kind declares.
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, capabilities)) info.capabilities = nullptr;
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, capability_count)) info.capability_count = 0;
  return BP_OK;
}

}  // namespace backplane::cpu
