// The trace plugin's state and instances: one writer per trace file,
// shared by every instance that traces into it and counted, so that a
// trace layer over each rank of a group writes one file.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backplane/plugin.h"
#include "trace_writer.hpp"

// One per bp_plugin_entry call (one per host).
struct bp_plugin_state {
  explicit bp_plugin_state(const bp_host_services *lent) : services(lent) {}
  const bp_host_services *services;
  std::mutex mutex;  // guards writers and each writer's instance count
  std::map<std::string, std::unique_ptr<backplane::trace::TraceWriter>> writers;  // by resolved file name
};

// One trace layer over one device.
struct bp_layer_instance {
  backplane::trace::TraceWriter *writer;
  std::uint32_t device;  // its index in the writer's device table
};

namespace backplane::trace {

// The bodies of the layer table's functions, behind plugin.cpp's boundary.
std::int32_t create_instance(bp_plugin_state &state, const bp_layer_create_args &args, bp_layer_instance **out,
                             bp_error_sink *sink);
void destroy_instance(bp_plugin_state &state, bp_layer_instance *instance);
std::int32_t flush_instance(bp_plugin_state &state, bp_layer_instance &instance, bp_error_sink *sink);
// The plugin's destroy: writers still open (instances the host never
// destroyed) write what they hold first.
void destroy_state(bp_plugin_state *state);

}  // namespace backplane::trace
