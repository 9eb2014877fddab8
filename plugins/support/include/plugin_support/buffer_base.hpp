// What every in-tree plugin's buffer holds whatever its memory (host memory,
// a cl_mem), and the check of a transfer against it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "plugin_support/host_link.hpp"

namespace backplane::plugin_support {

// The base of each plugin's bp_plugin_buffer.
struct BufferBase {
  std::size_t bytes = 0;
  std::uint32_t device = 0;  // index within the plugin's one kind
};

// BP_OK when `bytes` at `offset` of `buffer` may be copied to or from
// `host`: the buffer is there, so is the host memory unless `bytes` is 0,
// and offset + bytes <= buffer->bytes (tested without the sum, which may
// overflow). Otherwise BP_INVALID_ARGUMENT, reported as `call`'s. The host
// checked the range already (plugin.h); checked again because a wrong one
// here corrupts memory instead of failing.
std::int32_t check_transfer(const TableCall &call, const BufferBase *buffer, std::size_t offset, const void *host,
                            std::size_t bytes) noexcept;

}  // namespace backplane::plugin_support
