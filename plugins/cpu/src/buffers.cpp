// Buffers of the cpu devices: host memory the plugin allocates (aligned,
// huge pages for large ones, touched up front) or the caller's own, wrapped.
// plugin_support::function_table() checks, counts and frees them.
#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

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

}  // namespace

std::int32_t Backend::buffer_allocate(bp_plugin_state &state, bp_plugin_buffer &buffer, bp_error_sink *sink) {
  const std::size_t bytes = buffer.bytes;
  if (bytes == 0) return BP_OK;
  const bool huge = bytes >= kHugePageSize;
  const std::size_t alignment = huge ? kHugePageSize : kBufferAlignment;
  // Rounded up so a huge-page buffer ends on a huge page too.
  const std::size_t rounded = (bytes + (alignment - 1)) & ~(alignment - 1);
  void *memory = nullptr;
  if (rounded < bytes || posix_memalign(&memory, alignment, rounded) != 0) {
    return fail(state.services, sink, BP_OUT_OF_MEMORY,
                "cpu buffer_create: cannot allocate %zu bytes on cpu logical device %u", bytes,
                static_cast<unsigned>(buffer.device));
  }
  buffer.data = static_cast<std::byte *>(memory);
  buffer.owned = true;
  if (huge && madvise(memory, rounded, MADV_HUGEPAGE) != 0) {
    // Transparent huge pages may be disabled; the buffer works without.
    log(state.services, BP_LOG_DEBUG, "madvise(MADV_HUGEPAGE) failed for a %zu-byte buffer: %s", rounded,
        std::strerror(errno));
  }
  // Touch every page now, so the page faults are paid here rather than
  // inside the first collective, and the buffer starts as zeros.
  std::memset(memory, 0, rounded);
  return BP_OK;
}

std::int32_t Backend::buffer_wrap_host(bp_plugin_state &, bp_plugin_buffer &buffer, void *memory, bp_error_sink *) {
  buffer.data = buffer.bytes != 0 ? static_cast<std::byte *>(memory) : nullptr;
  buffer.owned = false;
  return BP_OK;
}

std::int32_t Backend::buffer_write(bp_plugin_state &, bp_plugin_buffer &buffer, std::size_t offset,
                                   const void *source, std::size_t bytes, bp_error_sink *) {
  std::memcpy(buffer.data + offset, source, bytes);
  return BP_OK;
}

std::int32_t Backend::buffer_read(bp_plugin_state &, const bp_plugin_buffer &buffer, std::size_t offset,
                                  void *destination, std::size_t bytes, bp_error_sink *) {
  std::memcpy(destination, buffer.data + offset, bytes);
  return BP_OK;
}

// Every cpu buffer is host memory: staging wraps parts of it in place.
std::int32_t Backend::buffer_host_memory(bp_plugin_state &, const bp_plugin_buffer &buffer, void *&memory,
                                         bp_error_sink *) {
  memory = buffer.data;
  return BP_OK;
}

}  // namespace backplane::cpu
