// Loading the Vulkan loader and resolving its functions (vulkan_api.hpp).
#include "vulkan_api.hpp"

#include <dlfcn.h>

#include <cstdlib>

namespace backplane::vulkan {

bool VulkanLoader::open(std::string *why) {
  const char *override_path = std::getenv("BACKPLANE_VULKAN_LOADER");
  const char *path = override_path != nullptr && *override_path != '\0' ? override_path : "libvulkan.so.1";
  library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char *error = dlerror();
    *why = std::string("the Vulkan loader ") + path + " cannot be loaded: " + (error != nullptr ? error : "?") +
           " (Debian: libvulkan1)";
    return false;
  }
  vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(library, "vkGetInstanceProcAddr"));
  if (vkGetInstanceProcAddr == nullptr) {
    *why = std::string("the Vulkan loader ") + path + " has no vkGetInstanceProcAddr";
    close();
    return false;
  }
#define BP_VULKAN_LOAD_GLOBAL(name)                                                             \
  name = reinterpret_cast<PFN_##name>(vkGetInstanceProcAddr(nullptr, #name));                 \
  if (name == nullptr) {                                                                       \
    *why = std::string("the Vulkan loader ") + path + " has no " #name " (Vulkan 1.1 or later needed)"; \
    close();                                                                                   \
    return false;                                                                              \
  }
  BP_VULKAN_GLOBAL_FUNCTIONS(BP_VULKAN_LOAD_GLOBAL)
#undef BP_VULKAN_LOAD_GLOBAL
  return true;
}

void VulkanLoader::close() {
  if (library != nullptr) dlclose(library);
  library = nullptr;
  vkGetInstanceProcAddr = nullptr;
}

bool InstanceFunctions::load(const VulkanLoader &loader, VkInstance instance, bool with_debug_utils,
                             std::string *why) {
#define BP_VULKAN_LOAD_INSTANCE(name)                                                      \
  name = reinterpret_cast<PFN_##name>(loader.vkGetInstanceProcAddr(instance, #name));      \
  if (name == nullptr) {                                                                   \
    *why = "the Vulkan instance has no " #name;                                            \
    return false;                                                                          \
  }
  BP_VULKAN_INSTANCE_FUNCTIONS(BP_VULKAN_LOAD_INSTANCE)
  if (with_debug_utils) {
    BP_VULKAN_DEBUG_FUNCTIONS(BP_VULKAN_LOAD_INSTANCE)
  }
#undef BP_VULKAN_LOAD_INSTANCE
  return true;
}

bool DeviceFunctions::load(const InstanceFunctions &instance, VkDevice device, bool with_push_descriptors,
                           bool with_host_pointers, std::string *why) {
#define BP_VULKAN_LOAD_DEVICE(name)                                                  \
  name = reinterpret_cast<PFN_##name>(instance.vkGetDeviceProcAddr(device, #name));  \
  if (name == nullptr) {                                                             \
    *why = "the Vulkan device has no " #name;                                        \
    return false;                                                                    \
  }
  BP_VULKAN_DEVICE_FUNCTIONS(BP_VULKAN_LOAD_DEVICE)
  if (with_push_descriptors) {
    BP_VULKAN_PUSH_DESCRIPTOR_FUNCTIONS(BP_VULKAN_LOAD_DEVICE)
  }
  if (with_host_pointers) {
    BP_VULKAN_HOST_POINTER_FUNCTIONS(BP_VULKAN_LOAD_DEVICE)
  }
#undef BP_VULKAN_LOAD_DEVICE
  return true;
}

std::string result_name(VkResult result) {
  switch (result) {
#define BP_VULKAN_RESULT(name) \
  case name: return #name;
    BP_VULKAN_RESULT(VK_SUCCESS)
    BP_VULKAN_RESULT(VK_NOT_READY)
    BP_VULKAN_RESULT(VK_TIMEOUT)
    BP_VULKAN_RESULT(VK_EVENT_SET)
    BP_VULKAN_RESULT(VK_EVENT_RESET)
    BP_VULKAN_RESULT(VK_INCOMPLETE)
    BP_VULKAN_RESULT(VK_ERROR_OUT_OF_HOST_MEMORY)
    BP_VULKAN_RESULT(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    BP_VULKAN_RESULT(VK_ERROR_INITIALIZATION_FAILED)
    BP_VULKAN_RESULT(VK_ERROR_DEVICE_LOST)
    BP_VULKAN_RESULT(VK_ERROR_MEMORY_MAP_FAILED)
    BP_VULKAN_RESULT(VK_ERROR_LAYER_NOT_PRESENT)
    BP_VULKAN_RESULT(VK_ERROR_EXTENSION_NOT_PRESENT)
    BP_VULKAN_RESULT(VK_ERROR_FEATURE_NOT_PRESENT)
    BP_VULKAN_RESULT(VK_ERROR_INCOMPATIBLE_DRIVER)
    BP_VULKAN_RESULT(VK_ERROR_TOO_MANY_OBJECTS)
    BP_VULKAN_RESULT(VK_ERROR_FORMAT_NOT_SUPPORTED)
    BP_VULKAN_RESULT(VK_ERROR_FRAGMENTED_POOL)
    BP_VULKAN_RESULT(VK_ERROR_UNKNOWN)
    BP_VULKAN_RESULT(VK_ERROR_OUT_OF_POOL_MEMORY)
    BP_VULKAN_RESULT(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    BP_VULKAN_RESULT(VK_ERROR_FRAGMENTATION)
    BP_VULKAN_RESULT(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
    BP_VULKAN_RESULT(VK_PIPELINE_COMPILE_REQUIRED)
    BP_VULKAN_RESULT(VK_ERROR_VALIDATION_FAILED_EXT)
#undef BP_VULKAN_RESULT
    default: return "VkResult " + std::to_string(static_cast<int>(result));
  }
}

}  // namespace backplane::vulkan
