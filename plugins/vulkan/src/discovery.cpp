// The vulkan kind's devices: every physical device the loader reports
// (vkEnumeratePhysicalDevices order) that has a compute queue and what the
// shaders need (Vulkan 1.2, buffer device addresses, timeline semaphores),
// each shown as `ranks_per_device` logical devices that share its VkDevice.
// Also configure, device_info and kind_info, which read what discovery found.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capabilities.hpp"
#include "plugin_state.hpp"

namespace backplane::vulkan {
namespace {

constexpr const char *kValidationLayer = "VK_LAYER_KHRONOS_validation";

std::string one_line(const char *text) {
  std::string line = text != nullptr ? text : "";
  for (char &c : line) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return line;
}

std::string version_text(std::uint32_t version) {
  return std::to_string(VK_API_VERSION_MAJOR(version)) + "." + std::to_string(VK_API_VERSION_MINOR(version)) + "." +
         std::to_string(VK_API_VERSION_PATCH(version));
}

// NVIDIA packs its driver version its own way (10/8/8/6 bits); everyone
// else follows VK_MAKE_API_VERSION's layout.
std::string driver_version_text(std::uint32_t vendor, std::uint32_t version) {
  if (vendor == 0x10DE) {
    return std::to_string((version >> 22) & 0x3FF) + "." + std::to_string((version >> 14) & 0xFF) + "." +
           std::to_string((version >> 6) & 0xFF) + "." + std::to_string(version & 0x3F);
  }
  return version_text(version);
}

const char *device_type_name(VkPhysicalDeviceType type) {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated_gpu";
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete_gpu";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual_gpu";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
  }
}

std::string uuid_text(const std::uint8_t (&uuid)[VK_UUID_SIZE]) {
  std::string text;
  char hex[3];
  for (std::size_t i = 0; i < VK_UUID_SIZE; ++i) {
    std::snprintf(hex, sizeof hex, "%02x", uuid[i]);
    text += hex;
    if (i == 3 || i == 5 || i == 7 || i == 9) text += '-';
  }
  return text;
}

std::string mebibytes(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f MiB", static_cast<double>(bytes) / static_cast<double>(1u << 20));
  return text;
}

std::string list(const std::vector<std::string> &items) {
  std::string text;
  for (const std::string &item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

bool layer_present(const VulkanLoader &loader, const char *name) {
  std::uint32_t count = 0;
  if (loader.vkEnumerateInstanceLayerProperties(&count, nullptr) != VK_SUCCESS) return false;
  std::vector<VkLayerProperties> layers(count);
  if (loader.vkEnumerateInstanceLayerProperties(&count, layers.data()) != VK_SUCCESS) return false;
  return std::any_of(layers.begin(), layers.begin() + count,
                     [&](const VkLayerProperties &layer) { return std::strcmp(layer.layerName, name) == 0; });
}

VKAPI_ATTR VkBool32 VKAPI_CALL on_validation_message(VkDebugUtilsMessageSeverityFlagBitsEXT,
                                                     VkDebugUtilsMessageTypeFlagsEXT,
                                                     const VkDebugUtilsMessengerCallbackDataEXT *data,
                                                     void *user_data) {
  auto *sink = static_cast<bp_plugin_state::ValidationSink *>(user_data);
  sink->messages.fetch_add(1, std::memory_order_relaxed);
  log(sink->services, BP_LOG_ERROR, "validation: %s",
      one_line(data != nullptr ? data->pMessage : nullptr).c_str());
  return VK_FALSE;
}

// The features of `physical` the plugin uses, as the driver reports them.
FeatureSet supported_features(const InstanceFunctions &vk, VkPhysicalDevice physical) {
  VkPhysicalDeviceVulkan12Features features12{};
  features12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  VkPhysicalDeviceVulkan11Features features11{};
  features11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
  features11.pNext = &features12;
  VkPhysicalDeviceFeatures2 features{};
  features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  features.pNext = &features11;
  vk.vkGetPhysicalDeviceFeatures2(physical, &features);
  FeatureSet set = 0;
  const auto add = [&](Feature feature, VkBool32 present) {
    if (present) set |= feature_bit(feature);
  };
  add(Feature::shaderFloat64, features.features.shaderFloat64);
  add(Feature::shaderInt64, features.features.shaderInt64);
  add(Feature::shaderInt16, features.features.shaderInt16);
  add(Feature::shaderFloat16, features12.shaderFloat16);
  add(Feature::shaderInt8, features12.shaderInt8);
  add(Feature::storageBuffer16BitAccess, features11.storageBuffer16BitAccess);
  add(Feature::storageBuffer8BitAccess, features12.storageBuffer8BitAccess);
  add(Feature::bufferDeviceAddress, features12.bufferDeviceAddress);
  add(Feature::timelineSemaphore, features12.timelineSemaphore);
  return set;
}

std::string feature_list(FeatureSet set) {
  std::vector<std::string> names;
  for (std::uint32_t f = 0; f < kFeatureCount; ++f) {
    if (set & feature_bit(static_cast<Feature>(f))) names.emplace_back(feature_name(static_cast<Feature>(f)));
  }
  return names.empty() ? std::string("none") : list(names);
}

// The first queue family with compute, preferring one without graphics (a
// GPU's asynchronous compute queue); UINT32_MAX when there is none.
std::uint32_t compute_queue_family(const InstanceFunctions &vk, VkPhysicalDevice physical) {
  std::uint32_t count = 0;
  vk.vkGetPhysicalDeviceQueueFamilyProperties(physical, &count, nullptr);
  std::vector<VkQueueFamilyProperties> families(count);
  vk.vkGetPhysicalDeviceQueueFamilyProperties(physical, &count, families.data());
  std::uint32_t chosen = UINT32_MAX;
  for (std::uint32_t i = 0; i < count; ++i) {
    const VkQueueFlags flags = families[i].queueFlags;
    if (!(flags & VK_QUEUE_COMPUTE_BIT) || families[i].queueCount == 0) continue;
    if (!(flags & VK_QUEUE_GRAPHICS_BIT)) return i;
    if (chosen == UINT32_MAX) chosen = i;
  }
  return chosen;
}

bool device_extension_present(const InstanceFunctions &vk, VkPhysicalDevice physical, const char *name) {
  std::uint32_t count = 0;
  if (vk.vkEnumerateDeviceExtensionProperties(physical, nullptr, &count, nullptr) != VK_SUCCESS) return false;
  std::vector<VkExtensionProperties> extensions(count);
  if (vk.vkEnumerateDeviceExtensionProperties(physical, nullptr, &count, extensions.data()) != VK_SUCCESS) {
    return false;
  }
  return std::any_of(extensions.begin(), extensions.begin() + count,
                     [&](const VkExtensionProperties &extension) { return std::strcmp(extension.extensionName, name) == 0; });
}

// The format reduce.comp's TEXEL_BUFFERS variant of each element type views
// its buffers with, four elements to a texel (the shader's sampler types and
// image format qualifiers match); none for the 64-bit types, whose texel
// formats need extensions few drivers have.
constexpr std::array<VkFormat, BP_DTYPE_COUNT> kTexelFormats = {
    VK_FORMAT_R16G16B16A16_SFLOAT, VK_FORMAT_R16G16B16A16_UINT, VK_FORMAT_R32G32B32A32_SFLOAT,
    VK_FORMAT_UNDEFINED,           VK_FORMAT_R8G8B8A8_SINT,     VK_FORMAT_R8G8B8A8_UINT,
    VK_FORMAT_R32G32B32A32_SINT,   VK_FORMAT_R32G32B32A32_UINT, VK_FORMAT_UNDEFINED,
    VK_FORMAT_UNDEFINED};
constexpr VkFormatFeatureFlags kTexelFormatFeatures =
    VK_FORMAT_FEATURE_UNIFORM_TEXEL_BUFFER_BIT | VK_FORMAT_FEATURE_STORAGE_TEXEL_BUFFER_BIT;

// Whether `gpu` reads reduction inputs as texel buffers, and with which
// formats (Gpu::texel_buffers); the property's text in *text.
void choose_reduce_inputs(const bp_plugin_state &state, const Options &options, Gpu &gpu, std::string *text) {
  *text = "addresses";
  const bool wanted = options.reduce_inputs == ReduceInputs::texel_buffers ||
                      (options.reduce_inputs == ReduceInputs::automatic && gpu.type == VK_PHYSICAL_DEVICE_TYPE_CPU);
  if (!wanted) return;
  if (!device_extension_present(state.vk, gpu.physical, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME)) {
    *text += " (no " VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME " for texel buffers)";
    return;
  }
  VkPhysicalDevicePushDescriptorPropertiesKHR push{};
  push.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PUSH_DESCRIPTOR_PROPERTIES_KHR;
  VkPhysicalDeviceProperties2 properties{};
  properties.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  properties.pNext = &push;
  state.vk.vkGetPhysicalDeviceProperties2(gpu.physical, &properties);
  gpu.max_texel_views = std::min({kMaxTexelViews, push.maxPushDescriptors, gpu.limits.maxPerStageDescriptorSampledImages,
                                  gpu.limits.maxPerStageDescriptorStorageImages, gpu.limits.maxPerStageResources,
                                  gpu.limits.maxDescriptorSetSampledImages, gpu.limits.maxDescriptorSetStorageImages});
  std::string formats;
  for (std::size_t dtype = 0; dtype < BP_DTYPE_COUNT; ++dtype) {
    if (kTexelFormats[dtype] == VK_FORMAT_UNDEFINED) continue;
    VkFormatProperties format{};
    state.vk.vkGetPhysicalDeviceFormatProperties(gpu.physical, kTexelFormats[dtype], &format);
    if ((format.bufferFeatures & kTexelFormatFeatures) != kTexelFormatFeatures) continue;
    gpu.texel_formats[dtype] = kTexelFormats[dtype];
    formats += (formats.empty() ? "" : ", ") + std::string(dtype_name(static_cast<std::uint32_t>(dtype)));
  }
  // Two ranks' all_reduce: two inputs, two outputs.
  if (formats.empty() || gpu.max_texel_views < 4) {
    gpu.texel_formats = {};
    *text += " (no texel buffer format or too few push descriptors)";
    return;
  }
  gpu.texel_buffers = true;
  *text = "texel_buffers for " + formats + " up to " + std::to_string(gpu.max_texel_views) +
          " views a dispatch (inputs and outputs together) and 4 elements or more; addresses otherwise";
}

// Whether buffer_wrap_host can import caller memory on `gpu` as rank
// buffers (Gpu::host_pointer_alignment); the property's text in *text.
// After choose_reduce_inputs, which decides the buffers' usage.
void choose_host_import(const bp_plugin_state &state, Gpu &gpu, std::string *text) {
  if (!device_extension_present(state.vk, gpu.physical, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME)) {
    *text = "no (the driver lacks " VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME ")";
    return;
  }
  VkPhysicalDeviceExternalBufferInfo buffer_info{};
  buffer_info.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_BUFFER_INFO;
  buffer_info.usage = rank_buffer_usage(gpu);
  buffer_info.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
  VkExternalBufferProperties buffer_properties{};
  buffer_properties.sType = VK_STRUCTURE_TYPE_EXTERNAL_BUFFER_PROPERTIES;
  state.vk.vkGetPhysicalDeviceExternalBufferProperties(gpu.physical, &buffer_info, &buffer_properties);
  if (!(buffer_properties.externalMemoryProperties.externalMemoryFeatures & VK_EXTERNAL_MEMORY_FEATURE_IMPORTABLE_BIT)) {
    *text = "no (host allocations are not importable as storage buffers)";
    return;
  }
  VkPhysicalDeviceExternalMemoryHostPropertiesEXT host{};
  host.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT;
  VkPhysicalDeviceProperties2 properties{};
  properties.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  properties.pNext = &host;
  state.vk.vkGetPhysicalDeviceProperties2(gpu.physical, &properties);
  const VkDeviceSize alignment = host.minImportedHostPointerAlignment;
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    *text = "no (minImportedHostPointerAlignment " + std::to_string(alignment) + " is not a power of two)";
    return;
  }
  gpu.host_pointer_alignment = alignment;
  *text = std::string(VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME) + ", imported in pieces of " +
          std::to_string(alignment) + " bytes";
}

// The VkDevice of `gpu` with its features enabled, its queue, timeline and
// pipeline layout; false with *why naming the call that failed.
bool open_gpu(const bp_plugin_state &state, Gpu &gpu, std::string *why) {
  const auto has = [&](Feature feature) -> VkBool32 { return (gpu.features & feature_bit(feature)) ? 1 : 0; };
  VkPhysicalDeviceVulkan12Features features12{};
  features12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  features12.shaderFloat16 = has(Feature::shaderFloat16);
  features12.shaderInt8 = has(Feature::shaderInt8);
  features12.storageBuffer8BitAccess = has(Feature::storageBuffer8BitAccess);
  features12.bufferDeviceAddress = VK_TRUE;
  features12.timelineSemaphore = VK_TRUE;
  VkPhysicalDeviceVulkan11Features features11{};
  features11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
  features11.pNext = &features12;
  features11.storageBuffer16BitAccess = has(Feature::storageBuffer16BitAccess);
  VkPhysicalDeviceFeatures2 features{};
  features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  features.pNext = &features11;
  features.features.shaderFloat64 = has(Feature::shaderFloat64);
  features.features.shaderInt64 = has(Feature::shaderInt64);
  features.features.shaderInt16 = has(Feature::shaderInt16);

  const float priority = 1.0f;
  VkDeviceQueueCreateInfo queue_info{};
  queue_info.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
  queue_info.queueFamilyIndex = gpu.queue_family;
  queue_info.queueCount = 1;
  queue_info.pQueuePriorities = &priority;
  std::vector<const char *> extensions;
  if (gpu.texel_buffers) extensions.push_back(VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
  if (gpu.host_pointer_alignment != 0) extensions.push_back(VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
  VkDeviceCreateInfo device_info{};
  device_info.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
  device_info.pNext = &features;
  device_info.queueCreateInfoCount = 1;
  device_info.pQueueCreateInfos = &queue_info;
  device_info.enabledExtensionCount = static_cast<std::uint32_t>(extensions.size());
  device_info.ppEnabledExtensionNames = extensions.data();
  if (const VkResult result = state.vk.vkCreateDevice(gpu.physical, &device_info, nullptr, &gpu.device);
      result != VK_SUCCESS) {
    gpu.device = VK_NULL_HANDLE;
    *why = "vkCreateDevice: " + result_name(result);
    return false;
  }
  if (!gpu.vk.load(state.vk, gpu.device, gpu.texel_buffers, gpu.host_pointer_alignment != 0, why)) return false;
  gpu.vk.vkGetDeviceQueue(gpu.device, gpu.queue_family, 0, &gpu.queue);

  VkSemaphoreTypeCreateInfo timeline_type{};
  timeline_type.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO;
  timeline_type.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  VkSemaphoreCreateInfo semaphore_info{};
  semaphore_info.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO;
  semaphore_info.pNext = &timeline_type;
  if (const VkResult result = gpu.vk.vkCreateSemaphore(gpu.device, &semaphore_info, nullptr, &gpu.timeline);
      result != VK_SUCCESS) {
    *why = "vkCreateSemaphore (timeline): " + result_name(result);
    return false;
  }

  VkPushConstantRange push_range{VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(ReduceArguments)};
  VkPipelineLayoutCreateInfo layout_info{};
  layout_info.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
  layout_info.pushConstantRangeCount = 1;
  layout_info.pPushConstantRanges = &push_range;
  if (const VkResult result = gpu.vk.vkCreatePipelineLayout(gpu.device, &layout_info, nullptr, &gpu.pipeline_layout);
      result != VK_SUCCESS) {
    *why = "vkCreatePipelineLayout: " + result_name(result);
    return false;
  }

  VkCommandPoolCreateInfo pool_info{};
  pool_info.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pool_info.queueFamilyIndex = gpu.queue_family;
  if (const VkResult result = gpu.vk.vkCreateCommandPool(gpu.device, &pool_info, nullptr, &gpu.transfer_pool);
      result != VK_SUCCESS) {
    *why = "vkCreateCommandPool: " + result_name(result);
    return false;
  }
  VkCommandBufferAllocateInfo allocate_info{};
  allocate_info.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
  allocate_info.commandPool = gpu.transfer_pool;
  allocate_info.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  allocate_info.commandBufferCount = 1;
  if (const VkResult result = gpu.vk.vkAllocateCommandBuffers(gpu.device, &allocate_info, &gpu.transfer_commands);
      result != VK_SUCCESS) {
    *why = "vkAllocateCommandBuffers: " + result_name(result);
    return false;
  }
  return true;
}

// Everything about one physical device but its VkDevice; nullptr (with
// *skipped saying why) for one the plugin cannot run on.
std::unique_ptr<Gpu> describe_gpu(const bp_plugin_state &state, VkPhysicalDevice physical, std::size_t index,
                                  const Options &options, std::vector<std::string> &properties_out_keys,
                                  std::vector<std::string> &properties_out_values, std::string *description,
                                  std::string *skipped) {
  auto gpu = std::make_unique<Gpu>();
  gpu->index = index;
  gpu->physical = physical;
  VkPhysicalDeviceProperties core{};
  state.vk.vkGetPhysicalDeviceProperties(physical, &core);
  gpu->name = one_line(core.deviceName);
  if (gpu->name.empty()) gpu->name = "unnamed Vulkan device";
  if (core.apiVersion < VK_API_VERSION_1_2) {
    *skipped = "'" + gpu->name + "' (Vulkan " + version_text(core.apiVersion) +
               "; the plugin needs 1.2: buffer device addresses and timeline semaphores)";
    return nullptr;
  }

  VkPhysicalDeviceVulkan12Properties properties12{};
  properties12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES;
  VkPhysicalDeviceVulkan11Properties properties11{};
  properties11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES;
  properties11.pNext = &properties12;
  VkPhysicalDeviceProperties2 properties{};
  properties.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  properties.pNext = &properties11;
  state.vk.vkGetPhysicalDeviceProperties2(physical, &properties);
  gpu->type = core.deviceType;
  gpu->limits = core.limits;
  gpu->max_allocation_bytes = properties11.maxMemoryAllocationSize;
  gpu->vendor_id = core.vendorID;
  gpu->device_id = core.deviceID;
  gpu->driver_version = core.driverVersion;
  std::memcpy(gpu->pipeline_cache_uuid.data(), core.pipelineCacheUUID, VK_UUID_SIZE);
  state.vk.vkGetPhysicalDeviceMemoryProperties(physical, &gpu->memory_properties);

  const FeatureSet supported = supported_features(state.vk, physical);
  gpu->features = supported & ~options.disabled_features;
  constexpr FeatureSet kRequired = feature_bit(Feature::bufferDeviceAddress) | feature_bit(Feature::timelineSemaphore);
  if ((gpu->features & kRequired) != kRequired) {
    const bool masked = (supported & kRequired) == kRequired;
    *skipped = "'" + gpu->name + "' (" + (masked ? "disable_features masks " : "lacks ") +
               feature_list(kRequired & ~gpu->features) + ", which the plugin needs)";
    return nullptr;
  }
  gpu->queue_family = compute_queue_family(state.vk, physical);
  if (gpu->queue_family == UINT32_MAX) {
    *skipped = "'" + gpu->name + "' (no queue family with compute)";
    return nullptr;
  }
  gpu->mapped_buffers = options.transfers == Transfers::automatic &&
                        (core.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ||
                         core.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU);

  std::uint64_t device_local = 0, host_visible = 0;
  const VkPhysicalDeviceMemoryProperties &memory = gpu->memory_properties;
  for (std::uint32_t h = 0; h < memory.memoryHeapCount; ++h) {
    bool visible = false;
    for (std::uint32_t t = 0; t < memory.memoryTypeCount; ++t) {
      if (memory.memoryTypes[t].heapIndex == h &&
          (memory.memoryTypes[t].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) {
        visible = true;
      }
    }
    if (memory.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) device_local += memory.memoryHeaps[h].size;
    if (visible) host_visible += memory.memoryHeaps[h].size;
  }

  const auto add = [&](const char *key, std::string value) {
    properties_out_keys.emplace_back(key);
    properties_out_values.push_back(one_line(value.c_str()));
  };
  const std::string driver_version = driver_version_text(core.vendorID, core.driverVersion);
  char id[16];
  add("device", gpu->name);
  add("physical_device", std::to_string(index));
  std::snprintf(id, sizeof id, "0x%04x", core.vendorID);
  add("vendor_id", id);
  std::snprintf(id, sizeof id, "0x%04x", core.deviceID);
  add("device_id", id);
  add("device_type", device_type_name(core.deviceType));
  add("driver_name", properties12.driverName);
  add("driver_info", properties12.driverInfo);
  add("api_version", version_text(core.apiVersion));
  add("driver_version", driver_version);
  add("uuid", uuid_text(properties11.deviceUUID));
  add("device_local_heap_bytes", std::to_string(device_local));
  add("host_visible_heap_bytes", std::to_string(host_visible));
  add("subgroup_size", std::to_string(properties11.subgroupSize));
  add("max_storage_buffer_range", std::to_string(core.limits.maxStorageBufferRange));
  add("max_compute_work_group_count", std::to_string(core.limits.maxComputeWorkGroupCount[0]) + "," +
                                          std::to_string(core.limits.maxComputeWorkGroupCount[1]) + "," +
                                          std::to_string(core.limits.maxComputeWorkGroupCount[2]));
  add("max_memory_allocation_size", std::to_string(gpu->max_allocation_bytes));
  add("queue_family", std::to_string(gpu->queue_family));
  add("transfers", gpu->mapped_buffers ? "mapped" : "staged");
  std::string reduce_inputs;
  choose_reduce_inputs(state, options, *gpu, &reduce_inputs);
  add("reduce_inputs", reduce_inputs);
  std::string wrap_host;
  choose_host_import(state, *gpu, &wrap_host);
  add("wrap_host", wrap_host);
  add("features", feature_list(gpu->features));
  if (options.validation) add("validation", kValidationLayer);
  if (options.disabled_features & supported) add("disabled_features", feature_list(options.disabled_features & supported));
  // What the device refuses and which feature would run it, for `backplane explain`.
  if (const std::string missing = missing_dtypes_text(gpu->features); !missing.empty()) add("dtypes_missing", missing);

  *description = std::string(device_type_name(core.deviceType)) + " Vulkan " + version_text(core.apiVersion) +
                 " device (" + one_line(properties12.driverName) + " " + driver_version + ", " +
                 mebibytes(device_local) + " device-local)";
  gpu->capabilities = device_capabilities(state.declared.rows, gpu->features, gpu->max_allocation_bytes);
  return gpu;
}

// Serialised across the process like the opencl plugin's: discovery is
// rare, and drivers' lazy initialisation is not always safe to race.
std::mutex &discovery_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace

Gpu::~Gpu() {
  if (device == VK_NULL_HANDLE) return;
  // Work a released request left running ends before its objects go; not
  // on any call path.
  if (vk.vkDeviceWaitIdle != nullptr) vk.vkDeviceWaitIdle(device);
  for (VkPipeline pipeline : pipelines) {
    if (pipeline != VK_NULL_HANDLE) vk.vkDestroyPipeline(device, pipeline, nullptr);
  }
  for (const auto &[key, pipeline] : texel_pipelines) vk.vkDestroyPipeline(device, pipeline, nullptr);
  for (const auto &[inputs, layout] : texel_layouts) {
    vk.vkDestroyPipelineLayout(device, layout.pipeline_layout, nullptr);
    vk.vkDestroyDescriptorSetLayout(device, layout.set_layout, nullptr);
  }
  destroy_block(*this, staging);
  if (transfer_pool != VK_NULL_HANDLE) vk.vkDestroyCommandPool(device, transfer_pool, nullptr);
  if (pipeline_cache != VK_NULL_HANDLE) vk.vkDestroyPipelineCache(device, pipeline_cache, nullptr);
  if (pipeline_layout != VK_NULL_HANDLE) vk.vkDestroyPipelineLayout(device, pipeline_layout, nullptr);
  if (timeline != VK_NULL_HANDLE) vk.vkDestroySemaphore(device, timeline, nullptr);
  vk.vkDestroyDevice(device, nullptr);
}

std::uint32_t Gpu::memory_type(std::uint32_t allowed_types, VkMemoryPropertyFlags required,
                               VkMemoryPropertyFlags preferred) const {
  std::uint32_t fallback = UINT32_MAX;
  for (std::uint32_t t = 0; t < memory_properties.memoryTypeCount; ++t) {
    if (!(allowed_types & (1u << t))) continue;
    const VkMemoryPropertyFlags flags = memory_properties.memoryTypes[t].propertyFlags;
    if ((flags & required) != required) continue;
    if ((flags & preferred) == preferred) return t;
    if (fallback == UINT32_MAX) fallback = t;
  }
  return fallback;
}

void forget_devices(bp_plugin_state &state) {
  // Whatever device_info handed out stays valid until destroy (plugin.h).
  for (auto &device : state.devices) {
    device->gpu = nullptr;
    state.retired_devices.push_back(std::move(device));
  }
  state.devices.clear();
  for (const auto &gpu : state.gpus) save_pipeline_cache(state.services, *gpu);
  state.gpus.clear();
  if (state.messenger != VK_NULL_HANDLE) state.vk.vkDestroyDebugUtilsMessengerEXT(state.instance, state.messenger, nullptr);
  state.messenger = VK_NULL_HANDLE;
  if (state.instance != VK_NULL_HANDLE) state.vk.vkDestroyInstance(state.instance, nullptr);
  state.instance = VK_NULL_HANDLE;
}

void discover(bp_plugin_state &state, const Options &options) {
  std::lock_guard<std::mutex> process_lock(discovery_mutex());
  forget_devices(state);
  state.options = options;
  state.kind_status.clear();
  state.validation.services = state.services;

  if (state.loader.library == nullptr && !state.loader.open(&state.kind_status)) {
    state.kind_status = "no Vulkan device: " + state.kind_status;
    log(state.services, BP_LOG_INFO, "%s", state.kind_status.c_str());
    return;
  }

  VkApplicationInfo application{};
  application.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  application.pApplicationName = "backplane";
  application.pEngineName = "backplane vulkan plugin";
  application.apiVersion = VK_API_VERSION_1_2;
  const char *layers[] = {kValidationLayer};
  const char *extensions[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME};
  VkDebugUtilsMessengerCreateInfoEXT messenger_info{};
  messenger_info.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
  messenger_info.messageSeverity =
      VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  messenger_info.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                               VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                               VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  messenger_info.pfnUserCallback = on_validation_message;
  messenger_info.pUserData = &state.validation;
  VkInstanceCreateInfo instance_info{};
  instance_info.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  instance_info.pApplicationInfo = &application;
  if (options.validation) {
    // Also chained here, so that vkCreateInstance's own messages are seen.
    instance_info.pNext = &messenger_info;
    instance_info.enabledLayerCount = 1;
    instance_info.ppEnabledLayerNames = layers;
    instance_info.enabledExtensionCount = 1;
    instance_info.ppEnabledExtensionNames = extensions;
  }
  if (const VkResult result = state.loader.vkCreateInstance(&instance_info, nullptr, &state.instance);
      result != VK_SUCCESS) {
    state.instance = VK_NULL_HANDLE;
    const char *driver_files = std::getenv("VK_DRIVER_FILES");
    if (driver_files == nullptr || *driver_files == '\0') driver_files = std::getenv("VK_ICD_FILENAMES");
    state.kind_status = "no Vulkan device: vkCreateInstance returned " + result_name(result) +
                        (result == VK_ERROR_INCOMPATIBLE_DRIVER
                             ? std::string("; is a Vulkan driver (ICD) installed in ") +
                                   (driver_files != nullptr && *driver_files != '\0'
                                        ? std::string(driver_files) + " (VK_DRIVER_FILES)"
                                        : std::string("/usr/share/vulkan/icd.d")) +
                                   "? (Debian: mesa-vulkan-drivers for lavapipe)"
                             : std::string());
    log(state.services, BP_LOG_INFO, "%s", state.kind_status.c_str());
    return;
  }
  std::string why;
  if (!state.vk.load(state.loader, state.instance, options.validation, &why)) {
    state.kind_status = "no Vulkan device: " + why;
    forget_devices(state);
    return;
  }
  if (options.validation) {
    if (const VkResult result =
            state.vk.vkCreateDebugUtilsMessengerEXT(state.instance, &messenger_info, nullptr, &state.messenger);
        result != VK_SUCCESS) {
      state.messenger = VK_NULL_HANDLE;
      log(state.services, BP_LOG_WARN, "vkCreateDebugUtilsMessengerEXT: %s; validation messages are not seen",
          result_name(result).c_str());
    }
  }

  std::uint32_t count = 0;
  VkResult listed = state.vk.vkEnumeratePhysicalDevices(state.instance, &count, nullptr);
  std::vector<VkPhysicalDevice> physicals(count);
  if (listed == VK_SUCCESS && count != 0) listed = state.vk.vkEnumeratePhysicalDevices(state.instance, &count, physicals.data());
  if ((listed != VK_SUCCESS && listed != VK_INCOMPLETE) || count == 0) {
    state.kind_status = "no Vulkan device: vkEnumeratePhysicalDevices " +
                        (listed == VK_SUCCESS ? std::string("found none") : "returned " + result_name(listed));
    log(state.services, BP_LOG_INFO, "%s", state.kind_status.c_str());
    return;
  }
  physicals.resize(count);

  std::vector<std::string> left_out;
  for (std::size_t index = 0; index < physicals.size(); ++index) {
    std::vector<std::string> keys, values;
    std::string description, skipped;
    std::unique_ptr<Gpu> gpu = describe_gpu(state, physicals[index], index, options, keys, values, &description, &skipped);
    if (!gpu) {
      left_out.push_back(skipped);
      continue;
    }
    if (!open_gpu(state, *gpu, &why)) {
      left_out.push_back("'" + gpu->name + "' (" + why + ")");
      continue;
    }
    for (std::uint32_t rank = 0; rank < options.ranks_per_device; ++rank) {
      auto device = std::make_unique<Device>();
      device->gpu = gpu.get();
      device->rank_on_gpu = rank;
      device->name = gpu->name;
      device->description = description;
      if (options.ranks_per_device > 1) {
        device->name += " (rank " + std::to_string(rank) + " of " + std::to_string(options.ranks_per_device) + ")";
        device->description += ", logical device " + std::to_string(rank) + " of " +
                               std::to_string(options.ranks_per_device) + " sharing it";
      }
      device->property_keys = keys;
      device->property_values = values;
      device->property_keys.emplace_back("rank_on_device");
      device->property_values.push_back(std::to_string(rank));
      for (std::size_t i = 0; i < device->property_keys.size(); ++i) {
        device->property_key_pointers.push_back(device->property_keys[i].c_str());
        device->property_value_pointers.push_back(device->property_values[i].c_str());
      }
      state.devices.push_back(std::move(device));
    }
    state.gpus.push_back(std::move(gpu));
  }
  if (state.devices.empty()) state.kind_status = "no usable Vulkan device";
  if (!left_out.empty()) {
    state.kind_status += std::string(state.kind_status.empty() ? "" : "; ") + "left out: " + list(left_out);
  }
  for (std::size_t i = 0; i < state.devices.size(); ++i) {
    log(state.services, BP_LOG_DEBUG, "vulkan:%zu is '%s'", i, state.devices[i]->name.c_str());
  }
  if (!state.kind_status.empty()) log(state.services, BP_LOG_INFO, "%s", state.kind_status.c_str());
}

std::int32_t Backend::configure(bp_plugin_state &state, const char *options_json, bp_error_sink *sink) {
  std::string error;
  const std::optional<Options> options = parse_options(options_json, &error);
  if (!options) return fail(state.services, sink, BP_CONFIG, "vulkan options: %s", error.c_str());

  std::lock_guard<std::mutex> lock(state.mutex);
  if (*options == state.options) return BP_OK;
  if (state.live_objects != 0) {
    return fail(state.services, sink, BP_CONFIG,
                "vulkan options: cannot change the options while %zu buffers or groups of "
                "vulkan devices exist; configure before creating any",
                state.live_objects);
  }
  if (options->validation && state.loader.library != nullptr && !layer_present(state.loader, kValidationLayer)) {
    return fail(state.services, sink, BP_CONFIG,
                "vulkan options: \"validation\": the layer %s is not installed (Debian: vulkan-validationlayers)",
                kValidationLayer);
  }
  discover(state, *options);
  return BP_OK;
}

// Under the state's mutex, with `device_index` among its devices.
std::int32_t Backend::device_info(bp_plugin_state &state, std::uint32_t device_index, bp_plugin_device_info &info,
                                  bp_error_sink *) {
  const Device &device = *state.devices[device_index];
  const Gpu &gpu = *device.gpu;
  // The caller's struct may be older (smaller) than ours: write only what
  // fits in its struct_size.
  const std::size_t size = info.struct_size;
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, name)) info.name = device.name.c_str();
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, description)) info.description = device.description.c_str();
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, flags)) {
    info.flags = (gpu.host_pointer_alignment != 0 ? BP_DEVICE_HOST_ADDRESSABLE : 0) |
                 (gpu.type == VK_PHYSICAL_DEVICE_TYPE_CPU ? BP_DEVICE_ON_HOST_CORES : 0);
  }
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, memory_bytes)) {
    std::uint64_t device_local = 0;
    for (std::uint32_t h = 0; h < gpu.memory_properties.memoryHeapCount; ++h) {
      if (gpu.memory_properties.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) {
        device_local += gpu.memory_properties.memoryHeaps[h].size;
      }
    }
    info.memory_bytes = device_local;
  }
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, capabilities)) info.capabilities = gpu.capabilities.data();
  if (size >= BP_STRUCT_SIZE(bp_plugin_device_info, capability_count)) info.capability_count = gpu.capabilities.size();
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

}  // namespace backplane::vulkan

bp_plugin_state::~bp_plugin_state() {
  std::lock_guard<std::mutex> lock(mutex);
  backplane::vulkan::forget_devices(*this);
  loader.close();
}
