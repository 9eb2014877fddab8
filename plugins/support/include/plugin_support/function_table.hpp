// A plugin's bp_plugin_functions, written once for every in-tree plugin:
// each entry is a trampoline that runs the plugin's body behind the
// exception boundary (boundary.hpp), after the checks that need no
// knowledge of the device. The host validates every argument already
// (plugin.h); what stays here is what a plugin's own memory safety needs
// (NULL handles and out-pointers, a transfer's range) and the bookkeeping
// of buffers and comms (the kind index, the devices' existence, the live
// count that keeps configure from changing them).
//
// A Backend is a type with these static members; the bodies may throw.
//   using State = bp_plugin_state;   deriving from StateBase
//   using Buffer = bp_plugin_buffer; deriving from BufferBase
//   kName  the plugin's name: the first word of every message, the log category
//   kKind  the name of its one device kind (index 0)
//   size_t devices_now(const State &)                 the kind's devices; under state.mutex
//   device_info(State &, uint32_t device, bp_plugin_device_info &, sink)   under state.mutex;
//                                                           the device exists
//   buffer_allocate(State &, Buffer &, sink)          gives a new buffer (bytes and device set)
//                                                     its memory; the device stays while it runs
//   buffer_write(State &, Buffer &, size_t offset, const void *source, size_t bytes, sink)
//   buffer_read(State &, const Buffer &, size_t offset, void *destination, size_t bytes, sink)
//                                                     bytes > 0, within the buffer, host memory there
//   comm_create(State &, span<const uint32_t> devices, bp_plugin_comm **out, sink)
//                                                     devices non-empty, existing, and staying
//                                                     while it runs; *out NULL until it succeeds
//   void comm_destroy(State &, bp_plugin_comm *)      not NULL; frees it
//   collective_start(State &, bp_plugin_comm &, const bp_collective_args &, bp_plugin_request **out, sink)
//                                                     args at least ABI 1.0's, *out NULL
//   request_test(State &, bp_plugin_request &, bool &done, sink)
//   request_wait(State &, bp_plugin_request &, int64_t timeout_ns, sink)
//   void request_release(State &, bp_plugin_request *)   not NULL; frees it
// and, where the plugin has them (the entry is NULL without):
//   configure(State &, const char *options_json, sink)      not NULL (NULL keeps the options)
//   buffer_wrap_host(State &, Buffer &, void *memory, sink)   memory not NULL unless bytes is 0
//   kind_info(State &, bp_plugin_kind_info &, sink)
//   comm_info(State &, bp_plugin_comm &, bp_plugin_comm_info &, sink)
//   buffer_host_memory(State &, const Buffer &, void *&memory, sink)   the buffer's bytes are host memory
//   void finish_work(State &)                         destroy's first step, before the state goes
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <type_traits>

#include "backplane/plugin.h"
#include "plugin_support/boundary.hpp"
#include "plugin_support/buffer_base.hpp"
#include "plugin_support/host_link.hpp"
#include "plugin_support/state_base.hpp"

namespace backplane::plugin_support {

template <class Backend>
class FunctionTable {
  // Taken from Backend so that the handles' members are looked up where
  // the table is made, once the plugin has defined them.
  using State = typename Backend::State;
  using Buffer = typename Backend::Buffer;

 public:
  static constexpr bp_plugin_functions table() {
    bp_plugin_functions functions{};
    functions.struct_size = sizeof(bp_plugin_functions);
    functions.destroy = destroy;
    if constexpr (requires { &Backend::configure; }) functions.configure = configure;
    functions.device_count = device_count;
    functions.device_info = device_info;
    functions.buffer_create = buffer_create;
    if constexpr (requires { &Backend::buffer_wrap_host; }) functions.buffer_wrap_host = buffer_wrap_host;
    functions.buffer_destroy = buffer_destroy;
    functions.buffer_write = buffer_write;
    functions.buffer_read = buffer_read;
    functions.comm_create = comm_create;
    functions.comm_destroy = comm_destroy;
    functions.collective_start = collective_start;
    functions.request_test = request_test;
    functions.request_wait = request_wait;
    functions.request_release = request_release;
    if constexpr (requires { &Backend::kind_info; }) functions.kind_info = kind_info;
    if constexpr (requires { &Backend::comm_info; }) functions.comm_info = comm_info;
    if constexpr (requires { &Backend::buffer_host_memory; }) functions.buffer_host_memory = buffer_host_memory;
    return functions;
  }

