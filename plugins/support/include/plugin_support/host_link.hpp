// Talking back to the host through the services it lent at entry: error
// reports and log lines, formatted on the stack so that reporting never
// allocates (it is safe on the hot path and after running out of memory).
#pragma once

#include <cstdarg>
#include <cstdint>

#include "backplane/plugin.h"

namespace backplane::plugin_support {

// Messages longer than this are cut. The longest thing one carries is an
// OpenCL build log, which the opencl plugin trims to fit.
inline constexpr std::size_t kMessageCapacity = 4096;

// Reports `code` with a printf-style message through the host's error
// service (when the host lent one) and returns `code`, so that a failure
// path is `return fail(...)`.
std::int32_t fail(const bp_host_services *services, bp_error_sink *sink, std::int32_t code, const char *format,
                  ...) noexcept __attribute__((format(printf, 4, 5)));
std::int32_t vfail(const bp_host_services *services, bp_error_sink *sink, std::int32_t code, const char *format,
                   va_list arguments) noexcept;

// A log line in `category` (the plugin's name) at `level`, when the host
// lent a log service.
void log(const bp_host_services *services, std::int32_t level, const char *category, const char *format,
         ...) noexcept __attribute__((format(printf, 4, 5)));
void vlog(const bp_host_services *services, std::int32_t level, const char *category, const char *format,
          va_list arguments) noexcept;

// One function of a plugin's table as it reports a failure: through
// `services` into `sink`, every message beginning "<plugin> <function>: ".
struct TableCall {
  const bp_host_services *services;
  bp_error_sink *sink;
  const char *plugin;
  const char *function;

  // fail(), the message after the "<plugin> <function>: " prefix.
  std::int32_t fail(std::int32_t code, const char *format, ...) const noexcept
      __attribute__((format(printf, 3, 4)));
  // BP_INVALID_ARGUMENT: "<plugin> <function>: <argument> is NULL".
  std::int32_t null_argument(const char *argument) const noexcept;
};

// BP_INVALID_ARGUMENT unless `kind` is 0, for a plugin with one device kind
// named `kind_name`.
std::int32_t check_single_kind(const bp_host_services *services, bp_error_sink *sink, std::uint32_t kind,
                               const char *kind_name) noexcept;

}  // namespace backplane::plugin_support
