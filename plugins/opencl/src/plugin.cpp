// Entry point and ABI boundary of the opencl plugin: the descriptor, its
// function table, and the wrappers that stop every C++ exception before it
// reaches the host.
#include <dlfcn.h>

#include <exception>
#include <new>

#include "backplane/plugin.h"
#include "capabilities.hpp"
#include "plugin_state.hpp"

namespace {

using namespace backplane::opencl;

const char *const kDeviceKinds[] = {kKindName};

// Runs one table function's body, turning any exception into a reported
// error: running out of memory is BP_OUT_OF_MEMORY, anything else is a bug
// of this plugin (BP_INTERNAL).
template <class Body>
std::int32_t guarded(const bp_plugin_state *state, bp_error_sink *sink, const char *call, Body &&body) noexcept {
  if (state == nullptr) return BP_INVALID_ARGUMENT;
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return fail(state->services, sink, BP_OUT_OF_MEMORY, "opencl %s: out of host memory", call);
  } catch (const std::exception &e) {
    return fail(state->services, sink, BP_INTERNAL, "opencl %s: internal error: %s", call, e.what());
  } catch (...) {
    return fail(state->services, sink, BP_INTERNAL, "opencl %s: internal error: unknown exception", call);
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
      return fail(state->services, sink, BP_INVALID_ARGUMENT, "opencl collective_start: comm is NULL");
    }
    return collective_start(*state, *comm, args, out, sink);
  });
}

// collective_start completes every collective (it waits for the device
// once per call) and returns no request, so the host never has one of ours
// to pass here; anything it passes is a mistake, reported as such.
std::int32_t no_request(const bp_plugin_state *state, bp_plugin_request *request, const char *call,
                        bp_error_sink *sink) noexcept {
  if (state == nullptr) return BP_INVALID_ARGUMENT;
  if (request == nullptr) {
    return fail(state->services, sink, BP_INVALID_ARGUMENT,
                "opencl %s: request is NULL (a NULL request from collective_start means it already completed)",
                call);
  }
  return fail(state->services, sink, BP_INVALID_ARGUMENT,
              "opencl %s: %p is not a request of the opencl plugin, which completes every collective in "
              "collective_start and hands out no requests",
              call, static_cast<void *>(request));
}

std::int32_t fn_request_test(bp_plugin_state *state, bp_plugin_request *request, bool *done,
                             bp_error_sink *sink) noexcept {
  (void)done;
  return no_request(state, request, "request_test", sink);
}

std::int32_t fn_request_wait(bp_plugin_state *state, bp_plugin_request *request, std::int64_t timeout_ns,
                             bp_error_sink *sink) noexcept {
  (void)timeout_ns;
  return no_request(state, request, "request_wait", sink);
}

void fn_request_release(bp_plugin_state *state, bp_plugin_request *request) noexcept {
  if (state == nullptr || request == nullptr) return;
  log(state->services, BP_LOG_WARN, "request_release: %p is not a request of the opencl plugin; ignored",
      static_cast<void *>(request));
}

std::int32_t fn_kind_info(bp_plugin_state *state, std::uint32_t kind, bp_plugin_kind_info *info,
                          bp_error_sink *sink) noexcept {
  return guarded(state, sink, "kind_info", [&] { return kind_info(*state, kind, info, sink); });
}

std::int32_t fn_comm_info(bp_plugin_state *state, bp_plugin_comm *comm, bp_plugin_comm_info *info,
                          bp_error_sink *sink) noexcept {
  return guarded(state, sink, "comm_info", [&]() -> std::int32_t {
    if (comm == nullptr) return fail(state->services, sink, BP_INVALID_ARGUMENT, "opencl comm_info: comm is NULL");
    return comm_info(*state, *comm, info, sink);
  });
}

const bp_plugin_functions kFunctions = {
    sizeof(bp_plugin_functions),
    nullptr,
    fn_destroy,
    fn_configure,
    fn_device_count,
    fn_device_info,
    fn_buffer_create,
    nullptr,  // buffer_wrap_host: an OpenCL device does not in general address the caller's memory
    fn_buffer_destroy,
    fn_buffer_write,
    fn_buffer_read,
    fn_comm_create,
    fn_comm_destroy,
    fn_collective_start,
    fn_request_test,
    fn_request_wait,
    fn_request_release,
    fn_kind_info,
    fn_comm_info,
};

// The descriptor, capability rows and function table are immutable and
// shared by every state: they hold no per-host data.
const bp_plugin_descriptor &descriptor() noexcept {
  static const bp_plugin_descriptor kDescriptor = [] {
    std::size_t capability_count = 0;
    const bp_capability *capabilities = kind_capabilities(&capability_count);
    return bp_plugin_descriptor{sizeof(bp_plugin_descriptor),
                                nullptr,
                                BP_PLUGIN_ABI_MAJOR,
                                BP_PLUGIN_ABI_MINOR,
                                kPluginName,
                                kPluginVersion,
                                kDeviceKinds,
                                sizeof kDeviceKinds / sizeof kDeviceKinds[0],
                                capabilities,
                                capability_count,
                                &kFunctions};
  }();
  return kDescriptor;
}

