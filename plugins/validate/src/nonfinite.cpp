// nan_check: a floating-point collective whose output holds NaN or Inf
// while none of its inputs did is refused in `after`. The inputs are read
// in `before`, since the call may overwrite them (in place): the first rank
// whose hook sees the call reads the input of every rank, whether or not
// that rank's device carries validate, and leaves the answer in the state
// for the other ranks' hooks. The host runs every rank's `before` before
// the call and every `after` after it (one hook each per rank that let the
// call go on), so a count of hooks tells when the answer may go.
//
// With _async calls several calls of a group may be in flight, and the
// buffers hold what read_buffer sees, not what a call in the queue will
// read or wrote: a call is checked only when no earlier call of its group
// is in flight at its `before` and no later one began by its `after`.
// The table of calls in flight tells the first; the last call each group
// began (kept per group for the state's life) the second.
#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>

#include "plugin_support/host_link.hpp"
#include "validate.hpp"

namespace backplane::validate {
namespace {

using plugin_support::fail;
using plugin_support::log;

constexpr std::size_t kNotFound = std::numeric_limits<std::size_t>::max();
// Calls whose InputFacts the state keeps at most: a host that lost `after`
// hooks would otherwise grow the table without end.
constexpr std::size_t kMostCallsInFlight = 65536;

// Elements of one buffer the call reads or writes.
struct Region {
  const bp_buffer *buffer = nullptr;
  std::size_t offset = 0;  // bytes
  std::size_t count = 0;   // elements
};

// The first element among `count` whose exponent bits are all set (NaN or
// Inf). Elements are read as words of `Bits`; the test looks at `Lane`, the
// word shifted right by kShift: the whole word for f16, bf16 and f32, the
// high half for f64, whose exponent lies there (a 32-bit test vectorises
// on every x86-64, a 64-bit compare needs SSE4.1). Each full block of 256
// is tested with an OR of every element's test, a loop of fixed length the
// compiler vectorises (nonfinite.cpp is built with -ftree-vectorize), and
// searched only when it holds one. About 25 µs per MiB here, against 22 µs
// for the read_buffer copy before it.
template <class Bits, class Lane, Lane kExponent, unsigned kShift>
std::size_t first_nonfinite_of(const unsigned char *bytes, std::size_t count) noexcept {
  constexpr std::size_t kBlock = 256;
  auto nonfinite = [bytes](std::size_t i) {
    Bits value;
    std::memcpy(&value, bytes + i * sizeof value, sizeof value);
    return (static_cast<Lane>(value >> kShift) & kExponent) == kExponent;
  };
  std::size_t begin = 0;
  for (; begin + kBlock <= count; begin += kBlock) {
    Lane hits = 0;
    for (std::size_t i = 0; i < kBlock; ++i) hits |= nonfinite(begin + i) ? Lane{1} : Lane{0};
    if (hits == 0) [[likely]]
      continue;
    for (std::size_t i = begin; i < begin + kBlock; ++i)
      if (nonfinite(i)) return i;
  }
  for (std::size_t i = begin; i < count; ++i)
    if (nonfinite(i)) return i;
  return kNotFound;
}

std::size_t first_nonfinite(std::uint32_t dtype, const unsigned char *bytes, std::size_t count) noexcept {
  switch (dtype) {
    case BP_F16: return first_nonfinite_of<std::uint16_t, std::uint16_t, 0x7C00u, 0>(bytes, count);
    case BP_BF16: return first_nonfinite_of<std::uint16_t, std::uint16_t, 0x7F80u, 0>(bytes, count);
    case BP_F32: return first_nonfinite_of<std::uint32_t, std::uint32_t, 0x7F800000u, 0>(bytes, count);
    case BP_F64: return first_nonfinite_of<std::uint64_t, std::uint32_t, 0x7FF00000u, 32>(bytes, count);
    default: return kNotFound;
  }
}

// "NaN", "Inf" or "-Inf" for the element at `bytes`, known to be one.
const char *nonfinite_name(std::uint32_t dtype, const unsigned char *bytes) noexcept {
  std::uint64_t value = 0, mantissa = 0, sign = 0;
  switch (dtype) {
    case BP_F16:
    case BP_BF16: {
      std::uint16_t bits;
      std::memcpy(&bits, bytes, sizeof bits);
      value = bits;
      mantissa = dtype == BP_F16 ? 0x03FFu : 0x007Fu;
      sign = 0x8000u;
      break;
    }
    case BP_F32: {
      std::uint32_t bits;
      std::memcpy(&bits, bytes, sizeof bits);
      value = bits;
      mantissa = 0x007FFFFFu;
      sign = 0x80000000u;
      break;
    }
    default:
      std::memcpy(&value, bytes, sizeof value);
      mantissa = 0x000FFFFFFFFFFFFFull;
      sign = 0x8000000000000000ull;
      break;
  }
  if ((value & mantissa) != 0) return "NaN";
  return (value & sign) != 0 ? "-Inf" : "Inf";
}

// Scratch memory of at least one element and at most kScanChunkBytes,
// grown (in powers of two) when a call needs more than the last; the
// caller holds scratch_mutex.
void reserve_scratch(bp_layer_instance &instance, std::size_t bytes) {
  const std::size_t wanted = std::min(bytes, kScanChunkBytes);
  if (instance.scratch_bytes >= wanted) return;
  std::size_t size = std::max<std::size_t>(instance.scratch_bytes, 4096);
  while (size < wanted) size *= 2;
  instance.scratch = std::make_unique_for_overwrite<unsigned char[]>(size);
  instance.scratch_bytes = size;
}

// The first NaN or Inf of `region`, read chunk by chunk through the host:
// *found is its element index in the buffer (kNotFound when none) and
// *name what it is. The caller holds scratch_mutex.
std::int32_t find_nonfinite(const bp_host_services &services, bp_layer_instance &instance, const Region &region,
                            std::uint32_t dtype, std::size_t *found, const char **name, bp_error_sink *sink) {
  *found = kNotFound;
  const std::size_t element = dtype_size(dtype);
  const std::size_t total = region.count * element;  // the host checked the buffer holds it
  if (total == 0) return BP_OK;
  reserve_scratch(instance, total);
  const std::size_t chunk_most = instance.scratch_bytes / element * element;
  for (std::size_t done = 0; done < total;) {
    const std::size_t chunk = std::min(total - done, chunk_most);
    if (const std::int32_t code =
            services.read_buffer(region.buffer, region.offset + done, instance.scratch.get(), chunk, sink);
        code != BP_OK)
      return code;
    const std::size_t at = first_nonfinite(dtype, instance.scratch.get(), chunk / element);
    if (at != kNotFound) {
      *found = region.offset / element + done / element + at;
      *name = nonfinite_name(dtype, instance.scratch.get() + at * element);
      return BP_OK;
    }
    done += chunk;
  }
  return BP_OK;
}

// What rank `rank` contributes to the call: its send, or in place its own
// block of recv (all_gather, gather); nothing off the root of broadcast and
// scatter.
Region input_of(const bp_layer_call &call, std::size_t rank) {
  const bp_rank_buffers use = bp_rank_buffers_of(call.collective, call.rank_count, rank == call.root);
  if (!use.uses_send || call.send[rank] == nullptr) return {};
  const bool in_place = use.uses_recv && call.send[rank] == call.recv[rank];
  const std::size_t block = call.count * dtype_size(call.dtype);
  if (in_place && (call.collective == BP_ALL_GATHER || call.collective == BP_GATHER))
    return {call.send[rank], rank * block, call.count};
  return {call.send[rank], 0, call.count * use.send_blocks};
}

// What the call writes at `rank`: its recv, or in place its own block of
// it (reduce_scatter, scatter); nothing off the root of reduce and gather.
Region output_of(const bp_layer_call &call, std::size_t rank) {
  const bp_rank_buffers use = bp_rank_buffers_of(call.collective, call.rank_count, rank == call.root);
  if (!use.uses_recv || call.recv[rank] == nullptr) return {};
  const bool in_place = use.uses_send && call.send[rank] == call.recv[rank];
  const std::size_t block = call.count * dtype_size(call.dtype);
  if (in_place && (call.collective == BP_REDUCE_SCATTER || call.collective == BP_SCATTER))
    return {call.recv[rank], rank * block, call.count};
  return {call.recv[rank], 0, call.count * use.recv_blocks};
}

// A call whose place in its group's order nan_check keeps: every
// collective but barrier, which writes nothing.
bool tracked(const bp_layer_call &call) {
  return call.collective < BP_COLLECTIVE_COUNT && call.collective != BP_BARRIER;
}

// A call nan_check reads: floating point, with buffers, sizes that fit.
bool checked(const bp_layer_call &call) {
  std::size_t bytes = 0;
  return dtype_is_float(call.dtype) && call.collective != BP_BARRIER && call.collective < BP_COLLECTIVE_COUNT &&
         call.send != nullptr && call.recv != nullptr && call.rank < call.rank_count &&
         !__builtin_mul_overflow(call.count, dtype_size(call.dtype), &bytes) &&
         !__builtin_mul_overflow(bytes, call.rank_count, &bytes);
}

std::string operation_text(const bp_layer_call &call) {
  std::string text = std::string(collective_name(call.collective)) + "(" + dtype_name(call.dtype);
  if (collective_reduces(call.collective)) text += std::string(", ") + reduce_op_name(call.reduce_op);
  if (collective_has_root(call.collective)) text += ", root " + std::to_string(call.root);
  return text + ")";
}

}  // namespace

std::int32_t note_inputs(bp_plugin_state &state, bp_layer_instance &instance, const bp_layer_call &call,
                         bp_error_sink *sink) {
  if (!tracked(call)) return BP_OK;
  const auto key = std::make_pair(call.group_serial, call.call_serial);
  bool earlier_in_flight = false;
  {
    std::lock_guard lock(state.inputs_mutex);
    if (state.inputs.size() >= kMostCallsInFlight && state.inputs.find(key) == state.inputs.end()) {
      state.inputs.erase(state.inputs.begin());
      if (!state.warned_inputs_full) {
        state.warned_inputs_full = true;
        log(state.services, BP_LOG_WARN, kName,
            "nan_check: %zu collectives in flight at once, or `after` hooks missing; the oldest is not checked",
            kMostCallsInFlight);
      }
    }
    auto [facts, fresh] = state.inputs.try_emplace(key);
    ++facts->second.hooks;
    if (!fresh) return BP_OK;
    std::uint64_t &latest = state.latest_calls[call.group_serial];
    latest = std::max(latest, call.call_serial);
    earlier_in_flight = facts != state.inputs.begin() && std::prev(facts)->first.first == call.group_serial;
  }
  // An earlier call of the group still in flight may be writing this
  // one's inputs: what read_buffer gives now is not what the call will
  // read. Left unchecked rather than judged on stale data.
  if (!checked(call)) return BP_OK;
  if (earlier_in_flight) {
    log(state.services, BP_LOG_DEBUG, kName,
        "nan_check: call %llu of group %llu not checked: an earlier call of the group is in flight",
        static_cast<unsigned long long>(call.call_serial), static_cast<unsigned long long>(call.group_serial));
    return BP_OK;
  }
  std::int32_t code = BP_OK;
  bool nonfinite = false;
  {
    std::lock_guard lock(instance.scratch_mutex);
    for (std::size_t rank = 0; rank < call.rank_count && !nonfinite && code == BP_OK; ++rank) {
      const Region input = input_of(call, rank);
      if (input.buffer == nullptr) continue;
      std::size_t found = kNotFound;
      const char *name = nullptr;
      code = find_nonfinite(*state.services, instance, input, call.dtype, &found, &name, sink);
      nonfinite = found != kNotFound;
    }
  }
  std::lock_guard lock(state.inputs_mutex);
  const auto facts = state.inputs.find(key);
  if (facts == state.inputs.end()) return code;
  if (code != BP_OK) {
    // Refused: no `after` of this rank comes to take its count back.
    if (--facts->second.hooks == 0) state.inputs.erase(facts);
    return code;
  }
  facts->second.scanned = true;
  facts->second.nonfinite = nonfinite;
  return BP_OK;
}

std::int32_t check_outputs(bp_plugin_state &state, bp_layer_instance &instance, const bp_layer_call &call,
                           const bp_layer_outcome &outcome, bp_error_sink *sink) {
  if (!tracked(call)) return BP_OK;
  InputFacts facts;
  bool later_begun = false;
  {
    std::lock_guard lock(state.inputs_mutex);
    const auto found = state.inputs.find(std::make_pair(call.group_serial, call.call_serial));
    if (found == state.inputs.end()) return BP_OK;  // its `before` refused, or the table dropped it
    facts = found->second;
    if (--found->second.hooks == 0) state.inputs.erase(found);
    const auto latest = state.latest_calls.find(call.group_serial);
    later_begun = latest != state.latest_calls.end() && latest->second > call.call_serial;
  }
  // A later call of the group that began may be writing this one's
  // outputs already (or have written them, when its event was waited for
  // first): they are no longer what this call wrote.
  if (outcome.code != BP_OK || !checked(call) || !facts.scanned || facts.nonfinite || later_begun) return BP_OK;
  const Region output = output_of(call, call.rank);
  if (output.buffer == nullptr) return BP_OK;
  std::size_t found = kNotFound;
  const char *name = nullptr;
  std::lock_guard lock(instance.scratch_mutex);
  if (const std::int32_t code = find_nonfinite(*state.services, instance, output, call.dtype, &found, &name, sink);
      code != BP_OK)
    return code;
  if (found == kNotFound) [[likely]]
    return BP_OK;
  return fail(state.services, sink, BP_INVALID_ARGUMENT,
              "validate: rank %u: %s wrote %s at element %zu of recv (inputs held none)", call.rank,
              operation_text(call).c_str(), name, found);
}

}  // namespace backplane::validate
