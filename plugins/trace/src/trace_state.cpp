// Instances and the writers they share (trace_state.hpp).
#include "trace_state.hpp"

#include "plugin_support/host_link.hpp"
#include "trace_options.hpp"

namespace backplane::trace {
namespace {

constexpr const char *kPlugin = "trace";

// What thread names show for a device: its own name, unless that is only
// the chain's text ("trace → cpu:0"), which says less than its base's.
std::string shown_name(const std::string &name, const std::string &base, const char *chain) {
  return chain != nullptr && name == chain && !base.empty() ? base : name;
}

// The last instance of a file is gone: write what is left and close it.
void finish_writer(bp_plugin_state &state, std::unique_ptr<TraceWriter> writer) {
  std::string error;
  if (writer->write(WriteOut::last, &error) != BP_OK)
    plugin_support::log(state.services, BP_LOG_ERROR, kPlugin, "%s", error.c_str());
}

}  // namespace

std::int32_t create_instance(bp_plugin_state &state, const bp_layer_create_args &args, bp_layer_instance **out,
                             bp_error_sink *sink) {
  const plugin_support::TableCall call{state.services, sink, kPlugin, "instance_create"};
  if (args.layer_kind != 0)
    return call.fail(BP_INVALID_ARGUMENT, "layer kind %u does not exist (the plugin has one, 0 = trace)",
                     static_cast<unsigned>(args.layer_kind));
  const char *device_name = args.device_name != nullptr ? args.device_name : "?";
  std::string error;
  const std::optional<TraceOptions> options = parse_trace_options(args.options_json, &error);
  if (!options) return call.fail(BP_CONFIG, "device '%s': %s", device_name, error.c_str());

  std::string name = device_name, base, plugin = "?";
  bp_layer_device_facts facts{};
  facts.struct_size = sizeof facts;
  if (args.device != nullptr && state.services->describe_device(args.device, &facts) == BP_OK) {
    if (facts.name != nullptr) name = facts.name;
    if (facts.base_name != nullptr) base = facts.base_name;
    if (facts.plugin != nullptr) plugin = facts.plugin;
  }

  auto instance = std::make_unique<bp_layer_instance>();
  std::lock_guard lock(state.mutex);
  auto found = state.writers.find(options->file);
  if (found != state.writers.end()) {
    // One file, one ring and one limit: devices sharing it must agree.
    const TraceOptions &shared = found->second->options();
    if (shared.ring_events != options->ring_events)
      return call.fail(BP_CONFIG,
                       "device '%s': option \"ring_events\" is %llu (rounded up to a power of two) but the "
                       "devices already tracing into '%s' use %llu: give them all the same",
                       device_name, static_cast<unsigned long long>(options->ring_events), options->file.c_str(),
                       static_cast<unsigned long long>(shared.ring_events));
    if (shared.max_bytes != options->max_bytes)
      return call.fail(BP_CONFIG,
                       "device '%s': option \"max_bytes\" is %llu but the devices already tracing into "
                       "'%s' use %llu: give them all the same",
                       device_name, static_cast<unsigned long long>(options->max_bytes), options->file.c_str(),
                       static_cast<unsigned long long>(shared.max_bytes));
  } else {
    std::unique_ptr<TraceWriter> writer = TraceWriter::open(*options, state.services, &error);
    if (!writer) return call.fail(BP_CONFIG, "device '%s': option \"file\": %s", device_name, error.c_str());
    found = state.writers.emplace(options->file, std::move(writer)).first;
  }
  TraceWriter &writer = *found->second;
  instance->writer = &writer;
  try {
    instance->device = writer.add_device(name, plugin, shown_name(name, base, args.chain));
  } catch (...) {
    if (writer.instances == 0) state.writers.erase(found);  // made for this instance alone
    throw;
  }
  ++writer.instances;
  plugin_support::log(state.services, BP_LOG_DEBUG, kPlugin, "tracing '%s' into '%s' (%zu devices)", device_name,
                      options->file.c_str(), writer.instances);
  *out = instance.release();
  return BP_OK;
}

void destroy_instance(bp_plugin_state &state, bp_layer_instance *instance) {
  std::unique_ptr<bp_layer_instance> owned(instance);
  // Under the lock, so that an instance made meanwhile for the same file
  // finds either this writer or the file closed.
  std::lock_guard lock(state.mutex);
  TraceWriter *writer = instance->writer;
  if (--writer->instances > 0) return;
  auto found = state.writers.find(writer->options().file);
  std::unique_ptr<TraceWriter> last = std::move(found->second);
  state.writers.erase(found);
  finish_writer(state, std::move(last));
}

std::int32_t flush_instance(bp_plugin_state &state, bp_layer_instance &instance, bp_error_sink *sink) {
  std::string error;
  if (instance.writer->write(WriteOut::flush, &error) == BP_OK) return BP_OK;
  return plugin_support::fail(state.services, sink, BP_DEVICE_FAILURE, "trace flush: %s", error.c_str());
}

void destroy_state(bp_plugin_state *state) {
  std::unique_ptr<bp_plugin_state> owned(state);
  for (auto &[file, writer] : state->writers) {
    plugin_support::log(state->services, BP_LOG_WARN, kPlugin,
                        "'%s' still had %zu instances at the plugin's destroy; writing it out", file.c_str(),
                        writer->instances);
    finish_writer(*state, std::move(writer));
  }
  state->writers.clear();
}

}  // namespace backplane::trace
