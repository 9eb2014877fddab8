/* An application of the newest application API: it calls
 * bp_group_get_span (1.6), so its link records libbackplane's
 * BACKPLANE_1.6 node, and an older
 * library refuses it at load, naming that node (symbol_versions_test.sh).
 * Prints the version it runs against. */
#include <stdio.h>

#include "backplane/backplane.h"

int main(void) {
  const uint32_t version = bp_api_version();
  bp_group_span_info span = {sizeof span, NULL, 0, 0, 0, 0, 0, 0, 0};
  bp_error *refused = bp_group_get_span(NULL, &span); /* 1.6's */
  if (!refused) return 1;
  bp_error_destroy(refused);
  /* bp_code_name is 1.0's: the program needs both nodes. */
  printf("%u.%u %s\n", (unsigned)BP_API_VERSION_MAJOR_OF(version), (unsigned)BP_API_VERSION_MINOR_OF(version),
         bp_code_name(BP_OK));
  return version == BP_MAKE_API_VERSION(BP_API_VERSION_MAJOR, BP_API_VERSION_MINOR) ? 0 : 1;
}
