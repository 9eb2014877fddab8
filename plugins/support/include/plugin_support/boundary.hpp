// The exception boundary of a plugin: nothing C++ may cross the ABI, so
// every function-table entry and bp_plugin_entry itself run their bodies
// through these. Running out of memory is BP_OUT_OF_MEMORY; any other
// exception is a bug of the plugin, reported as BP_INTERNAL with its text.
// The messages are formatted without allocating, since memory may be what
// ran out.
#pragma once

#include <cstdint>
#include <exception>
#include <new>

#include "backplane/plugin.h"
#include "plugin_support/host_link.hpp"

namespace backplane::plugin_support {

// Runs one table function's body for a plugin whose state (any type with
// a `services` member) is `state`. Without a state there are no host
// services to report through: BP_INVALID_ARGUMENT.
template <class State, class Body>
std::int32_t guarded(const State *state, bp_error_sink *sink, const char *plugin, const char *call,
                     Body &&body) noexcept {
  if (state == nullptr) return BP_INVALID_ARGUMENT;
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return fail(state->services, sink, BP_OUT_OF_MEMORY, "%s %s: out of host memory", plugin, call);
  } catch (const std::exception &e) {
    return fail(state->services, sink, BP_INTERNAL, "%s %s: internal error: %s", plugin, call, e.what());
  } catch (...) {
    return fail(state->services, sink, BP_INTERNAL, "%s %s: internal error: unknown exception", plugin, call);
  }
}

// For the table functions that return nothing: a failure can only be logged.
template <class State, class Body>
void guarded_void(const State *state, const char *plugin, const char *call, Body &&body) noexcept {
  if (state == nullptr) return;
  try {
    body();
  } catch (const std::exception &e) {
    log(state->services, BP_LOG_ERROR, plugin, "%s: internal error: %s", call, e.what());
  } catch (...) {
    log(state->services, BP_LOG_ERROR, plugin, "%s: internal error: unknown exception", call);
  }
}

// The checks every bp_plugin_entry makes before anything else: the host's
// ABI major is ours, the arguments are at least ABI 1.0's, and the host
// lent services with report_error. BP_OK, or the refusal, reported.
std::int32_t check_entry(const bp_plugin_entry_args *args, const bp_host_services *services, bp_error_sink *sink,
                         const char *plugin, const char *version) noexcept;

// The whole of an exported bp_plugin_entry: reads the services and sink
// from `args` as far as its struct_size reaches, makes check_entry()'s
// checks, then runs `entry(args, services, sink)` behind the boundary.
template <class Entry>
std::int32_t run_entry(bp_plugin_entry_args *args, const char *plugin, const char *version,
                       Entry &&entry) noexcept {
  if (args == nullptr) return BP_INVALID_ARGUMENT;
  if (args->struct_size < BP_STRUCT_SIZE(bp_plugin_entry_args, host_abi_minor)) return BP_PLUGIN_ABI;
  const bp_host_services *services =
      args->struct_size >= BP_STRUCT_SIZE(bp_plugin_entry_args, services) ? args->services : nullptr;
  bp_error_sink *sink = args->struct_size >= BP_STRUCT_SIZE(bp_plugin_entry_args, sink) ? args->sink : nullptr;
  try {
    if (const std::int32_t refused = check_entry(args, services, sink, plugin, version); refused != BP_OK)
      return refused;
    return entry(args, services, sink);
  } catch (const std::bad_alloc &) {
    return fail(services, sink, BP_OUT_OF_MEMORY, "%s plugin: out of memory while loading", plugin);
  } catch (const std::exception &e) {
    return fail(services, sink, BP_INTERNAL, "%s plugin: internal error while loading: %s", plugin, e.what());
  } catch (...) {
    return fail(services, sink, BP_INTERNAL, "%s plugin: internal error while loading: unknown exception", plugin);
  }
}

// request_test / request_wait of a plugin whose collective_start completes
// every collective and hands out no request: anything the host passes is
// a mistake, reported as such rather than dereferenced.
std::int32_t no_such_request(const bp_host_services *services, bp_error_sink *sink, const char *plugin,
                             const bp_plugin_request *request, const char *call) noexcept;

}  // namespace backplane::plugin_support
