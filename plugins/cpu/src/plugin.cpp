// Entry point and ABI boundary of the cpu plugin: the descriptor, its
// capability rows and function table, and the wrappers that stop every C++
// exception before it reaches the host.
#include <exception>
#include <new>

#include "backplane/plugin.h"
#include "plugin_state.hpp"
#include "reduce_kernels.hpp"

namespace {

using namespace backplane::cpu;

constexpr const char *kPluginName = "cpu";
constexpr const char *kPluginVersion = "0.1.0";
const char *const kDeviceKinds[] = {"cpu"};

constexpr std::uint32_t kAllDtypes = (1u << BP_DTYPE_COUNT) - 1;
constexpr std::uint32_t kFloatDtypes = (1u << BP_F16) | (1u << BP_BF16) | (1u << BP_F32) | (1u << BP_F64);
constexpr std::uint32_t kArithmeticOps = (1u << BP_SUM) | (1u << BP_PROD) | (1u << BP_MIN) | (1u << BP_MAX);
constexpr std::uint32_t kAvg = 1u << BP_AVG;

constexpr bp_capability row(std::uint32_t collective, std::uint32_t dtypes, std::uint32_t reduce_ops) {
  return bp_capability{sizeof(bp_capability), nullptr, 0, collective, dtypes, reduce_ops,
                       BP_CAPABILITY_IN_PLACE | BP_CAPABILITY_OUT_OF_PLACE};
}

// Avg is declared for float types only: an integer mean would have to pick
// a rounding, and no caller has asked for one.
const bp_capability kCapabilities[] = {
    row(BP_ALL_REDUCE, kAllDtypes, kArithmeticOps),
    row(BP_ALL_REDUCE, kFloatDtypes, kAvg),
    row(BP_REDUCE, kAllDtypes, kArithmeticOps),
    row(BP_REDUCE, kFloatDtypes, kAvg),
    row(BP_REDUCE_SCATTER, kAllDtypes, kArithmeticOps),
    row(BP_REDUCE_SCATTER, kFloatDtypes, kAvg),
    row(BP_BROADCAST, kAllDtypes, 0),
    row(BP_ALL_GATHER, kAllDtypes, 0),
    row(BP_GATHER, kAllDtypes, 0),
    row(BP_SCATTER, kAllDtypes, 0),
    row(BP_ALL_TO_ALL, kAllDtypes, 0),
    row(BP_BARRIER, 0, 0),
};

// Runs one table function's body, turning any exception into a reported
// error: running out of memory is BP_OUT_OF_MEMORY, anything else is a bug
// of this plugin (BP_INTERNAL). The messages are formatted without
// allocating, since memory may be what ran out.
template <class Body>
std::int32_t guarded(const bp_plugin_state *state, bp_error_sink *sink, const char *call, Body &&body) noexcept {
  // Without a state there are no host services to report through.
  if (state == nullptr) return BP_INVALID_ARGUMENT;
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return fail(state->services, sink, BP_OUT_OF_MEMORY, "cpu %s: out of memory", call);
  } catch (const std::exception &e) {
    return fail(state->services, sink, BP_INTERNAL, "cpu %s: internal error: %s", call, e.what());
  } catch (...) {
    return fail(state->services, sink, BP_INTERNAL, "cpu %s: internal error: unknown exception", call);
  }
}

// For the functions that return nothing: a failure can only be logged.
template <class Body>
void guarded_void(const bp_plugin_state *state, const char *call, Body &&body) noexcept {
  if (state == nullptr) return;
  try {
    body();
  } catch (const std::exception &e) {
    log(state->services, BP_LOG_ERROR, "%s: internal error: %s", call, e.what());
  } catch (...) {
    log(state->services, BP_LOG_ERROR, "%s: internal error: unknown exception", call);
  }
}

