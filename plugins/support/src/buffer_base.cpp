// The check of a buffer transfer (buffer_base.hpp).
#include "plugin_support/buffer_base.hpp"

namespace backplane::plugin_support {

std::int32_t check_transfer(const TableCall &call, const BufferBase *buffer, std::size_t offset, const void *host,
                            std::size_t bytes) noexcept {
  if (buffer == nullptr) return call.null_argument("buffer");
  if (host == nullptr && bytes != 0) return call.fail(BP_INVALID_ARGUMENT, "host pointer is NULL for %zu bytes", bytes);
  if (offset > buffer->bytes || bytes > buffer->bytes - offset) {
    return call.fail(BP_INVALID_ARGUMENT, "%zu bytes at offset %zu do not fit in a buffer of %zu bytes", bytes, offset,
                     buffer->bytes);
  }
  return BP_OK;
}

}  // namespace backplane::plugin_support
