// The waiting primitives the cpu plugin's threads share (the pool's hand-off,
// the async submitter, request and queue waits): a futex on an atomic word
// used in place, a pause instruction, and a spin-then-yield loop to try
// before sleeping.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <thread>

namespace backplane::cpu {

using Clock = std::chrono::steady_clock;

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t) &&
                  std::atomic<std::uint32_t>::is_always_lock_free,
              "futex words are atomics used in place");

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Sleeps while *word holds `expected`, at most `timeout` when given.
// Returns at once (EAGAIN) when *word no longer holds `expected`; callers
// re-check their condition either way (EINTR, spurious wake-ups, timeout).
inline void futex_wait(std::atomic<std::uint32_t> *word, std::uint32_t expected,
                       const timespec *timeout = nullptr) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t *>(word), FUTEX_WAIT_PRIVATE, expected, timeout, nullptr, 0);
}

// Wakes every thread asleep on `word`. Only the address is used: it is safe
// to call after the word's memory may have been freed by a woken thread
// (at worst another futex there sees a spurious wake-up, which every waiter
// tolerates).
inline void futex_wake_all(std::atomic<std::uint32_t> *word) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t *>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

// Spins for `spin`, then yields until `spin + yield` has passed, checking
// `ready` throughout. True once ready; false when the time ran out (the
// caller then sleeps).
template <class Ready>
bool spin_then_yield(Ready &&ready, Clock::duration spin, Clock::duration yield) noexcept {
  const Clock::time_point start = Clock::now();
  for (unsigned i = 1;; ++i) {
    if (ready()) return true;
    cpu_relax();
    if (i % 64 == 0 && Clock::now() - start > spin) break;
  }
  while (Clock::now() - start < spin + yield) {
    if (ready()) return true;
    std::this_thread::yield();
  }
  return ready();
}

}  // namespace backplane::cpu
