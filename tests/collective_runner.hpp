// One collective call checked against the reference (tools/reference), every
// byte of every buffer passed, guard bytes past the end included: shared by
// the cpu plugin's sweep and the staged (mixed-kind) groups' tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "backplane/backplane.hpp"
#include "backplane_reference/collective_reference.hpp"

namespace backplane::testing::collectives {

using backplane::Buffer;
using backplane::Device;
using backplane::Event;
using backplane::Group;
using backplane::Host;
using backplane::Result;
using backplane::Status;
namespace ref = backplane::reference;

// Bytes past the region a collective may touch, in every buffer: they must
// come back unchanged.
constexpr std::size_t kGuardBytes = 48;

// How send[r] and recv[r] relate. mixed: even ranks in place, odd ranks not.
enum class Placement { out_of_place, in_place, mixed };
// What is passed where types.h says a rank's buffer is not used (recv of a
// non-root for reduce/gather, send of a non-root for broadcast/scatter):
// a sentinel-filled buffer that must stay untouched, or NULL.
enum class Unused { sentinel, null };

struct Case {
  bp_collective collective;
  bp_dtype dtype;
  bp_reduce_op op;  // reducing collectives only
  Placement placement;
  Unused unused = Unused::sentinel;
};

inline const char *placement_name(Placement p) {
  switch (p) {
    case Placement::out_of_place: return "out_of_place";
    case Placement::in_place: return "in_place";
    case Placement::mixed: return "mixed";
  }
  return "?";
}

inline std::string case_name(const Case &c) {
  std::string name = std::string(bp_collective_name(c.collective)) + "_" + bp_dtype_name(c.dtype);
  if (ref::is_reducing(c.collective)) name += std::string("_") + bp_reduce_op_name(c.op);
  name += std::string("_") + placement_name(c.placement);
  if (c.unused == Unused::null) name += "_null_unused";
  return name;
}

// How gtest shows a Case (in ctest's test names too).
inline void PrintTo(const Case &c, std::ostream *out) { *out << case_name(c); }

// Fills `out` with bytes no collective should produce by accident: a
// pattern different per buffer, repeating with a prime period so that no
// block or element boundary lines up with it.
inline void fill_sentinel(std::size_t buffer_id, std::uint8_t *out, std::size_t bytes) {
  constexpr std::size_t kPeriod = 1021;
  for (std::size_t i = 0; i < std::min(bytes, kPeriod); ++i)
    out[i] = static_cast<std::uint8_t>(0xA5u ^ (i * 29u + buffer_id * 101u + (i >> 8) * 7u));
  for (std::size_t done = kPeriod; done < bytes; done *= 2) std::memcpy(out + done, out, std::min(done, bytes - done));
}

// One buffer of the call, with what it holds before and what it must hold after.
struct Slot {
  std::string label;
  Buffer buffer;
  std::vector<std::uint8_t> initial;
  std::vector<std::uint8_t> expected;
};

// Which entry point runs the collective; every case goes through one of them.
enum class Path { named_blocking, request_blocking, named_async };

inline const char *path_name(Path p) {
  switch (p) {
    case Path::named_blocking: return "the collective's blocking call";
    case Path::request_blocking: return "bp_run_collective";
    case Path::named_async: return "the collective's _async call and bp_event_wait";
  }
  return "?";
}

class Runner {
 public:
  // Rank r runs on the device named devices[r]; `options` (may be NULL)
  // creates the group.
  Runner(Host &host, const Case &c, std::vector<std::string> devices, std::size_t count, std::uint32_t root, Path path,
         const bp_group_options *options = nullptr)
      : host_(host), c_(c), names_(std::move(devices)), n_(names_.size()), local_(names_.size()), count_(count),
        root_(root), path_(path), size_(bp_dtype_size(c.dtype)), options_(options) {}

