// Talking back to the host, in the opencl plugin's words: log lines in its
// category, and OpenCL failures by name.
#include "plugin_state.hpp"

namespace backplane::opencl {

void log(const bp_host_services *services, std::int32_t level, const char *format, ...) noexcept {
  va_list arguments;
  va_start(arguments, format);
  plugin_support::vlog(services, level, kKindName, format, arguments);
  va_end(arguments);
}

std::int32_t fail_cl(const bp_host_services *services, bp_error_sink *sink, cl_int status, const char *call,
                     const char *what, const char *device) noexcept {
  return fail(services, sink, cl_status_code(status), "%s(%s) on '%s': %s (%d)", call, what, device,
              cl_error_name(status), static_cast<int>(status));
}

}  // namespace backplane::opencl