void fn_destroy(bp_plugin_state *state) noexcept {
  if (state == nullptr) return;
  guarded_void(state, "destroy", [&] {
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
  return guarded(state, sink, "configure", [&] { return configure(*state, kind, options_json, sink); });
}

std::int32_t fn_device_count(bp_plugin_state *state, std::uint32_t kind, std::uint32_t *count,
                             bp_error_sink *sink) noexcept {
  return guarded(state, sink, "device_count", [&] { return device_count(*state, kind, count, sink); });
}

std::int32_t fn_device_info(bp_plugin_state *state, std::uint32_t kind, std::uint32_t device,
                            bp_plugin_device_info *info, bp_error_sink *sink) noexcept {
  return guarded(state, sink, "device_info", [&] { return device_info(*state, kind, device, info, sink); });
}

std::int32_t fn_buffer_create(bp_plugin_state *state, std::uint32_t kind, std::uint32_t device, std::size_t bytes,
                              bp_plugin_buffer **out, bp_error_sink *sink) noexcept {
  return guarded(state, sink, "buffer_create",
                 [&] { return buffer_create(*state, kind, device, bytes, out, sink); });
}

std::int32_t fn_buffer_wrap_host(bp_plugin_state *state, std::uint32_t kind, std::uint32_t device, void *memory,
                                 std::size_t bytes, bp_plugin_buffer **out, bp_error_sink *sink) noexcept {
  return guarded(state, sink, "buffer_wrap_host",
                 [&] { return buffer_wrap_host(*state, kind, device, memory, bytes, out, sink); });
}

void fn_buffer_destroy(bp_plugin_state *state, bp_plugin_buffer *buffer) noexcept {
  guarded_void(state, "buffer_destroy", [&] { buffer_destroy(*state, buffer); });
}

std::int32_t fn_buffer_write(bp_plugin_state *state, bp_plugin_buffer *buffer, std::size_t offset,
                             const void *source, std::size_t bytes, bp_error_sink *sink) noexcept {
  return guarded(state, sink, "buffer_write",
                 [&] { return buffer_write(*state, buffer, offset, source, bytes, sink); });
}

std::int32_t fn_buffer_read(bp_plugin_state *state, const bp_plugin_buffer *buffer, std::size_t offset,
                            void *destination, std::size_t bytes, bp_error_sink *sink) noexcept {
  return guarded(state, sink, "buffer_read",
                 [&] { return buffer_read(*state, buffer, offset, destination, bytes, sink); });
}

std::int32_t fn_comm_create(bp_plugin_state *state, std::uint32_t kind, const std::uint32_t *devices,
                            std::size_t device_count, bp_plugin_comm **out, bp_error_sink *sink) noexcept {
  return guarded(state, sink, "comm_create",
                 [&] { return comm_create(*state, kind, devices, device_count, out, sink); });
}

void fn_comm_destroy(bp_plugin_state *state, bp_plugin_comm *comm) noexcept {
  guarded_void(state, "comm_destroy", [&] { comm_destroy(*state, comm); });
}

std::int32_t fn_collective_start(bp_plugin_state *state, bp_plugin_comm *comm, const bp_collective_args *args,
                                 bp_plugin_request **out, bp_error_sink *sink) noexcept {
  return guarded(state, sink, "collective_start", [&]() -> std::int32_t {
    if (comm == nullptr) {
      if (out != nullptr) *out = nullptr;
      return fail(state->services, sink, BP_INVALID_ARGUMENT, "cpu collective_start: comm is NULL");
    }
    return collective_start(*state, *comm, args, out, sink);
  });
}

// collective_start completes every collective and returns no request, so
// the host never has one of ours to pass here; anything it passes is a
// mistake, reported as such rather than dereferenced.
std::int32_t no_request(const bp_plugin_state *state, bp_plugin_request *request, const char *call,
                        bp_error_sink *sink) noexcept {
  if (state == nullptr) return BP_INVALID_ARGUMENT;
  if (request == nullptr) {
    return fail(state->services, sink, BP_INVALID_ARGUMENT,
                "cpu %s: request is NULL (a NULL request from collective_start means it already completed)",
                call);
  }
  return fail(state->services, sink, BP_INVALID_ARGUMENT,
              "cpu %s: %p is not a request of the cpu plugin, which completes every collective in "
              "collective_start and hands out no requests",
              call, static_cast<void *>(request));
}

std::int32_t fn_request_test(bp_plugin_state *state, bp_plugin_request *request, bool *done,
                             bp_error_sink *sink) noexcept {
  (void)done;  // left untouched: there is no request whose state it could give
  return no_request(state, request, "request_test", sink);
}

std::int32_t fn_request_wait(bp_plugin_state *state, bp_plugin_request *request, std::int64_t timeout_ns,
                             bp_error_sink *sink) noexcept {
  (void)timeout_ns;
  return no_request(state, request, "request_wait", sink);
}

void fn_request_release(bp_plugin_state *state, bp_plugin_request *request) noexcept {
  if (state == nullptr || request == nullptr) return;
  log(state->services, BP_LOG_WARN, "request_release: %p is not a request of the cpu plugin; ignored",
      static_cast<void *>(request));
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

const bp_plugin_descriptor kDescriptor = {
    sizeof(bp_plugin_descriptor),
    nullptr,
    BP_PLUGIN_ABI_MAJOR,
    BP_PLUGIN_ABI_MINOR,
    kPluginName,
    kPluginVersion,
    kDeviceKinds,
    sizeof kDeviceKinds / sizeof kDeviceKinds[0],
    kCapabilities,
    sizeof kCapabilities / sizeof kCapabilities[0],
    &kFunctions,
};

// A struct_size of sizeof() tells the host every field we know is there.
static_assert(sizeof(bp_plugin_functions) >= BP_PLUGIN_FUNCTIONS_SIZE_V1_0);
static_assert(sizeof(bp_plugin_descriptor) >= BP_PLUGIN_DESCRIPTOR_SIZE_V1_0);

std::int32_t entry(bp_plugin_entry_args *args, const bp_host_services *services, bp_error_sink *sink) {
  if (args->host_abi_major != BP_PLUGIN_ABI_MAJOR) {
    const bool host_newer = args->host_abi_major > BP_PLUGIN_ABI_MAJOR;
    return fail(services, sink, BP_PLUGIN_ABI,
                "cpu plugin %s implements plugin ABI %d.%d, the host speaks ABI %u.%u: upgrade the %s", kPluginVersion,
                BP_PLUGIN_ABI_MAJOR, BP_PLUGIN_ABI_MINOR, static_cast<unsigned>(args->host_abi_major),
                static_cast<unsigned>(args->host_abi_minor),
                host_newer ? "cpu plugin to one built for the host's ABI major" : "host to ABI major 1");
  }
  if (args->struct_size < BP_PLUGIN_ENTRY_ARGS_SIZE_V1_0) {
    return fail(services, sink, BP_PLUGIN_ABI,
                "cpu plugin: entry arguments of %zu bytes are smaller than ABI 1.0's %zu", args->struct_size,
                static_cast<std::size_t>(BP_PLUGIN_ENTRY_ARGS_SIZE_V1_0));
  }
  if (services == nullptr || services->struct_size < BP_HOST_SERVICES_SIZE_V1_0 ||
      services->report_error == nullptr) {
    // fail() reports only when it can.
    return fail(services, sink, BP_PLUGIN_INIT,
                "cpu plugin: host services missing, smaller than ABI 1.0's, or without report_error");
  }
  auto state = make_state(services);
  // Picks the kernels' instruction set now, so no collective pays for it.
  log(services, BP_LOG_DEBUG, "cpu plugin %s: %u logical devices on %s; %u threads; kernels for %s", kPluginVersion,
      static_cast<unsigned>(state->device_count), state->cpu_model.c_str(), static_cast<unsigned>(state->threads),
      kernel_target_name());
  args->descriptor = &kDescriptor;
  args->state = state.release();
  return BP_OK;
}

}  // namespace

extern "C" BP_PLUGIN_EXPORT std::int32_t bp_plugin_entry(bp_plugin_entry_args *args) {
  if (args == nullptr) return BP_INVALID_ARGUMENT;
  // The version fields come right after struct_size and next, so a host of
  // any major can be told apart; services and sink are read only when the
  // struct reaches them.
  if (args->struct_size < BP_STRUCT_SIZE(bp_plugin_entry_args, host_abi_minor)) return BP_PLUGIN_ABI;
  const bp_host_services *services =
      args->struct_size >= BP_STRUCT_SIZE(bp_plugin_entry_args, services) ? args->services : nullptr;
  bp_error_sink *sink = args->struct_size >= BP_STRUCT_SIZE(bp_plugin_entry_args, sink) ? args->sink : nullptr;
  try {
    return entry(args, services, sink);
  } catch (const std::bad_alloc &) {
    return fail(services, sink, BP_OUT_OF_MEMORY, "cpu plugin: out of memory while loading");
  } catch (const std::exception &e) {
    return fail(services, sink, BP_INTERNAL, "cpu plugin: internal error while loading: %s", e.what());
  } catch (...) {
    return fail(services, sink, BP_INTERNAL, "cpu plugin: internal error while loading: unknown exception");
  }
}