 private:
  // Runs `body(state, call)` as the table function `function`, behind the
  // exception boundary; a NULL state is BP_INVALID_ARGUMENT.
  template <class Body>
  static std::int32_t run(State *state, bp_error_sink *sink, const char *function, Body &&body) noexcept {
    static_assert(std::is_base_of_v<StateBase, State> && std::is_base_of_v<BufferBase, Buffer>);
    return guarded(state, sink, Backend::kName, function, [&]() -> std::int32_t {
      return body(*state, TableCall{state->services, sink, Backend::kName, function});
    });
  }

  static std::int32_t check_kind(const TableCall &call, std::uint32_t kind) noexcept {
    return check_single_kind(call.services, call.sink, kind, Backend::kKind);
  }

  // Counts a new object on `devices` as live once each of them exists: a
  // buffer's one device, or a comm's, rank by rank.
  static std::int32_t claim_devices(State &state, const TableCall &call, std::span<const std::uint32_t> devices,
                                    bool of_ranks, std::optional<LiveObjectClaim> &claim) {
    std::lock_guard<std::mutex> lock(state.mutex);
    const std::size_t available = Backend::devices_now(state);
    for (std::size_t r = 0; r < devices.size(); ++r) {
      if (devices[r] < available) continue;
      if (!of_ranks) {
        return call.fail(BP_INVALID_ARGUMENT, "device %u does not exist (%zu %s devices)",
                         static_cast<unsigned>(devices[r]), available, Backend::kKind);
      }
      return call.fail(BP_INVALID_ARGUMENT, "rank %zu names device %u, which does not exist (%zu %s devices)", r,
                       static_cast<unsigned>(devices[r]), available, Backend::kKind);
    }
    claim.emplace(state, lock);
    return BP_OK;
  }

  // buffer_create and buffer_wrap_host once their own arguments passed:
  // the buffer, counted, on its device, with `fill` giving it its memory.
  template <class Fill>
  static std::int32_t create_buffer(State &state, const TableCall &call, std::uint32_t device, std::size_t bytes,
                                    bp_plugin_buffer **out, Fill &&fill) {
    std::optional<LiveObjectClaim> claim;
    if (const std::int32_t refused = claim_devices(state, call, {&device, 1}, false, claim); refused != BP_OK) {
      return refused;
    }
    auto buffer = std::make_unique<Buffer>();
    buffer->bytes = bytes;
    buffer->device = device;
    if (const std::int32_t status = fill(*buffer); status != BP_OK) return status;
    claim->keep();
    *out = buffer.release();
    return BP_OK;
  }

  static void destroy(State *state) noexcept {
    if (state == nullptr) return;
    guarded_void(state, Backend::kName, "destroy", [&] {
      if constexpr (requires { Backend::finish_work(*state); }) Backend::finish_work(*state);
      log_leaked_objects(*state, Backend::kName);
    });
    delete state;
  }

  static std::int32_t configure(State *state, std::uint32_t kind, const char *options_json,
                                bp_error_sink *sink) noexcept {
    return run(state, sink, "configure", [&](State &s, const TableCall &call) -> std::int32_t {
      if (const std::int32_t refused = check_kind(call, kind); refused != BP_OK) return refused;
      if (options_json == nullptr) return BP_OK;  // keep the current options (plugin.h)
      return Backend::configure(s, options_json, sink);
    });
  }

  static std::int32_t device_count(State *state, std::uint32_t kind, std::uint32_t *count,
                                   bp_error_sink *sink) noexcept {
    return run(state, sink, "device_count", [&](State &s, const TableCall &call) -> std::int32_t {
      if (const std::int32_t refused = check_kind(call, kind); refused != BP_OK) return refused;
      if (count == nullptr) return call.null_argument("count");
      std::lock_guard<std::mutex> lock(s.mutex);
      *count = static_cast<std::uint32_t>(Backend::devices_now(s));
      return BP_OK;
    });
  }

