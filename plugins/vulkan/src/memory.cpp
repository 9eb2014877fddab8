// Memory of the vulkan devices: buffers bound to memory of their own, with
// device addresses (every shader reaches its buffers by address, so no
// descriptor set and no maxStorageBufferRange applies), and the device's
// one queue, on which every submission is ordered by the timeline.
//
// Host transfers take one of two paths (discovery decides, "transfers"
// says which): on a device that shares host memory (lavapipe, integrated
// GPUs) rank buffers are host-visible, coherent and mapped, and a transfer
// is a memcpy; elsewhere they are device-local and a transfer goes through
// the device's staging buffer, kStagingBytes at a time, copied by the
// queue, so it also comes after every collective submitted before it.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "plugin_state.hpp"

namespace backplane::vulkan {

namespace {

constexpr std::size_t kStagingBytes = std::size_t{16} << 20;

// vkCmdFillBuffer and VK_WHOLE_SIZE work in 4-byte words.
constexpr std::size_t round_up_to_words(std::size_t bytes) { return (bytes + 3) / 4 * 4; }

VkCommandBufferBeginInfo one_time_begin() {
  VkCommandBufferBeginInfo begin{};
  begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  return begin;
}

// Recorded into the transfer command buffer by `record`, submitted, waited
// for. The caller holds gpu.transfer_mutex.
template <class Record>
std::int32_t run_transfer(const bp_host_services *services, bp_error_sink *sink, Gpu &gpu, const char *what,
                          Record &&record) {
  const VkCommandBufferBeginInfo begin = one_time_begin();
  VkResult result = gpu.vk.vkBeginCommandBuffer(gpu.transfer_commands, &begin);
  if (result != VK_SUCCESS) return fail_vk(services, sink, gpu, result, "vkBeginCommandBuffer", what);
  record(gpu.transfer_commands);
  host_read_barrier(gpu, gpu.transfer_commands);
  result = gpu.vk.vkEndCommandBuffer(gpu.transfer_commands);
  if (result != VK_SUCCESS) return fail_vk(services, sink, gpu, result, "vkEndCommandBuffer", what);
  std::uint64_t value = 0;
  BP_VULKAN_CHECK(submit(services, sink, gpu, gpu.transfer_commands, what, &value));
  result = wait_for(gpu, value, -1);
  if (result != VK_SUCCESS) return fail_vk(services, sink, gpu, result, "vkWaitSemaphores", what);
  return BP_OK;
}

std::uint64_t next_buffer_serial() {
  static std::atomic<std::uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

std::int32_t ensure_staging(const bp_host_services *services, bp_error_sink *sink, Gpu &gpu) {
  if (gpu.staging.buffer != VK_NULL_HANDLE) return BP_OK;
  const std::size_t bytes = std::min<std::size_t>(kStagingBytes, gpu.max_allocation_bytes);
  return create_block(services, sink, gpu, bytes, VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, true, gpu.staging);
}

}  // namespace

void host_read_barrier(Gpu &gpu, VkCommandBuffer commands) {
  VkMemoryBarrier barrier{};
  barrier.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  gpu.vk.vkCmdPipelineBarrier(commands, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                              VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &barrier, 0, nullptr, 0, nullptr);
}

std::int32_t create_block(const bp_host_services *services, bp_error_sink *sink, Gpu &gpu, std::size_t bytes,
                          VkBufferUsageFlags usage, VkMemoryPropertyFlags required, bool map, MemoryBlock &block,
                          const HostImport *import) {
  BP_VULKAN_CHECK(check_not_lost(services, sink, gpu));
  // Refused before the driver sees it: past the limit a driver may fail,
  // or succeed and fail at first use, far from the cause.
  const VkDeviceSize allocation_bytes = import != nullptr ? import->bytes : bytes;
  if (allocation_bytes > gpu.max_allocation_bytes) {
    return fail(services, sink, BP_OUT_OF_MEMORY,
                "vulkan: %llu bytes on '%s' exceed its largest allocation, maxMemoryAllocationSize = %llu bytes",
                static_cast<unsigned long long>(allocation_bytes), gpu.name.c_str(),
                static_cast<unsigned long long>(gpu.max_allocation_bytes));
  }
  const std::string what = std::to_string(bytes) + " bytes";
  VkExternalMemoryBufferCreateInfo external_info{};
  external_info.sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO;
  external_info.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
  VkBufferCreateInfo buffer_info{};
  buffer_info.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  buffer_info.pNext = import != nullptr ? &external_info : nullptr;
  buffer_info.size = bytes;
  buffer_info.usage = usage | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
  buffer_info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkResult result = gpu.vk.vkCreateBuffer(gpu.device, &buffer_info, nullptr, &block.buffer);
  if (result != VK_SUCCESS) {
    block.buffer = VK_NULL_HANDLE;
    return fail_vk(services, sink, gpu, result, "vkCreateBuffer", what.c_str());
  }
  VkMemoryRequirements requirements{};
  gpu.vk.vkGetBufferMemoryRequirements(gpu.device, block.buffer, &requirements);
  if (import != nullptr && import->offset % requirements.alignment != 0) {
    destroy_block(gpu, block);
    return fail(services, sink, BP_INVALID_ARGUMENT,
                "vulkan buffer_wrap_host: memory at %p is not aligned as '%s' binds buffers: its address must be a "
                "multiple of %llu bytes (aligned_alloc, or bp_buffer_create and bp_buffer_write)",
                static_cast<void *>(static_cast<std::byte *>(import->base) + import->offset), gpu.name.c_str(),
                static_cast<unsigned long long>(requirements.alignment));
  }
  const std::uint32_t type =
      import != nullptr
          ? gpu.memory_type(requirements.memoryTypeBits & import->memory_types, required)
          : gpu.memory_type(requirements.memoryTypeBits, required,
                            map ? VkMemoryPropertyFlags{0} : VkMemoryPropertyFlags{VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT});
  if (type == UINT32_MAX) {
    destroy_block(gpu, block);
    if (import != nullptr) {
      return fail(services, sink, BP_DEVICE_FAILURE,
                  "vulkan: '%s' has no memory type that both imports host memory and holds a buffer", gpu.name.c_str());
    }
    return fail(services, sink, BP_DEVICE_FAILURE, "vulkan: '%s' has no memory type with flags 0x%x for a buffer",
                gpu.name.c_str(), static_cast<unsigned>(required));
  }
  VkMemoryAllocateFlagsInfo flags_info{};
  flags_info.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO;
  flags_info.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  VkImportMemoryHostPointerInfoEXT import_info{};
  import_info.sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT;
  import_info.pNext = &flags_info;
  import_info.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
  import_info.pHostPointer = import != nullptr ? import->base : nullptr;
  VkMemoryAllocateInfo allocate_info{};
  allocate_info.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
  allocate_info.pNext = import != nullptr ? static_cast<const void *>(&import_info) : &flags_info;
  allocate_info.allocationSize = import != nullptr ? import->bytes : requirements.size;
  allocate_info.memoryTypeIndex = type;
  result = gpu.vk.vkAllocateMemory(gpu.device, &allocate_info, nullptr, &block.memory);
  if (result != VK_SUCCESS) {
    block.memory = VK_NULL_HANDLE;
    destroy_block(gpu, block);
    return fail_vk(services, sink, gpu, result, import != nullptr ? "vkAllocateMemory (host pointer)" : "vkAllocateMemory",
                   what.c_str());
  }
  result = gpu.vk.vkBindBufferMemory(gpu.device, block.buffer, block.memory, import != nullptr ? import->offset : 0);
  if (result == VK_SUCCESS && map) {
    result = gpu.vk.vkMapMemory(gpu.device, block.memory, 0, VK_WHOLE_SIZE, 0, &block.mapped);
    if (result != VK_SUCCESS) {
      block.mapped = nullptr;
      destroy_block(gpu, block);
      return fail_vk(services, sink, gpu, result, "vkMapMemory", what.c_str());
    }
  }
  if (result != VK_SUCCESS) {
    destroy_block(gpu, block);
    return fail_vk(services, sink, gpu, result, "vkBindBufferMemory", what.c_str());
  }
  if (import != nullptr) block.mapped = static_cast<std::byte *>(import->base) + import->offset;
  VkBufferDeviceAddressInfo address_info{};
  address_info.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO;
  address_info.buffer = block.buffer;
  block.address = gpu.vk.vkGetBufferDeviceAddress(gpu.device, &address_info);
  block.bytes = bytes;
  return BP_OK;
}

void destroy_block(Gpu &gpu, MemoryBlock &block) noexcept {
  if (gpu.device == VK_NULL_HANDLE) return;
  if (block.buffer != VK_NULL_HANDLE) gpu.vk.vkDestroyBuffer(gpu.device, block.buffer, nullptr);
  // Unmapped with the memory it maps.
  if (block.memory != VK_NULL_HANDLE) gpu.vk.vkFreeMemory(gpu.device, block.memory, nullptr);
  block = MemoryBlock{};
}

std::int32_t submit(const bp_host_services *services, bp_error_sink *sink, Gpu &gpu, VkCommandBuffer commands,
                    const char *what, std::uint64_t *value) {
  std::lock_guard<std::mutex> lock(gpu.queue_mutex);
  BP_VULKAN_CHECK(check_not_lost(services, sink, gpu));
  // After everything before it, whatever it touches: the queue may
  // otherwise overlap two submissions.
  const std::uint64_t after = gpu.submitted;
  const std::uint64_t next = gpu.submitted + 1;
  const VkPipelineStageFlags wait_stage = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
  VkTimelineSemaphoreSubmitInfo timeline_info{};
  timeline_info.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO;
  timeline_info.waitSemaphoreValueCount = 1;
  timeline_info.pWaitSemaphoreValues = &after;
  timeline_info.signalSemaphoreValueCount = 1;
  timeline_info.pSignalSemaphoreValues = &next;
  VkSubmitInfo submit_info{};
  submit_info.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
  submit_info.pNext = &timeline_info;
  submit_info.waitSemaphoreCount = 1;
  submit_info.pWaitSemaphores = &gpu.timeline;
  submit_info.pWaitDstStageMask = &wait_stage;
  submit_info.commandBufferCount = commands != VK_NULL_HANDLE ? 1 : 0;
  submit_info.pCommandBuffers = commands != VK_NULL_HANDLE ? &commands : nullptr;
  submit_info.signalSemaphoreCount = 1;
  submit_info.pSignalSemaphores = &gpu.timeline;
  const VkResult result = gpu.vk.vkQueueSubmit(gpu.queue, 1, &submit_info, VK_NULL_HANDLE);
  if (result != VK_SUCCESS) return fail_vk(services, sink, gpu, result, "vkQueueSubmit", what);
  gpu.submitted = next;
  *value = next;
  return BP_OK;
}

VkResult wait_for(Gpu &gpu, std::uint64_t value, std::int64_t timeout_ns) {
  VkSemaphoreWaitInfo wait_info{};
  wait_info.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO;
  wait_info.semaphoreCount = 1;
  wait_info.pSemaphores = &gpu.timeline;
  wait_info.pValues = &value;
  const std::uint64_t timeout = timeout_ns < 0 ? UINT64_MAX : static_cast<std::uint64_t>(timeout_ns);
  return gpu.vk.vkWaitSemaphores(gpu.device, &wait_info, timeout);
}

std::int32_t Backend::buffer_allocate(bp_plugin_state &state, bp_plugin_buffer &buffer, bp_error_sink *sink) {
  // The device stays as it is while the buffer is counted (configure is
  // refused meanwhile).
  Gpu &gpu = *state.devices[buffer.device]->gpu;
  buffer.gpu = &gpu;
  buffer.serial = next_buffer_serial();
  if (buffer.bytes == 0) return BP_OK;  // Vulkan has no empty buffers
  const VkBufferUsageFlags usage = rank_buffer_usage(gpu);
  // Whole words, for vkCmdFillBuffer, unless that would pass the limit
  // (which create_block enforces on the size asked for).
  const std::size_t bytes = buffer.bytes > gpu.max_allocation_bytes
                                ? buffer.bytes
                                : std::min<std::size_t>(round_up_to_words(buffer.bytes), gpu.max_allocation_bytes);
  if (gpu.mapped_buffers) {
    BP_VULKAN_CHECK(create_block(state.services, sink, gpu, bytes, usage,
                                 VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, true,
                                 buffer.block));
    std::memset(buffer.block.mapped, 0, buffer.block.bytes);
    return BP_OK;
  }
  BP_VULKAN_CHECK(create_block(state.services, sink, gpu, bytes, usage, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, false,
                               buffer.block));
  // Zeros, written by the device now, as the cpu plugin's buffers start.
  std::lock_guard<std::mutex> lock(gpu.transfer_mutex);
  return run_transfer(state.services, sink, gpu, "zeroing a new buffer", [&](VkCommandBuffer commands) {
    gpu.vk.vkCmdFillBuffer(commands, buffer.block.buffer, 0, VK_WHOLE_SIZE, 0);
  });
}

// The caller's memory, imported: shaders and copies reach it where it is,
// and transfers are a memcpy on any device. The import covers the whole
// pieces (minImportedHostPointerAlignment) around the range, as the
// extension requires; the buffer sees only the range.
std::int32_t Backend::buffer_wrap_host(bp_plugin_state &state, bp_plugin_buffer &buffer, void *memory,
                                       bp_error_sink *sink) {
  Gpu &gpu = *state.devices[buffer.device]->gpu;
  buffer.gpu = &gpu;
  buffer.serial = next_buffer_serial();
  if (gpu.host_pointer_alignment == 0) {
    return fail(state.services, sink, BP_UNSUPPORTED_DEVICE,
                "vulkan buffer_wrap_host: '%s' cannot import host memory (no usable %s; see its wrap_host property)",
                gpu.name.c_str(), VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
  }
  if (buffer.bytes == 0) return BP_OK;
  BP_VULKAN_CHECK(check_not_lost(state.services, sink, gpu));
  const std::uintptr_t piece = gpu.host_pointer_alignment;
  const auto address = reinterpret_cast<std::uintptr_t>(memory);
  const std::uintptr_t base = address & ~(piece - 1);
  // The host checked that address + bytes does not wrap; the piece around
  // the end may still.
  std::uintptr_t end = 0;
  if (__builtin_add_overflow(address + buffer.bytes, piece - 1, &end)) {
    return fail(state.services, sink, BP_INVALID_ARGUMENT,
                "vulkan buffer_wrap_host: %zu bytes at %p end in the last %llu bytes of the address space", buffer.bytes,
                memory, static_cast<unsigned long long>(piece));
  }
  end &= ~(piece - 1);
  HostImport import;
  import.base = reinterpret_cast<void *>(base);
  import.bytes = end - base;
  import.offset = address - base;
  VkMemoryHostPointerPropertiesEXT pointer_properties{};
  pointer_properties.sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT;
  const VkResult result = gpu.vk.vkGetMemoryHostPointerPropertiesEXT(
      gpu.device, VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT, import.base, &pointer_properties);
  if (result == VK_ERROR_INVALID_EXTERNAL_HANDLE) {
    return fail(state.services, sink, BP_INVALID_ARGUMENT,
                "vulkan buffer_wrap_host: '%s' cannot import the host memory at %p", gpu.name.c_str(), memory);
  }
  if (result != VK_SUCCESS) {
    return fail_vk(state.services, sink, gpu, result, "vkGetMemoryHostPointerPropertiesEXT", "buffer_wrap_host");
  }
  import.memory_types = pointer_properties.memoryTypeBits;
  return create_block(state.services, sink, gpu, buffer.bytes, rank_buffer_usage(gpu), 0, false, buffer.block,
                      &import);
}

std::int32_t Backend::buffer_write(bp_plugin_state &state, bp_plugin_buffer &buffer, std::size_t offset,
                                   const void *source, std::size_t bytes, bp_error_sink *sink) {
  Gpu &gpu = *buffer.gpu;
  BP_VULKAN_CHECK(check_not_lost(state.services, sink, gpu));
  if (buffer.block.mapped != nullptr) {
    std::memcpy(static_cast<std::byte *>(buffer.block.mapped) + offset, source, bytes);
    return BP_OK;
  }
  std::lock_guard<std::mutex> lock(gpu.transfer_mutex);
  BP_VULKAN_CHECK(ensure_staging(state.services, sink, gpu));
  const auto *from = static_cast<const std::byte *>(source);
  for (std::size_t done = 0; done < bytes;) {
    const std::size_t piece = std::min(bytes - done, gpu.staging.bytes);
    std::memcpy(gpu.staging.mapped, from + done, piece);
    const VkBufferCopy region{0, offset + done, piece};
    BP_VULKAN_CHECK(run_transfer(state.services, sink, gpu, "buffer_write", [&](VkCommandBuffer commands) {
      gpu.vk.vkCmdCopyBuffer(commands, gpu.staging.buffer, buffer.block.buffer, 1, &region);
    }));
    done += piece;
  }
  return BP_OK;
}

std::int32_t Backend::buffer_read(bp_plugin_state &state, const bp_plugin_buffer &buffer, std::size_t offset,
                                  void *destination, std::size_t bytes, bp_error_sink *sink) {
  Gpu &gpu = *buffer.gpu;
  BP_VULKAN_CHECK(check_not_lost(state.services, sink, gpu));
  if (buffer.block.mapped != nullptr) {
    std::memcpy(destination, static_cast<const std::byte *>(buffer.block.mapped) + offset, bytes);
    return BP_OK;
  }
  std::lock_guard<std::mutex> lock(gpu.transfer_mutex);
  BP_VULKAN_CHECK(ensure_staging(state.services, sink, gpu));
  auto *to = static_cast<std::byte *>(destination);
  for (std::size_t done = 0; done < bytes;) {
    const std::size_t piece = std::min(bytes - done, gpu.staging.bytes);
    const VkBufferCopy region{offset + done, 0, piece};
    BP_VULKAN_CHECK(run_transfer(state.services, sink, gpu, "buffer_read", [&](VkCommandBuffer commands) {
      gpu.vk.vkCmdCopyBuffer(commands, buffer.block.buffer, gpu.staging.buffer, 1, &region);
    }));
    std::memcpy(to + done, gpu.staging.mapped, piece);
    done += piece;
  }
  return BP_OK;
}

}  // namespace backplane::vulkan

bp_plugin_buffer::~bp_plugin_buffer() {
  if (gpu != nullptr) backplane::vulkan::destroy_block(*gpu, block);
}
