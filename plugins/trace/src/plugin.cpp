// Entry point of the trace plugin: a layer-only plugin (no device kind)
// whose descriptor hangs the layer table of kind `trace` off its `next`,
// and every function behind plugin_support's exception boundary.
#include "backplane/plugin.h"

#include "plugin_support/boundary.hpp"
#include "plugin_support/host_link.hpp"
#include "trace_state.hpp"

namespace {

namespace plugin_support = backplane::plugin_support;
namespace trace = backplane::trace;

constexpr const char *kPluginName = "trace";
constexpr const char *kPluginVersion = "0.1.0";

void destroy(bp_plugin_state *state) {
  plugin_support::guarded_void(state, kPluginName, "destroy", [&] { trace::destroy_state(state); });
}

std::int32_t instance_create(bp_plugin_state *state, const bp_layer_create_args *args, bp_layer_instance **out,
                             bp_error_sink *sink) {
  return plugin_support::guarded(state, sink, kPluginName, "instance_create", [&]() -> std::int32_t {
    const plugin_support::TableCall call{state->services, sink, kPluginName, "instance_create"};
    if (out == nullptr) return call.null_argument("out");
    *out = nullptr;
    if (args == nullptr || args->struct_size < BP_LAYER_CREATE_ARGS_SIZE_V1_3)
      return call.fail(BP_INVALID_ARGUMENT, "args is NULL or smaller than ABI 1.3's");
    return trace::create_instance(*state, *args, out, sink);
  });
}

void instance_destroy(bp_plugin_state *state, bp_layer_instance *instance) {
  plugin_support::guarded_void(state, kPluginName, "instance_destroy", [&] {
    if (instance != nullptr) trace::destroy_instance(*state, instance);
  });
}

// The hot path: one event into the ring (trace_writer.cpp, record()).
std::int32_t after(bp_plugin_state *state, bp_layer_instance *instance, const bp_layer_call *call,
                   const bp_layer_outcome *outcome, bp_error_sink *sink) {
  return plugin_support::guarded(state, sink, kPluginName, "after", [&]() -> std::int32_t {
    if (instance == nullptr || call == nullptr || outcome == nullptr || call->struct_size < BP_LAYER_CALL_SIZE_V1_3 ||
        outcome->struct_size < BP_LAYER_OUTCOME_SIZE_V1_3) [[unlikely]]
      return plugin_support::fail(state->services, sink, BP_INVALID_ARGUMENT,
                                  "trace after: instance, call or outcome is NULL or smaller than ABI 1.3's");
    instance->writer->record(*call, *outcome, instance->device);
    return BP_OK;
  });
}

std::int32_t flush(bp_plugin_state *state, bp_layer_instance *instance, bp_error_sink *sink) {
  return plugin_support::guarded(state, sink, kPluginName, "flush", [&]() -> std::int32_t {
    if (instance == nullptr)
      return plugin_support::fail(state->services, sink, BP_INVALID_ARGUMENT, "trace flush: instance is NULL");
    return trace::flush_instance(*state, *instance, sink);
  });
}

// A layer-only plugin implements destroy alone (plugin.h); every other
// entry stays NULL.
constexpr bp_plugin_functions layer_only_functions() {
  bp_plugin_functions functions{};
  functions.struct_size = sizeof functions;
  functions.destroy = destroy;
  return functions;
}
constinit const bp_plugin_functions kFunctions = layer_only_functions();

constinit const bp_layer_functions kLayerFunctions = {
    .struct_size = sizeof(bp_layer_functions),
    .next = nullptr,
    .instance_create = instance_create,
    .instance_destroy = instance_destroy,
    .before = nullptr,
    .after = after,
    .flush = flush,
};

const bp_layer_option kOptions[] = {
    {sizeof(bp_layer_option), nullptr, "file",
     "the trace file (Chrome trace-event JSON); default backplane-trace-<pid>.json in the working directory",
     BP_LAYER_OPTION_PATH},
    {sizeof(bp_layer_option), nullptr, "ring_events",
     "events held in memory before they are written out (16..16777216, default 65536)", 0},
    {sizeof(bp_layer_option), nullptr, "max_bytes",
     "the most bytes the file may grow to; later events are dropped and counted (default 268435456)", 0},
};

// Not stackable (a second trace in one chain would record every call
// twice); timed, since a trace without durations says little.
const bp_layer_kind kLayerKind = {
    sizeof(bp_layer_kind),
    nullptr,
    "trace",
    "records every call on the device, with its timing, to a Chrome trace-event JSON file (Perfetto)",
    BP_LAYER_TIMED,
    nullptr,
    0,
    kOptions,
    sizeof kOptions / sizeof kOptions[0],
};

const bp_layer_table kLayerTable = {
    sizeof(bp_layer_table), nullptr, BP_EXTENSION_LAYER_TABLE, &kLayerKind, 1, &kLayerFunctions,
};

const bp_plugin_descriptor kDescriptor = {
    sizeof(bp_plugin_descriptor),
    &kLayerTable,
    BP_PLUGIN_ABI_MAJOR,
    BP_PLUGIN_ABI_MINOR,
    kPluginName,
    kPluginVersion,
    nullptr,
    0,
    nullptr,
    0,
    &kFunctions,
};

static_assert(sizeof(bp_layer_table) >= BP_LAYER_TABLE_SIZE_V1_3);
static_assert(sizeof(bp_layer_functions) >= BP_LAYER_FUNCTIONS_SIZE_V1_3);

// Called by plugin_support::run_entry once the host's ABI major and
// services are known to fit.
std::int32_t entry(bp_plugin_entry_args *args, const bp_host_services *services, bp_error_sink *sink) {
  // Layers exist since 1.3: an older host neither reads the layer table nor
  // lends describe_device.
  if (args->host_abi_minor < 3 || services->struct_size < BP_HOST_SERVICES_SIZE_V1_3 ||
      services->describe_device == nullptr) {
    return plugin_support::fail(services, sink, BP_PLUGIN_ABI,
                                "trace plugin %s is a layer (plugin ABI 1.3), the host speaks ABI %u.%u%s: upgrade "
                                "the host to ABI 1.3",
                                kPluginVersion, static_cast<unsigned>(args->host_abi_major),
                                static_cast<unsigned>(args->host_abi_minor),
                                args->host_abi_minor >= 3 ? " without the layer services (describe_device)" : "");
  }
  args->descriptor = &kDescriptor;
  args->state = new bp_plugin_state(services);
  return BP_OK;
}

}  // namespace

extern "C" BP_PLUGIN_EXPORT std::int32_t bp_plugin_entry(bp_plugin_entry_args *args) {
  return plugin_support::run_entry(args, kPluginName, kPluginVersion, entry);
}
