// Entry point of the validate plugin: a layer-only plugin (no device kind)
// whose descriptor carries one layer kind, `validate`, through a
// bp_layer_table on its `next`; every hook runs behind the exception
// boundary of plugin_support.
#include <memory>

#include "backplane/plugin.h"
#include "plugin_support/boundary.hpp"
#include "plugin_support/host_link.hpp"
#include "validate.hpp"

namespace {

using namespace backplane::validate;
namespace plugin_support = backplane::plugin_support;
using plugin_support::fail;

const bp_layer_option kOptions[] = {
    {sizeof(bp_layer_option), nullptr, "nan_check",
     "true: refuse a floating-point collective whose result holds NaN or Inf when its inputs held none "
     "(reads every input and output; default false)",
     0},
    {sizeof(bp_layer_option), nullptr, "fingerprints",
     "a file to write each collective's fingerprint to, one line a call (group, call, rank, what it did)",
     BP_LAYER_OPTION_PATH},
    {sizeof(bp_layer_option), nullptr, "expect_fingerprints",
     "the fingerprints file of an earlier run: a call that differs from the one recorded for it is refused",
     BP_LAYER_OPTION_PATH},
};

const bp_layer_kind kLayerKinds[] = {{
    sizeof(bp_layer_kind),
    nullptr,
    kName,
    "checks each collective before it runs: buffers on the rank's own device, no aliasing, NaN/Inf out of "
    "finite inputs, the calls of a recorded run",
    0,  // not stackable, not timed
    nullptr,
    0,  // wraps every device kind
    kOptions,
    sizeof kOptions / sizeof kOptions[0],
}};

std::int32_t instance_create(bp_plugin_state *state, const bp_layer_create_args *args, bp_layer_instance **out,
                             bp_error_sink *sink) {
  return plugin_support::guarded(state, sink, kName, "instance_create", [&]() -> std::int32_t {
    if (args == nullptr || out == nullptr)
      return fail(state->services, sink, BP_INVALID_ARGUMENT, "validate instance_create: args or out is NULL");
    if (args->struct_size < BP_LAYER_CREATE_ARGS_SIZE_V1_3)
      return fail(state->services, sink, BP_INVALID_ARGUMENT,
                  "validate instance_create: args of %zu bytes are smaller than ABI 1.3's %zu", args->struct_size,
                  static_cast<std::size_t>(BP_LAYER_CREATE_ARGS_SIZE_V1_3));
    return create_instance(*state, *args, out, sink);
  });
}

void instance_destroy(bp_plugin_state *state, bp_layer_instance *instance) {
  plugin_support::guarded_void(state, kName, "instance_destroy", [&] {
    if (instance != nullptr) destroy_instance(*state, instance);
  });
}

// The checks in the order a user fixes them: where the buffers are, then
// how they overlap, then whether the program still makes the calls it
// made; nan_check last, since it reads the data. With fingerprints and
// nan_check off it neither allocates nor locks.
std::int32_t before(bp_plugin_state *state, bp_layer_instance *instance, const bp_layer_call *call,
                    bp_error_sink *sink) {
  return plugin_support::guarded(state, sink, kName, "before", [&]() -> std::int32_t {
    if (instance == nullptr || call == nullptr)
      return fail(state->services, sink, BP_INVALID_ARGUMENT, "validate before: instance or call is NULL");
    if (call->operation != BP_LAYER_COLLECTIVE || call->struct_size < BP_LAYER_CALL_SIZE_V1_3) return BP_OK;
    const CallShape shape = shape_of(*call);
    std::uint64_t print = 0;
    if (instance->fingerprints || instance->expected)
      print = fingerprint(shape, call->group_name != nullptr ? call->group_name : "");
    if (instance->fingerprints) record_call(*state, *instance, *call, shape, print);
    if (call->collective != BP_BARRIER)
      if (const std::int32_t refused = check_buffers(*state, *call, sink); refused != BP_OK) return refused;
    if (instance->expected)
      if (const std::int32_t refused = check_expected(*state, *instance, *call, shape, print, sink);
          refused != BP_OK)
        return refused;
    if (instance->nan_check) return note_inputs(*state, *instance, *call, sink);
    return BP_OK;
  });
}

std::int32_t after(bp_plugin_state *state, bp_layer_instance *instance, const bp_layer_call *call,
                   const bp_layer_outcome *outcome, bp_error_sink *sink) {
  return plugin_support::guarded(state, sink, kName, "after", [&]() -> std::int32_t {
    if (instance == nullptr || call == nullptr || outcome == nullptr)
      return fail(state->services, sink, BP_INVALID_ARGUMENT, "validate after: instance, call or outcome is NULL");
    if (!instance->nan_check || call->operation != BP_LAYER_COLLECTIVE ||
        call->struct_size < BP_LAYER_CALL_SIZE_V1_3)
      return BP_OK;
    return check_outputs(*state, *instance, *call, *outcome, sink);
  });
}

std::int32_t flush(bp_plugin_state *state, bp_layer_instance *instance, bp_error_sink *sink) {
  return plugin_support::guarded(state, sink, kName, "flush", [&]() -> std::int32_t {
    if (instance == nullptr)
      return fail(state->services, sink, BP_INVALID_ARGUMENT, "validate flush: instance is NULL");
    return flush_instance(*state, *instance, sink);
  });
}

const bp_layer_functions kLayerFunctions = {
    sizeof(bp_layer_functions), nullptr, instance_create, instance_destroy, before, after, flush,
};

const bp_layer_table kLayerTable = {
    sizeof(bp_layer_table), nullptr, BP_EXTENSION_LAYER_TABLE,
    kLayerKinds,            1,       &kLayerFunctions,
};

void destroy(bp_plugin_state *state) {
  plugin_support::guarded_void(state, kName, "destroy", [&] { delete state; });
}

// A layer-only plugin implements destroy alone (plugin.h, 1.3): every
// other entry NULL.
constexpr bp_plugin_functions layer_only_functions() {
  bp_plugin_functions functions{};
  functions.struct_size = sizeof functions;
  functions.destroy = destroy;
  return functions;
}
constinit const bp_plugin_functions kFunctions = layer_only_functions();

const bp_plugin_descriptor kDescriptor = {
    sizeof(bp_plugin_descriptor),
    &kLayerTable,
    BP_PLUGIN_ABI_MAJOR,
    BP_PLUGIN_ABI_MINOR,
    kName,
    kVersion,
    nullptr,
    0,  // no device kinds
    nullptr,
    0,
    &kFunctions,
};

static_assert(sizeof(bp_layer_table) >= BP_LAYER_TABLE_SIZE_V1_3);
static_assert(sizeof(bp_layer_functions) >= BP_LAYER_FUNCTIONS_SIZE_V1_3);

std::int32_t entry(bp_plugin_entry_args *args, const bp_host_services *services, bp_error_sink *sink) {
  // Layers are ABI 1.3: an older host would see a plugin with nothing in it.
  if (args->host_abi_minor < 3 || services->struct_size < BP_HOST_SERVICES_SIZE_V1_3 ||
      services->describe_device == nullptr || services->describe_buffer == nullptr ||
      services->read_buffer == nullptr)
    return fail(services, sink, BP_PLUGIN_INIT,
                "validate plugin %s provides a layer, which needs plugin ABI 1.3 and its layer services; the host "
                "speaks ABI %u.%u",
                kVersion, static_cast<unsigned>(args->host_abi_major), static_cast<unsigned>(args->host_abi_minor));
  auto state = std::make_unique<bp_plugin_state>();
  state->services = services;
  args->descriptor = &kDescriptor;
  args->state = state.release();
  return BP_OK;
}

}  // namespace

extern "C" BP_PLUGIN_EXPORT std::int32_t bp_plugin_entry(bp_plugin_entry_args *args) {
  return plugin_support::run_entry(args, kName, kVersion, entry);
}
