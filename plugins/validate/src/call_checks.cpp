// What `before` checks of a collective at one rank: where its buffers were
// made, whether they overlap, and whether the call is the one a recorded
// run made. Only the entries the collective uses at a rank are looked at
// (bp_rank_buffers_of); nothing here allocates or locks unless it refuses.
#include <algorithm>
#include <cinttypes>
#include <string>

#include "plugin_support/host_link.hpp"
#include "validate.hpp"

namespace backplane::validate {
namespace {

using plugin_support::fail;

// One buffer of the call as validate sees it: its facts and the bytes the
// call uses of it, from its start.
struct UsedBuffer {
  const bp_buffer *handle = nullptr;
  bp_layer_buffer_facts facts{};
  std::size_t bytes = 0;
  bool described = false;
};

UsedBuffer used_buffer(const bp_host_services &services, const bp_buffer *handle, std::size_t bytes) {
  UsedBuffer used;
  used.handle = handle;
  used.bytes = bytes;
  used.facts.struct_size = sizeof used.facts;
  used.described = handle != nullptr && services.describe_buffer(handle, &used.facts) == BP_OK;
  return used;
}

// The bytes both buffers' host memory covers; 0 unless both wrap host memory.
std::size_t overlap_bytes(const UsedBuffer &a, const UsedBuffer &b) {
  if (!a.described || !b.described || a.facts.host_memory == nullptr || b.facts.host_memory == nullptr) return 0;
  const auto a_begin = reinterpret_cast<std::uintptr_t>(a.facts.host_memory);
  const auto b_begin = reinterpret_cast<std::uintptr_t>(b.facts.host_memory);
  const std::uintptr_t begin = std::max(a_begin, b_begin);
  const std::uintptr_t end = std::min(a_begin + a.bytes, b_begin + b.bytes);  // wrap_host refused wrapping ranges
  return end > begin ? end - begin : 0;
}

struct DeviceText {
  std::string name, base;
};

DeviceText device_text(const bp_host_services &services, const bp_device *device) {
  bp_layer_device_facts facts{};
  facts.struct_size = sizeof facts;
  if (device == nullptr || services.describe_device(device, &facts) != BP_OK) return {"?", "?"};
  return {facts.name != nullptr ? facts.name : "?", facts.base_name != nullptr ? facts.base_name : "?"};
}

// A buffer at `rank` made on a device that is not ranks[rank].
[[gnu::cold]] std::int32_t misplaced(const bp_host_services &services, const bp_layer_call &call, const char *which,
                                     const bp_device *made_on, bp_error_sink *sink) {
  const std::uint32_t rank = call.rank;
  const DeviceText made = device_text(services, made_on);
  const DeviceText own = device_text(services, call.ranks[rank]);
  for (std::size_t other = 0; other < call.rank_count; ++other) {
    if (call.ranks[other] != made_on) continue;
    return fail(&services, sink, BP_INVALID_ARGUMENT,
                "validate: rank %u: %s[%u] was made on '%s', rank %zu's device, not rank %u's '%s'", rank, which,
                rank, made.name.c_str(), other, rank, own.name.c_str());
  }
  return fail(&services, sink, BP_INVALID_ARGUMENT,
              "validate: rank %u: %s[%u] was made on '%s', a device outside the group (rank %u is '%s' over %s)", rank,
              which, rank, made.name.c_str(), rank, own.name.c_str(), own.base.c_str());
}

std::string group_text(const bp_layer_call &call) {
  if (call.group_name == nullptr || call.group_name[0] == '\0') return "an unnamed group";
  return "group '" + std::string(call.group_name) + "'";
}

}  // namespace

std::int32_t check_buffers(const bp_plugin_state &state, const bp_layer_call &call, bp_error_sink *sink) {
  const bp_host_services &services = *state.services;
  const std::size_t ranks = call.rank_count;
  const std::uint32_t rank = call.rank;
  const std::size_t element = dtype_size(call.dtype);
  std::size_t block = 0, all_blocks = 0;
  // Values the host refuses (it may hook before it checks): nothing to say.
  if (call.send == nullptr || call.recv == nullptr || call.ranks == nullptr || rank >= ranks || element == 0 ||
      __builtin_mul_overflow(call.count, element, &block) || __builtin_mul_overflow(block, ranks, &all_blocks))
    return BP_OK;
  auto bytes_of = [&](std::size_t blocks) { return blocks == 1 ? block : all_blocks; };
  const bp_rank_buffers use = bp_rank_buffers_of(call.collective, ranks, rank == call.root);
  const UsedBuffer send =
      use.uses_send ? used_buffer(services, call.send[rank], bytes_of(use.send_blocks)) : UsedBuffer{};
  const UsedBuffer recv =
      use.uses_recv ? used_buffer(services, call.recv[rank], bytes_of(use.recv_blocks)) : UsedBuffer{};

  // Where they were made: the host takes a buffer of any device over the
  // rank's base; validate wants the rank's own device.
  if (send.described && send.facts.device != call.ranks[rank])
    return misplaced(services, call, "send", send.facts.device, sink);
  if (recv.described && recv.facts.device != call.ranks[rank])
    return misplaced(services, call, "recv", recv.facts.device, sink);

  // Out of place over memory the two share.
  if (send.described && recv.described && send.handle != recv.handle) {
    if (const std::size_t shared = overlap_bytes(send, recv); shared > 0) [[unlikely]]
      return fail(&services, sink, BP_INVALID_ARGUMENT,
                  "validate: rank %u: send and recv overlap by %zu bytes but are different buffers (out of place); "
                  "pass the same buffer for in place",
                  rank, shared);
  }

  // This rank's recv against every other rank's buffers: one buffer, or
  // host memory in common.
  if (!recv.described) return BP_OK;
  for (std::size_t other = 0; other < ranks; ++other) {
    if (other == rank) continue;
    const bp_rank_buffers their = bp_rank_buffers_of(call.collective, ranks, other == call.root);
    const bp_buffer *their_send = their.uses_send ? call.send[other] : nullptr;
    const bp_buffer *their_recv = their.uses_recv ? call.recv[other] : nullptr;
    for (int which = 0; which < 2; ++which) {
      const bp_buffer *handle = which == 0 ? their_send : their_recv;
      if (handle == nullptr || (which == 1 && handle == their_send)) continue;
      const bool same = handle == recv.handle;
      // Host memory is what two handles can share; without it only the
      // handle itself (a pointer comparison, no call to the host).
      if (!same && recv.facts.host_memory == nullptr) [[likely]]
        continue;
      const UsedBuffer theirs =
          used_buffer(services, handle, bytes_of(which == 0 ? their.send_blocks : their.recv_blocks));
      const std::size_t shared = same ? std::min(recv.bytes, theirs.bytes) : overlap_bytes(recv, theirs);
      if (!same && shared == 0) [[likely]]
        continue;
      const char *what = which == 0 ? (handle == their_recv ? "send and recv" : "send") : "recv";
      return fail(&services, sink, BP_INVALID_ARGUMENT,
                  "validate: rank %u: recv %s rank %zu's %s%s (%zu bytes); a rank's recv may not overlap another "
                  "rank's buffers",
                  rank, same ? "is" : "overlaps", other, what, same ? " buffer" : "", shared);
    }
  }
  return BP_OK;
}

std::int32_t check_expected(const bp_plugin_state &state, const bp_layer_instance &instance,
                            const bp_layer_call &call, const CallShape &shape, std::uint64_t print,
                            bp_error_sink *sink) {
  const std::string_view group = call.group_name != nullptr ? call.group_name : "";
  const auto recorded = instance.expected->find(group, call.call_serial, call.rank);
  for (const ExpectedCalls::Recorded &candidate : recorded)
    if (candidate.fingerprint == print && candidate.shape == shape) [[likely]]
      return BP_OK;

  // A difference: named as the caller would write the two calls.
  const std::string where = "call " + std::to_string(call.call_serial) + " of " + group_text(call);
  std::string now = describe(shape);
  if (recorded.empty()) {
    const std::uint64_t last = instance.expected->last_call(group, call.rank);
    const std::string had =
        last == 0 ? "no call of " + group_text(call) + " at rank " + std::to_string(call.rank)
                  : "no " + where + " at rank " + std::to_string(call.rank) + " (its last there was call " +
                        std::to_string(last) + ")";
    return fail(state.services, sink, BP_INVALID_ARGUMENT, "validate: rank %u: %s is %s, the recorded run had %s",
                call.rank, where.c_str(), now.c_str(), had.c_str());
  }
  const ExpectedCalls::Recorded &first = recorded.front();
  std::string then = describe(first.shape);
  if (first.shape.rank_count != shape.rank_count) {
    now += " on " + std::to_string(shape.rank_count) + " ranks";
    then += " on " + std::to_string(first.shape.rank_count) + " ranks";
  }
  if (now == then) {  // only a hash could differ here: another version's file
    char text[96];
    std::snprintf(text, sizeof text, " (fingerprint 0x%016" PRIx64 ", recorded 0x%016" PRIx64 ")", print,
                  first.fingerprint);
    then += text;
  }
  return fail(state.services, sink, BP_INVALID_ARGUMENT, "validate: rank %u: %s is %s, the recorded run had %s%s",
              call.rank, where.c_str(), now.c_str(), then.c_str(),
              recorded.size() > 1 ? " (and other calls of that name and number)" : "");
}

}  // namespace backplane::validate
