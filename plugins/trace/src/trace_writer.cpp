// The trace file's writer (trace_writer.hpp): the hot path's record(), the
// rare paths beside it, and the write-out of the ring as trace-event JSON.
#include "trace_writer.hpp"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <set>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <thread>
#include <tuple>

#include "names.hpp"
#include "plugin_support/host_link.hpp"

namespace backplane::trace {
namespace {

constexpr const char *kCategory = "trace";
// Output is written whenever this much is formatted, so that a write-out
// never holds more than this beside the ring.
constexpr std::size_t kOutputChunk = std::size_t{1} << 20;
// Past this many devices at one rank, a thread name says how many more.
constexpr std::size_t kNamesPerThread = 8;
// How long a collective seen on some of its ranks waits for the others
// (write-outs in between take it along again). The ranks of one call
// reach `after` microseconds apart, from one thread; a rank that never
// comes (refused, or not traced) costs its call this much delay.
constexpr std::int64_t kWaitForRanksNs = 100'000'000;
constexpr std::uint32_t kEnd = UINT32_MAX;
constexpr std::uint8_t kKeep = 1;

// Files this process writes, over every plugin state (one per host): two
// hosts tracing into one file at once would overwrite each other.
std::mutex &open_files_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::set<std::string> &open_files() {
  static std::set<std::string> files;
  return files;
}
void forget_open_file(const std::string &file) {
  std::lock_guard lock(open_files_mutex());
  open_files().erase(file);
}

std::string errno_text(int number) { return std::error_code(number, std::generic_category()).message(); }

std::int64_t steady_ns() noexcept {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

std::uint8_t small(std::uint32_t value) { return value < 255 ? static_cast<std::uint8_t>(value) : 255; }
// The fragment of `value`; the last entry is any unknown value's.
template <std::size_t N>
const std::string &entry(const std::array<std::string, N> &table, std::uint32_t value) {
  return table[value < N - 1 ? value : N - 1];
}

std::size_t group_slot(std::uint64_t serial) { return static_cast<std::size_t>((serial * 0x9E3779B97F4A7C15u) >> 54); }

// The flow id of one collective: its group serial and call serial side by
// side while they fit (group serials below 2^24, call serials below 2^40),
// else a mix of the two.
std::uint64_t flow_id(std::uint64_t group_serial, std::uint64_t call_serial) {
  constexpr std::uint64_t kCallBits = 40;
  if (group_serial < (std::uint64_t{1} << (64 - kCallBits)) && call_serial < (std::uint64_t{1} << kCallBits))
    return group_serial << kCallBits | call_serial;
  std::uint64_t mixed = group_serial * 0x9E3779B97F4A7C15u ^ call_serial;
  mixed ^= mixed >> 31;
  return mixed * 0xBF58476D1CE4E5B9u;
}

std::string header_text(int pid) {
  json::TextBuffer text;
  text.put("{\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":");
  text.put_int(pid);
  text.put(",\"tid\":0,\"args\":{\"name\":\"backplane\"}}");
  return std::string(text.view());
}

// The end of the file: the count of dropped events when there are any, and
// the closing of the array and the object.
std::string tail_text(int pid, std::uint64_t dropped, std::int64_t last_dropped_ns, std::uint64_t max_bytes) {
  json::TextBuffer text;
  if (dropped > 0) {
    text.put(",\n{\"name\":\"dropped\",\"cat\":\"trace\",\"ph\":\"i\",\"s\":\"g\",\"ts\":");
    text.put_microseconds(last_dropped_ns);
    text.put(",\"pid\":");
    text.put_int(pid);
    text.put(",\"tid\":0,\"args\":{\"dropped\":");
    text.put_uint(dropped);
    text.put(",\"max_bytes\":");
    text.put_uint(max_bytes);
    text.put("}}");
  }
  text.put("\n],\n\"displayTimeUnit\":\"ns\"}\n");
  return std::string(text.view());
}

}  // namespace

std::unique_ptr<TraceWriter> TraceWriter::open(const TraceOptions &options, const bp_host_services *services,
                                               std::string *error) {
  {
    std::lock_guard lock(open_files_mutex());
    if (!open_files().insert(options.file).second) {
      *error = "'" + options.file + "' is being written by the trace layer of another host in this process";
      return nullptr;
    }
  }
  const int fd = ::open(options.file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = "cannot create '" + options.file + "': " + errno_text(errno);
    forget_open_file(options.file);
    return nullptr;
  }
  std::unique_ptr<TraceWriter> writer;
  try {
    writer.reset(new TraceWriter(options, services, fd));
  } catch (...) {
    ::close(fd);
    forget_open_file(options.file);
    throw;
  }
  // An empty trace, whole JSON, from the start.
  const std::string header = header_text(writer->pid_);
  writer->body_end_ = header.size();
  if (!writer->write_at(0, header + writer->tail(), error)) return nullptr;  // the destructor forgets the file
  return writer;
}

TraceWriter::TraceWriter(const TraceOptions &options, const bp_host_services *services, int fd)
    : options_(options),
      services_(services),
      fd_(fd),
      pid_(static_cast<int>(getpid())),
      ring_(options.ring_events),
      // Untouched until the first write-out needs them.
      batch_(std::make_unique_for_overwrite<TraceEvent[]>(2 * options.ring_events)),
      next_(std::make_unique_for_overwrite<std::uint32_t[]>(2 * options.ring_events)),
      set_table_(std::make_unique_for_overwrite<std::uint32_t[]>(4 * options.ring_events)),
      set_table_mask_(4 * options.ring_events - 1),
      tail_reserve_(tail_text(pid_, UINT64_MAX, INT64_MIN, options.max_bytes).size()) {
  pid_tid_ = ",\"pid\":" + std::to_string(pid_) + ",\"tid\":";
  for (std::uint32_t c = 0; c <= BP_COLLECTIVE_COUNT; ++c) {
    const std::string name = json::quoted(collective_name(c));
    collective_heads_[c] = ",\n{\"name\":" + name + ",\"cat\":\"collective\",\"ph\":\"X\",\"ts\":";
    collective_args_[c] = ",\"args\":{\"operation\":\"collective\",\"collective\":" + name;
    flow_heads_[c] = ",\n{\"name\":" + name + ",\"cat\":\"collective\",\"ph\":\"";
  }
  for (std::uint32_t o = 0; o <= BP_LAYER_OPERATION_COUNT; ++o) {
    const std::string name = json::quoted(operation_name(o));
    buffer_heads_[o] = ",\n{\"name\":" + name + ",\"cat\":\"buffer\",\"ph\":\"X\",\"ts\":";
    buffer_args_[o] = ",\"args\":{\"operation\":" + name;
  }
  for (std::uint32_t d = 0; d <= BP_DTYPE_COUNT; ++d) dtype_args_[d] = ",\"dtype\":" + json::quoted(dtype_name(d));
  for (std::uint32_t r = 0; r <= BP_REDUCE_OP_COUNT; ++r)
    reduce_op_args_[r] = ",\"reduce_op\":" + json::quoted(reduce_op_name(r));
  for (std::int32_t code = 0; code <= BP_CODE_COUNT; ++code)
    outcome_args_[static_cast<std::size_t>(code)] = ",\"outcome\":" + json::quoted(code_name(code));
}

TraceWriter::~TraceWriter() {
  ::close(fd_);
  forget_open_file(options_.file);
}

std::uint32_t TraceWriter::add_device(const std::string &name, const std::string &plugin, const std::string &shown) {
  TracedDevice device{name, plugin, shown, ",\"device\":" + json::quoted(name) + ",\"plugin\":" + json::quoted(plugin)};
  std::lock_guard lock(names_mutex_);
  devices_.push_back(std::move(device));
  return static_cast<std::uint32_t>(devices_.size() - 1);
}

// ---- the hot path and its rare branches -----------------------------------

void TraceWriter::record(const bp_layer_call &call, const bp_layer_outcome &outcome, std::uint32_t device) noexcept {
  const bool collective = call.operation == BP_LAYER_COLLECTIVE;
  if (collective && !group_known(call.group_serial)) [[unlikely]]
    learn_group(call.group_serial, call.group_name);
  std::uint32_t message = 0;
  if (outcome.code != BP_OK && outcome.message != nullptr) [[unlikely]]
    message = keep_message(outcome.message);
  std::int64_t start = outcome.start_ns, end = outcome.end_ns;
  // A call refused before it ran comes untimed.
  if (start == 0 && end == 0) [[unlikely]]
    start = end = steady_ns();

  const std::uint64_t position = ring_.claim();
  EventRing::Slot &slot = ring_.slot(position);
  if (!EventRing::free_for(slot, position)) [[unlikely]]
    make_room(slot, position);
  TraceEvent &event = slot.event;
  event.start_ns = start;
  event.end_ns = std::max(start, end);
  event.device = device;
  event.message = message;
  event.code = outcome.code;
  event.operation = small(call.operation);
  event.flags = static_cast<std::uint8_t>(call.flags & (BP_LAYER_CALL_IN_PLACE | BP_LAYER_CALL_ASYNC));
  event.keep = 0;
  event.bytes = call.bytes;
  if (collective) {
    event.group_serial = call.group_serial;
    event.call_serial = call.call_serial;
    event.count = call.count;
    event.offset = 0;
    event.rank_count = call.rank_count < UINT32_MAX ? static_cast<std::uint32_t>(call.rank_count) : UINT32_MAX;
    event.rank = call.rank;
    event.root = call.root;
    event.collective = small(call.collective);
    event.dtype = small(call.dtype);
    event.reduce_op = small(call.reduce_op);
  } else {
    event.group_serial = event.call_serial = event.count = 0;
    event.offset = call.offset;
    event.rank_count = event.rank = event.root = 0;
    event.collective = event.dtype = event.reduce_op = 0;
  }
  EventRing::publish(slot, position);
}

bool TraceWriter::group_known(std::uint64_t serial) const noexcept {
  const std::uint64_t key = serial + 1;
  std::size_t index = group_slot(serial);
  for (std::size_t probe = 0; probe < kGroupCacheProbes; ++probe, index = (index + 1) & (kGroupCacheSlots - 1)) {
    // Relaxed: groups_ itself is read under names_mutex_.
    const std::uint64_t seen = group_cache_[index].load(std::memory_order_relaxed);
    if (seen == key) return key != 0;
    if (seen == 0) return false;
  }
  return false;
}

void TraceWriter::learn_group(std::uint64_t serial, const char *name) noexcept {
  try {
    std::lock_guard lock(names_mutex_);
    if (groups_.find(serial) == groups_.end()) {
      Group group;
      group.fragment =
          ",\"group\":" + json::quoted(name != nullptr ? name : "") + ",\"group_serial\":" + std::to_string(serial);
      groups_.emplace(serial, std::move(group));
    }
  } catch (...) {
    return;  // out of memory: the group shows without its name
  }
  const std::uint64_t key = serial + 1;
  if (key == 0) return;
  std::size_t index = group_slot(serial);
  for (std::size_t probe = 0; probe < kGroupCacheProbes; ++probe, index = (index + 1) & (kGroupCacheSlots - 1)) {
    std::uint64_t seen = 0;
    if (group_cache_[index].compare_exchange_strong(seen, key, std::memory_order_relaxed) || seen == key) return;
  }
  // The probe window is full: this group's calls find it in groups_ under the lock.
}

std::uint32_t TraceWriter::keep_message(const char *message) noexcept {
  try {
    std::lock_guard lock(names_mutex_);
    std::uint32_t id = next_message_++;
    if (id == 0) id = next_message_++;
    messages_.insert_or_assign(id, message);
    return id;
  } catch (...) {
    return 0;  // out of memory: the event shows its code without the message
  }
}

void TraceWriter::make_room(EventRing::Slot &slot, std::uint64_t position) noexcept {
  while (!EventRing::free_for(slot, position)) {
    {
      std::lock_guard lock(io_mutex_);
      if (EventRing::free_for(slot, position)) return;
      write_out(WriteOut::ring_full);
    }
    // Still full: the slot's previous event is being published by another
    // thread, and the next write-out takes it.
    if (!EventRing::free_for(slot, position)) std::this_thread::yield();
  }
}

// ---- writing --------------------------------------------------------------

std::int32_t TraceWriter::write(WriteOut why, std::string *error) {
  std::lock_guard lock(io_mutex_);
  write_out(why);
  if (error_.empty()) return BP_OK;
  *error = std::move(error_);
  error_.clear();
  return BP_DEVICE_FAILURE;
}

std::string TraceWriter::tail() const { return tail_text(pid_, dropped_, last_dropped_ns_, options_.max_bytes); }

void TraceWriter::write_out(WriteOut why) noexcept {
  std::size_t count = held_count_;
  count += ring_.take(batch_.get() + count, ring_.capacity());
  held_count_ = 0;
  if (count == 0) return;
  std::string failure;
  const std::int64_t began_ns = steady_ns();
  const std::uint64_t began_at = body_end_;
  try {
    gather_sets(count);
    hold_back(why, began_ns);
    output_.clear();
    output_at_ = body_end_;
    name_threads();
    format_events();
    // On failure, `failure` says why.
    if (flush_output(&failure) && write_at(output_at_, tail(), &failure)) {
      body_end_ = output_at_;
      (void)::ftruncate(fd_, static_cast<off_t>(body_end_ + tail().size()));
    }
  } catch (const std::exception &e) {
    failure = std::string("writing '") + options_.file + "' failed: " + e.what();
  }
  std::size_t kept = 0;
  for (std::size_t i = 0; i < count; ++i) kept += batch_[i].keep;
  if (!failure.empty()) {
    output_.clear();
    failed_write(failure, count - kept);
    // The file as it was before this write-out, whole again if the disk lets us.
    std::string ignored;
    const std::string end = tail();
    if (write_at(body_end_, end, &ignored)) (void)::ftruncate(fd_, static_cast<off_t>(body_end_ + end.size()));
    std::lock_guard lock(names_mutex_);
    for (std::size_t i = 0; i < count; ++i)
      if (!batch_[i].keep && batch_[i].message != 0) messages_.erase(batch_[i].message);
  }
  // What was held back moves to the front, for the next write-out.
  for (std::size_t i = 0; i < count; ++i) {
    if (!batch_[i].keep) continue;
    batch_[held_count_] = batch_[i];
    batch_[held_count_++].keep = 0;
  }
  if (failure.empty())
    plugin_support::log(services_, BP_LOG_DEBUG, kCategory, "%s: %zu events (%zu held back), %llu bytes in %.2f ms",
                        options_.file.c_str(), count - kept, kept,
                        static_cast<unsigned long long>(body_end_ - began_at),
                        static_cast<double>(steady_ns() - began_ns) / 1e6);
}

// Sets of the batch in the order they first appear: one per collective
// (its ranks' events, by group and call serial, through a hash table) and
// one per buffer event.
void TraceWriter::gather_sets(std::size_t count) {
  sets_.clear();
  std::fill_n(set_table_.get(), set_table_mask_ + 1, 0u);
  for (std::uint32_t i = 0; i < count; ++i) {
    const TraceEvent &event = batch_[i];
    next_[i] = kEnd;
    if (event.operation != BP_LAYER_COLLECTIVE) {
      sets_.push_back({0, 0, i, i, 1, false, false, nullptr});
      continue;
    }
    std::size_t slot = static_cast<std::size_t>((event.group_serial * 0x9E3779B97F4A7C15u) ^
                                                (event.call_serial * 0xC2B2AE3D27D4EB4Fu));
    for (slot = (slot ^ (slot >> 29)) & set_table_mask_;; slot = (slot + 1) & set_table_mask_) {
      std::uint32_t &entry = set_table_[slot];
      if (entry == 0) {
        entry = static_cast<std::uint32_t>(sets_.size() + 1);
        sets_.push_back({event.group_serial, event.call_serial, i, i, 1, true, false, nullptr});
        break;
      }
      Set &set = sets_[entry - 1];
      if (set.group_serial != event.group_serial || set.call_serial != event.call_serial) continue;
      next_[set.last] = i;
      set.last = i;
      ++set.count;
      break;
    }
  }
  std::lock_guard lock(names_mutex_);
  for (Set &set : sets_) {
    if (!set.collective) continue;
    auto found = groups_.find(set.group_serial);
    set.group = found != groups_.end() ? &found->second : nullptr;
  }
  device_view_.clear();
  for (const TracedDevice &device : devices_) device_view_.push_back(&device);
}

// Marks what waits for the next write-out: a collective not seen on every
// rank yet, while its ranks may still be on their way (WriteOut says when
// that is), for at most kWaitForRanksNs and while the batch has room.
void TraceWriter::hold_back(WriteOut why, std::int64_t now_ns) {
  std::size_t kept = 0;
  for (Set &set : sets_) {
    if (!set.collective) continue;
    const TraceEvent &first = batch_[set.first];
    const bool whole = set.count >= first.rank_count;
    if (!whole && why != WriteOut::last && set.group != nullptr) {
      std::int64_t newest = 0;
      for (std::uint32_t i = set.first; i != kEnd; i = next_[i]) newest = std::max(newest, batch_[i].end_ns);
      // A group proven whole before is waited for at a flush too; a new one
      // only when the ring filled up (its other ranks are then surely a
      // moment away, and a flush must not hide a group traced on some
      // ranks only).
      const bool expected = set.group->whole || (!set.group->written && why == WriteOut::ring_full);
      if (expected && now_ns - newest < kWaitForRanksNs && kept + set.count <= ring_.capacity()) {
        set.kept = true;
        kept += set.count;
        for (std::uint32_t i = set.first; i != kEnd; i = next_[i]) batch_[i].keep = kKeep;
        continue;
      }
    }
    if (set.group != nullptr) {
      set.group->written = true;
      set.group->whole = set.group->whole || whole;
    }
  }
}

// Thread names: each rank's with every device seen at it, each device's
// buffer thread; emitted again whenever a rank sees a new device (the last
// name of a tid is the one viewers show).
void TraceWriter::name_threads() {
  std::vector<std::uint32_t> renamed;
  const auto shown = [&](std::uint32_t device) {
    return device < device_view_.size() ? std::string_view(device_view_[device]->shown) : std::string_view("?");
  };
  for (const Set &set : sets_) {
    if (set.kept) continue;
    for (std::uint32_t i = set.first; i != kEnd; i = next_[i]) {
      const TraceEvent &e = batch_[i];
      if (e.operation == BP_LAYER_COLLECTIVE) {
        std::vector<std::uint32_t> &seen = rank_devices_[e.rank];
        if (std::find(seen.begin(), seen.end(), e.device) != seen.end()) continue;
        seen.push_back(e.device);
        if (std::find(renamed.begin(), renamed.end(), e.rank) == renamed.end()) renamed.push_back(e.rank);
        continue;
      }
      if (buffer_tid_named_.size() <= e.device) buffer_tid_named_.resize(e.device + 1, false);
      if (buffer_tid_named_[e.device]) continue;
      buffer_tid_named_[e.device] = true;
      const std::size_t mark = output_.size();
      output_.put(",\n{\"name\":\"thread_name\",\"ph\":\"M\"");
      output_.put(pid_tid_);
      output_.put_uint(std::uint64_t{kBufferTidBase} + e.device);
      output_.put(",\"args\":{\"name\":");
      output_.put_string("buffers \u00B7 " + std::string(shown(e.device)));
      output_.put("}}");
      commit_record(mark, nullptr);
    }
  }
  for (const std::uint32_t rank : renamed) {
    const std::vector<std::uint32_t> &seen = rank_devices_[rank];
    std::string name = "rank " + std::to_string(rank) + " \u00B7 ";
    for (std::size_t k = 0; k < seen.size() && k < kNamesPerThread; ++k)
      name += (k == 0 ? "" : ", ") + std::string(shown(seen[k]));
    if (seen.size() > kNamesPerThread) name += " and " + std::to_string(seen.size() - kNamesPerThread) + " more";
    const std::size_t mark = output_.size();
    output_.put(",\n{\"name\":\"thread_name\",\"ph\":\"M\"");
    output_.put(pid_tid_);
    output_.put_uint(rank);
    output_.put(",\"args\":{\"name\":");
    output_.put_string(name);
    output_.put("}}");
    commit_record(mark, nullptr);
  }
}

// The events: an X slice per call and rank, and for a collective seen on
// several ranks a flow through them, at each slice's start so that viewers
// bind it to the slice: s on the first by start time and rank, t on the
// middle ones, f on the last (the host times a collective once for all its
// ranks, so that is rank order).
void TraceWriter::format_events() {
  for (const Set &set : sets_) {
    if (set.kept) continue;
    if (full_) {
      // Nothing more fits: count what is dropped without formatting it.
      for (std::uint32_t i = set.first; i != kEnd; i = next_[i]) {
        ++dropped_;
        last_dropped_ns_ = std::max(last_dropped_ns_, batch_[i].end_ns);
      }
      continue;
    }
    members_.clear();
    for (std::uint32_t i = set.first; i != kEnd; i = next_[i]) members_.push_back(i);
    const auto earlier = [&](std::uint32_t a, std::uint32_t b) {
      return std::tie(batch_[a].start_ns, batch_[a].rank) < std::tie(batch_[b].start_ns, batch_[b].rank);
    };
    if (!std::is_sorted(members_.begin(), members_.end(), earlier))
      std::sort(members_.begin(), members_.end(), earlier);
    if (set.collective) format_call_args(batch_[members_.front()], set);
    const bool flows = set.collective && members_.size() >= 2;
    const std::uint64_t id = flows ? flow_id(set.group_serial, set.call_serial) : 0;
    for (std::size_t k = 0; k < members_.size(); ++k) {
      const char *phase = !flows ? nullptr : k == 0 ? "s" : k + 1 == members_.size() ? "f" : "t";
      format_event(batch_[members_[k]], set, phase, id);
    }
  }
}

// The args every rank of one collective shares, formatted once for its set.
void TraceWriter::format_call_args(const TraceEvent &e, const Set &set) {
  call_args_.clear();
  call_args_.put(entry(collective_args_, e.collective));
  if (e.collective != BP_BARRIER) call_args_.put(entry(dtype_args_, e.dtype));
  if (collective_reduces(e.collective)) call_args_.put(entry(reduce_op_args_, e.reduce_op));
  call_args_.put(",\"count\":");
  call_args_.put_uint(e.count);
  if (set.group != nullptr) {
    call_args_.put(set.group->fragment);
  } else {
    call_args_.put(",\"group\":\"?\",\"group_serial\":");
    call_args_.put_uint(e.group_serial);
  }
  call_args_.put(",\"call_serial\":");
  call_args_.put_uint(e.call_serial);
  call_args_.put(",\"rank_count\":");
  call_args_.put_uint(e.rank_count);
  if (collective_has_root(e.collective)) {
    call_args_.put(",\"root\":");
    call_args_.put_uint(e.root);
  }
  call_args_.put((e.flags & BP_LAYER_CALL_ASYNC) ? ",\"async\":true" : ",\"async\":false");
}

// The digits of a nanosecond count, kept for the next event of the set,
// which usually has the same (the host times a collective once).
std::string_view TraceWriter::Digits::of(std::int64_t ns) {
  if (ns != value || length == 0) {
    value = ns;
    length = static_cast<std::size_t>(std::to_chars(text, text + sizeof text, ns).ptr - text);
  }
  return {text, length};
}

void TraceWriter::format_event(const TraceEvent &e, const Set &set, const char *flow_phase, std::uint64_t flow) {
  const bool collective = set.collective;
  const std::size_t mark = output_.size();
  const std::uint64_t tid = collective ? std::uint64_t{e.rank} : std::uint64_t{kBufferTidBase} + e.device;
  // The start's digits serve three times: "ts" (as microseconds), the
  // flow's "ts" and "start_ns".
  const std::string_view start_ns = start_digits_.of(e.start_ns), end_ns = end_digits_.of(e.end_ns);
  const auto put_start_ts = [&] {
    if (start_ns.size() > 3 && e.start_ns > 0) {
      output_.put(start_ns.substr(0, start_ns.size() - 3));
      output_.put('.');
      output_.put(start_ns.substr(start_ns.size() - 3));
    } else {
      output_.put_microseconds(e.start_ns);
    }
  };
  output_.put(collective ? entry(collective_heads_, e.collective) : entry(buffer_heads_, e.operation));
  put_start_ts();
  output_.put(",\"dur\":");
  output_.put_microseconds(e.end_ns - e.start_ns);
  output_.put(pid_tid_);
  output_.put_uint(tid);
  if (collective) {
    output_.put(call_args_.view());
    output_.put(",\"rank\":");
    output_.put_uint(e.rank);
    output_.put((e.flags & BP_LAYER_CALL_IN_PLACE) ? ",\"in_place\":true" : ",\"in_place\":false");
  } else {
    output_.put(entry(buffer_args_, e.operation));
    if (e.operation == BP_LAYER_BUFFER_WRITE || e.operation == BP_LAYER_BUFFER_READ) {
      output_.put(",\"offset\":");
      output_.put_uint(e.offset);
    }
  }
  output_.put(",\"bytes\":");
  output_.put_uint(e.bytes);
  output_.put(e.device < device_view_.size() ? std::string_view(device_view_[e.device]->fragment)
                                             : std::string_view(",\"device\":\"?\",\"plugin\":\"?\""));
  output_.put(entry(outcome_args_, e.code >= 0 ? static_cast<std::uint32_t>(e.code) : UINT32_MAX));
  if (e.code != BP_OK) {
    std::string message;
    if (e.message != 0) {
      std::lock_guard lock(names_mutex_);
      if (auto found = messages_.find(e.message); found != messages_.end()) {
        message = std::move(found->second);
        messages_.erase(found);
      }
    }
    output_.put(",\"message\":");
    output_.put_string(message);
  }
  output_.put(",\"start_ns\":");
  output_.put(start_ns);
  output_.put(",\"end_ns\":");
  output_.put(end_ns);
  output_.put("}}");
  if (flow_phase != nullptr) {
    output_.put(entry(flow_heads_, e.collective));
    output_.put(flow_phase);
    output_.put("\",\"id\":\"0x");
    output_.put_hex(flow);
    output_.put("\",\"ts\":");
    put_start_ts();
    output_.put(pid_tid_);
    output_.put_uint(tid);
    output_.put(",\"bp\":\"e\"}");
  }
  commit_record(mark, &e);
}

// Keeps the record(s) appended since `mark` when the file stays within
// max_bytes with them (and the longest tail); otherwise the file is full,
// and they and everything after are dropped, events counted.
void TraceWriter::commit_record(std::size_t mark, const TraceEvent *event) {
  if (!full_ && output_at_ + output_.size() + tail_reserve_ > options_.max_bytes) full_ = true;
  if (full_) {
    output_.truncate(mark);
    if (event != nullptr) {
      ++dropped_;
      last_dropped_ns_ = std::max(last_dropped_ns_, event->end_ns);
    }
    return;
  }
  if (output_.size() < kOutputChunk) return;
  std::string why;
  if (!flush_output(&why)) throw std::runtime_error(why);
}

bool TraceWriter::flush_output(std::string *error) {
  if (output_.empty()) return true;
  if (!write_at(output_at_, output_.view(), error)) return false;
  output_at_ += output_.size();
  output_.clear();
  return true;
}

bool TraceWriter::write_at(std::uint64_t position, std::string_view bytes, std::string *error) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t wrote = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(position + done));
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      *error = "writing '" + options_.file + "' failed: " + (wrote < 0 ? errno_text(errno) : "no byte written");
      return false;
    }
    done += static_cast<std::size_t>(wrote);
  }
  return true;
}

void TraceWriter::failed_write(const std::string &reason, std::size_t events) {
  lost_ += events;
  error_ = reason;
  // The thread names written with this batch are lost with it: name again.
  rank_devices_.clear();
  buffer_tid_named_.clear();
  plugin_support::log(services_, BP_LOG_ERROR, kCategory, "%s; %zu events lost (%llu so far)", reason.c_str(), events,
                      static_cast<unsigned long long>(lost_));
}

}  // namespace backplane::trace
