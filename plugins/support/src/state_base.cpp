// The live-object count of a plugin's state (state_base.hpp).
#include "plugin_support/state_base.hpp"

#include "plugin_support/host_link.hpp"

namespace backplane::plugin_support {

void release_live_object(StateBase &state) {
  std::lock_guard<std::mutex> lock(state.mutex);
  --state.live_objects;
}

void log_leaked_objects(StateBase &state, const char *plugin) {
  std::size_t live = 0;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    live = state.live_objects;
  }
  if (live != 0) {
    log(state.services, BP_LOG_WARN, plugin, "destroyed with %zu buffers or groups still alive; they are leaked",
        live);
  }
}

}  // namespace backplane::plugin_support
