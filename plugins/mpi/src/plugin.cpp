// Entry point of the mpi plugin: a transport-only plugin (no device kind)
// whose descriptor carries the transport `mpi` through a bp_transport_table
// on its `next` (plugin.h, "transports", ABI 1.6). Every table function
// checks its arguments and runs its body behind the exception boundary.
#include <memory>

#include "backplane/plugin.h"
#include "mpi_plugin.hpp"
#include "plugin_support/boundary.hpp"
#include "plugin_support/capability_rows.hpp"

namespace {

using namespace backplane::mpi;
namespace plugin_support = backplane::plugin_support;
using plugin_support::guarded;
using plugin_support::guarded_void;

std::int32_t table_open(bp_plugin_state *state, const bp_transport_open_args *args, bp_transport **out,
                        bp_error_sink *sink) {
  return guarded(state, sink, kName, "open", [&]() -> std::int32_t {
    const TableCall call{state->services, sink, kName, "open"};
    if (out == nullptr) return call.null_argument("out");
    *out = nullptr;
    if (args == nullptr) return call.null_argument("args");
    if (args->struct_size < BP_TRANSPORT_OPEN_ARGS_SIZE_V1_6)
      return call.fail(BP_INVALID_ARGUMENT, "args of %zu bytes are smaller than ABI 1.6's %zu", args->struct_size,
                       static_cast<std::size_t>(BP_TRANSPORT_OPEN_ARGS_SIZE_V1_6));
    return open_transport(*state, *args, out, sink);
  });
}

void table_close(bp_plugin_state *state, bp_transport *transport) {
  guarded_void(state, kName, "close", [&] {
    if (transport != nullptr) close_transport(*state, transport);
  });
}

std::int32_t transport_info(bp_plugin_state *state, bp_transport *transport, bp_transport_info *out,
                            bp_error_sink *sink) {
  return guarded(state, sink, kName, "transport_info", [&]() -> std::int32_t {
    const TableCall call{state->services, sink, kName, "transport_info"};
    if (transport == nullptr) return call.null_argument("transport");
    if (out == nullptr) return call.null_argument("out");
    return describe_transport(*state, *transport, *out, sink);
  });
}

std::int32_t comm_create(bp_plugin_state *state, bp_transport *transport, const bp_transport_comm_args *args,
                         bp_transport_comm_info *info, bp_transport_comm **out, bp_error_sink *sink) {
  return guarded(state, sink, kName, "comm_create", [&]() -> std::int32_t {
    const TableCall call{state->services, sink, kName, "comm_create"};
    if (out == nullptr) return call.null_argument("out");
    *out = nullptr;
    if (transport == nullptr) return call.null_argument("transport");
    if (info == nullptr) return call.null_argument("info");
    if (args == nullptr) return call.null_argument("args");
    if (args->struct_size < BP_TRANSPORT_COMM_ARGS_SIZE_V1_6)
      return call.fail(BP_INVALID_ARGUMENT, "args of %zu bytes are smaller than ABI 1.6's %zu", args->struct_size,
                       static_cast<std::size_t>(BP_TRANSPORT_COMM_ARGS_SIZE_V1_6));
    return create_comm(*state, *transport, *args, *info, out, sink);
  });
}

void comm_destroy(bp_plugin_state *state, bp_transport_comm *comm) {
  guarded_void(state, kName, "comm_destroy", [&] {
    if (comm != nullptr) destroy_comm(*state, comm);
  });
}

std::int32_t exchange_start(bp_plugin_state *state, bp_transport_comm *comm, const bp_transport_exchange *exchange,
                            bp_plugin_request **out, bp_error_sink *sink) {
  return guarded(state, sink, kName, "exchange_start", [&]() -> std::int32_t {
    const TableCall call{state->services, sink, kName, "exchange_start"};
    if (out == nullptr) return call.null_argument("out");
    *out = nullptr;
    if (comm == nullptr) return call.null_argument("comm");
    if (exchange == nullptr) return call.null_argument("exchange");
    if (exchange->struct_size < BP_TRANSPORT_EXCHANGE_SIZE_V1_6)
      return call.fail(BP_INVALID_ARGUMENT, "exchange of %zu bytes is smaller than ABI 1.6's %zu",
                       exchange->struct_size, static_cast<std::size_t>(BP_TRANSPORT_EXCHANGE_SIZE_V1_6));
    return start_exchange(*state, *comm, *exchange, out, sink);
  });
}

std::int32_t exchange_wait(bp_plugin_state *state, bp_plugin_request *request, std::int64_t timeout_ns,
                           bp_error_sink *sink) {
  return guarded(state, sink, kName, "exchange_wait", [&]() -> std::int32_t {
    if (request == nullptr)
      return TableCall{state->services, sink, kName, "exchange_wait"}.fail(
          BP_INVALID_ARGUMENT, "request is NULL (a NULL request from exchange_start means it already completed)");
    return wait_exchange(*state, *request, timeout_ns, sink);
  });
}

void exchange_release(bp_plugin_state *state, bp_plugin_request *request) {
  guarded_void(state, kName, "exchange_release", [&] {
    if (request != nullptr) release_exchange(*state, request);
  });
}

const bp_transport_functions kTransportFunctions = {
    sizeof(bp_transport_functions), nullptr, table_open, table_close, transport_info, comm_create, comm_destroy,
    exchange_start, exchange_wait, exchange_release,
};

void destroy(bp_plugin_state *state) {
  guarded_void(state, kName, "destroy", [&] { delete state; });
}

// A plugin without device kinds implements destroy alone (plugin.h): every
// other entry NULL.
constexpr bp_plugin_functions transport_only_functions() {
  bp_plugin_functions functions{};
  functions.struct_size = sizeof functions;
  functions.destroy = destroy;
  return functions;
}
constinit const bp_plugin_functions kFunctions = transport_only_functions();

static_assert(sizeof(bp_transport_table) >= BP_TRANSPORT_TABLE_SIZE_V1_6);
static_assert(sizeof(bp_transport_functions) >= BP_TRANSPORT_FUNCTIONS_SIZE_V1_6);

std::int32_t entry(bp_plugin_entry_args *args, const bp_host_services *services, bp_error_sink *sink) {
  // The transport table is ABI 1.6: an older host would see a plugin with
  // nothing in it.
  if (args->host_abi_minor < 6)
    return plugin_support::fail(services, sink, BP_PLUGIN_ABI,
                                "mpi plugin %s provides a transport, which needs plugin ABI 1.6; the host speaks ABI "
                                "%u.%u",
                                kVersion, static_cast<unsigned>(args->host_abi_major),
                                static_cast<unsigned>(args->host_abi_minor));
  auto state = std::make_unique<bp_plugin_state>();
  state->services = services;
  // Every collective, every element type, both modes; avg for the
  // floating-point types only (an integer mean would have to pick a
  // rounding): what MPI carries, f16/bf16 through the plugin's own ops.
  state->rows = plugin_support::rows_for_host(plugin_support::kEveryCollectiveRows, args->host_abi_minor);
  state->table = bp_transport_table{sizeof(bp_transport_table), nullptr, BP_EXTENSION_TRANSPORT_TABLE, kName,
                                    state->rows.data(), state->rows.size(), &kTransportFunctions};
  state->descriptor = bp_plugin_descriptor{sizeof(bp_plugin_descriptor),
                                           &state->table,
                                           BP_PLUGIN_ABI_MAJOR,
                                           BP_PLUGIN_ABI_MINOR,
                                           kName,
                                           kVersion,
                                           nullptr,
                                           0,  // no device kinds
                                           nullptr,
                                           0,
                                           &kFunctions};
  args->descriptor = &state->descriptor;
  args->state = state.release();
  return BP_OK;
}

}  // namespace

extern "C" BP_PLUGIN_EXPORT std::int32_t bp_plugin_entry(bp_plugin_entry_args *args) {
  return plugin_support::run_entry(args, kName, kVersion, entry);
}