  static std::int32_t device_info(State *state, std::uint32_t kind, std::uint32_t device,
                                  bp_plugin_device_info *info, bp_error_sink *sink) noexcept {
    return run(state, sink, "device_info", [&](State &s, const TableCall &call) -> std::int32_t {
      if (const std::int32_t refused = check_kind(call, kind); refused != BP_OK) return refused;
      if (info == nullptr) return call.null_argument("info");
      std::lock_guard<std::mutex> lock(s.mutex);
      if (const std::size_t available = Backend::devices_now(s); device >= available) {
        return call.fail(BP_INVALID_ARGUMENT, "device %u does not exist (%zu %s devices)",
                         static_cast<unsigned>(device), available, Backend::kKind);
      }
      return Backend::device_info(s, device, *info, sink);
    });
  }

  static std::int32_t buffer_create(State *state, std::uint32_t kind, std::uint32_t device, std::size_t bytes,
                                    bp_plugin_buffer **out, bp_error_sink *sink) noexcept {
    return run(state, sink, "buffer_create", [&](State &s, const TableCall &call) -> std::int32_t {
      if (const std::int32_t refused = check_kind(call, kind); refused != BP_OK) return refused;
      if (out == nullptr) return call.null_argument("out");
      *out = nullptr;
      return create_buffer(s, call, device, bytes, out,
                           [&](Buffer &buffer) { return Backend::buffer_allocate(s, buffer, sink); });
    });
  }

  static std::int32_t buffer_wrap_host(State *state, std::uint32_t kind, std::uint32_t device, void *memory,
                                       std::size_t bytes, bp_plugin_buffer **out, bp_error_sink *sink) noexcept {
    return run(state, sink, "buffer_wrap_host", [&](State &s, const TableCall &call) -> std::int32_t {
      if (const std::int32_t refused = check_kind(call, kind); refused != BP_OK) return refused;
      if (out == nullptr) return call.null_argument("out");
      *out = nullptr;
      if (memory == nullptr && bytes != 0) return call.fail(BP_INVALID_ARGUMENT, "memory is NULL for %zu bytes", bytes);
      return create_buffer(s, call, device, bytes, out,
                           [&](Buffer &buffer) { return Backend::buffer_wrap_host(s, buffer, memory, sink); });
    });
  }

  static void buffer_destroy(State *state, Buffer *buffer) noexcept {
    guarded_void(state, Backend::kName, "buffer_destroy", [&] {
      if (buffer == nullptr) return;
      delete buffer;
      release_live_object(*state);
    });
  }

  static std::int32_t buffer_write(State *state, Buffer *buffer, std::size_t offset, const void *source,
                                   std::size_t bytes, bp_error_sink *sink) noexcept {
    return run(state, sink, "buffer_write", [&](State &s, const TableCall &call) -> std::int32_t {
      if (const std::int32_t refused = check_transfer(call, buffer, offset, source, bytes); refused != BP_OK) {
        return refused;
      }
      // Nothing to move, and memcpy may not be given NULL even for 0 bytes.
      if (bytes == 0) return BP_OK;
      return Backend::buffer_write(s, *buffer, offset, source, bytes, sink);
    });
  }

  static std::int32_t buffer_read(State *state, const Buffer *buffer, std::size_t offset, void *destination,
                                  std::size_t bytes, bp_error_sink *sink) noexcept {
    return run(state, sink, "buffer_read", [&](State &s, const TableCall &call) -> std::int32_t {
      if (const std::int32_t refused = check_transfer(call, buffer, offset, destination, bytes); refused != BP_OK) {
        return refused;
      }
      if (bytes == 0) return BP_OK;
      return Backend::buffer_read(s, *buffer, offset, destination, bytes, sink);
    });
  }

  static std::int32_t buffer_host_memory(State *state, const Buffer *buffer, void **memory,
                                         bp_error_sink *sink) noexcept {
    return run(state, sink, "buffer_host_memory", [&](State &s, const TableCall &call) -> std::int32_t {
      if (buffer == nullptr) return call.null_argument("buffer");
      if (memory == nullptr) return call.null_argument("memory");
      *memory = nullptr;
      return Backend::buffer_host_memory(s, *buffer, *memory, sink);
    });
  }

