// Reading typed extension chains: a reader skips the types it does not know.
#include "extensions.hpp"

#include <string>

#include "backplane/types.h"
#include "log.hpp"

namespace backplane {

const void *find_extension(const void *next, uint32_t type, const char *where) noexcept {
  size_t links = 0;
  for (const void *link = next; link && links < BP_EXTENSION_CHAIN_MAX; ++links) {
    const auto *header = static_cast<const bp_extension_header *>(link);
    if (header->struct_size < BP_EXTENSION_HEADER_SIZE_V1_2) break;
    if (header->type == type) return link;
    try {
      log(BP_LOG_DEBUG, "abi",
          std::string(where) + ": skipping extension of unknown type " + std::to_string(header->type));
    } catch (...) {
    }
    link = header->next;
  }
  return nullptr;
}

void skip_unknown_extensions(const void *next, const char *where) noexcept {
  // No type this host knows lives here: every link is skipped (and logged).
  (void)find_extension(next, BP_EXTENSION_NONE, where);
}

}  // namespace backplane
