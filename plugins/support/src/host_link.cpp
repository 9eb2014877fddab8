// Error reports and log lines through the host's services (host_link.hpp).
#include "plugin_support/host_link.hpp"

#include <cstdio>

namespace backplane::plugin_support {

std::int32_t vfail(const bp_host_services *services, bp_error_sink *sink, std::int32_t code, const char *format,
                   va_list arguments) noexcept {
  if (services != nullptr && services->struct_size >= BP_STRUCT_SIZE(bp_host_services, report_error) &&
      services->report_error != nullptr) {
    char message[kMessageCapacity];
    std::vsnprintf(message, sizeof message, format, arguments);
    services->report_error(sink, code, message);
  }
  return code;
}

std::int32_t fail(const bp_host_services *services, bp_error_sink *sink, std::int32_t code, const char *format,
                  ...) noexcept {
  va_list arguments;
  va_start(arguments, format);
  vfail(services, sink, code, format, arguments);
  va_end(arguments);
  return code;
}

void vlog(const bp_host_services *services, std::int32_t level, const char *category, const char *format,
          va_list arguments) noexcept {
  if (services == nullptr || services->struct_size < BP_STRUCT_SIZE(bp_host_services, host_context) ||
      services->log == nullptr) {
    return;
  }
  char message[kMessageCapacity];
  std::vsnprintf(message, sizeof message, format, arguments);
  services->log(services->host_context, level, category, message);
}

void log(const bp_host_services *services, std::int32_t level, const char *category, const char *format,
         ...) noexcept {
  va_list arguments;
  va_start(arguments, format);
  vlog(services, level, category, format, arguments);
  va_end(arguments);
}

std::int32_t TableCall::fail(std::int32_t code, const char *format, ...) const noexcept {
  char message[kMessageCapacity];
  const int prefix = std::snprintf(message, sizeof message, "%s %s: ", plugin, function);
  if (prefix > 0 && static_cast<std::size_t>(prefix) < sizeof message) {
    va_list arguments;
    va_start(arguments, format);
    std::vsnprintf(message + prefix, sizeof message - static_cast<std::size_t>(prefix), format, arguments);
    va_end(arguments);
  }
  return plugin_support::fail(services, sink, code, "%s", message);
}

std::int32_t TableCall::null_argument(const char *argument) const noexcept {
  return fail(BP_INVALID_ARGUMENT, "%s is NULL", argument);
}

std::int32_t check_single_kind(const bp_host_services *services, bp_error_sink *sink, std::uint32_t kind,
                               const char *kind_name) noexcept {
  if (kind == 0) return BP_OK;
  return fail(services, sink, BP_INVALID_ARGUMENT,
              "%s plugin: device kind index %u does not exist (the plugin has one kind, 0 = %s)", kind_name,
              static_cast<unsigned>(kind), kind_name);
}

}  // namespace backplane::plugin_support
