// The queue of _async requests and its thread, the waits on requests and
// comms, and the table's request functions (see async_queue.hpp).
#include "async_queue.hpp"

#include <pthread.h>
#include <sched.h>

#include <cinttypes>
#include <cstdio>

#include "futex.hpp"
#include "plugin_state.hpp"

namespace backplane::cpu {
namespace {

// A waiter's short look before it sleeps on the word. No yielding phase,
// and the queue's thread sleeps as soon as its queue is empty: what runs
// here is large (async_threshold_bytes), the pool's threads already hold
// every core then, and a thread that yields in a loop still takes its turn
// on one — measured, a queue thread spinning 50 us after each request made
// the blocking calls that followed up to twice as slow on 2 cores.
constexpr auto kWaitSpin = std::chrono::microseconds(2);

// report_error of the queue's services: the sink is the request that runs.
void record_error(bp_error_sink *sink, std::int32_t code, const char *message) {
  bp_plugin_request &request = *reinterpret_cast<bp_plugin_request *>(sink);
  request.status = code;
  std::snprintf(request.message, sizeof request.message, "%s", message != nullptr ? message : "");
}

const char *collective_name(std::uint32_t collective) {
  static const char *const names[BP_COLLECTIVE_COUNT] = {
      "all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter",
      "gather",     "scatter", "all_to_all", "barrier"};
  return collective < BP_COLLECTIVE_COUNT ? names[collective] : "collective";
}

// Nothing is lost if the system refuses.
void set_policy(int policy) noexcept {
  const sched_param none{};
  pthread_setschedparam(pthread_self(), policy, &none);
}

timespec to_timespec(Clock::duration duration) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(duration).count();
  return timespec{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
}

// The request's outcome, reported through the caller's sink when it failed.
std::int32_t outcome(const bp_plugin_state &state, const bp_plugin_request &request, bp_error_sink *sink) {
  if (request.status == BP_OK) return BP_OK;
  return fail(state.services, sink, request.status, "%s", request.message);
}

}  // namespace

void AsyncQueue::start(const bp_host_services *services) {
  if (started_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (started_.load(std::memory_order_relaxed)) return;
  services_ = *services;
  services_.struct_size = sizeof services_;
  services_.report_error = record_error;
  thread_ = std::thread([this] { main(); });
  pthread_setname_np(thread_.native_handle(), "bp-cpu-async");
  started_.store(true, std::memory_order_release);
}

void AsyncQueue::push(bp_plugin_request *request) noexcept {
  request->next = nullptr;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (tail_ != nullptr) {
      tail_->next = request;
    } else {
      head_ = request;
    }
    tail_ = request;
    wake = sleeping_;
  }
  if (wake) wake_.notify_one();
}

void AsyncQueue::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!thread_.joinable()) return;
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void AsyncQueue::main() noexcept {
  int policy = SCHED_OTHER;
  sched_param priority{};
  const bool switch_policy =
      pthread_getschedparam(pthread_self(), &policy, &priority) == 0 && policy == SCHED_OTHER;
  for (;;) {
    bp_plugin_request *request = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (head_ == nullptr && !stopping_) {
        // Asleep as SCHED_BATCH (the same weight, no privilege needed): a
        // thread that never preempts another on waking. As SCHED_OTHER,
        // push()'s wake-up often took the caller's core at once (the pool's
        // threads hold the others), and collective_start returned only when
        // the request was done: on 2 cores, the slowest tenth of 4 MiB-64 MiB
        // starts took the whole request (0.1-6 ms) instead of 5-30 us.
        // Running, it is SCHED_OTHER again, so that the requests themselves
        // are not slowed (always BATCH, 4 MiB all_reduces took twice as
        // long). Only for a thread that started as SCHED_OTHER: a real-time
        // policy inherited from the application is left alone.
        if (switch_policy) set_policy(SCHED_BATCH);
        while (head_ == nullptr && !stopping_) {
          sleeping_ = true;
          wake_.wait(lock);
          sleeping_ = false;
        }
        if (switch_policy) set_policy(SCHED_OTHER);
      }
      if (head_ == nullptr) return;  // stopping, and everything queued ran
      request = head_;
      head_ = request->next;
      if (head_ == nullptr) tail_ = nullptr;
    }
    run(*request);
  }
}

