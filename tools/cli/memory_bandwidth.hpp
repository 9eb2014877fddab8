// What `backplane bench` measures CPU groups against: the bytes a
// collective reads and writes in memory by the cpu plugin's own account
// (plugins/cpu/README.md, "Collectives"), and the memory bandwidth of this
// machine, probed in the same run.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backplane/backplane.h"

namespace backplane::cli {

// Bytes read plus bytes written by one call of `collective` on `ranks`
// ranks with the call's `count` (a block of count x element_size bytes), as
// the cpu plugin moves them: every input element read once, every output
// element written once, nothing staged. `in_place` as the bench runs it
// (every rank that has both sides passes one buffer; for rooted collectives
// that is the root alone). The table is in memory_bandwidth.cpp.
uint64_t traffic_bytes(bp_collective collective, size_t ranks, size_t count, size_t element_size, bool in_place);

// The CPUs this process may run on (sched_getaffinity), as the cpu plugin
// counts them for its default thread count.
unsigned usable_cpus();

struct BandwidthProbe {
  double gbps = 0;       // bytes read + written per nanosecond, the median run
  double best_gbps = 0;  // the fastest run: on a busy machine far from the median
  unsigned threads = 0;
  size_t bytes = 0;      // bytes copied per run (the source buffer's size)
  unsigned runs = 0;     // timed runs, after one untimed
};

// memcpy of `bytes` (at least 64 MiB) between two buffers touched first,
// split across every CPU this process may run on (each thread copies its
// contiguous share), timed from when all threads start to when the last
// finishes; the median of `runs`. Counts 2 x bytes per run (read + written),
// as traffic_bytes() counts.
BandwidthProbe probe_memory_bandwidth(size_t bytes = size_t{64} << 20, unsigned runs = 9);

}  // namespace backplane::cli
