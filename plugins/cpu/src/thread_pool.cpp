// The persistent thread pool (see thread_pool.hpp for the protocol).
#include "thread_pool.hpp"

#include "futex.hpp"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <system_error>

namespace backplane::cpu {
namespace {

constexpr std::uint32_t kGateOpen = 0x80000000u;

// How long waits spin (pause instruction) and then yield before sleeping on
// the futex. A hand-off to a spinning thread costs about 1 us here, one to a
// sleeping thread about 10 us, so workers stay ready for a while after each
// job, but mostly by yielding: when other processes hold the other core, a
// worker may share a core with the very caller it would help, and a
// spinning worker would then take that core from it.
constexpr auto kWorkerSpin = std::chrono::microseconds(10);
constexpr auto kWorkerYield = std::chrono::microseconds(200);
constexpr auto kCallerSpin = std::chrono::microseconds(20);
constexpr auto kCallerYield = std::chrono::microseconds(50);

}  // namespace

void run_inline(const ParallelJob &job) noexcept {
  if (job.units == 0) return;
  for (std::size_t t = 0; t < job.tasks; ++t) job.run(job.context, t, 0, job.units);
}

ThreadPool::ThreadPool(std::size_t workers)
    : segments_(std::make_unique<Segment[]>(workers + 1)), segment_count_(workers + 1) {
  threads_.reserve(workers);
  try {
    for (std::size_t w = 0; w < workers; ++w) {
      threads_.emplace_back([this, w] { worker_main(w + 1); });
      pthread_setname_np(threads_.back().native_handle(), "bp-cpu-pool");
    }
  } catch (...) {
    stop();
    throw;
  }
}

ThreadPool::~ThreadPool() { stop(); }

void ThreadPool::stop() noexcept {
  if (threads_.empty()) return;
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(&generation_);
  for (std::thread &thread : threads_) thread.join();
  threads_.clear();
}

void ThreadPool::run(const ParallelJob &job) noexcept {
  if (job.tasks == 0 || job.units == 0) return;
  if (job.chunk == 0 || busy_.load(std::memory_order_relaxed) || busy_.exchange(true, std::memory_order_acquire)) {
    run_inline(job);
    return;
  }
  job_ = &job;
  const std::size_t chunks = job.tasks * ((job.units + job.chunk - 1) / job.chunk);
  for (std::size_t s = 0; s < segment_count_; ++s) {
    segments_[s].begin = chunks * s / segment_count_;
    segments_[s].end = chunks * (s + 1) / segment_count_;
    segments_[s].next.store(0, std::memory_order_relaxed);
  }
  gate_.store(kGateOpen, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  // The only system call of a hand-off, and only when a worker sleeps.
  if (sleepers_.load(std::memory_order_seq_cst) != 0) futex_wake_all(&generation_);

  work(job, 0);

  // No worker joins after this; wait only for those inside a chunk.
  const std::uint32_t inside = gate_.fetch_and(~kGateOpen, std::memory_order_acq_rel) & ~kGateOpen;
  if (inside != 0) wait_for_participants();
  busy_.store(false, std::memory_order_release);
}

void ThreadPool::work(const ParallelJob &job, std::size_t self) noexcept {
  // Chunks go range-major: consecutive chunks cover the same units of
  // different tasks, so a source several tasks share (all_gather's blocks)
  // is still in cache when the next task reads it. This thread's own
  // segment first, then whatever the others have not taken yet.
  for (std::size_t k = 0; k < segment_count_; ++k) {
    Segment &segment = segments_[(self + k) % segment_count_];
    const std::size_t length = segment.end - segment.begin;
    for (;;) {
      const std::size_t i = segment.next.fetch_add(1, std::memory_order_relaxed);
      if (i >= length) break;
      const std::size_t c = segment.begin + i;
      const std::size_t range = c / job.tasks;
      const std::size_t task = c % job.tasks;
      const std::size_t begin = range * job.chunk;
      job.run(job.context, task, begin, std::min(job.units, begin + job.chunk));
    }
  }
}

bool ThreadPool::try_join() noexcept {
  std::uint32_t gate = gate_.load(std::memory_order_relaxed);
  while ((gate & kGateOpen) != 0) {
    if (gate_.compare_exchange_weak(gate, gate + 1, std::memory_order_acquire, std::memory_order_relaxed)) {
      return true;
    }
  }
  return false;
}

void ThreadPool::leave() noexcept {
  // Releases this worker's writes to the caller. Streaming stores were
  // drained (sfence) by the kernel that made them.
  const std::uint32_t before = gate_.fetch_sub(1, std::memory_order_seq_cst);
  if (before == 1 && caller_sleeping_.load(std::memory_order_seq_cst) != 0) futex_wake_all(&gate_);
}

void ThreadPool::wait_for_participants() noexcept {
  if (spin_then_yield([this] { return gate_.load(std::memory_order_acquire) == 0; }, kCallerSpin, kCallerYield)) {
    return;
  }
  caller_sleeping_.store(1, std::memory_order_seq_cst);
  for (std::uint32_t gate; (gate = gate_.load(std::memory_order_seq_cst)) != 0;) futex_wait(&gate_, gate);
  caller_sleeping_.store(0, std::memory_order_relaxed);
}

void ThreadPool::wait_for_job(std::uint32_t seen) noexcept {
  const auto changed = [this, seen] { return generation_.load(std::memory_order_acquire) != seen; };
  if (spin_then_yield(changed, kWorkerSpin, kWorkerYield)) return;
  while (!changed()) {
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    if (generation_.load(std::memory_order_seq_cst) == seen) futex_wait(&generation_, seen);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }
}

void ThreadPool::worker_main(std::size_t self) noexcept {
  // Generation 0 is the pool's start: no job was announced before it.
  std::uint32_t seen = 0;
  for (;;) {
    wait_for_job(seen);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_relaxed)) return;
    if (try_join()) {
      work(*job_, self);
      leave();
    }
  }
}

}  // namespace backplane::cpu