  static std::int32_t comm_create(State *state, std::uint32_t kind, const std::uint32_t *devices,
                                  std::size_t device_count, bp_plugin_comm **out, bp_error_sink *sink) noexcept {
    return run(state, sink, "comm_create", [&](State &s, const TableCall &call) -> std::int32_t {
      if (const std::int32_t refused = check_kind(call, kind); refused != BP_OK) return refused;
      if (out == nullptr) return call.null_argument("out");
      *out = nullptr;
      if (devices == nullptr || device_count == 0) {
        return call.fail(BP_INVALID_ARGUMENT, "a comm needs at least one device");
      }
      const std::span<const std::uint32_t> ranks(devices, device_count);
      std::optional<LiveObjectClaim> claim;
      if (const std::int32_t refused = claim_devices(s, call, ranks, true, claim); refused != BP_OK) return refused;
      const std::int32_t status = Backend::comm_create(s, ranks, out, sink);
      if (status == BP_OK) claim->keep();
      return status;
    });
  }

  static void comm_destroy(State *state, bp_plugin_comm *comm) noexcept {
    guarded_void(state, Backend::kName, "comm_destroy", [&] {
      if (comm == nullptr) return;
      Backend::comm_destroy(*state, comm);
      release_live_object(*state);
    });
  }

  static std::int32_t collective_start(State *state, bp_plugin_comm *comm, const bp_collective_args *args,
                                       bp_plugin_request **out, bp_error_sink *sink) noexcept {
    return run(state, sink, "collective_start", [&](State &s, const TableCall &call) -> std::int32_t {
      if (out != nullptr) *out = nullptr;
      if (comm == nullptr) return call.null_argument("comm");
      if (out == nullptr) return call.null_argument("out");
      if (args == nullptr || args->struct_size < BP_COLLECTIVE_ARGS_SIZE_V1_0) {
        return call.fail(BP_INVALID_ARGUMENT, "args is NULL or smaller than ABI 1.0's");
      }
      return Backend::collective_start(s, *comm, *args, out, sink);
    });
  }

  // The host never passes the NULL "already complete" request (plugin.h).
  static std::int32_t request_test(State *state, bp_plugin_request *request, bool *done,
                                   bp_error_sink *sink) noexcept {
    return run(state, sink, "request_test", [&](State &s, const TableCall &call) -> std::int32_t {
      if (request == nullptr) return call.null_argument("request");
      if (done == nullptr) return call.null_argument("done");
      return Backend::request_test(s, *request, *done, sink);
    });
  }

  static std::int32_t request_wait(State *state, bp_plugin_request *request, std::int64_t timeout_ns,
                                   bp_error_sink *sink) noexcept {
    return run(state, sink, "request_wait", [&](State &s, const TableCall &call) -> std::int32_t {
      if (request == nullptr) return call.null_argument("request");
      return Backend::request_wait(s, *request, timeout_ns, sink);
    });
  }

  static void request_release(State *state, bp_plugin_request *request) noexcept {
    guarded_void(state, Backend::kName, "request_release", [&] {
      if (request != nullptr) Backend::request_release(*state, request);
    });
  }

  static std::int32_t kind_info(State *state, std::uint32_t kind, bp_plugin_kind_info *info,
                                bp_error_sink *sink) noexcept {
    return run(state, sink, "kind_info", [&](State &s, const TableCall &call) -> std::int32_t {
      if (const std::int32_t refused = check_kind(call, kind); refused != BP_OK) return refused;
      if (info == nullptr) return call.null_argument("info");
      return Backend::kind_info(s, *info, sink);
    });
  }

  static std::int32_t comm_info(State *state, bp_plugin_comm *comm, bp_plugin_comm_info *info,
                                bp_error_sink *sink) noexcept {
    return run(state, sink, "comm_info", [&](State &s, const TableCall &call) -> std::int32_t {
      if (comm == nullptr) return call.null_argument("comm");
      if (info == nullptr) return call.null_argument("info");
      return Backend::comm_info(s, *comm, *info, sink);
    });
  }
};

// The table of `Backend`'s plugin; shared by every state of it, since it
// holds no per-host data.
template <class Backend>
constexpr bp_plugin_functions function_table() {
  return FunctionTable<Backend>::table();
}

}  // namespace backplane::plugin_support
