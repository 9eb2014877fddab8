// Talking back to the host, in the vulkan plugin's words: log lines in its
// category, and Vulkan failures by VkResult name and the call that failed.
#include <cstdarg>

#include "plugin_state.hpp"

namespace backplane::vulkan {

void log(const bp_host_services *services, std::int32_t level, const char *format, ...) noexcept {
  va_list arguments;
  va_start(arguments, format);
  plugin_support::vlog(services, level, kKindName, format, arguments);
  va_end(arguments);
}

std::int32_t fail_vk(const bp_host_services *services, bp_error_sink *sink, Gpu &gpu, VkResult result,
                     const char *call, const char *what) {
  const std::string name = result_name(result);
  if (result == VK_ERROR_DEVICE_LOST && !gpu.lost.load(std::memory_order_acquire)) {
    static std::mutex lost_mutex;  // the first to see it names the call
    std::lock_guard<std::mutex> lock(lost_mutex);
    if (!gpu.lost.load(std::memory_order_relaxed)) {
      gpu.lost_in = std::string(call) + " (" + what + ")";
      gpu.lost.store(true, std::memory_order_release);
      log(services, BP_LOG_ERROR, "'%s' is lost (%s: VK_ERROR_DEVICE_LOST); its groups and buffers fail from now on",
          gpu.name.c_str(), gpu.lost_in.c_str());
    }
  }
  const bool out_of_memory = result == VK_ERROR_OUT_OF_DEVICE_MEMORY || result == VK_ERROR_OUT_OF_HOST_MEMORY;
  return fail(services, sink, out_of_memory ? BP_OUT_OF_MEMORY : BP_DEVICE_FAILURE, "vulkan %s (%s) on '%s': %s",
              call, what, gpu.name.c_str(), name.c_str());
}

std::int32_t check_not_lost(const bp_host_services *services, bp_error_sink *sink, const Gpu &gpu) {
  if (!gpu.lost.load(std::memory_order_acquire)) return BP_OK;
  return fail(services, sink, BP_DEVICE_FAILURE,
              "vulkan: '%s' was lost (VK_ERROR_DEVICE_LOST in %s); nothing more runs on it; destroy its groups "
              "and buffers and create a new host",
              gpu.name.c_str(), gpu.lost_in.c_str());
}

}  // namespace backplane::vulkan
