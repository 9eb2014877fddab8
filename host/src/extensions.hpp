// Typed extension chains (types.h, bp_extension_header): what a `next`
// points at. A reader finds the types it knows (the layer table, 1.3) and
// skips the rest, bounded, saying so at debug.
#pragma once

#include <cstddef>
#include <cstdint>

namespace backplane {

// Walks the chain from `next` (at most BP_EXTENSION_CHAIN_MAX links),
// skipping every type this host does not know; `where` names the struct
// for the log.
void skip_unknown_extensions(const void *next, const char *where) noexcept;

// The first extension of `type` in the chain from `next` (at most
// BP_EXTENSION_CHAIN_MAX links), NULL when there is none; the types this
// host does not know are skipped as above.
const void *find_extension(const void *next, uint32_t type, const char *where) noexcept;

}  // namespace backplane
