// Entry point and ABI boundary of the cpu plugin: the descriptor, its
// capability rows and function table, and the wrappers that stop every C++
// exception before it reaches the host.

#include "backplane/plugin.h"
#include "plugin_state.hpp"
#include "plugin_support/boundary.hpp"
#include "plugin_support/capability_rows.hpp"
#include "reduce_kernels.hpp"

namespace {

using namespace backplane::cpu;
namespace plugin_support = backplane::plugin_support;

constexpr const char *kPluginName = "cpu";
constexpr const char *kPluginVersion = "0.1.0";
const char *const kDeviceKinds[] = {"cpu"};

void fn_destroy(bp_plugin_state *state) noexcept {
  if (state == nullptr) return;
  plugin_support::guarded_void(state, kPluginName, "destroy", [&] {
    // Requests still queued run to their end before the threads stop.
    state->async_queue.stop();
    std::size_t live = 0;
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      live = state->live_objects;
    }
    if (live != 0) {
      log(state->services, BP_LOG_WARN, "destroyed with %zu buffers or groups still alive; they are leaked", live);
    }
  });
  delete state;
}

std::int32_t fn_configure(bp_plugin_state *state, std::uint32_t kind, const char *options_json,
                          bp_error_sink *sink) noexcept {
  return plugin_support::guarded(state, sink, kPluginName, "configure",
                                 [&] { return configure(*state, kind, options_json, sink); });
}

std::int32_t fn_device_count(bp_plugin_state *state, std::uint32_t kind, std::uint32_t *count,
                             bp_error_sink *sink) noexcept {
  return plugin_support::guarded(state, sink, kPluginName, "device_count",
                                 [&] { return device_count(*state, kind, count, sink); });
}

std::int32_t fn_device_info(bp_plugin_state *state, std::uint32_t kind, std::uint32_t device,
                            bp_plugin_device_info *info, bp_error_sink *sink) noexcept {
  return plugin_support::guarded(state, sink, kPluginName, "device_info",
                                 [&] { return device_info(*state, kind, device, info, sink); });
}

std::int32_t fn_buffer_create(bp_plugin_state *state, std::uint32_t kind, std::uint32_t device, std::size_t bytes,
                              bp_plugin_buffer **out, bp_error_sink *sink) noexcept {
  return plugin_support::guarded(state, sink, kPluginName, "buffer_create",
                 [&] { return buffer_create(*state, kind, device, bytes, out, sink); });
}

std::int32_t fn_buffer_wrap_host(bp_plugin_state *state, std::uint32_t kind, std::uint32_t device, void *memory,
                                 std::size_t bytes, bp_plugin_buffer **out, bp_error_sink *sink) noexcept {
  return plugin_support::guarded(state, sink, kPluginName, "buffer_wrap_host",
                 [&] { return buffer_wrap_host(*state, kind, device, memory, bytes, out, sink); });
}

void fn_buffer_destroy(bp_plugin_state *state, bp_plugin_buffer *buffer) noexcept {
  plugin_support::guarded_void(state, kPluginName, "buffer_destroy", [&] { buffer_destroy(*state, buffer); });
}

std::int32_t fn_buffer_write(bp_plugin_state *state, bp_plugin_buffer *buffer, std::size_t offset,
                             const void *source, std::size_t bytes, bp_error_sink *sink) noexcept {
  return plugin_support::guarded(state, sink, kPluginName, "buffer_write",
                 [&] { return buffer_write(*state, buffer, offset, source, bytes, sink); });
}

std::int32_t fn_buffer_read(bp_plugin_state *state, const bp_plugin_buffer *buffer, std::size_t offset,
                            void *destination, std::size_t bytes, bp_error_sink *sink) noexcept {
  return plugin_support::guarded(state, sink, kPluginName, "buffer_read",
                 [&] { return buffer_read(*state, buffer, offset, destination, bytes, sink); });
}

std::int32_t fn_comm_create(bp_plugin_state *state, std::uint32_t kind, const std::uint32_t *devices,
                            std::size_t device_count, bp_plugin_comm **out, bp_error_sink *sink) noexcept {
  return plugin_support::guarded(state, sink, kPluginName, "comm_create",
                 [&] { return comm_create(*state, kind, devices, device_count, out, sink); });
}

void fn_comm_destroy(bp_plugin_state *state, bp_plugin_comm *comm) noexcept {
  plugin_support::guarded_void(state, kPluginName, "comm_destroy", [&] { comm_destroy(*state, comm); });
}

std::int32_t fn_collective_start(bp_plugin_state *state, bp_plugin_comm *comm, const bp_collective_args *args,
                                 bp_plugin_request **out, bp_error_sink *sink) noexcept {
  return plugin_support::guarded(state, sink, kPluginName, "collective_start", [&]() -> std::int32_t {
    if (comm == nullptr) {
      if (out != nullptr) *out = nullptr;
      return fail(state->services, sink, BP_INVALID_ARGUMENT, "cpu collective_start: comm is NULL");
    }
    return collective_start(*state, *comm, args, out, sink);
  });
}

// Requests are those collective_start handed out (async_queue.cpp); the host
// never passes the NULL "already complete" one.
std::int32_t fn_request_test(bp_plugin_state *state, bp_plugin_request *request, bool *done,
                             bp_error_sink *sink) noexcept {
  return plugin_support::guarded(state, sink, kPluginName, "request_test", [&]() -> std::int32_t {
    if (request == nullptr) {
      return fail(state->services, sink, BP_INVALID_ARGUMENT, "cpu request_test: request is NULL");
    }
    return request_test(*state, *request, done, sink);
  });
}

std::int32_t fn_request_wait(bp_plugin_state *state, bp_plugin_request *request, std::int64_t timeout_ns,
                             bp_error_sink *sink) noexcept {
  return plugin_support::guarded(state, sink, kPluginName, "request_wait", [&]() -> std::int32_t {
    if (request == nullptr) {
      return fail(state->services, sink, BP_INVALID_ARGUMENT, "cpu request_wait: request is NULL");
    }
    return request_wait(*state, *request, timeout_ns, sink);
  });
}

void fn_request_release(bp_plugin_state *state, bp_plugin_request *request) noexcept {
  plugin_support::guarded_void(state, kPluginName, "request_release", [&] { request_release(*state, request); });
}

// The descriptor, capability rows and function table are immutable and shared
// by every state: they hold no per-host data.
const bp_plugin_functions kFunctions = {
    sizeof(bp_plugin_functions),
    nullptr,
    fn_destroy,
    fn_configure,
    fn_device_count,
    fn_device_info,
    fn_buffer_create,
    fn_buffer_wrap_host,
    fn_buffer_destroy,
    fn_buffer_write,
    fn_buffer_read,
    fn_comm_create,
    fn_comm_destroy,
    fn_collective_start,
    fn_request_test,
    fn_request_wait,
    fn_request_release,
    nullptr,  // kind_info: the cpu kind always has its devices
    nullptr,  // comm_info: every rank shares the process's memory
};

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
  return plugin_support::run_entry(args, kPluginName, kPluginVersion, entry);
}
