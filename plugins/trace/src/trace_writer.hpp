// One trace file and everything that feeds it: the ring every instance
// tracing into the file records into, the tables that keep strings out of
// the ring (devices, group names, failure messages), and the writing of
// what the ring holds as Chrome trace-event JSON, appended in place so that
// the file is whole JSON after every write (README.md, "The file").
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backplane/plugin.h"
#include "event_ring.hpp"
#include "trace_json.hpp"
#include "trace_options.hpp"

namespace backplane::trace {

// A device traced into the file, as describe_device told at instance_create.
struct TracedDevice {
  std::string name;      // the layered device's name
  std::string plugin;    // the plugin that computes on it (its base's)
  std::string shown;     // in thread names: the name, or the base's when the name is only the chain's text
  std::string fragment;  // ,"device":...,"plugin":... as the file has it
};

// Why the ring is written out: what may wait for the next write-out.
enum class WriteOut {
  ring_full,  // a collective whose other ranks are surely on their way waits
  flush,      // only one of a group seen whole before, in flight right now, waits
  last,       // nothing waits (the file's last instance is gone)
};

class TraceWriter {
 public:
  // Creates (truncates) the file and writes an empty trace into it. nullptr
  // with *error ("cannot create '<path>': <strerror>") when it cannot;
  // std::bad_alloc when the ring does not fit in memory.
  static std::unique_ptr<TraceWriter> open(const TraceOptions &options, const bp_host_services *services,
                                           std::string *error);
  ~TraceWriter();
  TraceWriter(const TraceWriter &) = delete;
  TraceWriter &operator=(const TraceWriter &) = delete;

  const TraceOptions &options() const { return options_; }

  // The index events of `device` carry. Rare path (instance_create).
  std::uint32_t add_device(const std::string &name, const std::string &plugin, const std::string &shown);

  // The hot path (`after`): one event into the ring. Allocates, locks and
  // writes only on a group's first call, on a failed call (its message) and
  // when the ring is full (this thread then writes the ring out). Never
  // throws; what a rare path cannot keep for lack of memory is left out.
  void record(const bp_layer_call &call, const bp_layer_outcome &outcome, std::uint32_t device) noexcept;

  // Writes out what the ring holds (flush, or the last instance's destroy).
  // BP_OK, or BP_DEVICE_FAILURE with *error when this or an earlier
  // write-out since the last call failed (each failure is logged when it
  // happens, too).
  std::int32_t write(WriteOut why, std::string *error);

  // Instances tracing into this file; the state's registry counts them
  // under its lock.
  std::size_t instances = 0;

 private:
  struct Group {
    std::string fragment;  // ,"group":...,"group_serial":N
    bool written = false;  // some call of it is in the file (the writer's, under io_mutex_)
    bool whole = false;    // some call of it reached the file on every rank
  };
  // One collective's events in a batch (or one buffer event).
  struct Set {
    std::uint64_t group_serial, call_serial;
    std::uint32_t first, last, count;  // batch_ indices chained through next_
    bool collective, kept;
    Group *group;
  };

  TraceWriter(const TraceOptions &options, const bp_host_services *services, int fd);

  bool group_known(std::uint64_t serial) const noexcept;
  void learn_group(std::uint64_t serial, const char *name) noexcept;
  std::uint32_t keep_message(const char *message) noexcept;
  void make_room(EventRing::Slot &slot, std::uint64_t position) noexcept;

  // The write-out and its steps (io_mutex_ held).
  void write_out(WriteOut why) noexcept;
  void gather_sets(std::size_t count);
  void hold_back(WriteOut why, std::int64_t now_ns);
  void name_threads();
  void format_events();
  void format_call_args(const TraceEvent &event, const Set &set);
  void format_event(const TraceEvent &event, const Set &set, const char *flow_phase, std::uint64_t flow);
  void commit_record(std::size_t mark, const TraceEvent *event);
  bool write_at(std::uint64_t position, std::string_view bytes, std::string *error);
  bool flush_output(std::string *error);
  std::string tail() const;
  void failed_write(const std::string &reason, std::size_t events);

  const TraceOptions options_;
  const bp_host_services *services_;
  const int fd_;
  const int pid_;
  EventRing ring_;

  // Group names (by serial), devices and failure messages. Taken on the
  // rare paths only; the hot path asks group_cache_, which says without a
  // lock that a group is already in groups_.
  std::mutex names_mutex_;
  std::unordered_map<std::uint64_t, Group> groups_;          // entries never move or go
  std::deque<TracedDevice> devices_;                         // likewise: events hold indices
  std::unordered_map<std::uint32_t, std::string> messages_;  // until their event is written
  std::uint32_t next_message_ = 1;
  static constexpr std::size_t kGroupCacheSlots = 1024;  // groups beyond it take the lock on every call
  static constexpr std::size_t kGroupCacheProbes = 8;
  std::array<std::atomic<std::uint64_t>, kGroupCacheSlots> group_cache_{};  // serial + 1; 0 empty

  // Writing. Everything below is the writer's, under io_mutex_.
  std::mutex io_mutex_;
  // Events taken from the ring: those held back by the last write-out (a
  // collective some of whose ranks had not reached the ring yet) first,
  // then up to a ring's worth of new ones. Allocated once.
  std::unique_ptr<TraceEvent[]> batch_;
  std::size_t held_count_ = 0;
  std::unique_ptr<std::uint32_t[]> next_;       // the next event of the same set, or kEnd
  std::unique_ptr<std::uint32_t[]> set_table_;  // (group, call) -> sets_ index + 1, open addressing
  std::size_t set_table_mask_;
  std::vector<Set> sets_;
  std::vector<std::uint32_t> members_;  // one set's events by start and rank
  std::vector<const TracedDevice *> device_view_;

  json::TextBuffer output_;     // formatted records not yet written
  json::TextBuffer call_args_;  // what every rank of the set being formatted shares
  struct Digits {
    std::string_view of(std::int64_t ns);
    std::int64_t value = 0;
    std::size_t length = 0;
    char text[24];
  };
  Digits start_digits_, end_digits_;
  std::uint64_t body_end_ = 0;   // where the closing tail starts in the file
  std::uint64_t output_at_ = 0;  // where output_ goes
  std::uint64_t tail_reserve_;   // the longest tail, counted against max_bytes
  bool full_ = false;            // max_bytes reached: every later event is dropped
  std::uint64_t dropped_ = 0;
  std::int64_t last_dropped_ns_ = 0;
  std::uint64_t lost_ = 0;  // events of write-outs that failed
  std::string error_;       // the latest failure since write() last reported one
  // Thread names: the devices seen at each rank (tid), and the buffer tids named.
  std::map<std::uint32_t, std::vector<std::uint32_t>> rank_devices_;
  std::vector<bool> buffer_tid_named_;

  // Fragments of the records, built once.
  std::string pid_tid_;  // ,"pid":P,"tid":
  std::array<std::string, BP_COLLECTIVE_COUNT + 1> collective_heads_, collective_args_, flow_heads_;
  std::array<std::string, BP_LAYER_OPERATION_COUNT + 1> buffer_heads_, buffer_args_;
  std::array<std::string, BP_DTYPE_COUNT + 1> dtype_args_;
  std::array<std::string, BP_REDUCE_OP_COUNT + 1> reduce_op_args_;
  std::array<std::string, BP_CODE_COUNT + 1> outcome_args_;
};

// The tid of a device's buffer operations: beyond any rank.
inline constexpr std::uint32_t kBufferTidBase = 1000000;

}  // namespace backplane::trace
