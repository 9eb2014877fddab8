// Entry point of the vulkan plugin: the descriptor and its function table
// (plugin_support::function_table(), the ABI boundary that stops every C++
// exception before it reaches the host).
#include "backplane/plugin.h"
#include "capabilities.hpp"
#include "plugin_state.hpp"
#include "plugin_support/boundary.hpp"
#include "plugin_support/function_table.hpp"

namespace {

using namespace backplane::vulkan;
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

// Called by plugin_support::run_entry once the host's ABI and services
// are known to fit.
std::int32_t entry(bp_plugin_entry_args *args, const bp_host_services *services, bp_error_sink *) {
  auto state = std::make_unique<bp_plugin_state>();
  state->services = services;
  // Before discovery, which derives each device's rows from these.
  const bp_plugin_descriptor *descriptor = state->declared.declare(kDescriptor, kind_capabilities(args->host_abi_minor));
  {
    // No loader, no driver or no device is not a refusal: the kind loads
    // with no device, and kind_info says why.
    std::lock_guard<std::mutex> lock(state->mutex);
    discover(*state, Options{});
  }
  log(services, BP_LOG_DEBUG, "vulkan plugin %s: %zu devices on %zu physical devices", kPluginVersion,
      state->devices.size(), state->gpus.size());
  args->descriptor = descriptor;
  args->state = state.release();
  return BP_OK;
}

}  // namespace

extern "C" BP_PLUGIN_EXPORT std::int32_t bp_plugin_entry(bp_plugin_entry_args *args) {
  return plugin_support::run_entry(args, kPluginName, kPluginVersion, entry);
}