void AsyncQueue::run(bp_plugin_request &request) noexcept {
  std::int32_t status = BP_OK;
  if (!request.nothing_to_do) {
    status = run_request(&services_, reinterpret_cast<bp_error_sink *>(&request), request);
  }
  if (status != BP_OK && request.message[0] == '\0') {
    std::snprintf(request.message, sizeof request.message, "cpu %s: failed with code %d",
                  collective_name(request.args.collective), static_cast<int>(status));
  }
  request.status = status;
  std::atomic<std::uint32_t> &in_flight = request.comm->in_flight;
  // The request completes before its comm's count drops, so that an
  // in-order wait on the comm (a blocking call, comm_destroy) also sees
  // every event of it complete. The host may release the request as soon
  // as it is done; comm_destroy waits for the count, so the comm outlives
  // the decrement below. After each exchange, only the futex address is
  // used.
  std::atomic<std::uint32_t> *progress = &request.progress;
  if (progress->exchange(kRequestDone, std::memory_order_acq_rel) == kRequestWaited) futex_wake_all(progress);
  std::uint32_t count = in_flight.load(std::memory_order_relaxed);
  std::uint32_t next = 0;
  do {
    next = count - 1;
    if (next == kDrainWaiters) next = 0;  // the last one: clear the waiters' bit too
  } while (!in_flight.compare_exchange_weak(count, next, std::memory_order_acq_rel, std::memory_order_relaxed));
  if (count == (kDrainWaiters | 1)) futex_wake_all(&in_flight);
}

bool wait_for_request(bp_plugin_request &request, std::int64_t timeout_ns) noexcept {
  std::atomic<std::uint32_t> &progress = request.progress;
  const auto done = [&progress] { return progress.load(std::memory_order_acquire) == kRequestDone; };
  if (done()) return true;
  if (timeout_ns == 0) return false;
  const Clock::time_point start = Clock::now();
  const Clock::duration limit = std::chrono::nanoseconds(timeout_ns);
  if ((timeout_ns < 0 || limit > kWaitSpin) && spin_then_yield(done, kWaitSpin, Clock::duration::zero())) {
    return true;
  }
  for (;;) {
    std::uint32_t seen = progress.load(std::memory_order_acquire);
    if (seen == kRequestDone) return true;
    if (seen == kRequestPending &&
        !progress.compare_exchange_weak(seen, kRequestWaited, std::memory_order_acquire, std::memory_order_acquire)) {
      continue;  // it changed: done, or a spurious failure
    }
    if (timeout_ns < 0) {
      futex_wait(&progress, kRequestWaited);
    } else {
      const Clock::duration left = limit - (Clock::now() - start);
      if (left <= Clock::duration::zero()) return done();
      const timespec relative = to_timespec(left);
      futex_wait(&progress, kRequestWaited, &relative);
    }
  }
}

void wait_for_comm(std::atomic<std::uint32_t> &in_flight) noexcept {
  const auto drained = [&in_flight] { return in_flight.load(std::memory_order_acquire) == 0; };
  if (drained() || spin_then_yield(drained, kWaitSpin, Clock::duration::zero())) return;
  for (;;) {
    std::uint32_t seen = in_flight.load(std::memory_order_acquire);
    if (seen == 0) return;
    if ((seen & kDrainWaiters) == 0) {
      if (!in_flight.compare_exchange_weak(seen, seen | kDrainWaiters, std::memory_order_acquire,
                                           std::memory_order_acquire)) {
        continue;
      }
      seen |= kDrainWaiters;
    }
    futex_wait(&in_flight, seen);
  }
}

std::int32_t Backend::request_test(bp_plugin_state &state, bp_plugin_request &request, bool &done,
                                   bp_error_sink *sink) {
  if (request.progress.load(std::memory_order_acquire) != kRequestDone) {
    done = false;
    return BP_OK;
  }
  if (const std::int32_t status = outcome(state, request, sink); status != BP_OK) return status;
  done = true;
  return BP_OK;
}

std::int32_t Backend::request_wait(bp_plugin_state &state, bp_plugin_request &request, std::int64_t timeout_ns,
                                   bp_error_sink *sink) {
  if (!wait_for_request(request, timeout_ns)) {
    return fail(state.services, sink, BP_TIMEOUT,
                "cpu request_wait: %s of %zu elements still in flight after %" PRId64 " ns",
                collective_name(request.args.collective), request.args.count, timeout_ns);
  }
  return outcome(state, request, sink);
}

void Backend::request_release(bp_plugin_state &state, bp_plugin_request *request) {
  if (request->progress.load(std::memory_order_acquire) != kRequestDone) {
    // An older host releases without waiting: finish it first, so that
    // nothing touches the group's buffers once this returns.
    log(state.services, BP_LOG_DEBUG, "request_release: %s still in flight; waiting for it",
        collective_name(request->args.collective));
    wait_for_request(*request, -1);
  }
  delete request;
}

}  // namespace backplane::cpu
