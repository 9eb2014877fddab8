// Layered devices (plugin.h and backplane.h, "layers"): building one under
// the nesting rules, the hooks around each call on it, and the services a
// layer asks the host for.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "host.hpp"

namespace backplane {

// What a layered device is made of, from C (bp_device_wrap) or a fleet entry.
struct WrapRequest {
  std::string name;  // "" for the chain's text
  bp_device *over = nullptr;
  std::vector<std::string> layers;  // outermost first
  nlohmann::json options = nlohmann::json::object();  // {"trace": {...}}
  // Where relative BP_LAYER_OPTION_PATH values start (the fleet's folder);
  // empty: left as given (the working directory).
  std::filesystem::path base;
};

// Checks the nesting rules and makes the device with its layer instances;
// registration is the caller's (bp_device_wrap, a fleet's commit). The
// caller holds the host's lock.
Expected<std::unique_ptr<bp_device>> build_layered_device(bp_host &host, const WrapRequest &request);

// The nesting error of a cycle through fleet entries' "over":
// `names` is the cycle from the entry back to itself.
Error layer_cycle_error(const std::vector<std::string> &names);

// A steady-clock reading in nanoseconds (bp_layer_outcome).
int64_t steady_now_ns() noexcept;

// The hooks of one device's chain, outermost first. `before_chain` runs
// each layer's before; when one refuses, the layers outside it get their
// after with the refusal, and the refusal (naming the layer) is returned.
Status before_chain(const bp_device &device, const bp_layer_call &call);
// Every layer's after, innermost first; the first failure is returned.
Status after_chain(const bp_device &device, const bp_layer_call &call, const bp_layer_outcome &outcome);

// A buffer operation on a layered device: before hooks, `run`, after hooks.
// `made` (create, wrap) is the new buffer once run succeeded.
template <typename Run>
Status around_buffer_call(const bp_device &device, bp_layer_call &call, const bp_buffer *const *made, Run &&run);

// A collective on a group with layered ranks: the call as every rank's
// hooks see it. Kept with its InFlight when the collective outlives its
// start; the arrays are then copies.
struct LayeredCall {
  bp_group *group = nullptr;
  bp_layer_call call;  // left unset: before_collective sets every field (no memset of this struct per call)
  std::vector<const bp_buffer *> send, recv;  // the copies, for an _async call
  size_t block = 0;  // bytes of one block: count x element size
  int64_t start_ns = 0;
  bool timed = false;
};

// Fills `layered` for `request` on `group` (the next call serial) and runs
// every layered rank's before hooks, in rank order. On a refusal, the ranks
// whose layers had seen the call get their after hooks.
Status before_collective(bp_group &group, const bp_collective_request &request, bool caller_waits,
                         LayeredCall &layered);
// Every layered rank's after hooks with the outcome; returns `outcome`,
// or the first hook's failure when the call itself succeeded.
Status after_collective(LayeredCall &layered, Status outcome);

// bp_host_services' layer entries (ABI 1.3).
int32_t describe_device_service(const bp_device *device, bp_layer_device_facts *out);
int32_t describe_buffer_service(const bp_buffer *buffer, bp_layer_buffer_facts *out);
int32_t read_buffer_service(const bp_buffer *buffer, size_t offset, void *destination, size_t bytes,
                            bp_error_sink *sink);

// Every layer instance's flush (bp_host_flush).
Status flush_layers(bp_host &host);

// A process-wide serial, never reused (buffers, groups).
uint64_t next_serial() noexcept;

template <typename Run>
Status around_buffer_call(const bp_device &device, bp_layer_call &call, const bp_buffer *const *made, Run &&run) {
  if (Status refused = before_chain(device, call); !refused) return refused;
  bp_layer_outcome outcome{};
  outcome.struct_size = sizeof outcome;
  if (device.wants_time) outcome.start_ns = steady_now_ns();
  Status status = run();
  if (device.wants_time) outcome.end_ns = steady_now_ns();
  if (!status) {
    outcome.code = status.error().code();
    outcome.message = status.error().message().c_str();
  } else if (made) {
    outcome.buffer = *made;
  }
  Status after = after_chain(device, call, outcome);
  if (status && !after) return after;
  return status;
}

}  // namespace backplane
