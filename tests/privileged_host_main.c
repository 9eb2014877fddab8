/* A host created by a process that runs with elevated privileges (the test
 * makes a setuid copy of this program): prints each log line and the names
 * of the plugins it loaded, one per line, so the test can check that
 * BACKPLANE_PLUGIN_PATH was ignored and that the host said so. */
#include <stdio.h>

#include "backplane/backplane.h"

static void print_line(void *context, int32_t level, const char *category, const char *message) {
  (void)context;
  printf("log %d %s: %s\n", (int)level, category, message);
}

int main(void) {
  bp_log_set_sink(print_line, NULL);
  if (!bp_log_configure("info")) return 2;
  bp_host_options options = {0};
  options.struct_size = sizeof options;
  options.flags = BP_HOST_IGNORE_INSTALL_PATH;
  bp_host *host = NULL;
  bp_error *error = bp_host_create(&options, &host);
  if (error) {
    printf("error %s\n", bp_error_json(error));
    bp_error_destroy(error);
    return 1;
  }
  for (size_t i = 0; i < bp_host_plugin_count(host); ++i) {
    bp_plugin_info info = {0};
    info.struct_size = sizeof info;
    bp_error *failed = bp_host_plugin(host, i, &info);
    if (failed) {
      bp_error_destroy(failed);
      continue;
    }
    printf("plugin %s\n", info.name);
  }
  bp_host_destroy(host);
  return 0;
}
