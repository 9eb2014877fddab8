// What every in-tree plugin's state holds whatever its devices: the host's
// services, the descriptor it declared, the mutex of its configuration, and
// the count of buffers and comms alive, which keeps configure from
// changing the devices under them.
#pragma once

#include <cstddef>
#include <mutex>

#include "backplane/plugin.h"
#include "plugin_support/capability_rows.hpp"

namespace backplane::plugin_support {

// The base of each plugin's bp_plugin_state.
struct StateBase {
  const bp_host_services *services = nullptr;
  // What this state declares, narrowed to the host's ABI minor at entry
  // (rows_for_host), in the descriptor handed to the host.
  DeclaredDescriptor declared;

  // The host is thread-safe, so configure, buffer and comm calls may race;
  // this guards live_objects and the plugin's configuration (its devices
  // above all). Collectives never take it.
  std::mutex mutex;
  // Buffers and comms alive: configure is refused while any exists, since
  // they name devices of the current configuration.
  std::size_t live_objects = 0;
};

// Uncounts one buffer or comm, at its destroy.
void release_live_object(StateBase &state);

// destroy's warning about the buffers and comms the host never destroyed.
void log_leaked_objects(StateBase &state, const char *plugin);

// A buffer or comm being created, counted in live_objects from the moment
// its devices were found to exist, so that no configure changes them while
// the plugin builds it. Dropped, it uncounts itself; kept, the object was
// handed out and its destroy uncounts it.
class LiveObjectClaim {
 public:
  // Counts one object. The lock is the caller's on state.mutex, under which
  // it found the object's devices.
  LiveObjectClaim(StateBase &state, const std::lock_guard<std::mutex> & /*held*/) noexcept : state_(&state) {
    ++state.live_objects;
  }
  ~LiveObjectClaim() {
    if (state_ != nullptr) release_live_object(*state_);
  }
  LiveObjectClaim(const LiveObjectClaim &) = delete;
  LiveObjectClaim &operator=(const LiveObjectClaim &) = delete;

  void keep() noexcept { state_ = nullptr; }

 private:
  StateBase *state_;
};

}  // namespace backplane::plugin_support
