// Buffers of the cpu devices: host memory the plugin allocates (aligned,
// huge pages for large ones, touched up front) or the caller's own, wrapped.
#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "plugin_state.hpp"

namespace backplane::cpu {
namespace {

// A cache line, so every buffer starts on one and vector loads of any width
// up to AVX-512 are aligned at offset 0.
constexpr std::size_t kBufferAlignment = 64;
// Transparent huge page size on x86-64: from this size on, buffers are
// 2 MiB aligned and rounded so the kernel can back them with huge pages,
// which spares the TLB misses of streaming over large arrays.
constexpr std::size_t kHugePageSize = std::size_t{2} << 20;

// Counts a buffer against the device set, after checking the device exists;
// configure is refused while the count is non-zero.
std::int32_t claim_device(bp_plugin_state &state, std::uint32_t device, const char *call,
                          bp_error_sink *sink) {
  std::lock_guard<std::mutex> lock(state.mutex);
  if (device >= state.device_count) {
    return fail(state.services, sink, BP_INVALID_ARGUMENT, "cpu %s: device %u does not exist (%u cpu devices)",
                call, static_cast<unsigned>(device), static_cast<unsigned>(state.device_count));
  }
  ++state.live_objects;
  return BP_OK;
}

void release_device(bp_plugin_state &state) {
  std::lock_guard<std::mutex> lock(state.mutex);
  --state.live_objects;
}

std::int32_t check_range(const bp_plugin_state &state, const bp_plugin_buffer *buffer, std::size_t offset,
                         const void *host, std::size_t bytes, const char *call, bp_error_sink *sink) {
  if (buffer == nullptr) return fail(state.services, sink, BP_INVALID_ARGUMENT, "cpu %s: buffer is NULL", call);
  if (host == nullptr && bytes != 0) {
    return fail(state.services, sink, BP_INVALID_ARGUMENT, "cpu %s: host pointer is NULL for %zu bytes", call,
                bytes);
  }
  // The host checked this already; checked again because a wrong range
  // here corrupts memory instead of failing.
  if (offset > buffer->bytes || bytes > buffer->bytes - offset) {
    return fail(state.services, sink, BP_INVALID_ARGUMENT,
                "cpu %s: %zu bytes at offset %zu do not fit in a buffer of %zu bytes", call, bytes, offset,
                buffer->bytes);
  }
  return BP_OK;
}

}  // namespace

std::int32_t buffer_create(bp_plugin_state &state, std::uint32_t kind, std::uint32_t device,
                           std::size_t bytes, bp_plugin_buffer **out, bp_error_sink *sink) {
  if (const std::int32_t status = check_kind(state, kind, sink); status != BP_OK) return status;
  if (out == nullptr) return fail(state.services, sink, BP_INVALID_ARGUMENT, "cpu buffer_create: out is NULL");
  *out = nullptr;
  if (const std::int32_t status = claim_device(state, device, "buffer_create", sink); status != BP_OK) {
    return status;
  }

  std::unique_ptr<bp_plugin_buffer> buffer;
  void *memory = nullptr;
  try {
    buffer = std::make_unique<bp_plugin_buffer>();
    if (bytes != 0) {
      const bool huge = bytes >= kHugePageSize;
      const std::size_t alignment = huge ? kHugePageSize : kBufferAlignment;
      // Rounded up so a huge-page buffer ends on a huge page too.
      const std::size_t rounded = (bytes + (alignment - 1)) & ~(alignment - 1);
      if (rounded < bytes || posix_memalign(&memory, alignment, rounded) != 0) {
        release_device(state);
        return fail(state.services, sink, BP_OUT_OF_MEMORY,
                    "cpu buffer_create: cannot allocate %zu bytes on cpu logical device %u", bytes,
                    static_cast<unsigned>(device));
      }
      if (huge && madvise(memory, rounded, MADV_HUGEPAGE) != 0) {
        // Transparent huge pages may be disabled; the buffer works without.
        log(state.services, BP_LOG_DEBUG, "madvise(MADV_HUGEPAGE) failed for a %zu-byte buffer: %s", rounded,
            std::strerror(errno));
      }
      // Touch every page now, so the page faults are paid here rather than
      // inside the first collective, and the buffer starts as zeros.
      std::memset(memory, 0, rounded);
    }
  } catch (...) {
    std::free(memory);
    release_device(state);
    throw;
  }
  buffer->data = static_cast<std::byte *>(memory);
  buffer->bytes = bytes;
  buffer->device = device;
  buffer->owned = true;
  *out = buffer.release();
  return BP_OK;
}

std::int32_t buffer_wrap_host(bp_plugin_state &state, std::uint32_t kind, std::uint32_t device, void *memory,
                              std::size_t bytes, bp_plugin_buffer **out, bp_error_sink *sink) {
  if (const std::int32_t status = check_kind(state, kind, sink); status != BP_OK) return status;
  if (out == nullptr) return fail(state.services, sink, BP_INVALID_ARGUMENT, "cpu buffer_wrap_host: out is NULL");
  *out = nullptr;
  if (memory == nullptr && bytes != 0) {
    return fail(state.services, sink, BP_INVALID_ARGUMENT, "cpu buffer_wrap_host: memory is NULL for %zu bytes",
                bytes);
  }
  if (const std::int32_t status = claim_device(state, device, "buffer_wrap_host", sink); status != BP_OK) {
    return status;
  }
  std::unique_ptr<bp_plugin_buffer> buffer;
  try {
    buffer = std::make_unique<bp_plugin_buffer>();
  } catch (...) {
    release_device(state);
    throw;
  }
  buffer->data = bytes != 0 ? static_cast<std::byte *>(memory) : nullptr;
  buffer->bytes = bytes;
  buffer->device = device;
  buffer->owned = false;
  *out = buffer.release();
  return BP_OK;
}

void buffer_destroy(bp_plugin_state &state, bp_plugin_buffer *buffer) {
  if (buffer == nullptr) return;
  if (buffer->owned) std::free(buffer->data);
  delete buffer;
  release_device(state);
}

std::int32_t buffer_write(bp_plugin_state &state, bp_plugin_buffer *buffer, std::size_t offset, const void *source,
                          std::size_t bytes, bp_error_sink *sink) {
  if (const std::int32_t status = check_range(state, buffer, offset, source, bytes, "buffer_write", sink);
      status != BP_OK) {
    return status;
  }
  // memcpy with a NULL pointer is undefined even for 0 bytes.
  if (bytes != 0) std::memcpy(buffer->data + offset, source, bytes);
  return BP_OK;
}

std::int32_t buffer_read(bp_plugin_state &state, const bp_plugin_buffer *buffer, std::size_t offset,
                         void *destination, std::size_t bytes, bp_error_sink *sink) {
  if (const std::int32_t status = check_range(state, buffer, offset, destination, bytes, "buffer_read", sink);
      status != BP_OK) {
    return status;
  }
  if (bytes != 0) std::memcpy(destination, buffer->data + offset, bytes);
  return BP_OK;
}

}  // namespace backplane::cpu
