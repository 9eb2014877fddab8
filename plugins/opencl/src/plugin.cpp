// Entry point of the opencl plugin: the descriptor and its function table
// (plugin_support::function_table(), the ABI boundary that stops every C++
// exception before it reaches the host).
#include <dlfcn.h>

#include "backplane/plugin.h"
#include "capabilities.hpp"
#include "plugin_state.hpp"
#include "plugin_support/boundary.hpp"
#include "plugin_support/function_table.hpp"

namespace {

using namespace backplane::opencl;
namespace plugin_support = backplane::plugin_support;

const char *const kDeviceKinds[] = {kKindName};

// Immutable and shared by every state, like the descriptor: neither holds
// per-host data.
constinit const bp_plugin_functions kFunctions = plugin_support::function_table<Backend>();

// The descriptor but for its rows, which each state narrows to its host.
const bp_plugin_descriptor kDescriptor = {
    sizeof(bp_plugin_descriptor),
    nullptr,
    BP_PLUGIN_ABI_MAJOR,
    BP_PLUGIN_ABI_MINOR,
    kPluginName,
    kPluginVersion,
    kDeviceKinds,
    sizeof kDeviceKinds / sizeof kDeviceKinds[0],
    nullptr,
    0,
    &kFunctions,
};

static_assert(sizeof(bp_plugin_functions) >= BP_PLUGIN_FUNCTIONS_SIZE_V1_1);
static_assert(sizeof(bp_plugin_descriptor) >= BP_PLUGIN_DESCRIPTOR_SIZE_V1_0);

// Keeps the OpenCL ICD loader in the process once this plugin has loaded
// it. ocl-icd is not made to be unloaded: every unload leaks its vendor
// table (48-77 bytes, seen by LeakSanitizer as allocations of an unknown
// module, so no suppression can name them), and the drivers it opened stay
// loaded anyway. Pinned with RTLD_NODELETE, the loader is loaded once and
// initialised once however many hosts load and unload this plugin; the
// plugin itself still unloads. Best effort: a loader that cannot be pinned
// works as before.
void pin_icd_loader(const bp_host_services *services) {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void *>(&clGetPlatformIDs), &info) == 0 || info.dli_fname == nullptr) {
    log(services, BP_LOG_DEBUG, "cannot find the OpenCL ICD loader's file to keep it loaded");
    return;
  }
  // The handle is never closed: that is the point.
  if (dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) == nullptr) {
    log(services, BP_LOG_DEBUG, "cannot keep the OpenCL ICD loader %s loaded: %s", info.dli_fname, dlerror());
  }
}

// Called by plugin_support::run_entry once the host's ABI and services
// are known to fit.
std::int32_t entry(bp_plugin_entry_args *args, const bp_host_services *services, bp_error_sink *) {
  pin_icd_loader(services);
  auto state = std::make_unique<bp_plugin_state>();
  state->services = services;
  // Before discovery, which derives each device's rows from these.
  const bp_plugin_descriptor *descriptor = state->declared.declare(kDescriptor, kind_capabilities(args->host_abi_minor));
  {
    // No platform is not a refusal: the kind loads with no device, and
    // kind_info says why.
    std::lock_guard<std::mutex> lock(state->mutex);
    discover(*state, Options{});
  }
  log(services, BP_LOG_DEBUG, "opencl plugin %s: %zu devices on %zu platforms", kPluginVersion,
      state->devices.size(), state->platforms.size());
  args->descriptor = descriptor;
  args->state = state.release();
  return BP_OK;
}

}  // namespace

extern "C" BP_PLUGIN_EXPORT std::int32_t bp_plugin_entry(bp_plugin_entry_args *args) {
  return plugin_support::run_entry(args, kPluginName, kPluginVersion, entry);
}
