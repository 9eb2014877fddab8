// The cpu plugin's handles (state, buffer, comm, request) and the bodies of
// its table (Backend). Everything here may throw; the trampolines of
// plugin_support::function_table() are the ABI boundary that stops it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backplane/plugin.h"
#include "plugin_support/buffer_base.hpp"
#include "plugin_support/host_link.hpp"
#include "plugin_support/state_base.hpp"
#include "async_queue.hpp"
#include "thread_pool.hpp"

// One per bp_plugin_entry call, so two hosts in one process never share one.
// StateBase's mutex guards the fields below; collectives never take it.
// Buffers and comms alive (its live_objects) name devices of the current
// count, so configure is refused while any exists.
struct bp_plugin_state : backplane::plugin_support::StateBase {
  std::uint32_t device_count = 8;
  // Threads one collective may use, the caller's included; the pool has one
  // worker fewer. Set by configure ("threads"), default: the CPUs this
  // process may run on.
  std::uint32_t threads = 1;
  // Calls moving fewer bytes (read + written) than this run on the calling
  // thread alone ("parallel_threshold_bytes").
  std::size_t parallel_threshold_bytes = 0;
  // Calls touching more distinct bytes than this write with streaming
  // stores ("streaming_threshold_bytes").
  std::size_t streaming_threshold_bytes = 0;
  // _async calls moving fewer bytes than this complete inside
  // collective_start ("async_threshold_bytes").
  std::size_t async_threshold_bytes = 0;
  // Created with the first comm, when threads > 1; replaced only while no
  // comm exists (configure), so a comm's pointer to it stays valid.
  std::unique_ptr<backplane::cpu::ThreadPool> pool;
  // Runs the _async requests of every comm, in start order, on a thread of
  // its own started with the first. Declared after the pool, so that it is
  // stopped (its queue run to the end) before the pool goes.
  backplane::cpu::AsyncQueue async_queue;
  // Device names and descriptions handed to the host, keyed by
  // (device_count, device). The ABI keeps them valid until destroy, so
  // entries are only ever added (std::map never moves its nodes).
  struct DeviceStrings {
    std::string name;
    std::string description;
  };
  std::map<std::pair<std::uint32_t, std::uint32_t>, DeviceStrings> device_strings;

  // Facts about the host machine, read once at entry.
  std::string cpu_model;
  long hardware_threads = 0;
  std::uint32_t available_cpus = 1;  // sched_getaffinity: CPUs this process may use
  std::size_t last_level_cache_bytes = 0;
  std::uint64_t memory_bytes = 0;
};

// Host memory on one logical device, owned (buffer_create, freed with the
// buffer) or the caller's (buffer_wrap_host). `data` is NULL only when
// `bytes` is 0.
struct bp_plugin_buffer : backplane::plugin_support::BufferBase {
  std::byte *data = nullptr;
  bool owned = false;

  bp_plugin_buffer() = default;
  bp_plugin_buffer(const bp_plugin_buffer &) = delete;
  bp_plugin_buffer &operator=(const bp_plugin_buffer &) = delete;
  ~bp_plugin_buffer() {
    if (owned) std::free(data);
  }
};

// The plugin's side of a group: its ranks and the per-call scratch, sized
// once here so that no collective call allocates.
struct bp_plugin_comm {
  std::vector<std::uint32_t> devices;       // rank r's device
  std::vector<const std::byte *> inputs;    // one per rank, filled per call
  std::vector<std::byte *> outputs;         // one per rank, filled per call
  // The state's pool (NULL: single-threaded) and thresholds, as configured
  // when the comm was created.
  backplane::cpu::ThreadPool *pool = nullptr;
  std::size_t threads = 1;
  std::size_t parallel_threshold_bytes = 0;
  std::size_t streaming_threshold_bytes = 0;
  std::size_t async_threshold_bytes = 0;
  // Requests of this comm started and not yet run to the end, plus
  // kDrainWaiters while a thread sleeps on the word for it to reach 0 (a
  // futex word; async_queue.hpp). Read once by every call: while it is 0,
  // nothing of the comm is in flight, and its scratch arrays above are the
  // caller's.
  std::atomic<std::uint32_t> in_flight{0};
};

// A started _async collective: its own copy of the arguments and of the
// send/recv handle arrays (borrowed by collective_start for the call only),
// queued on the state's AsyncQueue until it ran. The host owns it from
// collective_start to request_release.
struct bp_plugin_request {
  bp_plugin_comm *comm = nullptr;
  bp_collective_args args{};                // send and recv point into `buffers`
  std::vector<bp_plugin_buffer *> buffers;  // send[0..n), then recv[0..n)
  std::size_t block = 0;                    // bytes of `count` elements
  std::size_t total = 0;                    // bytes of `count * n` elements
  bool nothing_to_do = false;               // barrier or count 0: completes in turn, touches nothing
  bp_plugin_request *next = nullptr;        // the queue's link
  // kRequestPending, kRequestWaited (a thread sleeps on the word) or
  // kRequestDone (a futex word, async_queue.hpp). Once kRequestDone, the
  // queue's thread touches nothing of the request any more.
  std::atomic<std::uint32_t> progress{0};
  // The outcome, written before progress becomes kRequestDone.
  std::int32_t status = BP_OK;
  char message[512] = {};
};

