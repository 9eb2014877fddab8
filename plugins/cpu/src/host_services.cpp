// Talking back to the host, in the cpu plugin's words: log lines in its
// category, and its one kind.
#include "plugin_state.hpp"

namespace backplane::cpu {

void log(const bp_host_services *services, std::int32_t level, const char *format, ...) noexcept {
  va_list arguments;
  va_start(arguments, format);
  plugin_support::vlog(services, level, "cpu", format, arguments);
  va_end(arguments);
}

std::int32_t check_kind(const bp_plugin_state &state, std::uint32_t kind, bp_error_sink *sink) noexcept {
  return plugin_support::check_single_kind(state.services, sink, kind, "cpu");
}

}  // namespace backplane::cpu
