// The validate layer's state and instances, and the checks its hooks make
// (README.md has what each check refuses and what it costs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "backplane/plugin.h"
#include "call_shape.hpp"
#include "fingerprints.hpp"

namespace backplane::validate {

inline constexpr const char *kName = "validate";
inline constexpr const char *kVersion = "0.1.0";
// Calls an instance keeps before writing them to its fingerprints file.
inline constexpr std::size_t kRingCalls = 4096;
// The most bytes one read through read_buffer brings into scratch memory.
inline constexpr std::size_t kScanChunkBytes = std::size_t{1} << 20;

// What a NaN check knows of one collective between the hooks of its ranks:
// whether any input held NaN or Inf, found by the first rank's `before`
// (which reads every rank's input) and read by each rank's `after`. Kept
// for every collective but barrier, so that the table also tells which
// calls of a group are in flight.
struct InputFacts {
  std::size_t hooks = 0;  // `before` hooks that let the call go on, less the `after` hooks seen since
  bool scanned = false;   // false: not read (not floating point, or an earlier call was in flight)
  bool nonfinite = false;
};

}  // namespace backplane::validate

// One per bp_plugin_entry call: what its instances share.
struct bp_plugin_state {
  const bp_host_services *services = nullptr;

  // Files by absolute path, so that instances naming one file write it
  // together and read an expected file once. Taken at instance create
  // only.
  std::mutex files_mutex;
  std::map<std::string, std::weak_ptr<backplane::validate::FingerprintFile>> writing;
  std::map<std::string, std::weak_ptr<const backplane::validate::ExpectedCalls>> expected;

  // nan_check: InputFacts by (group serial, call serial), from the first
  // rank's `before` to the last rank's `after`.
  std::mutex inputs_mutex;
  std::map<std::pair<std::uint64_t, std::uint64_t>, backplane::validate::InputFacts> inputs;
  // The last call each group began (its `before`), by group serial: a
  // call's `after` reads its outputs only while no later call began.
  std::map<std::uint64_t, std::uint64_t> latest_calls;
  bool warned_inputs_full = false;
};

// One validate layer over one device.
struct bp_layer_instance {
  std::string device_name;
  bool nan_check = false;
  std::shared_ptr<backplane::validate::FingerprintFile> fingerprints;   // null: not written
  std::shared_ptr<const backplane::validate::ExpectedCalls> expected;   // null: not compared

  // fingerprints: the calls not yet written and the group names they
  // point at.
  std::mutex ring_mutex;
  std::unique_ptr<backplane::validate::CallRecord[]> ring;
  std::size_t ring_used = 0;
  std::set<std::string, std::less<>> group_names;
  bool warned_write = false;

  // nan_check: where read_buffer puts the bytes it scans; grown to at most
  // kScanChunkBytes, kept for the instance's life.
  std::mutex scratch_mutex;
  std::unique_ptr<unsigned char[]> scratch;
  std::size_t scratch_bytes = 0;
};

namespace backplane::validate {

// instance_create's body: the options read, files opened, the instance
// made. BP_CONFIG naming the option for what it refuses.
std::int32_t create_instance(bp_plugin_state &state, const bp_layer_create_args &args, bp_layer_instance **out,
                             bp_error_sink *sink);
// Writes what the instance holds; BP_CONFIG when the file cannot be written.
std::int32_t flush_instance(bp_plugin_state &state, bp_layer_instance &instance, bp_error_sink *sink);
void destroy_instance(bp_plugin_state &state, bp_layer_instance *instance);

// fingerprints: one collective into the instance's ring (written out when
// full).
void record_call(bp_plugin_state &state, bp_layer_instance &instance, const bp_layer_call &call,
                 const CallShape &shape, std::uint64_t print);

// The checks of `before` about the call's buffers at call.rank: each one
// made on the rank's own device, send and recv not overlapping unless they
// are one buffer, recv not overlapping another rank's buffers.
std::int32_t check_buffers(const bp_plugin_state &state, const bp_layer_call &call, bp_error_sink *sink);

// expect_fingerprints: the call against the recorded one.
std::int32_t check_expected(const bp_plugin_state &state, const bp_layer_instance &instance,
                            const bp_layer_call &call, const CallShape &shape, std::uint64_t print,
                            bp_error_sink *sink);

// nan_check, from `before`: the call's InputFacts joined, its inputs read
// by the first rank to come.
std::int32_t note_inputs(bp_plugin_state &state, bp_layer_instance &instance, const bp_layer_call &call,
                         bp_error_sink *sink);
// nan_check, from `after`: this rank's output read when the call succeeded
// and no input held NaN or Inf.
std::int32_t check_outputs(bp_plugin_state &state, bp_layer_instance &instance, const bp_layer_call &call,
                           const bp_layer_outcome &outcome, bp_error_sink *sink);

}  // namespace backplane::validate