namespace backplane::cpu {

inline constexpr std::uint32_t kDefaultDeviceCount = 8;
inline constexpr std::uint32_t kMaxDeviceCount = 1024;
inline constexpr std::uint32_t kMaxThreads = 1024;
// Measured on the 2-core development machine (README, "Requests"): below
// this many bytes read + written (about 100 us of work), an _async call
// completes inside collective_start: handed to the queue's thread, start
// and wait together cost 10-20 us more than the call itself (50-200% of
// calls of 1-8 MiB, 10% at 16 MiB, 1-6% at 64 MiB).
inline constexpr std::size_t kDefaultAsyncThresholdBytes = std::size_t{16} << 20;
// Measured on the 2-core development machine (README, "Threads"): below
// this many bytes read + written, handing half a call to a second thread
// (about 1 us) costs more than it saves.
inline constexpr std::size_t kDefaultParallelThresholdBytes = std::size_t{128} << 10;
// Streaming stores pay off once a call's data no longer fits in the last
// level cache; without a cache size from the system, assume this one.
inline constexpr std::size_t kFallbackLastLevelCacheBytes = std::size_t{32} << 20;
inline constexpr std::size_t kMaxThresholdBytes = std::size_t{1} << 62;

// The streaming threshold for a cache of `cache_bytes`.
inline constexpr std::size_t default_streaming_threshold(std::size_t cache_bytes) noexcept {
  return cache_bytes / 2;
}

// Talking back to the host (plugin_support/host_link.hpp): fail() reports
// `code` with a printf-formatted one-line message and returns the code, for
// `return fail(...)`; log() writes a line in the plugin's category
// (host_services.cpp). Neither allocates.
using plugin_support::fail;
void log(const bp_host_services *services, std::int32_t level, const char *format, ...) noexcept
    __attribute__((format(printf, 3, 4)));

// The state with its host facts filled in (devices.cpp).
std::unique_ptr<bp_plugin_state> make_state(const bp_host_services *services);

// Runs a queued request on the calling thread (the queue's), reporting a
// failure through `services` and `sink`; the status (collectives.cpp).
std::int32_t run_request(const bp_host_services *services, bp_error_sink *sink,
                         bp_plugin_request &request) noexcept;

// The bodies of the table, for plugin_support::function_table(), which
// says what each may assume.
struct Backend {
  using State = bp_plugin_state;
  using Buffer = bp_plugin_buffer;
  static constexpr const char *kName = "cpu";
  static constexpr const char *kKind = "cpu";

  static std::size_t devices_now(const bp_plugin_state &state) { return state.device_count; }
  // Requests still queued run to their end before the threads stop.
  static void finish_work(bp_plugin_state &state) { state.async_queue.stop(); }

  // options.cpp
  static std::int32_t configure(bp_plugin_state &state, const char *options_json, bp_error_sink *sink);

  // devices.cpp
  static std::int32_t device_info(bp_plugin_state &state, std::uint32_t device, bp_plugin_device_info &info,
                                  bp_error_sink *sink);

  // buffers.cpp
  static std::int32_t buffer_allocate(bp_plugin_state &state, bp_plugin_buffer &buffer, bp_error_sink *sink);
  static std::int32_t buffer_wrap_host(bp_plugin_state &state, bp_plugin_buffer &buffer, void *memory,
                                       bp_error_sink *sink);
  static std::int32_t buffer_write(bp_plugin_state &state, bp_plugin_buffer &buffer, std::size_t offset,
                                   const void *source, std::size_t bytes, bp_error_sink *sink);
  static std::int32_t buffer_read(bp_plugin_state &state, const bp_plugin_buffer &buffer, std::size_t offset,
                                  void *destination, std::size_t bytes, bp_error_sink *sink);
  static std::int32_t buffer_host_memory(bp_plugin_state &state, const bp_plugin_buffer &buffer, void *&memory,
                                         bp_error_sink *sink);

  // collectives.cpp
  static std::int32_t comm_create(bp_plugin_state &state, std::span<const std::uint32_t> devices,
                                  bp_plugin_comm **out, bp_error_sink *sink);
  static void comm_destroy(bp_plugin_state &state, bp_plugin_comm *comm);
  static std::int32_t collective_start(bp_plugin_state &state, bp_plugin_comm &comm, const bp_collective_args &a,
                                       bp_plugin_request **out, bp_error_sink *sink);

  // async_queue.cpp
  static std::int32_t request_test(bp_plugin_state &state, bp_plugin_request &request, bool &done,
                                   bp_error_sink *sink);
  static std::int32_t request_wait(bp_plugin_state &state, bp_plugin_request &request, std::int64_t timeout_ns,
                                   bp_error_sink *sink);
  static void request_release(bp_plugin_state &state, bp_plugin_request *request);

  // No kind_info: the cpu kind always has its devices. No comm_info: every
  // rank shares the process's memory.
};

}  // namespace backplane::cpu
