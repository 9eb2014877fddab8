// Entry point and ABI boundary of the opencl plugin: the descriptor, its
// function table, and the wrappers that stop every C++ exception before it
// reaches the host.
#include <dlfcn.h>

#include "backplane/plugin.h"
#include "capabilities.hpp"
#include "plugin_state.hpp"
#include "plugin_support/boundary.hpp"

namespace {

using namespace backplane::opencl;
namespace plugin_support = backplane::plugin_support;

const char *const kDeviceKinds[] = {kKindName};

void fn_destroy(bp_plugin_state *state) noexcept {
  if (state == nullptr) return;
  plugin_support::guarded_void(state, kPluginName, "destroy", [&] {
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
      return fail(state->services, sink, BP_INVALID_ARGUMENT, "opencl collective_start: comm is NULL");
    }
    return collective_start(*state, *comm, args, out, sink);
  });
}

// A request is one of ours (collective_start hands out no other); the host
// never passes the NULL "already complete" one.
std::int32_t fn_request_test(bp_plugin_state *state, bp_plugin_request *request, bool *done,
                             bp_error_sink *sink) noexcept {
  return plugin_support::guarded(state, sink, kPluginName, "request_test", [&]() -> std::int32_t {
    if (request == nullptr) {
      return fail(state->services, sink, BP_INVALID_ARGUMENT, "opencl request_test: request is NULL");
    }
    return request_test(*state, *request, done, sink);
  });
}

std::int32_t fn_request_wait(bp_plugin_state *state, bp_plugin_request *request, std::int64_t timeout_ns,
                             bp_error_sink *sink) noexcept {
  return plugin_support::guarded(state, sink, kPluginName, "request_wait", [&]() -> std::int32_t {
    if (request == nullptr) {
      return fail(state->services, sink, BP_INVALID_ARGUMENT, "opencl request_wait: request is NULL");
    }
    return request_wait(*state, *request, timeout_ns, sink);
  });
}

void fn_request_release(bp_plugin_state *state, bp_plugin_request *request) noexcept {
  plugin_support::guarded_void(state, kPluginName, "request_release", [&] { request_release(*state, request); });
}

std::int32_t fn_kind_info(bp_plugin_state *state, std::uint32_t kind, bp_plugin_kind_info *info,
                          bp_error_sink *sink) noexcept {
  return plugin_support::guarded(state, sink, kPluginName, "kind_info",
                                 [&] { return kind_info(*state, kind, info, sink); });
}

std::int32_t fn_comm_info(bp_plugin_state *state, bp_plugin_comm *comm, bp_plugin_comm_info *info,
                          bp_error_sink *sink) noexcept {
  return plugin_support::guarded(state, sink, kPluginName, "comm_info", [&]() -> std::int32_t {
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

// Called by plugin_support::run_entry once the host's ABI and services
// are known to fit.
std::int32_t entry(bp_plugin_entry_args *args, const bp_host_services *services, bp_error_sink *) {
  pin_icd_loader(services);
  auto state = std::make_unique<bp_plugin_state>();
  state->services = services;
  // Before discovery, which derives each device's rows from these.
  const bp_plugin_descriptor *descriptor = state->declared.declare(kDescriptor, kind_capabilities(args->host_abi_minor));
  {
    // No platform is not a refusal: the kind loads with no device, and
    // kind_info says why.
    std::lock_guard<std::mutex> lock(state->mutex);
    discover(*state, Options{});
  }
  log(services, BP_LOG_DEBUG, "opencl plugin %s: %zu devices on %zu platforms", kPluginVersion,
      state->devices.size(), state->platforms.size());
  args->descriptor = descriptor;
  args->state = state.release();
  return BP_OK;
}

}  // namespace

extern "C" BP_PLUGIN_EXPORT std::int32_t bp_plugin_entry(bp_plugin_entry_args *args) {
  return plugin_support::run_entry(args, kPluginName, kPluginVersion, entry);
}
