// The vkCmdCopyBuffer reference of `backplane bench` (see vulkan_copy.hpp).
#include "vulkan_copy.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#if BACKPLANE_CLI_VULKAN
#include <vulkan/vulkan.h>
#endif

namespace backplane::cli {

#if BACKPLANE_CLI_VULKAN
namespace {

// A copy that has not finished in this long is a hung device, not a result.
constexpr std::uint64_t kFenceTimeoutNanoseconds = 60'000'000'000;

void check(VkResult result, const char *call) {
  if (result != VK_SUCCESS)
    throw std::runtime_error(std::string(call) + " failed with VkResult " + std::to_string(result));
}

// The 16 bytes of the plugin's "uuid" property (hex digits, dashes between
// groups as in 8-4-4-4-12).
std::vector<std::uint8_t> parse_uuid(const std::string &text) {
  std::vector<std::uint8_t> bytes;
  int high = -1;
  for (char c : text) {
    if (c == '-') continue;
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (digit < 0) throw std::runtime_error("the device's uuid '" + text + "' is not hexadecimal");
    if (high < 0) {
      high = digit;
    } else {
      bytes.push_back(static_cast<std::uint8_t>(high * 16 + digit));
      high = -1;
    }
  }
  if (bytes.size() != VK_UUID_SIZE || high >= 0)
    throw std::runtime_error("the device's uuid '" + text + "' is not 16 bytes");
  return bytes;
}

}  // namespace

struct VulkanCopyBuffer::State {
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkPhysicalDeviceMemoryProperties memory_properties{};
  VkDeviceSize max_allocation = 0;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  VkCommandPool pool = VK_NULL_HANDLE;
  VkCommandBuffer commands = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;
  VkBuffer buffers[2] = {VK_NULL_HANDLE, VK_NULL_HANDLE};  // source, destination
  VkDeviceMemory memory[2] = {VK_NULL_HANDLE, VK_NULL_HANDLE};
  VkDeviceSize buffer_bytes = 0;
  VkDeviceSize recorded_bytes = 0;  // what `commands` copies

  ~State() {
    release_buffers();
    if (device != VK_NULL_HANDLE) {
      if (fence != VK_NULL_HANDLE) vkDestroyFence(device, fence, nullptr);
      if (pool != VK_NULL_HANDLE) vkDestroyCommandPool(device, pool, nullptr);
      vkDestroyDevice(device, nullptr);
    }
    if (instance != VK_NULL_HANDLE) vkDestroyInstance(instance, nullptr);
  }

  void release_buffers() {
    for (int i = 0; i < 2; ++i) {
      if (buffers[i] != VK_NULL_HANDLE) vkDestroyBuffer(device, buffers[i], nullptr);
      if (memory[i] != VK_NULL_HANDLE) vkFreeMemory(device, memory[i], nullptr);
      buffers[i] = VK_NULL_HANDLE;
      memory[i] = VK_NULL_HANDLE;
    }
    buffer_bytes = 0;
    recorded_bytes = 0;
  }

  // Submits the recorded commands and waits for them.
  void submit_and_wait() {
    VkSubmitInfo submit{};
    submit.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    submit.commandBufferCount = 1;
    submit.pCommandBuffers = &commands;
    check(vkResetFences(device, 1, &fence), "vkResetFences");
    check(vkQueueSubmit(queue, 1, &submit, fence), "vkQueueSubmit");
    check(vkWaitForFences(device, 1, &fence, VK_TRUE, kFenceTimeoutNanoseconds), "vkWaitForFences(copy)");
  }

  // `commands` recorded to copy `bytes` from the source buffer to the
  // destination, the buffers grown to fit first. Nothing is in flight: every
  // submission was waited for.
  void record_copy(VkDeviceSize bytes) {
    if (bytes == recorded_bytes) return;
    reserve(bytes);
    const VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, nullptr, 0, nullptr};
    check(vkBeginCommandBuffer(commands, &begin), "vkBeginCommandBuffer");
    const VkBufferCopy region{0, 0, bytes};
    vkCmdCopyBuffer(commands, buffers[0], buffers[1], 1, &region);
    check(vkEndCommandBuffer(commands), "vkEndCommandBuffer");
    recorded_bytes = bytes;
  }

  // Two buffers of at least `bytes`, device-local where the device has such
  // memory, both written once so that no timed copy pays for first use.
  void reserve(VkDeviceSize bytes) {
    if (bytes <= buffer_bytes) return;
    if (bytes > max_allocation)
      throw std::runtime_error("a copy of " + std::to_string(bytes) + " bytes is over the device's " +
                               std::to_string(max_allocation) + "-byte allocation limit");
    release_buffers();
    for (int i = 0; i < 2; ++i) {
      VkBufferCreateInfo buffer_info{};
      buffer_info.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
      buffer_info.size = bytes;
      buffer_info.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
      buffer_info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
      check(vkCreateBuffer(device, &buffer_info, nullptr, &buffers[i]), "vkCreateBuffer");
      VkMemoryRequirements requirements{};
      vkGetBufferMemoryRequirements(device, buffers[i], &requirements);
      std::uint32_t chosen = UINT32_MAX;
      for (std::uint32_t t = 0; t < memory_properties.memoryTypeCount; ++t) {
        if (!(requirements.memoryTypeBits & (1u << t))) continue;
        const bool device_local = memory_properties.memoryTypes[t].propertyFlags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
        if (chosen == UINT32_MAX || device_local) chosen = t;
        if (device_local) break;
      }
      if (chosen == UINT32_MAX) throw std::runtime_error("no memory type can hold a transfer buffer");
      VkMemoryAllocateInfo allocate{};
      allocate.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
      allocate.allocationSize = requirements.size;
      allocate.memoryTypeIndex = chosen;
      check(vkAllocateMemory(device, &allocate, nullptr, &memory[i]), "vkAllocateMemory");
      check(vkBindBufferMemory(device, buffers[i], memory[i], 0), "vkBindBufferMemory");
    }
    const VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, nullptr, 0, nullptr};
    check(vkBeginCommandBuffer(commands, &begin), "vkBeginCommandBuffer");
    vkCmdFillBuffer(commands, buffers[0], 0, bytes, 0x01020304u);
    vkCmdFillBuffer(commands, buffers[1], 0, bytes, 0);
    check(vkEndCommandBuffer(commands), "vkEndCommandBuffer");
    submit_and_wait();
    buffer_bytes = bytes;
  }
};

