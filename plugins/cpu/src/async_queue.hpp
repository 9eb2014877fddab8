// The cpu plugin's asynchrony: one thread per plugin state that runs the
// _async requests of all its comms in start order, and the waits on them.
//
// A request large enough to be worth it (async_threshold_bytes) is queued
// here by collective_start, which returns at once; the queue's thread takes
// requests first in, first out and runs each as the ThreadPool's caller, so
// the thread that started it goes on. One FIFO for the whole state keeps the
// in-flight contract (plugin.h, collective_start) trivially: requests of one
// comm complete in start order, and each one's stores are complete before
// the next reads anything.
//
// Waiting never spins for long: a spin of 2 us, then a futex on the word
// that changes (a request's `progress`, a comm's `in_flight`); the queue's
// thread sleeps on a condition variable whenever its queue is empty.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "backplane/plugin.h"

namespace backplane::cpu {

// bp_plugin_request::progress
inline constexpr std::uint32_t kRequestPending = 0;
inline constexpr std::uint32_t kRequestWaited = 1;  // pending, and a thread sleeps on the word
inline constexpr std::uint32_t kRequestDone = 2;
// The bit of bp_plugin_comm::in_flight that says a thread sleeps on it.
inline constexpr std::uint32_t kDrainWaiters = 0x80000000u;

class AsyncQueue {
 public:
  AsyncQueue() = default;
  ~AsyncQueue() { stop(); }
  AsyncQueue(const AsyncQueue &) = delete;
  AsyncQueue &operator=(const AsyncQueue &) = delete;

  // Starts the thread unless it runs already (one atomic load then).
  // `services` are the host's: the queue reports run-time failures of a
  // request into the request itself, and logs through them. Throws
  // std::system_error when the system refuses the thread.
  void start(const bp_host_services *services);
  // Appends `request` (start() succeeded before). The caller has counted it
  // in its comm's in_flight already.
  void push(bp_plugin_request *request) noexcept;
  // Runs every request still queued to its end, then stops the thread.
  void stop() noexcept;

 private:
  void main() noexcept;
  void run(bp_plugin_request &request) noexcept;

  std::atomic<bool> started_{false};
  std::mutex mutex_;  // guards what follows, and starting the thread
  std::condition_variable wake_;
  bp_plugin_request *head_ = nullptr;
  bp_plugin_request *tail_ = nullptr;
  bool sleeping_ = false;  // the thread waits on wake_
  bool stopping_ = false;
  // The host's services with report_error writing into the request whose
  // address is passed as the sink (errors of a request that runs here are
  // reported to the host later, by the call that sees it complete).
  bp_host_services services_{};
  std::thread thread_;
};

// Waits until `request` ran to its end: true then; false when timeout_ns
// passed first (0: only look; negative: no limit).
bool wait_for_request(bp_plugin_request &request, std::int64_t timeout_ns) noexcept;

// Waits until a comm's in_flight word reaches 0: nothing of the comm is
// queued or running any more, and its effects are visible to the caller.
void wait_for_comm(std::atomic<std::uint32_t> &in_flight) noexcept;

}  // namespace backplane::cpu
