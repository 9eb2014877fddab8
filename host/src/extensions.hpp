// Typed extension chains (types.h, bp_extension_header): what a `next`
// points at. This host knows no extension type yet, so reading a chain is
// skipping it, bounded, and saying so at debug.
#pragma once

#include <cstddef>

namespace backplane {

// Walks the chain from `next` (at most BP_EXTENSION_CHAIN_MAX links),
// skipping every type this host does not know; `where` names the struct
// for the log. Returns the number of links seen.
size_t skip_unknown_extensions(const void *next, const char *where) noexcept;

}  // namespace backplane
