// The cpu plugin's persistent thread pool: one per plugin state, created with
// the first group, stopped by destroy. A collective large enough to be worth
// it is cut into chunks that the calling thread and the pool's workers take
// in turn; the calling thread always takes part, so the pool has one worker
// fewer than the threads a call may use.
//
// The hand-off takes no lock, allocates nothing and makes no system call
// while the workers are awake: the job lives on the caller's stack, a
// generation counter announces it, and workers join through an atomic
// gate. The chunks are split into one contiguous segment per thread, which
// that thread works through first (so each thread streams through its own
// part of memory, and the same part on every call: what it wrote last time
// may still be in its own cache), then it takes what is left of the others'. Idle workers spin briefly, then yield, then sleep on a futex (a
// wake-up costs a syscall only then). The caller never waits for a worker
// that has not joined: it closes the gate when the chunks run out and waits
// only for workers still inside one — so a worker descheduled by another
// busy process costs at most one chunk, never a collapse.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace backplane::cpu {

// `tasks` independent pieces of work of `units` units each (elements or
// bytes), processed in chunks of at most `chunk` units. run(context, task,
// begin, end) does units [begin, end) of one task; chunks of one task never
// overlap, and may run on any thread in any order.
struct ParallelJob {
  void (*run)(const void *context, std::size_t task, std::size_t begin, std::size_t end) noexcept;
  const void *context;
  std::size_t tasks;
  std::size_t units;
  std::size_t chunk;
};

// Runs every task of `job` on the calling thread, whole.
void run_inline(const ParallelJob &job) noexcept;

class ThreadPool {
 public:
  // Starts `workers` threads (>= 1). Throws std::system_error when the
  // system refuses a thread (the threads already started are stopped).
  explicit ThreadPool(std::size_t workers);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  std::size_t workers() const noexcept { return threads_.size(); }

  // Runs `job` on the calling thread and whichever workers join, and
  // returns when every chunk is done and no worker touches `job` any more.
  // Groups may run collectives from several threads at once: the pool serves
  // one call at a time, and a call that finds it busy runs inline (the other
  // call's threads already occupy the cores).
  void run(const ParallelJob &job) noexcept;

 private:
  // Chunks of one thread's share: [begin, end), `next` counts those taken.
  struct alignas(64) Segment {
    std::atomic<std::size_t> next{0};
    std::size_t begin = 0;
    std::size_t end = 0;
  };

  void stop() noexcept;
  void worker_main(std::size_t self) noexcept;
  void work(const ParallelJob &job, std::size_t self) noexcept;
  bool try_join() noexcept;
  void leave() noexcept;
  void wait_for_job(std::uint32_t seen) noexcept;
  void wait_for_participants() noexcept;

  // Set while a call owns the pool.
  alignas(64) std::atomic<bool> busy_{false};
  // Bumped once per job (and at stop): workers wait on it (a futex word).
  alignas(64) std::atomic<std::uint32_t> generation_{0};
  std::atomic<std::uint32_t> sleepers_{0};  // workers asleep on generation_
  // kGateOpen while the current job admits workers, plus the number of
  // workers inside it (a futex word for the closing caller).
  alignas(64) std::atomic<std::uint32_t> gate_{0};
  std::atomic<std::uint32_t> caller_sleeping_{0};
  // One per thread (0: the caller, w + 1: worker w). Written by the caller
  // before it opens the gate, read by workers that got in: the gate orders
  // them.
  std::unique_ptr<Segment[]> segments_;
  std::size_t segment_count_ = 0;
  alignas(64) const ParallelJob *job_ = nullptr;
  std::atomic<bool> stop_{false};  // set before the last generation bump
  std::vector<std::thread> threads_;
};

}  // namespace backplane::cpu