static_assert(sizeof(bp_plugin_functions) >= BP_PLUGIN_FUNCTIONS_SIZE_V1_1);
static_assert(sizeof(bp_plugin_descriptor) >= BP_PLUGIN_DESCRIPTOR_SIZE_V1_0);

// Keeps the OpenCL ICD loader in the process once this plugin has loaded
// it. ocl-icd is not made to be unloaded: every unload leaks its vendor
// table (48-77 bytes, seen by LeakSanitizer as allocations of an unknown
// module, so no suppression can name them), and the drivers it opened stay
// loaded anyway. Pinned with RTLD_NODELETE, the loader is loaded once and
// initialised once however many hosts load and unload this plugin; the
// plugin itself still unloads. Best effort: a loader that cannot be pinned
// works as before.
void pin_icd_loader(const bp_host_services *services) {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void *>(&clGetPlatformIDs), &info) == 0 || info.dli_fname == nullptr) {
    log(services, BP_LOG_DEBUG, "cannot find the OpenCL ICD loader's file to keep it loaded");
    return;
  }
  // The handle is never closed: that is the point.
  if (dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) == nullptr) {
    log(services, BP_LOG_DEBUG, "cannot keep the OpenCL ICD loader %s loaded: %s", info.dli_fname, dlerror());
  }
}

std::int32_t entry(bp_plugin_entry_args *args, const bp_host_services *services, bp_error_sink *sink) {
  if (args->host_abi_major != BP_PLUGIN_ABI_MAJOR) {
    const bool host_newer = args->host_abi_major > BP_PLUGIN_ABI_MAJOR;
    return fail(services, sink, BP_PLUGIN_ABI,
                "opencl plugin %s implements plugin ABI %d.%d, the host speaks ABI %u.%u: upgrade the %s",
                kPluginVersion, BP_PLUGIN_ABI_MAJOR, BP_PLUGIN_ABI_MINOR,
                static_cast<unsigned>(args->host_abi_major), static_cast<unsigned>(args->host_abi_minor),
                host_newer ? "opencl plugin to one built for the host's ABI major" : "host to ABI major 1");
  }
  if (args->struct_size < BP_PLUGIN_ENTRY_ARGS_SIZE_V1_0) {
    return fail(services, sink, BP_PLUGIN_ABI,
                "opencl plugin: entry arguments of %zu bytes are smaller than ABI 1.0's %zu", args->struct_size,
                static_cast<std::size_t>(BP_PLUGIN_ENTRY_ARGS_SIZE_V1_0));
  }
  if (services == nullptr || services->struct_size < BP_HOST_SERVICES_SIZE_V1_0 ||
      services->report_error == nullptr) {
    return fail(services, sink, BP_PLUGIN_INIT,
                "opencl plugin: host services missing, smaller than ABI 1.0's, or without report_error");
  }
  pin_icd_loader(services);
  auto state = std::make_unique<bp_plugin_state>();
  state->services = services;
  {
    // No platform is not a refusal: the kind loads with no device, and
    // kind_info says why.
    std::lock_guard<std::mutex> lock(state->mutex);
    discover(*state, Options{});
  }
  log(services, BP_LOG_DEBUG, "opencl plugin %s: %zu devices on %zu platforms", kPluginVersion,
      state->devices.size(), state->platforms.size());
  args->descriptor = &descriptor();
  args->state = state.release();
  return BP_OK;
}

}  // namespace

extern "C" BP_PLUGIN_EXPORT std::int32_t bp_plugin_entry(bp_plugin_entry_args *args) {
  if (args == nullptr) return BP_INVALID_ARGUMENT;
  if (args->struct_size < BP_STRUCT_SIZE(bp_plugin_entry_args, host_abi_minor)) return BP_PLUGIN_ABI;
  const bp_host_services *services =
      args->struct_size >= BP_STRUCT_SIZE(bp_plugin_entry_args, services) ? args->services : nullptr;
  bp_error_sink *sink = args->struct_size >= BP_STRUCT_SIZE(bp_plugin_entry_args, sink) ? args->sink : nullptr;
  try {
    return entry(args, services, sink);
  } catch (const std::bad_alloc &) {
    return fail(services, sink, BP_OUT_OF_MEMORY, "opencl plugin: out of memory while loading");
  } catch (const std::exception &e) {
    return fail(services, sink, BP_INTERNAL, "opencl plugin: internal error while loading: %s", e.what());
  } catch (...) {
    return fail(services, sink, BP_INTERNAL, "opencl plugin: internal error while loading: unknown exception");
  }
}
