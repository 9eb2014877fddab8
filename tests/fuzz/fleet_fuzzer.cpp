// libFuzzer target: fleet parsing and validation (schema, then meaning) of
// arbitrary text, on a host with the mock fixture's devices. A fleet that
// does not load leaves the host as it was; one that loads is kept, so the
// host is made afresh after it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "backplane/backplane.h"

namespace {

bp_host *make_host() {
  const char *dirs[] = {BACKPLANE_FUZZ_FLEET_PLUGIN_DIR};
  bp_host_options options{};
  options.struct_size = sizeof options;
  options.plugin_dirs = dirs;
  options.plugin_dir_count = 1;
  options.flags = BP_HOST_IGNORE_ENV_PATH | BP_HOST_IGNORE_INSTALL_PATH;
  bp_host *host = nullptr;
  if (bp_error *error = bp_host_create(&options, &host)) {
    std::fprintf(stderr, "fleet_fuzzer: %s\n", bp_error_json(error));
    std::abort();
  }
  return host;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const bool quiet = bp_log_configure("error");
  (void)quiet;
  static bp_host *host = make_host();
  bp_error *error = bp_host_load_fleet_text(host, reinterpret_cast<const char *>(data), size);
  if (!error) {
    bp_host_destroy(host);
    host = make_host();
    return 0;
  }
  (void)bp_error_json(error);
  for (size_t i = 0; i < bp_error_problem_count(error); ++i) (void)bp_error_json(bp_error_problem(error, i));
  bp_error_destroy(error);
  return 0;
}
