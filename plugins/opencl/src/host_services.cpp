// Talking back to the host: error reports and log lines through the services
// it lent at entry, formatted on the stack so that reporting never allocates.
#include <cstdarg>
#include <cstdio>

#include "plugin_state.hpp"

namespace backplane::opencl {
namespace {

// Messages longer than this are cut. A build log is the longest thing a
// message carries; program_cache.cpp trims it to fit.
constexpr std::size_t kMessageCapacity = 4096;

}  // namespace

std::int32_t fail(const bp_host_services *services, bp_error_sink *sink, std::int32_t code,
                  const char *format, ...) noexcept {
  if (services != nullptr &&
      services->struct_size >= BP_STRUCT_SIZE(bp_host_services, report_error) &&
      services->report_error != nullptr) {
    char message[kMessageCapacity];
    va_list arguments;
    va_start(arguments, format);
    std::vsnprintf(message, sizeof message, format, arguments);
    va_end(arguments);
    services->report_error(sink, code, message);
  }
  return code;
}

void log(const bp_host_services *services, std::int32_t level, const char *format, ...) noexcept {
  if (services == nullptr || services->struct_size < BP_STRUCT_SIZE(bp_host_services, host_context) ||
      services->log == nullptr) {
    return;
  }
  char message[kMessageCapacity];
  va_list arguments;
  va_start(arguments, format);
  std::vsnprintf(message, sizeof message, format, arguments);
  va_end(arguments);
  services->log(services->host_context, level, kKindName, message);
}

std::int32_t fail_cl(const bp_host_services *services, bp_error_sink *sink, cl_int status, const char *call,
                     const char *what, const char *device) noexcept {
  return fail(services, sink, cl_status_code(status), "%s(%s) on '%s': %s (%d)", call, what, device,
              cl_error_name(status), static_cast<int>(status));
}

std::int32_t check_kind(const bp_plugin_state &state, std::uint32_t kind, bp_error_sink *sink) noexcept {
  if (kind != 0) {
    return fail(state.services, sink, BP_INVALID_ARGUMENT,
                "opencl plugin: device kind index %u does not exist (the plugin has one kind, 0 = opencl)",
                static_cast<unsigned>(kind));
  }
  return BP_OK;
}

}  // namespace backplane::opencl