VulkanCopyBuffer::VulkanCopyBuffer(const std::string &device_uuid) : state_(std::make_unique<State>()) {
  const std::vector<std::uint8_t> uuid = parse_uuid(device_uuid);
  VkApplicationInfo application{};
  application.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  application.pApplicationName = "backplane bench copy reference";
  application.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo instance_info{};
  instance_info.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  instance_info.pApplicationInfo = &application;
  check(vkCreateInstance(&instance_info, nullptr, &state_->instance), "vkCreateInstance");
  std::uint32_t count = 0;
  check(vkEnumeratePhysicalDevices(state_->instance, &count, nullptr), "vkEnumeratePhysicalDevices");
  std::vector<VkPhysicalDevice> physicals(count);
  check(vkEnumeratePhysicalDevices(state_->instance, &count, physicals.data()), "vkEnumeratePhysicalDevices");
  for (VkPhysicalDevice physical : physicals) {
    VkPhysicalDeviceMaintenance3Properties maintenance3{};
    maintenance3.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES;
    VkPhysicalDeviceIDProperties ids{};
    ids.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES;
    ids.pNext = &maintenance3;
    VkPhysicalDeviceProperties2 properties{};
    properties.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    properties.pNext = &ids;
    vkGetPhysicalDeviceProperties2(physical, &properties);
    if (!std::equal(uuid.begin(), uuid.end(), ids.deviceUUID)) continue;
    state_->physical = physical;
    state_->max_allocation = maintenance3.maxMemoryAllocationSize;
    device_name_ = properties.properties.deviceName;
    break;
  }
  if (state_->physical == VK_NULL_HANDLE)
    throw std::runtime_error("no Vulkan physical device has the uuid " + device_uuid);
  vkGetPhysicalDeviceMemoryProperties(state_->physical, &state_->memory_properties);

  // The plugin's queue: the first family with compute (which implies transfer).
  std::uint32_t family_count = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(state_->physical, &family_count, nullptr);
  std::vector<VkQueueFamilyProperties> families(family_count);
  vkGetPhysicalDeviceQueueFamilyProperties(state_->physical, &family_count, families.data());
  std::uint32_t family = UINT32_MAX;
  for (std::uint32_t f = 0; f < family_count && family == UINT32_MAX; ++f)
    if (families[f].queueFlags & VK_QUEUE_COMPUTE_BIT) family = f;
  if (family == UINT32_MAX) throw std::runtime_error(device_name_ + " has no compute queue");
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo queue_info{};
  queue_info.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
  queue_info.queueFamilyIndex = family;
  queue_info.queueCount = 1;
  queue_info.pQueuePriorities = &priority;
  VkDeviceCreateInfo device_info{};
  device_info.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
  device_info.queueCreateInfoCount = 1;
  device_info.pQueueCreateInfos = &queue_info;
  check(vkCreateDevice(state_->physical, &device_info, nullptr, &state_->device), "vkCreateDevice");
  vkGetDeviceQueue(state_->device, family, 0, &state_->queue);
  VkCommandPoolCreateInfo pool_info{};
  pool_info.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pool_info.queueFamilyIndex = family;
  check(vkCreateCommandPool(state_->device, &pool_info, nullptr, &state_->pool), "vkCreateCommandPool");
  VkCommandBufferAllocateInfo allocate{};
  allocate.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
  allocate.commandPool = state_->pool;
  allocate.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  allocate.commandBufferCount = 1;
  check(vkAllocateCommandBuffers(state_->device, &allocate, &state_->commands), "vkAllocateCommandBuffers");
  VkFenceCreateInfo fence_info{};
  fence_info.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
  check(vkCreateFence(state_->device, &fence_info, nullptr, &state_->fence), "vkCreateFence");
}

VulkanCopyBuffer::~VulkanCopyBuffer() = default;

void VulkanCopyBuffer::prepare_copy(std::size_t bytes) { state_->record_copy(bytes); }

void VulkanCopyBuffer::copy_and_wait() { state_->submit_and_wait(); }

#else  // built without Vulkan

struct VulkanCopyBuffer::State {};

VulkanCopyBuffer::VulkanCopyBuffer(const std::string &) {
  throw std::runtime_error("this backplane was built without Vulkan");
}
VulkanCopyBuffer::~VulkanCopyBuffer() = default;
void VulkanCopyBuffer::prepare_copy(std::size_t) {}
void VulkanCopyBuffer::copy_and_wait() {}

#endif

}  // namespace backplane::cli
