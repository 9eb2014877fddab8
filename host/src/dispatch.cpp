// Dispatch of collectives, as DESIGN.md's "Dispatch, step by step":
// (1) arguments, (2) ranks unwrapped to their base devices, (3) one kind
// across the group, then the capability lookup, then the owning plugin.
// The success path allocates nothing and takes no lock; errors are built
// only on failure.
#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <vector>

#include "host.hpp"
#include "layers.hpp"
#include "names.hpp"
#include "span.hpp"
#include "staging.hpp"

namespace backplane {
namespace {

std::string operation_text(uint32_t collective, uint32_t dtype, uint32_t op) {
  if (collective == BP_BARRIER) return "barrier";
  std::string text = std::string(collective_name(collective)) + "(" + dtype_name(dtype);
  if (collective_reduces(collective)) text += std::string(", ") + reduce_op_name(op);
  return text + ")";
}

nlohmann::json describe_ranks(const bp_group &group) {
  nlohmann::json devices = nlohmann::json::array();
  for (const bp_device *device : group.ranks) devices.push_back(device->describe());
  return devices;
}

std::string rank_names(const bp_group &group, const std::vector<const bp_device *> &devices) {
  std::string names;
  for (const bp_device *device : devices) names += (names.empty() ? "'" : ", '") + device->name + "'";
  if (!group.name.empty()) names += " of group '" + group.name + "'";
  return names;
}

// What `device` says element type `dtype` would need, from its
// "dtypes_missing" property ("f64 (needs shaderFloat64), i8 (needs
// shaderInt8 + storageBuffer8BitAccess)": the convention plugin.h gives
// plugins whose devices differ by feature), e.g. "needs shaderFloat64";
// empty when the device says nothing of it.
std::string missing_dtype_need(const bp_device &device, uint32_t dtype) {
  for (size_t i = 0; i < device.property_keys.size(); ++i) {
    if (device.property_keys[i] != "dtypes_missing") continue;
    const std::string &text = device.property_values[i];
    const std::string entry = std::string(dtype_name(dtype)) + " (";
    for (size_t at = text.find(entry); at != std::string::npos; at = text.find(entry, at + 1)) {
      if (at != 0 && text.compare(at - 2, 2, ", ") != 0) continue;
      const size_t begin = at + entry.size();
      const size_t end = text.find(')', begin);
      if (end == std::string::npos) return {};
      return text.substr(begin, end - begin);
    }
  }
  return {};
}

// The group's part of the context of every error about a request.
Error about_group(Error error, const bp_group &group) {
  error.with("devices", describe_ranks(group));
  if (!group.name.empty()) error.with("group", group.name);
  if (group.kind) {
    error.with("plugin", {{"name", group.kind->plugin->name}, {"version", group.kind->plugin->version}});
  }
  return error;
}

// The request's context, attached to every error about it.
Error about(Error error, const bp_group &group, uint32_t collective, uint32_t dtype, uint32_t op) {
  error.with("operation", collective_name(collective));
  if (collective != BP_BARRIER) error.with("dtype", dtype_name(dtype));
  if (collective_reduces(collective)) error.with("reduce_op", reduce_op_name(op));
  return about_group(std::move(error), group);
}

[[gnu::cold, gnu::noinline]] Status invalid(const bp_group &group, uint32_t collective, uint32_t dtype, uint32_t op,
                                            const std::string &reason) {
  return about(Error(BP_INVALID_ARGUMENT, operation_text(collective, dtype, op) + ": " + reason), group, collective,
               dtype, op);
}

[[gnu::cold, gnu::noinline]] Status mixed_kinds(const bp_group &group, uint32_t collective, uint32_t dtype,
                                                uint32_t op) {
  std::vector<std::string> kinds;
  for (const bp_device *device : group.ranks) {
    if (std::find(kinds.begin(), kinds.end(), device->kind->name) == kinds.end()) kinds.push_back(device->kind->name);
  }
  std::string list;
  for (const std::string &kind : kinds) list += (list.empty() ? "" : ", ") + kind;
  const bool rejected = group.policy == BP_POLICY_REJECT;
  const std::string why = rejected ? "its policy is 'reject'" : "it cannot be staged: " + group.staging_refusal;
  Error error(BP_MIXED_DEVICE_KINDS, operation_text(collective, dtype, op) + " on " +
                                         rank_names(group, {group.ranks.begin(), group.ranks.end()}) +
                                         " mixes device kinds " + list + ", and " + why);
  error.with("kinds", kinds).with("policy", rejected ? "reject" : "stage");
  if (!rejected) error.with("staging", group.staging_refusal);
  return std::move(about(std::move(error), group, collective, dtype, op))
      .hint(rejected ? "create the group with policy 'stage' to run it through host memory, or from devices of "
                       "one kind (" + list + ")"
                     : "create the group from devices of one kind (" + list + ")");
}

// A request staging does not run on a mixed group: what the cpu plugin,
// which computes staged collectives, lacks.
[[gnu::cold, gnu::noinline]] Status staged_unsupported(const bp_group &group, uint32_t collective, uint32_t dtype,
                                                       uint32_t op, uint32_t mode_flags, Support why) {
  const CapabilitySet &staged = group.staging->capabilities;
  const LoadedPlugin &reducer = *group.staging->reducer->plugin;
  const std::string operation = operation_text(collective, dtype, op);
  bp_code code = BP_UNSUPPORTED_DEVICE;
  std::string lacks, hint;
  if (why == Support::no_collective) {
    code = BP_UNSUPPORTED_COLLECTIVE;
    lacks = std::string("does not declare ") + collective_name(collective);
    hint = "run it on a group of one kind that provides it";
  } else if (why == Support::no_dtype) {
    code = BP_UNSUPPORTED_DTYPE;
    lacks = "supports " + dtype_list(staged.dtypes(collective)) + " for " + collective_name(collective);
    hint = "convert the data to one of " + dtype_list(staged.dtypes(collective));
  } else if (why == Support::no_reduce_op) {
    code = BP_UNSUPPORTED_REDUCE_OP;
    lacks = "supports " + reduce_op_list(staged.reduce_ops(collective, dtype)) + " for " + collective_name(collective) +
            " of " + dtype_name(dtype);
    hint = "use one of " + reduce_op_list(staged.reduce_ops(collective, dtype)) + " for " + dtype_name(dtype);
  } else {
    const bool in_place = mode_flags & BP_CAPABILITY_IN_PLACE;
    lacks = std::string("does not run ") + collective_name(collective) + (in_place ? " in place" : " out of place");
    hint = in_place ? "pass distinct send and recv buffers" : "pass the same buffer as send and recv";
  }
  Error error(code, operation + " on " + rank_names(group, {group.ranks.begin(), group.ranks.end()}) +
                        " runs through host memory (the group mixes device kinds), and plugin " + reducer.name + " " +
                        reducer.version + ", which computes it there, " + lacks);
  error.with("path", "staged");
  return std::move(about(std::move(error), group, collective, dtype, op)).hint(hint);
}

// Loaded kinds that run the request, and plugins that declare it but were refused.
nlohmann::json find_alternatives(const bp_group &group, uint32_t collective, uint32_t dtype, uint32_t op,
                                 uint32_t mode_flags, HostLock host_lock) {
  nlohmann::json alternatives = nlohmann::json::array();
  const bp_host &host = *group.host;
  std::shared_lock lock(host.mutex, std::defer_lock);
  if (host_lock == HostLock::take) lock.lock();
  for (const auto &kind : host.kinds) {
    if (kind.get() == group.kind) continue;
    if (kind->capabilities.lookup(collective, dtype, op, mode_flags) == Support::yes)
      alternatives.push_back({{"device_kind", kind->name}, {"plugin", kind->plugin->name}});
  }
  for (const RefusedPlugin &refused : host.refused) {
    for (const auto &[kind, set] : refused.declared) {
      if (set.lookup(collective, dtype, op, mode_flags) != Support::yes) continue;
      alternatives.push_back({{"device_kind", kind},
                              {"loaded", false},
                              {"file", bp_error_field(refused.error, "file")},
                              {"reason", bp_error_message(refused.error)}});
    }
  }
  return alternatives;
}

[[gnu::cold, gnu::noinline]] Status unsupported(const bp_group &group, uint32_t collective, uint32_t dtype,
                                                uint32_t op, uint32_t mode_flags, Support why, HostLock host_lock) {
  const DeviceKind &kind = *group.kind;
  const LoadedPlugin &plugin = *kind.plugin;
  const CapabilitySet &declared = kind.capabilities;
  const std::string operation = operation_text(collective, dtype, op);
  const std::string plugin_text = "plugin " + plugin.name + " " + plugin.version;
  // The ranks that fall short: in the mode asked for when the mode is what
  // the group lacks, else whatever the mode.
  const uint32_t lacking_modes = why == Support::no_mode ? mode_flags : 0;
  std::vector<const bp_device *> lacking;
  for (const bp_device *device : group.ranks) {
    if (device->capabilities().lookup(collective, dtype, op, lacking_modes) != Support::yes)
      lacking.push_back(device);
  }
  if (lacking.empty()) lacking.assign(group.ranks.begin(), group.ranks.end());
  const std::string where = operation + " is not supported on " + (lacking.size() == 1 ? "device " : "devices ") +
                            rank_names(group, lacking) + " (" + kind.name + "): ";

  Support kind_answer = declared.lookup(collective, dtype, op, 0);
  bp_code code = BP_UNSUPPORTED_DEVICE;
  std::string reason, fallback_hint;
  if (kind_answer == Support::no_collective) {
    code = BP_UNSUPPORTED_COLLECTIVE;
    reason = plugin_text + " does not declare " + collective_name(collective) + " for " + kind.name;
    fallback_hint = "load a plugin that provides " + std::string(collective_name(collective)) + " for a device kind";
  } else if (kind_answer == Support::no_dtype) {
    code = BP_UNSUPPORTED_DTYPE;
    reason = plugin_text + " supports " + dtype_list(declared.dtypes(collective)) + " for " + collective_name(collective);
    fallback_hint = "convert the data to one of " + dtype_list(declared.dtypes(collective));
  } else if (kind_answer == Support::no_reduce_op) {
    code = BP_UNSUPPORTED_REDUCE_OP;
    reason = plugin_text + " supports " + reduce_op_list(declared.reduce_ops(collective, dtype)) + " for " +
             collective_name(collective) + " of " + dtype_name(dtype);
    fallback_hint = "use one of " + reduce_op_list(declared.reduce_ops(collective, dtype)) + " for " + dtype_name(dtype);
  } else if (why == Support::no_mode) {
    const bool in_place = mode_flags & BP_CAPABILITY_IN_PLACE;
    reason = plugin_text + " does not run " + collective_name(collective) + (in_place ? " in place" : " out of place");
    fallback_hint = in_place ? "pass distinct send and recv buffers" : "pass the same buffer as send and recv";
  } else {
    // The kind runs it and a device declares less. The code names what the
    // device lacks where it runs the collective at all (f16 on an OpenCL
    // device without cl_khr_fp16 is UNSUPPORTED_DTYPE); a device without the
    // collective is itself the problem.
    // A dtype "runs" when some op of it does, as the conformance suite
    // learns it from the device alone.
    const CapabilitySet &device = lacking.front()->capabilities();
    uint32_t runnable = 0;
    for (uint32_t d = 0; d < BP_DTYPE_COUNT; ++d)
      if (device.reduce_ops(collective, d) != 0) runnable |= 1u << d;
    const bool one = lacking.size() == 1;
    reason = one ? "the device declares less than its kind" : "the devices declare less than their kind";
    const std::string runs = one ? ": it supports " : ": '" + lacking.front()->name + "' supports ";
    if (device.lookup(collective, dtype, op, 0) != Support::yes && runnable != 0) {
      if (!(runnable & (1u << dtype))) {
        code = BP_UNSUPPORTED_DTYPE;
        reason += runs + dtype_list(runnable) + " for " + collective_name(collective);
        if (const std::string need = missing_dtype_need(*lacking.front(), dtype); !need.empty()) {
          reason += std::string(" (") + dtype_name(dtype) + " " + need + ")";
        }
      } else {
        code = BP_UNSUPPORTED_REDUCE_OP;
        reason += runs + reduce_op_list(device.reduce_ops(collective, dtype)) + " for " +
                  collective_name(collective) + " of " + dtype_name(dtype);
      }
    }
    reason += "; " + plugin_text + " runs it on other " + kind.name + " devices";
    fallback_hint = "create the group from devices that support it";
  }
  nlohmann::json alternatives = find_alternatives(group, collective, dtype, op, mode_flags, host_lock);
  std::string hint = fallback_hint;
  for (const nlohmann::json &alternative : alternatives) {
    if (alternative.contains("plugin")) {
      hint = "use a " + alternative["device_kind"].get<std::string>() + " group: plugin " +
             alternative["plugin"].get<std::string>() + " runs " + operation;
      break;
    }
    hint = "plugin file '" + alternative["file"].get<std::string>() + "' declares " + operation +
           " for " + alternative["device_kind"].get<std::string>() + " but failed to load; fix it";
  }
  Error error = about(Error(code, where + reason), group, collective, dtype, op);
  error.with("alternatives", std::move(alternatives));
  return std::move(error).hint(hint);
}

// Step 1 for one rank's buffer: present, on the rank's device, big enough.
// The test is all the success path runs; buffer_error says which part failed.
bool buffer_fits(const bp_group &group, size_t rank, const bp_buffer *buffer, size_t needed_bytes) {
  // Layers only observe: a buffer of the base, or of any device over it, is the rank's.
  return buffer && buffer->device->base == group.ranks[rank]->base && buffer->bytes >= needed_bytes;
}

[[gnu::cold, gnu::noinline]] Status buffer_error(const bp_group &group, const bp_collective_request &request,
                                                 const char *side, size_t rank, const bp_buffer *buffer,
                                                 size_t needed_bytes) {
  if (!buffer) {
    return invalid(group, request.collective, request.dtype, request.reduce_op,
                   std::string(side) + "[" + std::to_string(rank) + "] is NULL");
  }
  if (buffer->device->base != group.ranks[rank]->base) {
    return invalid(group, request.collective, request.dtype, request.reduce_op,
                   std::string(side) + "[" + std::to_string(rank) + "] lives on '" + buffer->device->name +
                       "', not on rank " + std::to_string(rank) + "'s device '" + group.ranks[rank]->name + "'");
  }
  return invalid(group, request.collective, request.dtype, request.reduce_op,
                 std::string(side) + "[" + std::to_string(rank) + "] on '" + buffer->device->name + "' holds " +
                     std::to_string(buffer->bytes) + " bytes but needs " + std::to_string(needed_bytes) + " for " +
                     std::to_string(request.count) + " " + dtype_name(request.dtype) + " elements");
}

// The enum values a caller passed, before anything indexes a table by them.
bool enums_valid(uint32_t collective, uint32_t dtype, uint32_t op) {
  return collective < BP_COLLECTIVE_COUNT && (collective == BP_BARRIER || dtype < BP_DTYPE_COUNT) &&
         (!collective_reduces(collective) || op < BP_REDUCE_OP_COUNT);
}

// The message and context name only what is known: the first value out of
// range stops it, and what comes after it was never read.
[[gnu::cold, gnu::noinline]] Status enum_error(const bp_group &group, uint32_t collective, uint32_t dtype,
                                               uint32_t op) {
  if (collective >= BP_COLLECTIVE_COUNT)
    return about_group(Error(BP_INVALID_ARGUMENT, "unknown collective " + std::to_string(collective)), group);
  const std::string name = collective_name(collective);
  if (dtype >= BP_DTYPE_COUNT) {
    Error error(BP_INVALID_ARGUMENT, name + ": unknown element type " + std::to_string(dtype));
    return about_group(std::move(error).with("operation", name), group);
  }
  Error error(BP_INVALID_ARGUMENT,
              name + "(" + dtype_name(dtype) + "): unknown reduce op " + std::to_string(op));
  return about_group(std::move(error).with("operation", name).with("dtype", dtype_name(dtype)), group);
}

Status check_enums(const bp_group &group, uint32_t collective, uint32_t dtype, uint32_t op) {
  if (enums_valid(collective, dtype, op)) [[likely]]
    return {};
  return enum_error(group, collective, dtype, op);
}

// The other failures of step 1, built only when they happen.
[[gnu::cold, gnu::noinline]] Status root_error(const bp_group &group, const bp_collective_request &request) {
  return invalid(group, request.collective, request.dtype, request.reduce_op,
                 "root " + std::to_string(request.root) + " is outside the group of " +
                     std::to_string(group.global_ranks));
}

[[gnu::cold, gnu::noinline]] Status null_arrays_error(const bp_group &group, const bp_collective_request &request) {
  return invalid(group, request.collective, request.dtype, request.reduce_op,
                 std::string(request.send ? "recv" : "send") + " is NULL; pass one buffer per rank");
}

[[gnu::cold, gnu::noinline]] Status overflow_error(const bp_group &group, const bp_collective_request &request) {
  return invalid(group, request.collective, request.dtype, request.reduce_op,
                 "count " + std::to_string(request.count) + " overflows the size of a buffer");
}

// What plugin.h promises plugins of host memory: a rank's recv buffer
// never overlaps another rank's buffers. The host knows the ranges only of
// wrapped host memory (bp_buffer_wrap_host), so those are compared, over
// the bytes the call uses: in order of their start, one sweep keeps the
// recv range reaching furthest (recv ranges of two ranks cannot both reach
// a point without overlapping, so one is enough) and the two send ranges of
// distinct ranks reaching furthest. Sends and recvs are each in rank order,
// which is address order when the caller laid its memory out rank by rank:
// then each is sorted already and one merge orders them, O(m) for m wrapped
// buffers (O(m log m) otherwise). Up to kPairwiseRanks ranks, every pair is
// compared instead (at most 28 comparisons). Run only when a call has a
// wrapped buffer; no allocation up to 32 ranks.
struct HostRange {
  uintptr_t begin, end;
  size_t rank;
  bool recv;
};
constexpr HostRange kNoRange = {0, 0, SIZE_MAX, false};
// Up to this many ranks, comparing every pair is cheaper than ordering them.
constexpr size_t kPairwiseRanks = 4;

[[gnu::cold, gnu::noinline]] Status overlap_error(const bp_group &group, const bp_collective_request &request,
                                                  const HostRange &first, const HostRange &second) {
  auto describe = [](const HostRange &range) {
    char text[96];
    std::snprintf(text, sizeof text, "%s[%zu] (host memory 0x%" PRIxPTR "..0x%" PRIxPTR ")",
                  range.recv ? "recv" : "send", range.rank, range.begin, range.end);
    return std::string(text);
  };
  const HostRange &recv = second.recv ? second : first, &other = second.recv ? first : second;
  Status status = invalid(group, request.collective, request.dtype, request.reduce_op,
                          describe(recv) + " overlaps " + describe(other) + " of rank " + std::to_string(other.rank) +
                              ": a rank's recv buffer may not overlap another rank's buffers");
  Error error = status.take_error();
  error.with("ranks", nlohmann::json::array({recv.rank, other.rank}));
  return std::move(error).hint("give each rank's recv buffer memory of its own");
}

// Not cold: it is the path of every call on wrapped memory.
[[gnu::noinline]] Status check_host_overlap(const bp_group &group, const bp_collective_request &request, size_t block,
                                            size_t all_blocks) {
  const size_t ranks = group.ranks.size();
  // Sends, recvs and both merged: 4 ranges per rank at most.
  std::array<HostRange, 4 * 32> on_stack;  // left uninitialised: only what is filled is read
  std::vector<HostRange> on_heap;
  HostRange *storage = on_stack.data();
  if (4 * ranks > on_stack.size()) {
    on_heap.resize(4 * ranks);
    storage = on_heap.data();
  }
  HostRange *const sends = storage, *const recvs = storage + ranks, *const merged = storage + 2 * ranks;
  size_t send_count = 0, recv_count = 0;
  for (size_t rank = 0; rank < ranks; ++rank) {
    const bp_rank_buffers use =
        bp_rank_buffers_of(request.collective, group.global_ranks, group.first_rank + rank == request.root);
    const bp_buffer *send = use.uses_send ? request.send[rank] : nullptr;
    const bp_buffer *recv = use.uses_recv ? request.recv[rank] : nullptr;
    const size_t send_bytes = use.send_blocks == 1 ? block : all_blocks;
    const size_t recv_bytes = use.recv_blocks == 1 ? block : all_blocks;
    // wrap_host refused ranges that wrap the address space.
    if (send && send->host_memory && send_bytes > 0) {
      const uintptr_t begin = reinterpret_cast<uintptr_t>(send->host_memory);
      sends[send_count++] = HostRange{begin, begin + send_bytes, rank, false};
    }
    if (recv && recv->host_memory && recv_bytes > 0) {
      const uintptr_t begin = reinterpret_cast<uintptr_t>(recv->host_memory);
      recvs[recv_count++] = HostRange{begin, begin + recv_bytes, rank, true};
    }
  }
  // Few ranks: every recv against every other rank's range, no ordering.
  if (ranks <= kPairwiseRanks) {
    auto overlap = [](const HostRange &a, const HostRange &b) {
      return a.rank != b.rank && a.begin < b.end && b.begin < a.end;
    };
    for (const HostRange &recv : std::span<const HostRange>(recvs, recv_count)) {
      for (const HostRange &send : std::span<const HostRange>(sends, send_count))
        if (overlap(recv, send)) [[unlikely]]
          return overlap_error(group, request, send, recv);
      for (const HostRange *other = recvs; other != &recv; ++other)
        if (overlap(recv, *other)) [[unlikely]]
          return overlap_error(group, request, *other, recv);
    }
    return {};
  }
  auto by_begin = [](const HostRange &a, const HostRange &b) { return a.begin < b.begin; };
  if (!std::is_sorted(sends, sends + send_count, by_begin)) std::sort(sends, sends + send_count, by_begin);
  if (!std::is_sorted(recvs, recvs + recv_count, by_begin)) std::sort(recvs, recvs + recv_count, by_begin);
  std::merge(sends, sends + send_count, recvs, recvs + recv_count, merged, by_begin);
  HostRange recv_reach = kNoRange, send_reach = kNoRange, send_second = kNoRange;  // send_second: another rank's
  for (const HostRange &range : std::span<const HostRange>(merged, send_count + recv_count)) {
    if (recv_reach.end > range.begin && recv_reach.rank != range.rank)
      return overlap_error(group, request, recv_reach, range);
    if (range.recv) {
      for (const HostRange *send : {&send_reach, &send_second})
        if (send->end > range.begin && send->rank != range.rank) return overlap_error(group, request, *send, range);
      if (range.end > recv_reach.end) recv_reach = range;
    } else if (range.rank == send_reach.rank) {
      if (range.end > send_reach.end) send_reach = range;
    } else if (range.end > send_reach.end) {
      send_second = send_reach;
      send_reach = range;
    } else if (range.end > send_second.end) {
      send_second = range;
    }
  }
  return {};
}

// Step 1: everything about the arguments; fills the plugin handles and the
// in-place/out-of-place flags the call needs. The success path only tests;
// every message is built in the cold functions above, on failure.
Status check_arguments(bp_group &group, const bp_collective_request &request, uint32_t *mode_flags,
                       size_t *largest_bytes) {
  const uint32_t collective = request.collective, dtype = request.dtype;
  if (!enums_valid(collective, dtype, request.reduce_op)) [[unlikely]]
    return enum_error(group, collective, dtype, request.reduce_op);
  // A group across processes: this process's ranks, numbered from first_rank of global_ranks.
  const size_t ranks = group.ranks.size(), global = group.global_ranks;
  if (collective_has_root(collective) && request.root >= global) [[unlikely]]
    return root_error(group, request);
  *mode_flags = 0;
  if (collective == BP_BARRIER) return {};
  if (!request.send || !request.recv) [[unlikely]]
    return null_arrays_error(group, request);
  size_t block = 0, all_blocks = 0;
  if (__builtin_mul_overflow(request.count, dtype_size(dtype), &block) ||
      __builtin_mul_overflow(block, global, &all_blocks)) [[unlikely]]
    return overflow_error(group, request);
  bool host_memory = false;  // a buffer wraps host memory: check_host_overlap
  for (size_t rank = 0; rank < ranks; ++rank) {
    const bp_rank_buffers use = bp_rank_buffers_of(collective, global, group.first_rank + rank == request.root);
    // Blocks are 1 or `ranks`, so neither product overflows once all_blocks did not.
    const size_t send_bytes = use.send_blocks == 1 ? block : all_blocks;
    const size_t recv_bytes = use.recv_blocks == 1 ? block : all_blocks;
    bp_buffer *send = request.send[rank], *recv = request.recv[rank];
    if (use.uses_send && !buffer_fits(group, rank, send, send_bytes)) [[unlikely]]
      return buffer_error(group, request, "send", rank, send, send_bytes);
    if (use.uses_recv && !buffer_fits(group, rank, recv, recv_bytes)) [[unlikely]]
      return buffer_error(group, request, "recv", rank, recv, recv_bytes);
    group.send_handles[rank] = use.uses_send ? send->handle : nullptr;
    group.recv_handles[rank] = use.uses_recv ? recv->handle : nullptr;
    host_memory |= (use.uses_send && send->host_memory) || (use.uses_recv && recv->host_memory);
    if (use.uses_send && use.uses_recv) *mode_flags |= send == recv ? BP_CAPABILITY_IN_PLACE : BP_CAPABILITY_OUT_OF_PLACE;
    if (use.uses_send) *largest_bytes = std::max(*largest_bytes, send_bytes);
    if (use.uses_recv) *largest_bytes = std::max(*largest_bytes, recv_bytes);
  }
  if (host_memory) [[unlikely]]
    return check_host_overlap(group, request, block, all_blocks);
  return {};
}

// Marks the group busy for the scope; a second caller is refused.
class GroupClaim {
 public:
  explicit GroupClaim(bp_group &group) : group_(group), claimed_(!group.busy.exchange(true, std::memory_order_acquire)) {}
  ~GroupClaim() {
    if (claimed_) group_.busy.store(false, std::memory_order_release);
  }
  bool claimed() const { return claimed_; }