  void run() {
    ASSERT_EQ(ref::element_size(c_.dtype), size_);
    std::vector<Device> devices;
    for (std::size_t r = 0; r < local_; ++r) {
      Result<Device> device = host_.find_device(names_[r]);
      ASSERT_TRUE(device) << device.error().json();
      devices.push_back(*device);
    }
    Result<Group> group = options_ ? host_.create_group(devices, *options_) : host_.create_group(devices);
    ASSERT_TRUE(group) << group.error().json();
    // A group across processes: this process holds ranks first_ .. first_ + local_ - 1 of n_.
    bp_group_span_info span{};
    span.struct_size = sizeof span;
    Status spanned(bp_group_get_span(group->get(), &span));
    ASSERT_TRUE(spanned) << spanned.error().json();
    ASSERT_EQ(span.local_size, local_);
    n_ = span.global_size;
    first_ = span.first_rank;

    // Buffers and where each local rank's contribution and result live
    // (entry r: the global rank first_ + r).
    std::vector<std::optional<std::size_t>> send_slot(local_), recv_slot(local_);
    std::vector<ref::RankLayout> layouts;
    // The root's sizes, for a buffer passed where a rank does not use one.
    const ref::RankLayout nominal = ref::rank_layout(reference_case(false), root_);
    for (std::size_t r = 0; r < local_; ++r) {
      const std::size_t global = first_ + r;
      const ref::RankLayout &l = layouts.emplace_back(ref::rank_layout(reference_case(in_place(global)), global));
      const std::string rank = "[rank " + std::to_string(global) + "]";
      if (in_place(global) && (l.has_send || l.has_recv)) {
        // One buffer as both send and recv, as large as the larger used side
        // (the reference lays a rank that uses one side only out of place).
        const std::size_t elements = std::max(l.send, l.recv);
        if (c_.unused == Unused::null && !(l.has_send && l.has_recv)) {
          const std::size_t id = add_slot((l.has_send ? "send" : "recv") + rank, devices[r], elements * size_);
          (l.has_send ? send_slot : recv_slot)[r] = id;
        } else {
          const std::size_t id = add_slot("send=recv" + rank, devices[r], elements * size_);
          send_slot[r] = recv_slot[r] = id;
        }
      } else {
        if (l.has_send || c_.unused == Unused::sentinel)
          send_slot[r] = add_slot((l.has_send ? "send" : "unused send") + rank, devices[r],
                                  (l.has_send ? l.send : nominal.send) * size_);
        if (l.has_recv || c_.unused == Unused::sentinel)
          recv_slot[r] = add_slot((l.has_recv ? "recv" : "unused recv") + rank, devices[r],
                                  (l.has_recv ? l.recv : nominal.recv) * size_);
      }
    }

    // Contributions, different for every rank and element, where each rank's
    // layout puts them.
    std::vector<std::vector<std::byte>> contributions(n_);
    for (std::size_t g = 0; g < n_; ++g) contributions[g] = ref::make_contribution(reference_case(false), g);
    for (std::size_t r = 0; r < local_; ++r) {
      const std::vector<std::byte> &contribution = contributions[first_ + r];
      if (contribution.empty()) continue;  // memcpy from an empty vector's NULL is undefined
      Slot &slot = slots_[*send_slot[r]];
      std::memcpy(slot.initial.data() + layouts[r].input_offset * size_, contribution.data(), contribution.size());
    }
    for (Slot &slot : slots_) {
      slot.expected = slot.initial;
      ASSERT_TRUE(slot.buffer.write(0, slot.initial.data(), slot.initial.size()));
    }

    // The reference result, where each rank's layout puts it.
    for (std::size_t r = 0; r < local_; ++r) {
      const std::vector<std::byte> result = ref::reference_result(reference_case(false), contributions, first_ + r);
      if (result.empty()) continue;
      std::memcpy(slots_[*recv_slot[r]].expected.data() + layouts[r].result_offset * size_, result.data(),
                  result.size());
    }

    // Run it.
    std::vector<bp_buffer *> send(local_, nullptr), recv(local_, nullptr);
    for (std::size_t r = 0; r < local_; ++r) {
      if (send_slot[r]) send[r] = slots_[*send_slot[r]].buffer.get();
      if (recv_slot[r]) recv[r] = slots_[*recv_slot[r]].buffer.get();
    }
    Status status = call(*group, send, recv);
    ASSERT_TRUE(status) << status.error().json();

    // Every byte of every buffer.
    for (const Slot &slot : slots_) {
      std::vector<std::uint8_t> actual(slot.expected.size());
      ASSERT_TRUE(slot.buffer.read(0, actual.data(), actual.size()));
      if (actual == slot.expected) continue;
      std::size_t wrong = 0;
      std::ostringstream first;
      const std::size_t data_bytes = actual.size() - kGuardBytes;
      for (std::size_t b = 0; b < actual.size(); b += (b < data_bytes ? size_ : 1)) {
        const std::size_t width = b < data_bytes ? size_ : 1;
        if (std::memcmp(actual.data() + b, slot.expected.data() + b, width) == 0) continue;
        if (++wrong > 6) continue;
        if (b < data_bytes) {
          first << "\n  element " << b / size_ << ": expected "
                << ref::format_value(c_.dtype, reinterpret_cast<const std::byte *>(slot.expected.data() + b))
                << ", got " << ref::format_value(c_.dtype, reinterpret_cast<const std::byte *>(actual.data() + b))
                << (std::memcmp(slot.expected.data() + b, slot.initial.data() + b, size_) == 0 ? " (must stay untouched)"
                                                                                               : "");
        } else {
          first << "\n  guard byte " << b - data_bytes << " past the end was written: 0x" << std::hex
                << int(actual[b]) << std::dec;
        }
      }
      ADD_FAILURE() << slot.label << ": " << wrong << " wrong element(s) of " << data_bytes / size_ << first.str();
    }
  }

