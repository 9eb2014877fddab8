// Entry point of the cpu plugin: the descriptor, its capability rows, and
// its function table (plugin_support::function_table(), the ABI boundary
// that stops every C++ exception before it reaches the host).

#include "backplane/plugin.h"
#include "plugin_state.hpp"
#include "plugin_support/boundary.hpp"
#include "plugin_support/capability_rows.hpp"
#include "plugin_support/function_table.hpp"
#include "reduce_kernels.hpp"

namespace {

using namespace backplane::cpu;
namespace plugin_support = backplane::plugin_support;

constexpr const char *kPluginVersion = "0.1.0";
const char *const kDeviceKinds[] = {Backend::kKind};

// Immutable and shared by every state, like the descriptor: neither holds
// per-host data.
constinit const bp_plugin_functions kFunctions = plugin_support::function_table<Backend>();

// The descriptor but for its rows, which each state narrows to its host.
const bp_plugin_descriptor kDescriptor = {
    sizeof(bp_plugin_descriptor),
    nullptr,
    BP_PLUGIN_ABI_MAJOR,
    BP_PLUGIN_ABI_MINOR,
    Backend::kName,
    kPluginVersion,
    kDeviceKinds,
    sizeof kDeviceKinds / sizeof kDeviceKinds[0],
    nullptr,
    0,
    &kFunctions,
};

// A struct_size of sizeof() tells the host every field we know is there.
static_assert(sizeof(bp_plugin_functions) >= BP_PLUGIN_FUNCTIONS_SIZE_V1_0);
static_assert(sizeof(bp_plugin_descriptor) >= BP_PLUGIN_DESCRIPTOR_SIZE_V1_0);

// Called by plugin_support::run_entry once the host's ABI and services
// are known to fit.
std::int32_t entry(bp_plugin_entry_args *args, const bp_host_services *services, bp_error_sink *) {
  auto state = make_state(services);
  // Picks the kernels' instruction set now, so no collective pays for it.
  log(services, BP_LOG_DEBUG, "cpu plugin %s: %u logical devices on %s; %u threads; kernels for %s", kPluginVersion,
      static_cast<unsigned>(state->device_count), state->cpu_model.c_str(), static_cast<unsigned>(state->threads),
      kernel_target_name());
  args->descriptor = state->declared.declare(
      kDescriptor, plugin_support::rows_for_host(plugin_support::kEveryCollectiveRows, args->host_abi_minor));
  args->state = state.release();
  return BP_OK;
}

}  // namespace

extern "C" BP_PLUGIN_EXPORT std::int32_t bp_plugin_entry(bp_plugin_entry_args *args) {
  return plugin_support::run_entry(args, Backend::kName, kPluginVersion, entry);
}
