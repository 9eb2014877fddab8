// The cpu plugin's traffic per collective, and a memory bandwidth probe to
// hold it against; see memory_bandwidth.hpp.
#include "memory_bandwidth.hpp"

#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "cli.hpp"

namespace backplane::cli {

// Bytes read and written per call, n ranks, B = count x element size (one
// block; the size column S is B, or n·B for the collectives whose largest
// buffer holds a block per rank). The same accounting as the cpu plugin's
// README: each input element is read once and each output element written
// once (reductions fold all inputs in registers; copies read a block once
// and store it to every destination), and in place a rank's own block is
// not copied onto itself.
//
//   collective      out of place          in place (as the bench runs it)
//                   read      written     read       written
//   all_reduce      n·B       n·B         n·B        n·B
//   reduce          n·B       B           n·B        B          (root in place)
//   reduce_scatter  n²·B      n·B         n²·B       n·B        (n·S read, S written)
//   broadcast       B         n·B         B          (n-1)·B    (root in place)
//   all_gather      n·B       n²·B        n·B        n(n-1)·B   (S read, n·S written)
//   gather          n·B       n·B         (n-1)·B    (n-1)·B    (root in place)
//   scatter         n·B       n·B         (n-1)·B    (n-1)·B    (root in place)
//   all_to_all      n²·B      n²·B        n(n-1)·B   n(n-1)·B
//   barrier         0         0
//
// What it leaves out: the read-for-ownership of an ordinary store (the
// plugin writes large calls with streaming stores, which have none), and
// caches — a call that fits in cache moves less than this through memory,
// so its %peak can pass 100.
uint64_t traffic_bytes(bp_collective collective, size_t ranks, size_t count, size_t element_size, bool in_place) {
  const uint64_t n = ranks, b = uint64_t{count} * element_size;
  uint64_t read = 0, written = 0;
  switch (collective) {
    case BP_ALL_REDUCE:
      read = written = n * b;
      break;
    case BP_REDUCE:
      read = n * b;
      written = b;
      break;
    case BP_REDUCE_SCATTER:
      read = n * n * b;
      written = n * b;
      break;
    case BP_BROADCAST:
      read = b;
      written = (in_place ? n - 1 : n) * b;
      break;
    case BP_ALL_GATHER:
      read = n * b;
      written = n * (in_place ? n - 1 : n) * b;
      break;
    case BP_GATHER:
    case BP_SCATTER:
      read = written = (in_place ? n - 1 : n) * b;
      break;
    case BP_ALL_TO_ALL:
      read = written = n * (in_place ? n - 1 : n) * b;
      break;
    case BP_BARRIER:
    case BP_COLLECTIVE_MAX_ENUM:
      break;
  }
  return read + written;
}

namespace {

// Memory for the probe: 2 MiB aligned and advised to use huge pages, as
// the cpu plugin's large buffers are, so the probe and the collectives it
// is compared with pay the same for their TLB.
struct HugeMemory {
  explicit HugeMemory(size_t bytes) {
    constexpr size_t kHuge = size_t{2} << 20;
    size = (bytes + kHuge - 1) / kHuge * kHuge;
    data = static_cast<std::byte *>(std::aligned_alloc(kHuge, size));
    if (!data) throw std::bad_alloc();
    madvise(data, size, MADV_HUGEPAGE);  // a hint: without huge pages it still works
  }
  ~HugeMemory() { std::free(data); }
  HugeMemory(const HugeMemory &) = delete;
  HugeMemory &operator=(const HugeMemory &) = delete;
  std::byte *data = nullptr;
  size_t size = 0;
};

}  // namespace

unsigned usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return static_cast<unsigned>(CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

BandwidthProbe probe_memory_bandwidth(size_t bytes, unsigned runs) {
  BandwidthProbe probe;
  probe.threads = usable_cpus();
  probe.bytes = std::max(bytes, size_t{64} << 20);
  probe.runs = std::max(runs, 1u);
  HugeMemory source(probe.bytes), destination(probe.bytes);
  // Touched first: no page fault inside a timed copy.
  std::memset(source.data, 0x5A, probe.bytes);
  std::memset(destination.data, 0, probe.bytes);

  // Thread t copies its share, cut at 4 KiB so that every share starts
  // page-aligned. All threads start together (the first barrier) and the
  // run ends when the last one is done (the second); the calling thread is
  // thread 0 and reads the clock at both.
  const unsigned threads = probe.threads;
  const size_t pages = probe.bytes / 4096;
  auto share = [&](unsigned t) {
    const size_t from = pages * t / threads * 4096;
    const size_t to = t + 1 == threads ? probe.bytes : pages * (t + 1) / threads * 4096;
    std::memcpy(destination.data + from, source.data + from, to - from);
  };
  const unsigned total_runs = probe.runs + 1;  // the first untimed
  std::barrier sync(static_cast<std::ptrdiff_t>(threads));
  std::vector<std::jthread> workers;
  for (unsigned t = 1; t < threads; ++t)
    workers.emplace_back([&, t] {
      for (unsigned run = 0; run < total_runs; ++run) {
        sync.arrive_and_wait();
        share(t);
        sync.arrive_and_wait();
      }
    });
  std::vector<double> gbps;
  for (unsigned run = 0; run < total_runs; ++run) {
    sync.arrive_and_wait();
    const auto start = std::chrono::steady_clock::now();
    share(0);
    sync.arrive_and_wait();
    const auto stop = std::chrono::steady_clock::now();
    const double nanos = std::chrono::duration<double, std::nano>(stop - start).count();
    if (run > 0 && nanos > 0) gbps.push_back(2.0 * static_cast<double>(probe.bytes) / nanos);
  }
  workers.clear();  // joins
  probe.best_gbps = gbps.empty() ? 0 : *std::max_element(gbps.begin(), gbps.end());
  probe.gbps = median(std::move(gbps));
  return probe;
}

}  // namespace backplane::cli
