// libFuzzer target: the loader's checks of what a plugin declares. The
// descriptor plugin (descriptor_plugin.cpp) builds its descriptor, rows and
// device information from the input; a host is created over it and must
// either load it or refuse it with a structured error, never crash, hang
// or allocate without bound.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backplane/backplane.h"

namespace {

using SetBytes = void (*)(const uint8_t *, size_t);

// The plugin is mapped once here; the host's own dlopen of the same file
// (through /proc/self/fd) finds this copy, so both see the same bytes.
SetBytes plugin_setter() {
  static SetBytes setter = [] {
    void *handle = dlopen(BACKPLANE_FUZZ_DESCRIPTOR_PLUGIN, RTLD_NOW | RTLD_GLOBAL);
    if (!handle) {
      std::fprintf(stderr, "descriptor_fuzzer: %s\n", dlerror());
      std::abort();
    }
    return reinterpret_cast<SetBytes>(dlsym(handle, "bp_fuzz_set_bytes"));
  }();
  return setter;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const bool quiet = bp_log_configure("error");
  (void)quiet;
  plugin_setter()(data, size);
  const char *dirs[] = {BACKPLANE_FUZZ_DESCRIPTOR_DIR};
  bp_host_options options{};
  options.struct_size = sizeof options;
  options.plugin_dirs = dirs;
  options.plugin_dir_count = 1;
  options.flags = BP_HOST_IGNORE_ENV_PATH | BP_HOST_IGNORE_INSTALL_PATH;
  bp_host *host = nullptr;
  bp_error *error = bp_host_create(&options, &host);
  if (error) {
    std::fprintf(stderr, "bp_host_create failed: %s\n", bp_error_json(error));
    std::abort();  // a refused plugin never fails the host
  }
  for (size_t i = 0; i < bp_host_refused_count(host); ++i) (void)bp_error_json(bp_host_refused(host, i));
  for (size_t i = 0; i < bp_host_device_count(host); ++i) {
    bp_device_info info{};
    info.struct_size = sizeof info;
    if (bp_error *failed = bp_device_get_info(bp_host_device(host, i), &info)) bp_error_destroy(failed);
  }
  bp_host_destroy(host);
  return 0;
}
