/* The public C ABI of both headers and nothing else, as a shared object for
 * abidiff (abi_guard.sh): the library's own debug info describes its C++
 * insides too, and would bury the API under them. Compiled as C99 against
 * the headers of the tree being checked, or of a release for its dump. */
#include "backplane/backplane.h"
#include "backplane/plugin.h"

#define BP_ABI_PROBE __attribute__((visibility("default")))

/* Each libbackplane function becomes a variable whose type is a pointer to
 * the function as the header declares it: its DWARF holds the signature and
 * every type it reaches. The list is generated from host/libbackplane.map
 * (the nodes up to the release being dumped), so a name the map exports and
 * the header lacks fails this compile. */
#define BP_ABI_FUNCTION(fn) BP_ABI_PROBE __typeof__(fn) *bp_abi_function_##fn;
#include "abi_probe_functions.h"

/* The plugin ABI: its entry point reaches every struct and function table
 * of plugin.h. */
BP_ABI_PROBE bp_plugin_entry_fn bp_abi_plugin_entry;

/* Types no signature reaches: the enums that cross the ABIs as uint32_t
 * fields, and what a later minor added. */
#define BP_ABI_TYPE(type) BP_ABI_PROBE type bp_abi_type_##type;
BP_ABI_TYPE(bp_code)
BP_ABI_TYPE(bp_dtype)
BP_ABI_TYPE(bp_reduce_op)
BP_ABI_TYPE(bp_collective)
BP_ABI_TYPE(bp_log_level)
BP_ABI_TYPE(bp_group_policy)
#if BP_PLUGIN_ABI_MINOR >= 2
BP_ABI_TYPE(bp_extension_header)
#endif
