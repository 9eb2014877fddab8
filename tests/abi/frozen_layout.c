/* The frozen layouts of every released minor (frozen_layout.h) as the C
 * compiler lays them out: checked at compile time here, and handed to
 * abi_test.cpp, which compares them with what the C++ compiler sees.
 * Compiled as strict C99. */
#include "backplane/backplane.h"
#include "backplane/plugin.h"
#include "frozen_layout.h"

#if defined(__x86_64__) && defined(__LP64__)
/* C99 has no static_assert: an array of negative size fails the compile. */
#define CHECK_SIZE_V1_0(macro, bytes) typedef char bp_frozen_##macro[(macro) == (bytes) ? 1 : -1];
#define CHECK_SIZEOF(type, bytes) typedef char bp_frozen_sizeof_##type[sizeof(type) == (bytes) ? 1 : -1];
#define CHECK_FIELD(type, field, byte) \
  typedef char bp_frozen_##type##_##field[offsetof(type, field) == (byte) ? 1 : -1];
BP_FROZEN_LAYOUT(CHECK_SIZE_V1_0, CHECK_SIZEOF, CHECK_FIELD)
#endif

#define ENTRY_SIZE_V1_0(macro, bytes) {#macro, (macro), (bytes)},
#define ENTRY_SIZEOF(type, bytes) {"sizeof(" #type ")", sizeof(type), (bytes)},
#define ENTRY_FIELD(type, field, byte) {"offsetof(" #type ", " #field ")", offsetof(type, field), (byte)},

const bp_frozen_entry bp_frozen_layout_from_c[] = {
    BP_FROZEN_LAYOUT(ENTRY_SIZE_V1_0, ENTRY_SIZEOF, ENTRY_FIELD)};
const size_t bp_frozen_layout_from_c_count =
    sizeof bp_frozen_layout_from_c / sizeof bp_frozen_layout_from_c[0];
