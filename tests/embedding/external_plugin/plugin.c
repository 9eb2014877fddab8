/* An out-of-tree plugin built with the installed backplane_add_plugin(): it refuses
 * to load, on purpose and with a reason, so a host lists it among refused files. */
#include <backplane/plugin.h>

/* A symbol the version script must keep out of the dynamic symbol table. */
int backplane_external_plugin_helper(void) { return 42; }

int32_t bp_plugin_entry(bp_plugin_entry_args *args) {
  if (args == NULL || args->struct_size < BP_STRUCT_SIZE(bp_plugin_entry_args, sink)) return BP_PLUGIN_ABI;
  if (args->services != NULL && args->services->report_error != NULL)
    args->services->report_error(args->sink, BP_PLUGIN_INIT,
                                 "external test plugin: refuses to load, on purpose");
  return backplane_external_plugin_helper() == 42 ? BP_PLUGIN_INIT : BP_INTERNAL;
}
