// The Vulkan entry points the plugin calls, loaded at run time from the
// Khronos loader (libvulkan.so.1) rather than linked: a machine without the
// loader still loads the plugin, which then reports no device and says why
// (kind_info), as the ABI asks of a kind whose driver is missing.
//
// One VulkanApi per plugin state: the loader is opened with the state and
// closed with it, and every instance and device function is resolved once,
// through vkGetInstanceProcAddr and vkGetDeviceProcAddr (which return the
// driver's own entry for device functions, skipping the loader's
// trampoline).
#pragma once

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <string>

namespace backplane::vulkan {

// Functions of the loader itself, before any instance exists.
#define BP_VULKAN_GLOBAL_FUNCTIONS(X)      \
  X(vkEnumerateInstanceVersion)            \
  X(vkEnumerateInstanceLayerProperties)    \
  X(vkEnumerateInstanceExtensionProperties) \
  X(vkCreateInstance)

// Functions of an instance and its physical devices.
#define BP_VULKAN_INSTANCE_FUNCTIONS(X)        \
  X(vkDestroyInstance)                         \
  X(vkEnumeratePhysicalDevices)                \
  X(vkGetPhysicalDeviceProperties)             \
  X(vkGetPhysicalDeviceProperties2)            \
  X(vkGetPhysicalDeviceFeatures2)              \
  X(vkGetPhysicalDeviceMemoryProperties)       \
  X(vkGetPhysicalDeviceFormatProperties)       \
  X(vkGetPhysicalDeviceQueueFamilyProperties)  \
  X(vkGetPhysicalDeviceExternalBufferProperties) \
  X(vkEnumerateDeviceExtensionProperties)      \
  X(vkCreateDevice)                            \
  X(vkGetDeviceProcAddr)

// Of VK_EXT_debug_utils, present only when the validation option enabled it.
#define BP_VULKAN_DEBUG_FUNCTIONS(X)   \
  X(vkCreateDebugUtilsMessengerEXT)    \
  X(vkDestroyDebugUtilsMessengerEXT)

// Functions of a logical device.
#define BP_VULKAN_DEVICE_FUNCTIONS(X)   \
  X(vkDestroyDevice)                    \
  X(vkDeviceWaitIdle)                   \
  X(vkResetCommandBuffer)               \
  X(vkGetDeviceQueue)                   \
  X(vkCreateBuffer)                     \
  X(vkDestroyBuffer)                    \
  X(vkGetBufferMemoryRequirements)      \
  X(vkAllocateMemory)                   \
  X(vkFreeMemory)                       \
  X(vkBindBufferMemory)                 \
  X(vkMapMemory)                        \
  X(vkUnmapMemory)                      \
  X(vkGetBufferDeviceAddress)           \
  X(vkCreateCommandPool)                \
  X(vkDestroyCommandPool)               \
  X(vkAllocateCommandBuffers)           \
  X(vkFreeCommandBuffers)               \
  X(vkBeginCommandBuffer)               \
  X(vkEndCommandBuffer)                 \
  X(vkCmdCopyBuffer)                    \
  X(vkCmdFillBuffer)                    \
  X(vkCmdPipelineBarrier)               \
  X(vkCmdBindPipeline)                  \
  X(vkCmdPushConstants)                 \
  X(vkCmdDispatch)                      \
  X(vkQueueSubmit)                      \
  X(vkCreateSemaphore)                  \
  X(vkDestroySemaphore)                 \
  X(vkGetSemaphoreCounterValue)         \
  X(vkWaitSemaphores)                   \
  X(vkCreateShaderModule)               \
  X(vkDestroyShaderModule)              \
  X(vkCreatePipelineLayout)             \
  X(vkDestroyPipelineLayout)            \
  X(vkCreatePipelineCache)              \
  X(vkDestroyPipelineCache)             \
  X(vkGetPipelineCacheData)             \
  X(vkCreateComputePipelines)           \
  X(vkDestroyPipeline)                  \
  X(vkCreateBufferView)                 \
  X(vkDestroyBufferView)                \
  X(vkCreateDescriptorSetLayout)        \
  X(vkDestroyDescriptorSetLayout)

// Of VK_KHR_push_descriptor, present only when the device enabled it (the
// texel-buffer inputs of reduce.comp).
#define BP_VULKAN_PUSH_DESCRIPTOR_FUNCTIONS(X) X(vkCmdPushDescriptorSetKHR)
// Of VK_EXT_external_memory_host, present only when the device enabled it
// (buffer_wrap_host).
#define BP_VULKAN_HOST_POINTER_FUNCTIONS(X) X(vkGetMemoryHostPointerPropertiesEXT)

#define BP_VULKAN_DECLARE(name) PFN_##name name = nullptr;

// The loader, once opened: its global functions.
struct VulkanLoader {
  void *library = nullptr;  // dlopen handle; closed by close()
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  BP_VULKAN_GLOBAL_FUNCTIONS(BP_VULKAN_DECLARE)

  // Opens libvulkan.so.1 (or $BACKPLANE_VULKAN_LOADER, for tests that need
  // "no loader"): false with *why when it is not there or lacks a function.
  bool open(std::string *why);
  void close();
};

// An instance's functions.
struct InstanceFunctions {
  BP_VULKAN_INSTANCE_FUNCTIONS(BP_VULKAN_DECLARE)
  BP_VULKAN_DEBUG_FUNCTIONS(BP_VULKAN_DECLARE)

  // Resolves every instance function (the debug ones only when asked); false
  // with *why naming the first that is missing.
  bool load(const VulkanLoader &loader, VkInstance instance, bool with_debug_utils, std::string *why);
};

// A logical device's functions.
struct DeviceFunctions {
  BP_VULKAN_DEVICE_FUNCTIONS(BP_VULKAN_DECLARE)
  BP_VULKAN_PUSH_DESCRIPTOR_FUNCTIONS(BP_VULKAN_DECLARE)
  BP_VULKAN_HOST_POINTER_FUNCTIONS(BP_VULKAN_DECLARE)

  // Resolves every device function (those of an extension only when it is
  // enabled); false with *why naming the first that is missing.
  bool load(const InstanceFunctions &instance, VkDevice device, bool with_push_descriptors, bool with_host_pointers,
            std::string *why);
};

#undef BP_VULKAN_DECLARE

// "VK_ERROR_DEVICE_LOST" for a VkResult; "VkResult -1000001004" for one it
// does not know.
std::string result_name(VkResult result);

}  // namespace backplane::vulkan
