// The non-template parts of the exception boundary (boundary.hpp).
#include "plugin_support/boundary.hpp"

namespace backplane::plugin_support {

std::int32_t check_entry(const bp_plugin_entry_args *args, const bp_host_services *services, bp_error_sink *sink,
                         const char *plugin, const char *version) noexcept {
  if (args->host_abi_major != BP_PLUGIN_ABI_MAJOR) {
    const bool host_newer = args->host_abi_major > BP_PLUGIN_ABI_MAJOR;
    return fail(services, sink, BP_PLUGIN_ABI,
                "%s plugin %s implements plugin ABI %d.%d, the host speaks ABI %u.%u: upgrade the %s%s", plugin,
                version, BP_PLUGIN_ABI_MAJOR, BP_PLUGIN_ABI_MINOR, static_cast<unsigned>(args->host_abi_major),
                static_cast<unsigned>(args->host_abi_minor), host_newer ? plugin : "host to ABI major 1",
                host_newer ? " plugin to one built for the host's ABI major" : "");
  }
  if (args->struct_size < BP_PLUGIN_ENTRY_ARGS_SIZE_V1_0) {
    return fail(services, sink, BP_PLUGIN_ABI, "%s plugin: entry arguments of %zu bytes are smaller than ABI 1.0's %zu",
                plugin, args->struct_size, static_cast<std::size_t>(BP_PLUGIN_ENTRY_ARGS_SIZE_V1_0));
  }
  if (services == nullptr || services->struct_size < BP_HOST_SERVICES_SIZE_V1_0 ||
      services->report_error == nullptr) {
    return fail(services, sink, BP_PLUGIN_INIT,
                "%s plugin: host services missing, smaller than ABI 1.0's, or without report_error", plugin);
  }
  return BP_OK;
}

std::int32_t no_such_request(const bp_host_services *services, bp_error_sink *sink, const char *plugin,
                             const bp_plugin_request *request, const char *call) noexcept {
  if (request == nullptr) {
    return fail(services, sink, BP_INVALID_ARGUMENT,
                "%s %s: request is NULL (a NULL request from collective_start means it already completed)", plugin,
                call);
  }
  return fail(services, sink, BP_INVALID_ARGUMENT,
              "%s %s: %p is not a request of the %s plugin, which completes every collective in collective_start "
              "and hands out no requests",
              plugin, call, static_cast<const void *>(request), plugin);
}

}  // namespace backplane::plugin_support