 private:
  // The call as the reference takes it; rank r's layout comes from the case
  // with in_place(r), since ranks of a mixed placement differ.
  ref::CollectiveCase reference_case(bool rank_in_place) const {
    return {c_.collective, c_.dtype, c_.op, count_, n_, root_, rank_in_place};
  }

  bool in_place(std::size_t rank) const {
    switch (c_.placement) {
      case Placement::out_of_place: return false;
      case Placement::in_place: return true;
      case Placement::mixed: return rank % 2 == 0;
    }
    return false;
  }

  std::size_t add_slot(const std::string &label, Device device, std::size_t data_bytes) {
    Slot slot;
    slot.label = label;
    const std::size_t bytes = data_bytes + kGuardBytes;
    Result<Buffer> created = Buffer::create(device, bytes);
    if (!created) {
      ADD_FAILURE() << "bp_buffer_create(" << bytes << ") failed: " << created.error().json();
      throw std::runtime_error("buffer");
    }
    slot.buffer = std::move(created).value();
    slot.initial.resize(bytes);
    const std::size_t id = slots_.size();
    fill_sentinel(id, slot.initial.data(), bytes);
    slots_.push_back(std::move(slot));
    return id;
  }

  Status call(Group &group, const std::vector<bp_buffer *> &send, const std::vector<bp_buffer *> &recv) {
    const auto dtype = c_.dtype;
    const auto op = c_.op;
    const std::size_t count = count_;
    if (path_ == Path::request_blocking) {
      bp_collective_request request{};
      request.struct_size = sizeof request;
      request.collective = c_.collective;
      request.dtype = dtype;
      request.reduce_op = op;
      request.root = root_;
      request.count = count;
      request.send = send.data();
      request.recv = recv.data();
      return group.run(request);
    }
    if (path_ == Path::named_async) {
      bp_event *raw = nullptr;
      bp_error *error = nullptr;
      bp_group *g = group.get();
      switch (c_.collective) {
        case BP_ALL_REDUCE: error = bp_all_reduce_async(g, send.data(), recv.data(), count, dtype, op, &raw); break;
        case BP_REDUCE: error = bp_reduce_async(g, send.data(), recv.data(), count, dtype, op, root_, &raw); break;
        case BP_BROADCAST: error = bp_broadcast_async(g, send.data(), recv.data(), count, dtype, root_, &raw); break;
        case BP_ALL_GATHER: error = bp_all_gather_async(g, send.data(), recv.data(), count, dtype, &raw); break;
        case BP_REDUCE_SCATTER:
          error = bp_reduce_scatter_async(g, send.data(), recv.data(), count, dtype, op, &raw);
          break;
        case BP_GATHER: error = bp_gather_async(g, send.data(), recv.data(), count, dtype, root_, &raw); break;
        case BP_SCATTER: error = bp_scatter_async(g, send.data(), recv.data(), count, dtype, root_, &raw); break;
        case BP_ALL_TO_ALL: error = bp_all_to_all_async(g, send.data(), recv.data(), count, dtype, &raw); break;
        case BP_BARRIER: error = bp_barrier_async(g, &raw); break;
        default: break;
      }
      if (error) return Status(error);
      Event event(raw);
      return event.wait();
    }
    switch (c_.collective) {
      case BP_ALL_REDUCE: return group.all_reduce(send, recv, count, dtype, op);
      case BP_REDUCE: return group.reduce(send, recv, count, dtype, op, root_);
      case BP_BROADCAST: return group.broadcast(send, recv, count, dtype, root_);
      case BP_ALL_GATHER: return group.all_gather(send, recv, count, dtype);
      case BP_REDUCE_SCATTER: return group.reduce_scatter(send, recv, count, dtype, op);
      case BP_GATHER: return group.gather(send, recv, count, dtype, root_);
      case BP_SCATTER: return group.scatter(send, recv, count, dtype, root_);
      case BP_ALL_TO_ALL: return group.all_to_all(send, recv, count, dtype);
      case BP_BARRIER: return group.barrier();
      default: break;
    }
    return Status();
  }

  Host &host_;
  Case c_;
  std::vector<std::string> names_;
  std::size_t n_, local_, first_ = 0, count_;
  std::uint32_t root_;
  Path path_;
  std::size_t size_;
  const bp_group_options *options_;
  std::vector<Slot> slots_;
};

}  // namespace backplane::testing::collectives
