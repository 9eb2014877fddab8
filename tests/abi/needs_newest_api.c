/* An application of the newest application API: it calls
 * bp_group_local_kinds (1.5), so its link records libbackplane's
 * BACKPLANE_1.5 node, and an older
 * library refuses it at load, naming that node (symbol_versions_test.sh).
 * Prints the version it runs against. */
#include <stdio.h>

#include "backplane/backplane.h"

int main(void) {
  const uint32_t version = bp_api_version();
  if (bp_group_local_kinds(NULL) != 0) return 1; /* 1.5's */
  /* bp_code_name is 1.0's: the program needs both nodes. */
  printf("%u.%u %s\n", (unsigned)BP_API_VERSION_MAJOR_OF(version), (unsigned)BP_API_VERSION_MINOR_OF(version),
         bp_code_name(BP_OK));
  return version == BP_MAKE_API_VERSION(BP_API_VERSION_MAJOR, BP_API_VERSION_MINOR) ? 0 : 1;
}
