// Reading typed extension chains: a reader skips the types it does not know.
#include "extensions.hpp"

#include <string>

#include "backplane/types.h"
#include "log.hpp"

namespace backplane {

size_t skip_unknown_extensions(const void *next, const char *where) noexcept {
  size_t links = 0;
  for (const void *link = next; link && links < BP_EXTENSION_CHAIN_MAX; ++links) {
    const auto *header = static_cast<const bp_extension_header *>(link);
    if (header->struct_size < BP_EXTENSION_HEADER_SIZE_V1_2) break;  // not even a header: stop reading
    try {
      log(BP_LOG_DEBUG, "abi",
          std::string(where) + ": skipping extension of unknown type " + std::to_string(header->type));
    } catch (...) {
    }
    link = header->next;
  }
  return links;
}

}  // namespace backplane