 private:
  bp_group &group_;
  bool claimed_;
};

[[gnu::cold, gnu::noinline]] Status request_error(const bp_group *group) {
  if (!group) return Error(BP_INVALID_ARGUMENT, "group is NULL");
  return Error(BP_INVALID_ARGUMENT, "collective request is NULL or its struct_size is below its 1.0 size");
}

[[gnu::cold, gnu::noinline]] Status busy_error(const bp_group &group, const bp_collective_request &request) {
  return invalid(group, request.collective, request.dtype, request.reduce_op,
                 "the group is already starting a collective on another thread");
}

void release(LoadedPlugin &plugin, bp_plugin_request *request) {
  call_plugin_release(plugin, "request_release", [&] { plugin.functions.request_release(plugin.state, request); });
}

[[gnu::cold, gnu::noinline]] Status too_large(const bp_group &group, const bp_collective_request &request,
                                              size_t bytes, uint64_t limit, bool staged) {
  const std::string operation = operation_text(request.collective, request.dtype, request.reduce_op);
  Error error(BP_UNSUPPORTED_DEVICE,
              operation + " spans " + std::to_string(bytes) + " bytes in one buffer, more than the " +
                  std::to_string(limit) + " bytes " + (group.ranks.size() == 1 ? "device " : "devices ") +
                  rank_names(group, {group.ranks.begin(), group.ranks.end()}) + " (" +
                  (staged ? "staged through cpu" : group.kind->name) + ") take for " + operation +
                  " (the plugin's max_bytes)");
  error.with("bytes", bytes).with("max_bytes", limit);
  return std::move(about(std::move(error), group, request.collective, request.dtype, request.reduce_op))
      .hint("split the call into pieces of at most " + std::to_string(limit) + " bytes per buffer");
}

// The after hooks of a layered collective, once it completed or failed to
// start: a hook's failure becomes the call's outcome, with the request's
// context like every error about it.
Status after_layered(LayeredCall &layered, Status outcome) {
  Status after = after_collective(layered, std::move(outcome));
  if (after || after.error().context().contains("operation")) return after;
  const bp_layer_call &call = layered.call;
  return about(after.take_error(), *layered.group, call.collective, call.dtype, call.reduce_op);
}

// An _async layered collective's after hooks, when its event completes.
Status finish_layered(InFlight &in_flight, Status outcome) {
  std::unique_ptr<LayeredCall> layered = std::move(in_flight.layered);
  return after_layered(*layered, std::move(outcome));
}

// Completes one collective in flight: waits up to timeout_ns, then
// releases its request and keeps the outcome. A TIMEOUT leaves it in
// flight. A wait without limit that fails all the same (the plugin gave
// up) completes it with that failure: the host never waits forever on a
// plugin's word. Caller holds in_flight.mutex.
Status complete_locked(InFlight &in_flight, int64_t timeout_ns) {
  if (!in_flight.complete.load(std::memory_order_relaxed)) {
    Status status;
    if (in_flight.staged) [[unlikely]] {
      bp_group &group = *in_flight.staged;
      if (!wait_staged(*group.staging, timeout_ns, status))
        return Error(BP_TIMEOUT, "the collective through host memory is still in flight after " +
                                     std::to_string(timeout_ns) + " ns");
      group.staged_pending.store(false, std::memory_order_release);
      if (!status) {
        const StagedArgs &args = group.staging->args;
        status = about(status.take_error(), group, args.collective, args.dtype, args.reduce_op);
      }
    } else if (in_flight.spanning) [[unlikely]] {
      bp_group &group = *in_flight.spanning;
      if (!wait_spanning(*group.span, timeout_ns, status))
        return Error(BP_TIMEOUT, "the collective across processes is still in flight after " +
                                     std::to_string(timeout_ns) + " ns");
      if (!status) {
        const bp_collective_request &request = group.span->handed.request;
        status = about(status.take_error(), group, request.collective, request.dtype, request.reduce_op);
      }
    } else {
      LoadedPlugin &plugin = *in_flight.plugin;
      status = call_plugin(plugin, "request_wait", [&](bp_error_sink *sink) {
        return plugin.functions.request_wait(plugin.state, in_flight.request, timeout_ns, sink);
      });
      if (!status && status.error().code() == BP_TIMEOUT && timeout_ns >= 0) return status;
      release(plugin, in_flight.request);
      in_flight.request = nullptr;
    }
    if (in_flight.layered) [[unlikely]]
      status = finish_layered(in_flight, std::move(status));
    if (!status) in_flight.outcome = std::make_unique<Error>(status.take_error());
    in_flight.complete.store(true, std::memory_order_release);
  }
  if (in_flight.outcome) return Error(*in_flight.outcome);
  return {};
}

void complete_without_limit(InFlight &in_flight) {
  std::lock_guard lock(in_flight.mutex);
  Status outcome = complete_locked(in_flight, -1);
  (void)outcome;  // kept in in_flight for its event
}

// Forgets the group's entries that completed; caller holds in_flight_mutex.
void drop_completed(bp_group &group) {
  std::erase_if(group.in_flight, [](const std::shared_ptr<InFlight> &entry) {
    return entry->complete.load(std::memory_order_acquire);
  });
  group.tracked.store(group.in_flight.size(), std::memory_order_release);
}

// Before a plugin that takes one request at a time (minor < 2) is given the
// next: the group's earlier collectives complete first.
[[gnu::cold, gnu::noinline]] void wait_for_earlier(bp_group &group) {
  std::vector<std::shared_ptr<InFlight>> earlier;
  {
    std::lock_guard lock(group.in_flight_mutex);
    earlier = group.in_flight;
  }
  for (const auto &in_flight : earlier) complete_without_limit(*in_flight);
  std::lock_guard lock(group.in_flight_mutex);
  drop_completed(group);
}

// Records a started request in its group's list, dropping the entries that
// completed. Runs under the group's start claim, so the list is in start order.
void track(bp_group &group, const std::shared_ptr<InFlight> &in_flight) {
  std::lock_guard lock(group.in_flight_mutex);
  group.in_flight.push_back(in_flight);
  drop_completed(group);
}

// A refusal of what the group cannot run, counted (the caller holds the start claim).
[[gnu::cold, gnu::noinline]] Status refused(bp_group &group, Status refusal) {
  GroupCounters::add(group.counters.refused);
  return refusal;
}

// Steps 3 and 4 off the group's own table: whether staging runs a request
// (a mixed group's table is staging's; a group of one kind stages what its
// kind lacks when on_unsupported is stage), else the refusal.
[[gnu::cold, gnu::noinline]] Status off_table(const bp_group &group, uint32_t collective, uint32_t dtype,
                                              uint32_t op, uint32_t mode_flags, Support support,
                                              HostLock host_lock) {
  if (!group.kind) {
    if (!group.staging) return mixed_kinds(group, collective, dtype, op);
    if (support == Support::yes) return {};
    return staged_unsupported(group, collective, dtype, op, mode_flags, support);
  }
  if (group.staging && group.staging->capabilities.lookup(collective, dtype, op, mode_flags) == Support::yes)
    return {};
  Status refusal = unsupported(group, collective, dtype, op, mode_flags, support, host_lock);
  if (group.on_unsupported == BP_ON_UNSUPPORTED_STAGE) {
    Error error = refusal.take_error();
    error.with("on_unsupported", "stage");
    error.with("staging", group.staging ? "the cpu plugin, which computes staged collectives, does not run it either"
                                        : group.staging_refusal);
    return error;
  }
  return refusal;
}

// A collective through host memory (staging.hpp), with the layers' hooks
// around it. A blocking call completes before it returns; an _async one
// goes to the group's staging runner, its entry tracked and left in
// group.staged_started for start_collective (*started stays NULL).
[[gnu::cold, gnu::noinline]] Status start_off_table(bp_group &group, const bp_collective_request &request,
                                                    bool caller_waits, uint32_t mode_flags, size_t largest_bytes,
                                                    Support support, LayeredCall *layered) {
  const uint32_t collective = request.collective, dtype = request.dtype, op = request.reduce_op;
  if (Status refusal = off_table(group, collective, dtype, op, mode_flags, support, HostLock::take); !refusal)
    return refused(group, std::move(refusal));
  if (collective != BP_BARRIER) {
    const uint64_t limit = group.staging->capabilities.max_bytes(collective, dtype);
    if (limit != 0 && largest_bytes > limit) return refused(group, too_large(group, request, largest_bytes, limit, true));
  }
  // Staging reads and writes the ranks' buffers now: what is in flight on them goes first.
  if (group.tracked.load(std::memory_order_acquire) != 0) wait_for_earlier(group);
  if (group.layered) {
    if (Status refusal = before_collective(group, request, caller_waits, *layered); !refusal)
      return about(refusal.take_error(), group, collective, dtype, op);
  }
  GroupCounters::add(group.counters.staged);
  take_arguments(group, request);
  if (!caller_waits) {
    // Its entry exists (and is tracked) before the runner has the call, so
    // that nothing can throw once it runs.
    auto in_flight = std::make_shared<InFlight>();
    in_flight->staged = &group;
    track(group, in_flight);
    group.staged_pending.store(true, std::memory_order_release);
    if (start_staged(group)) {
      group.staged_started = std::move(in_flight);
      return {};
    }
    in_flight->complete.store(true, std::memory_order_release);  // no runner: it runs here
    group.staged_pending.store(false, std::memory_order_release);
  }
  Status status = run_staged(group);
  if (!status) {
    Error failed = about(status.take_error(), group, collective, dtype, op);
    if (group.layered) return after_layered(*layered, std::move(failed));
    return failed;
  }
  return {};
}

// What a group across processes does not run: the transport's refusal,
// else its local side's (the group's kind, or staging's cpu plugin).
[[gnu::cold, gnu::noinline]] Status span_unsupported(const bp_group &group, uint32_t collective, uint32_t dtype,
                                                     uint32_t op, uint32_t mode_flags, Support support,
                                                     HostLock host_lock) {
  if (Status refusal = transport_carries(group, collective, dtype, op, mode_flags); !refusal)
    return about(refusal.take_error(), group, collective, dtype, op);
  if (group.span->staged) return staged_unsupported(group, collective, dtype, op, mode_flags, support);
  return unsupported(group, collective, dtype, op, mode_flags, support, host_lock);
}

// A collective on a group across processes (span.hpp): the local kind's
// table and the transport's rows, then the phases: on this thread for a
// blocking call, else on the group's runner thread (its entry tracked and
// left in group.staged_started for start_collective).
[[gnu::cold, gnu::noinline]] Status start_spanning(bp_group &group, const bp_collective_request &request,
                                                   bool caller_waits) {
  const uint32_t collective = request.collective, dtype = request.dtype, op = request.reduce_op;
  // One call at a time on the processes' exchanges: an _async one in flight
  // finishes first (its runner reads the count below).
  if (group.tracked.load(std::memory_order_acquire) != 0) wait_for_earlier(group);
  // Every call counts, a refused one too: a process whose call never
  // reached the others carries a later sequence number into its next one,
  // which the mismatch guard then catches.
  ++group.span->calls;
  uint32_t mode_flags = 0;
  size_t largest_bytes = 0;
  if (Status status = check_arguments(group, request, &mode_flags, &largest_bytes); !status) return status;
  if (group.span->broken.load(std::memory_order_acquire))
    return refused(group, about(broken_group(group), group, collective, dtype, op));
  const Support support = group.capabilities.lookup(collective, dtype, op, mode_flags);
  if (support != Support::yes) {
    return refused(group, span_unsupported(group, collective, dtype, op, mode_flags, support, HostLock::take));
  }
  if (collective != BP_BARRIER) {
    const uint64_t limit = group.capabilities.max_bytes(collective, dtype);
    if (limit != 0 && largest_bytes > limit) return refused(group, too_large(group, request, largest_bytes, limit, false));
  }
  GroupCounters::add(group.counters.native);
  if (!caller_waits) {
    auto in_flight = std::make_shared<InFlight>();
    in_flight->spanning = &group;
    track(group, in_flight);
    if (start_spanning_apart(group, request)) {
      group.staged_started = std::move(in_flight);
      return {};
    }
    in_flight->complete.store(true, std::memory_order_release);  // no runner: it runs here
  }
  if (Status status = run_spanning(group, request); !status)
    return about(status.take_error(), group, collective, dtype, op);
  return {};
}

// The hot path of every collective (DESIGN.md's performance targets: tens of
// nanoseconds over the plugin's own function, no allocation): on success it
// only tests and copies; errors are built in cold functions. `caller_waits`:
// a blocking call, which waits for the request as soon as start returns.
Status start(bp_group *group, const bp_collective_request *given, bool caller_waits, bp_plugin_request **started,
             LayeredCall *layered) {
  if (!group || !given || given->struct_size < BP_COLLECTIVE_REQUEST_SIZE_V1_0) [[unlikely]]
    return request_error(group);
  const bp_collective_request &request = *given;
  GroupClaim claim(*group);
  if (!claim.claimed()) [[unlikely]]
    return busy_error(*group, request);
  uint32_t mode_flags = 0;
  size_t largest_bytes = 0;
  if (group->span) [[unlikely]]
    return start_spanning(*group, request, caller_waits);
  if (Status status = check_arguments(*group, request, &mode_flags, &largest_bytes); !status) [[unlikely]]
    return status;
  // Step 2: each rank's device is its base's kind and index (layers.hpp);
  // the layers' hooks run around the plugin's call below. Steps 3 and 4:
  // the group's own table (a mixed group's is what staging runs), else
  // staging or the refusal.
  Support support = group->capabilities.lookup(request.collective, request.dtype, request.reduce_op, mode_flags);
  if (!group->kind || support != Support::yes) [[unlikely]]
    return start_off_table(*group, request, caller_waits, mode_flags, largest_bytes, support, layered);
  if (request.collective != BP_BARRIER) {
    const uint64_t limit = group->capabilities.max_bytes(request.collective, request.dtype);
    if (limit != 0 && largest_bytes > limit) [[unlikely]]
      return refused(*group, too_large(*group, request, largest_bytes, limit, false));
  }
  if ((!group->plugin_queues || group->staged_pending.load(std::memory_order_acquire)) &&
      group->tracked.load(std::memory_order_acquire) != 0) [[unlikely]]
    wait_for_earlier(*group);

  LoadedPlugin &plugin = *group->kind->plugin;
  const bp_collective_args args =
      collective_args(request.collective, request.dtype, request.reduce_op, request.root, request.count,
                      group->ranks.size(), group->send_handles.data(), group->recv_handles.data(),
                      caller_waits ? BP_COLLECTIVE_CALLER_WAITS : 0);
  if (group->layered) [[unlikely]] {
    if (Status refused = before_collective(*group, request, caller_waits, *layered); !refused)
      return about(refused.take_error(), *group, request.collective, request.dtype, request.reduce_op);
  }
  GroupCounters::add(group->counters.native);
  Status status = call_plugin(plugin, "collective_start", [&](bp_error_sink *sink) {
    return plugin.functions.collective_start(plugin.state, group->comm, &args, started, sink);
  });
  if (!status) {
    Error failed = about(status.take_error(), *group, request.collective, request.dtype, request.reduce_op);
    if (group->layered) [[unlikely]]
      return after_layered(*layered, std::move(failed));
    return failed;
  }
  return {};
}

// A blocking collective on a group with layered ranks: the hooks see the
// call's arrays as given (no copy, no allocation).
[[gnu::noinline]] Status run_layered_collective(bp_group &group, const bp_collective_request *request) {
  LayeredCall layered;
  bp_plugin_request *started = nullptr;
  if (Status status = start(&group, request, true, &started, &layered); !status) return status;
  Status outcome;
  if (started) {
    InFlight in_flight;
    in_flight.plugin = group.kind->plugin;
    in_flight.request = started;
    std::lock_guard lock(in_flight.mutex);
    outcome = complete_locked(in_flight, -1);
  }
  return after_layered(layered, std::move(outcome));
}

}  // namespace

Status check_support(const bp_group &group, uint32_t collective, uint32_t dtype, uint32_t op, uint32_t mode_flags,
                     HostLock host_lock) {
  Expected<bp_group_path> path = plan(group, collective, dtype, op, mode_flags, host_lock);
  if (!path) return path.take_error();
  return {};
}

Expected<bp_group_path> plan(const bp_group &group, uint32_t collective, uint32_t dtype, uint32_t op,
                             uint32_t mode_flags, HostLock host_lock) {
  if (Status status = check_enums(group, collective, dtype, op); !status) return status.take_error();
  Support support = group.capabilities.lookup(collective, dtype, op, mode_flags);
  if (group.span) [[unlikely]] {
    if (group.span->broken.load(std::memory_order_acquire))
      return about(broken_group(group), group, collective, dtype, op);
    if (support == Support::yes) return BP_PATH_ACROSS_PROCESSES;
    return span_unsupported(group, collective, dtype, op, mode_flags, support, host_lock).take_error();
  }
  if (group.kind && support == Support::yes) return BP_PATH_NATIVE;
  if (Status refusal = off_table(group, collective, dtype, op, mode_flags, support, host_lock); !refusal)
    return refusal.take_error();
  return BP_PATH_STAGED;
}

Status run_collective(bp_group *group, const bp_collective_request *request) {
  bp_plugin_request *started = nullptr;
  if (group && group->layered) [[unlikely]]
    return run_layered_collective(*group, request);
  if (Status status = start(group, request, true, &started, nullptr); !status) return status;
  if (!started) return {};
  InFlight in_flight;
  in_flight.plugin = group->kind->plugin;
  in_flight.request = started;
  std::lock_guard lock(in_flight.mutex);
  return complete_locked(in_flight, -1);
}

Expected<bp_event *> start_collective(bp_group *group, const bp_collective_request *request) {
  auto event = std::make_unique<bp_event>();
  bp_plugin_request *started = nullptr;
  std::unique_ptr<LayeredCall> layered;
  if (group && group->layered) [[unlikely]]
    layered = std::make_unique<LayeredCall>();
  if (Status status = start(group, request, false, &started, layered.get()); !status) return status.take_error();
  if (!started && group->staged_started) [[unlikely]] {
    // Through host memory or across processes, on the group's runner
    // (start_off_table or start_spanning tracked it).
    event->in_flight = std::move(group->staged_started);
    std::lock_guard lock(event->in_flight->mutex);
    event->in_flight->layered = std::move(layered);
  } else if (started) {
    // Allocation failures past this point must not lose the request: it is
    // tracked before anything else can throw.
    auto in_flight = std::make_shared<InFlight>();
    in_flight->plugin = group->kind->plugin;
    in_flight->request = started;
    in_flight->layered = std::move(layered);
    event->in_flight = in_flight;
    track(*group, in_flight);
  } else if (layered) {
    // Complete inside its start: the layers see it end now.
    if (Status status = after_layered(*layered, {}); !status) return status.take_error();
  }
  event->host = group->host;
  retain_host(event->host);
  return event.release();
}

Status wait_event(bp_event *event, int64_t timeout_ns) {
  if (!event) return Error(BP_INVALID_ARGUMENT, "event is NULL");
  if (!event->in_flight) return {};
  std::lock_guard lock(event->in_flight->mutex);
  return complete_locked(*event->in_flight, timeout_ns);
}

bool test_event(bp_event *event) {
  if (!event) return false;
  if (!event->in_flight) return true;
  InFlight &in_flight = *event->in_flight;
  if (in_flight.complete.load(std::memory_order_acquire)) return true;
  std::lock_guard lock(in_flight.mutex);
  if (in_flight.complete.load(std::memory_order_relaxed)) return true;
  if (in_flight.staged || in_flight.spanning) [[unlikely]] {
    if (in_flight.staged ? !staged_finished(*in_flight.staged->staging) : !spanning_finished(*in_flight.spanning->span))
      return false;
    Status outcome = complete_locked(in_flight, -1);
    (void)outcome;  // kept in in_flight for its event
    return true;
  }
  bool done = false;
  Status status = call_plugin(*in_flight.plugin, "request_test", [&](bp_error_sink *sink) {
    return in_flight.plugin->functions.request_test(in_flight.plugin->state, in_flight.request, &done, sink);
  });
  if (!status || done) {
    release(*in_flight.plugin, in_flight.request);
    in_flight.request = nullptr;
    if (in_flight.layered) [[unlikely]]
      status = finish_layered(in_flight, std::move(status));
    if (!status) in_flight.outcome = std::make_unique<Error>(status.take_error());
    in_flight.complete.store(true, std::memory_order_release);
  }
  return in_flight.complete.load(std::memory_order_relaxed);
}

void destroy_event(bp_event *event) {
  if (!event) return;
  if (event->in_flight) complete_without_limit(*event->in_flight);
  bp_host *host = event->host;
  delete event;
  release_host(host);
}

void finish_in_flight(bp_group &group) {
  std::vector<std::shared_ptr<InFlight>> in_flight;
  {
    std::lock_guard lock(group.in_flight_mutex);
    in_flight.swap(group.in_flight);
    group.tracked.store(0, std::memory_order_release);
  }
  for (const auto &entry : in_flight) complete_without_limit(*entry);
}

}  // namespace backplane
