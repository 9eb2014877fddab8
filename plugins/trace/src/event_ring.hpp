// The hot path of the trace layer: one fixed-size event per hooked call
// and rank, copied into a bounded multi-producer ring (Vyukov's array of
// slots, each with a sequence number) by the thread that made the call.
// A producer claims a position with one fetch_add and publishes the slot
// with one store; nothing allocates, locks or makes a system call. One
// consumer at a time (the writer, under its lock) takes published events
// in position order.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace backplane::trace {

// One call on one rank (or one buffer operation), as `after` saw it. No
// strings: the device is an index into its writer's device table, the
// group's name is looked up by group_serial when the event is written, and
// a failure's message is an id into the writer's message table.
struct TraceEvent {
  std::int64_t start_ns;
  std::int64_t end_ns;
  std::uint64_t group_serial;  // collectives
  std::uint64_t call_serial;
  std::uint64_t count;
  std::uint64_t bytes;
  std::uint64_t offset;      // buffer_write, buffer_read
  std::uint32_t rank_count;  // saturated at UINT32_MAX
  std::uint32_t device;      // index into the writer's device table
  std::uint32_t rank;
  std::uint32_t root;
  std::uint32_t message;  // 0: none
  std::int32_t code;
  std::uint8_t operation;   // bp_layer_operation; 255 when out of range
  std::uint8_t collective;  // likewise for each enum below
  std::uint8_t dtype;
  std::uint8_t reduce_op;
  std::uint8_t flags;  // BP_LAYER_CALL_*
  std::uint8_t keep;   // the writer's: held back by the write-out under way
};

class EventRing {
 public:
  struct Slot {
    // position + 1 once the event at `position` is published; position +
    // capacity once it was taken (free for the next lap).
    std::atomic<std::uint64_t> sequence;
    TraceEvent event;
  };

  // `capacity` is a power of two.
  explicit EventRing(std::size_t capacity)
      : slots_(std::make_unique<Slot[]>(capacity)), capacity_(capacity), mask_(capacity - 1) {
    for (std::size_t i = 0; i < capacity; ++i) slots_[i].sequence.store(i, std::memory_order_relaxed);
  }

  std::size_t capacity() const { return capacity_; }

  // The producer's side: claim a position, wait until its slot is free
  // (free_for; when it is not, the ring is full), fill it, publish it.
  std::uint64_t claim() noexcept { return tail_.fetch_add(1, std::memory_order_relaxed); }
  Slot &slot(std::uint64_t position) noexcept { return slots_[position & mask_]; }
  static bool free_for(const Slot &slot, std::uint64_t position) noexcept {
    return slot.sequence.load(std::memory_order_acquire) == position;
  }
  static void publish(Slot &slot, std::uint64_t position) noexcept {
    slot.sequence.store(position + 1, std::memory_order_release);
  }

  // The consumer's side, one caller at a time: copies up to `most`
  // published events, oldest first, into `out` and frees their slots. It
  // stops at the first position not yet published (a producer may still
  // be filling it), so one call takes at most a ring's worth.
  std::size_t take(TraceEvent *out, std::size_t most) noexcept {
    std::size_t taken = 0;
    while (taken < most) {
      Slot &next = slots_[head_ & mask_];
      if (next.sequence.load(std::memory_order_acquire) != head_ + 1) break;
      out[taken++] = next.event;
      next.sequence.store(head_ + capacity_, std::memory_order_release);
      ++head_;
    }
    return taken;
  }

 private:
  std::unique_ptr<Slot[]> slots_;
  std::size_t capacity_;
  std::uint64_t mask_;
  alignas(64) std::atomic<std::uint64_t> tail_{0};
  alignas(64) std::uint64_t head_ = 0;  // the consumer's, under its lock
};

}  // namespace backplane::trace
