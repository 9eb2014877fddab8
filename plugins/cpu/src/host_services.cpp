// Talking back to the host, in the cpu plugin's words: log lines in its
// category.
#include "plugin_state.hpp"

namespace backplane::cpu {

void log(const bp_host_services *services, std::int32_t level, const char *format, ...) noexcept {
  va_list arguments;
  va_start(arguments, format);
  plugin_support::vlog(services, level, Backend::kName, format, arguments);
  va_end(arguments);
}

}  // namespace backplane::cpu
