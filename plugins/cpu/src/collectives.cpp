// Communicators and the nine collectives of the cpu plugin. Every rank lives
// in this process, so one call drives all of them: on the calling thread
// alone for small calls, split into chunks across the state's thread pool
// above parallel_threshold_bytes. A blocking call (BP_COLLECTIVE_CALLER_WAITS,
// or any call of a 1.0/1.1 host) and a small _async one complete before
// collective_start returns; nothing on their way allocates, locks or makes
// a system call (the pool's hand-off included, while its workers are awake),
// and one atomic load tells them the comm has no request in flight. A larger
// _async call is checked here and queued (async_queue.hpp), and its request
// runs the same code on the queue's thread.
//
// Every collective is one pass of the one kernel (reduce_kernels.hpp):
// reductions read each input once and write each output once; data
// movement is the same kernel with one input (a u8 "sum" of one rank),
// which reads a block once and writes it to every destination from
// registers. Cost, with n ranks and B = count * element size bytes per
// block (bytes read + written):
//   all_reduce      n*B read, n*B written
//   reduce          n*B read, B written
//   reduce_scatter  n*n*B read, n*B written (n reductions of one block)
//   broadcast       B read, n*B written
//   all_gather      n*B read, n*n*B written
//   gather, scatter n*B read, n*B written
//   all_to_all      n*n*B read, n*n*B written; in place: block pairs
//                   swapped through an L1-sized bounce buffer
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <system_error>

#include "plugin_state.hpp"
#include "reduce_kernels.hpp"

namespace backplane::cpu {
namespace {

const char *collective_name(std::uint32_t collective) {
  static const char *const names[BP_COLLECTIVE_COUNT] = {
      "all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter",
      "gather",     "scatter", "all_to_all", "barrier"};
  return collective < BP_COLLECTIVE_COUNT ? names[collective] : "unknown collective";
}

const char *dtype_name(std::uint32_t dtype) {
  static const char *const names[BP_DTYPE_COUNT] = {"f16", "bf16", "f32", "f64", "i8",
                                                    "u8",  "i32",  "u32", "i64", "u64"};
  return dtype < BP_DTYPE_COUNT ? names[dtype] : "unknown dtype";
}

bool reduces(std::uint32_t collective) {
  return collective == BP_ALL_REDUCE || collective == BP_REDUCE || collective == BP_REDUCE_SCATTER;
}

bool has_root(std::uint32_t collective) {
  return collective == BP_REDUCE || collective == BP_BROADCAST || collective == BP_GATHER ||
         collective == BP_SCATTER;
}

// Bytes of memory traffic (read + written) one chunk of a parallel job
// aims at: 20-60 us of one thread's work. Measured here (2 threads, all_reduce
// of 2 x 8 MiB): chunks of 256 KiB ran 25% slower than 2-4 MiB ones (each
// chunk ends with an sfence and restarts the streams), while a chunk is still
// short enough that a thread stalled by another process holds up little.
constexpr std::size_t kChunkTrafficBytes = std::size_t{2} << 20;
// Chunks start at multiples of this many units, which keeps each thread's
// slice of a 64-byte aligned buffer 64-byte aligned (streaming stores).
constexpr std::size_t kChunkUnitMultiple = 64;

// One collective call, its arguments checked and its sizes computed.
struct Call {
  const bp_host_services *services;  // the host's, or the async queue's (async_queue.hpp)
  bp_error_sink *sink;
  bp_plugin_comm &comm;
  const bp_collective_args &args;
  std::size_t n;      // ranks
  std::size_t block;  // bytes of `count` elements
  std::size_t total;  // bytes of `count * n` elements
  // Only the checks: an _async call checks its arguments on the caller's
  // thread (its errors reach the caller at once), then runs on the queue's.
  bool check_only = false;

  bp_plugin_buffer *send(std::size_t r) const { return args.send[r]; }
  bp_plugin_buffer *recv(std::size_t r) const { return args.recv[r]; }
  // send[r] == recv[r]; only meaningful for a rank whose buffers were checked.
  bool in_place(std::size_t r) const { return args.send[r] == args.recv[r]; }

  // The host checked buffers against the counts already; they are checked
  // again (O(n) per call) because a wrong size here corrupts memory rather
  // than failing.
  std::int32_t need(bp_plugin_buffer *const *list, const char *which, std::size_t r, std::size_t bytes) const {
    const bp_plugin_buffer *buffer = list[r];
    if (buffer == nullptr) {
      return fail(services, sink, BP_INVALID_ARGUMENT, "cpu %s: %s buffer of rank %zu is NULL",
                  collective_name(args.collective), which, r);
    }
    if (buffer->bytes < bytes) {
      return fail(services, sink, BP_INVALID_ARGUMENT,
                  "cpu %s: %s buffer of rank %zu holds %zu bytes, %zu needed", collective_name(args.collective),
                  which, r, buffer->bytes, bytes);
    }
    return BP_OK;
  }
  std::int32_t need_send(std::size_t r, std::size_t bytes) const { return need(args.send, "send", r, bytes); }
  std::int32_t need_recv(std::size_t r, std::size_t bytes) const { return need(args.recv, "recv", r, bytes); }

  // Streaming stores once the call's data outgrows the caches. `footprint`
  // is the distinct bytes the call touches. Only for outputs nothing in the
  // call reads: an output that is also an input (in place) was just loaded
  // into the cache, so an ordinary store costs no extra read there, and a
  // streaming one would only evict it.
  bool streaming(std::size_t footprint, bool outputs_are_inputs = false) const {
    return !outputs_are_inputs && footprint > comm.streaming_threshold_bytes;
  }
  bool any_in_place() const {
    for (std::size_t r = 0; r < n; ++r) {
      if (args.send[r] != nullptr && args.send[r] == args.recv[r]) return true;
    }
    return false;
  }

  // Runs `tasks` tasks of `units` units: inline below the parallel
  // threshold (or without a pool), else chunked across the pool.
  // `unit_traffic` is the bytes read + written per unit of one task.
  void run(ParallelJob job, std::size_t unit_traffic) const {
    const std::size_t traffic = job.tasks * job.units * unit_traffic;
    if (comm.pool == nullptr || traffic < comm.parallel_threshold_bytes) {
      run_inline(job);
      return;
    }
    // Chunks of about kChunkTrafficBytes, but at least a few per thread so
    // that a thread slowed down (by another process) leaves its share to
    // the others.
    std::size_t chunk = std::max<std::size_t>(kChunkTrafficBytes / unit_traffic, 1);
    const std::size_t wanted_chunks = 4 * comm.threads;
    const std::size_t all_units = job.tasks * job.units;
    if (all_units / chunk < wanted_chunks) chunk = std::max<std::size_t>(all_units / wanted_chunks, 1);
    chunk = (chunk + kChunkUnitMultiple - 1) / kChunkUnitMultiple * kChunkUnitMultiple;
    job.chunk = chunk;
    comm.pool->run(job);
  }

  ReduceKernel reduction_kernel() const {
    const ReduceKernel kernel = reduce_kernel(args.dtype, args.reduce_op);
    if (kernel == nullptr) {
      fail(services, sink, BP_INTERNAL, "cpu %s: no kernel for %s with reduce op %u",
           collective_name(args.collective), dtype_name(args.dtype), static_cast<unsigned>(args.reduce_op));
    }
    return kernel;
  }
};

// The collectives (and run_reduction) are inlined into both callers of
// dispatch(): the hot path (collective_start) and dispatch_apart(). Called,
// they cost a small call 5 ns more (measured: their arguments are built in
// memory field by field and read back whole, which stalls on store
// forwarding).
#define BP_CPU_INLINE [[gnu::always_inline]] inline

#define BP_CPU_CHECK(expression)                       \
  do {                                                 \
    const std::int32_t bp_cpu_status_ = (expression); \
    if (bp_cpu_status_ != BP_OK) return bp_cpu_status_; \
  } while (0)

// One kernel call over a whole element range, split by the pool.
struct RangeJob {
  ReduceKernel kernel;
  ReduceIo io;
  static void run(const void *context, std::size_t, std::size_t begin, std::size_t end) noexcept {
    const auto &job = *static_cast<const RangeJob *>(context);
    job.kernel(job.io, begin, end);
  }
};

BP_CPU_INLINE std::int32_t run_reduction(const Call &c, const ReduceIo &io) {
  const ReduceKernel kernel = c.reduction_kernel();
  if (kernel == nullptr) return BP_INTERNAL;
  const RangeJob job{kernel, io};
  const std::size_t element = c.block / c.args.count;
  c.run(ParallelJob{&RangeJob::run, &job, 1, c.args.count, 0}, (io.input_count + io.output_count) * element);
  return BP_OK;
}

BP_CPU_INLINE std::int32_t all_reduce(const Call &c) {
  for (std::size_t r = 0; r < c.n; ++r) {
    BP_CPU_CHECK(c.need_send(r, c.block));
    BP_CPU_CHECK(c.need_recv(r, c.block));
  }
  if (c.check_only) return BP_OK;
  std::size_t footprint = 0;
  for (std::size_t r = 0; r < c.n; ++r) {
    c.comm.inputs[r] = c.send(r)->data;
    c.comm.outputs[r] = c.recv(r)->data;
    footprint += c.in_place(r) ? c.block : 2 * c.block;
  }
  return run_reduction(c, ReduceIo{c.comm.inputs.data(), c.n, 0, c.comm.outputs.data(), c.n, 0, kNoOutputSkipped,
                                   c.streaming(footprint, c.any_in_place())});
}

BP_CPU_INLINE std::int32_t reduce(const Call &c) {
  const std::size_t root = c.args.root;
  for (std::size_t r = 0; r < c.n; ++r) BP_CPU_CHECK(c.need_send(r, c.block));
  BP_CPU_CHECK(c.need_recv(root, c.block));
  if (c.check_only) return BP_OK;
  for (std::size_t r = 0; r < c.n; ++r) c.comm.inputs[r] = c.send(r)->data;
  c.comm.outputs[0] = c.recv(root)->data;
  return run_reduction(c, ReduceIo{c.comm.inputs.data(), c.n, 0, c.comm.outputs.data(), 1, 0, kNoOutputSkipped,
                                   c.streaming((c.n + 1) * c.block, c.in_place(root))});
}

// Task b reduces block b of every send into rank b's result. In place that
// is block b of send[b]: no other block's reduction reads it, and its own
// reads each element before writing it.
struct ReduceScatterJob {
  ReduceKernel kernel;
  const std::byte *const *sends;
  std::byte *const *results;
  std::size_t n;
  std::size_t block;
  bool streaming;
  static void run(const void *context, std::size_t b, std::size_t begin, std::size_t end) noexcept {
    const auto &job = *static_cast<const ReduceScatterJob *>(context);
    const ReduceIo io{job.sends, job.n, b * job.block, job.results + b, 1, 0, kNoOutputSkipped, job.streaming};
    job.kernel(io, begin, end);
  }
};

BP_CPU_INLINE std::int32_t reduce_scatter(const Call &c) {
  for (std::size_t r = 0; r < c.n; ++r) {
    BP_CPU_CHECK(c.need_send(r, c.total));
    if (!c.in_place(r)) BP_CPU_CHECK(c.need_recv(r, c.block));
  }
  if (c.check_only) return BP_OK;
  const ReduceKernel kernel = c.reduction_kernel();
  if (kernel == nullptr) return BP_INTERNAL;
  for (std::size_t r = 0; r < c.n; ++r) {
    c.comm.inputs[r] = c.send(r)->data;
    c.comm.outputs[r] = c.in_place(r) ? c.send(r)->data + r * c.block : c.recv(r)->data;
  }
  const ReduceScatterJob job{kernel, c.comm.inputs.data(), c.comm.outputs.data(), c.n, c.block,
                             c.streaming(c.n * c.total + c.n * c.block, c.any_in_place())};
  const std::size_t element = c.block / c.args.count;
  c.run(ParallelJob{&ReduceScatterJob::run, &job, c.n, c.args.count, 0}, (c.n + 1) * element);
  return BP_OK;
}

// Data movement: the copy kernel with one source, a byte range at a time.
struct CopyJob {
  ReduceKernel kernel;
  bool streaming;
  void copy(std::byte *destination, const std::byte *source, std::size_t begin, std::size_t end) const {
    const ReduceIo io{&source, 1, 0, &destination, 1, 0, kNoOutputSkipped, streaming};
    kernel(io, begin, end);
  }
};

BP_CPU_INLINE std::int32_t broadcast(const Call &c) {
  const std::size_t root = c.args.root;
  BP_CPU_CHECK(c.need_send(root, c.block));
  for (std::size_t r = 0; r < c.n; ++r) BP_CPU_CHECK(c.need_recv(r, c.block));
  if (c.check_only) return BP_OK;
  c.comm.inputs[0] = c.send(root)->data;
  for (std::size_t r = 0; r < c.n; ++r) c.comm.outputs[r] = c.recv(r)->data;
  // The root's block is read once and written to every recv from registers.
  const RangeJob job{copy_kernel(), ReduceIo{c.comm.inputs.data(), 1, 0, c.comm.outputs.data(), c.n, 0,
                                             c.in_place(root) ? root : kNoOutputSkipped,
                                             c.streaming((c.n + 1) * c.block)}};
  c.run(ParallelJob{&RangeJob::run, &job, 1, c.block, 0}, c.n + 1);
  return BP_OK;
}

// Task j writes rank j's contribution (its send buffer, or in place block j
// of its recv) to block j of every recv, reading it once.
struct AllGatherJob {
  ReduceKernel kernel;
  const bp_plugin_comm *comm;
  const Call *call;
  bool streaming;
  static void run(const void *context, std::size_t j, std::size_t begin, std::size_t end) noexcept {
    const auto &job = *static_cast<const AllGatherJob *>(context);
    const std::size_t block = job.call->block;
    const bool in_place = job.call->in_place(j);
    const ReduceIo io{job.comm->inputs.data() + j, 1, 0, job.comm->outputs.data(), job.call->n, j * block,
                      in_place ? j : kNoOutputSkipped, job.streaming};
    job.kernel(io, begin, end);
  }
};

BP_CPU_INLINE std::int32_t all_gather(const Call &c) {
  for (std::size_t r = 0; r < c.n; ++r) {
    if (!c.in_place(r)) BP_CPU_CHECK(c.need_send(r, c.block));
    BP_CPU_CHECK(c.need_recv(r, c.total));
  }
  if (c.check_only) return BP_OK;
  for (std::size_t j = 0; j < c.n; ++j) {
    c.comm.inputs[j] = c.in_place(j) ? c.recv(j)->data + j * c.block : c.send(j)->data;
    c.comm.outputs[j] = c.recv(j)->data;
  }
  const AllGatherJob job{copy_kernel(), &c.comm, &c, c.streaming(c.n * c.block + c.n * c.total)};
  c.run(ParallelJob{&AllGatherJob::run, &job, c.n, c.block, 0}, c.n + 1);
  return BP_OK;
}

// Task j copies rank j's send to block j of the root's recv (gather), or
// block r of the root's send to rank r's recv (scatter); the root's own
// block stays where it is in place.
struct GatherJob {
  CopyJob copier;
  const Call *call;
  bool gather;
  static void run(const void *context, std::size_t j, std::size_t begin, std::size_t end) noexcept {
    const auto &job = *static_cast<const GatherJob *>(context);
    const Call &c = *job.call;
    const std::size_t root = c.args.root;
    if (j == root && c.in_place(root)) return;
    if (job.gather) {
      job.copier.copy(c.recv(root)->data + j * c.block, c.send(j)->data, begin, end);
    } else {
      job.copier.copy(c.recv(j)->data, c.send(root)->data + j * c.block, begin, end);
    }
  }
};

BP_CPU_INLINE std::int32_t gather(const Call &c) {
  const std::size_t root = c.args.root;
  for (std::size_t r = 0; r < c.n; ++r) {
    if (!(r == root && c.in_place(root))) BP_CPU_CHECK(c.need_send(r, c.block));
  }
  BP_CPU_CHECK(c.need_recv(root, c.total));
  if (c.check_only) return BP_OK;
  const GatherJob job{CopyJob{copy_kernel(), c.streaming(2 * c.total)}, &c, true};
  c.run(ParallelJob{&GatherJob::run, &job, c.n, c.block, 0}, 2);
  return BP_OK;
}

BP_CPU_INLINE std::int32_t scatter(const Call &c) {
  const std::size_t root = c.args.root;
  BP_CPU_CHECK(c.need_send(root, c.total));
  for (std::size_t r = 0; r < c.n; ++r) {
    if (!(r == root && c.in_place(root))) BP_CPU_CHECK(c.need_recv(r, c.block));
  }
  if (c.check_only) return BP_OK;
  const GatherJob job{CopyJob{copy_kernel(), c.streaming(2 * c.total)}, &c, false};
  c.run(ParallelJob{&GatherJob::run, &job, c.n, c.block, 0}, 2);
  return BP_OK;
}

// Exchanges two equal, disjoint ranges through a bounce buffer in L1.
void swap_ranges(const CopyJob &copier, std::byte *a, std::byte *b, std::size_t begin, std::size_t end) {
  alignas(64) std::byte bounce[4096];
  for (std::size_t done = begin; done < end; done += sizeof bounce) {
    const std::size_t step = std::min(end - done, sizeof bounce);
    std::memcpy(bounce, a + done, step);
    copier.copy(a + done, b + done, 0, step);
    copier.copy(b + done, bounce, 0, step);
  }
}

// Block j of rank i goes to block i of rank j: a block transposition. Each
// unordered pair {i, j} (i <= j) owns exactly two source blocks and two
// destination blocks that no other pair touches, so pairs are tasks, in
// whatever mix of in-place and out-of-place ranks the call has; within a
// pair, a range of one block is read before the same range of the other is
// overwritten.
struct AllToAllJob {
  CopyJob copier;
  const Call *call;
  static void run(const void *context, std::size_t task, std::size_t begin, std::size_t end) noexcept {
    const auto &job = *static_cast<const AllToAllJob *>(context);
    const Call &c = *job.call;
    // Task t is the pair (i, j), i <= j, numbered row by row.
    std::size_t i = 0;
    while (task >= c.n - i) task -= c.n - i++;
    const std::size_t j = i + task;
    const std::size_t block = c.block;
    if (i == j) {
      if (!c.in_place(i)) job.copier.copy(c.recv(i)->data + i * block, c.send(i)->data + i * block, begin, end);
      return;
    }
    std::byte *to_j = c.send(i)->data + j * block;  // ends at block i of recv[j]
    std::byte *to_i = c.send(j)->data + i * block;  // ends at block j of recv[i]
    std::byte *at_j = c.recv(j)->data + i * block;
    std::byte *at_i = c.recv(i)->data + j * block;
    if (c.in_place(i) && c.in_place(j)) {
      swap_ranges(job.copier, to_j, to_i, begin, end);
    } else if (c.in_place(i)) {  // at_i is to_j: move to_j out before overwriting it
      job.copier.copy(at_j, to_j, begin, end);
      job.copier.copy(at_i, to_i, begin, end);
    } else {  // at_j may be to_i (j in place): move to_i out first
      job.copier.copy(at_i, to_i, begin, end);
      job.copier.copy(at_j, to_j, begin, end);
    }
  }
};

BP_CPU_INLINE std::int32_t all_to_all(const Call &c) {
  for (std::size_t r = 0; r < c.n; ++r) {
    BP_CPU_CHECK(c.need_send(r, c.total));
    if (!c.in_place(r)) BP_CPU_CHECK(c.need_recv(r, c.total));
  }
  if (c.check_only) return BP_OK;
  const AllToAllJob job{CopyJob{copy_kernel(), c.streaming(2 * c.n * c.total, c.any_in_place())}, &c};
  // Pairs move 4 bytes per unit (2 blocks read, 2 written); the diagonal 2.
  c.run(ParallelJob{&AllToAllJob::run, &job, c.n * (c.n + 1) / 2, c.block, 0}, 4);
  return BP_OK;
}

// The shape of a call whose arguments passed the checks every call makes.
struct Shape {
  std::size_t n = 0;      // ranks
  std::size_t block = 0;  // bytes of `count` elements
  std::size_t total = 0;  // bytes of `count * n` elements
  bool nothing_to_do = false;  // barrier, or count 0
};

// Everything but the buffers, which each collective checks (Call::need).
std::int32_t check_shape(const bp_host_services *services, bp_error_sink *sink, const bp_plugin_comm &comm,
                         const bp_collective_args &a, Shape &shape) {
  const char *name = collective_name(a.collective);
  const std::size_t n = comm.devices.size();
  shape.n = n;
  if (a.collective >= BP_COLLECTIVE_COUNT) {
    return fail(services, sink, BP_UNSUPPORTED_COLLECTIVE, "cpu collective_start: collective %u does not exist",
                static_cast<unsigned>(a.collective));
  }
  if (a.rank_count != n) {
    return fail(services, sink, BP_INVALID_ARGUMENT, "cpu %s: %zu ranks given to a group of %zu", name,
                a.rank_count, n);
  }
  // All ranks are driven by this one call, so they have all arrived.
  if (a.collective == BP_BARRIER) {
    shape.nothing_to_do = true;
    return BP_OK;
  }

  const std::size_t element = dtype_size(a.dtype);
  if (element == 0) {
    return fail(services, sink, BP_UNSUPPORTED_DTYPE, "cpu %s: element type %u does not exist", name,
                static_cast<unsigned>(a.dtype));
  }
  if (reduces(a.collective)) {
    if (a.reduce_op >= BP_REDUCE_OP_COUNT) {
      return fail(services, sink, BP_UNSUPPORTED_REDUCE_OP, "cpu %s: reduce op %u does not exist", name,
                  static_cast<unsigned>(a.reduce_op));
    }
    if (a.reduce_op == BP_AVG && !is_float_dtype(a.dtype)) {
      return fail(services, sink, BP_UNSUPPORTED_REDUCE_OP,
                  "cpu %s: avg is supported on f16, bf16, f32 and f64 only, not %s", name, dtype_name(a.dtype));
    }
  }
  if (has_root(a.collective) && a.root >= n) {
    return fail(services, sink, BP_INVALID_ARGUMENT, "cpu %s: root %u is not a rank of a group of %zu", name,
                static_cast<unsigned>(a.root), n);
  }
  if (a.count == 0) {
    shape.nothing_to_do = true;
    return BP_OK;
  }
  if (a.send == nullptr || a.recv == nullptr) {
    return fail(services, sink, BP_INVALID_ARGUMENT, "cpu %s: send or recv array is NULL", name);
  }
  if (__builtin_mul_overflow(a.count, element, &shape.block) || __builtin_mul_overflow(shape.block, n, &shape.total)) {
    return fail(services, sink, BP_INVALID_ARGUMENT, "cpu %s: %zu elements of %s overflow the address space",
                name, a.count, dtype_name(a.dtype));
  }
  return BP_OK;
}

// Inlined into collective_start's one call of it, the hot path.
BP_CPU_INLINE std::int32_t dispatch(const Call &call) {
  switch (call.args.collective) {
    case BP_ALL_REDUCE:
      return all_reduce(call);
    case BP_REDUCE:
      return reduce(call);
    case BP_BROADCAST:
      return broadcast(call);
    case BP_ALL_GATHER:
      return all_gather(call);
    case BP_REDUCE_SCATTER:
      return reduce_scatter(call);
    case BP_GATHER:
      return gather(call);
    case BP_SCATTER:
      return scatter(call);
    case BP_ALL_TO_ALL:
      return all_to_all(call);
    default:
      return fail(call.services, call.sink, BP_INTERNAL, "cpu %s: not dispatched",
                  collective_name(call.args.collective));
  }
}

// The same for the _async path's checks and the queue's thread.
[[gnu::noinline]] std::int32_t dispatch_apart(const Call &call) { return dispatch(call); }

std::size_t saturating_multiply(std::size_t a, std::size_t b) {
  std::size_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? SIZE_MAX : product;
}

// Bytes read + written, as in the cost table at the top (saturating).
std::size_t traffic_bytes(std::uint32_t collective, const Shape &shape) {
  const std::size_t n = shape.n, block = shape.block, total = shape.total;
  switch (collective) {
    case BP_ALL_REDUCE:
    case BP_GATHER:
    case BP_SCATTER:
      return saturating_multiply(total, 2);
    case BP_REDUCE:
    case BP_BROADCAST:
      return total + block;
    case BP_REDUCE_SCATTER:
    case BP_ALL_GATHER:
      return saturating_multiply(total, n + 1);
    case BP_ALL_TO_ALL:
      return saturating_multiply(total, 2 * n);
    default:
      return 0;
  }
}

// An _async call worth running apart from the caller, or one that must
// wait its turn behind the comm's requests in flight: checked here, then
// queued with its own copy of the arguments. `shape` comes by value: by
// reference, it would live in memory on the hot path too, and reading it
// back whole there stalls on store forwarding (6 ns a call, measured).
[[gnu::noinline]] std::int32_t start_async(bp_plugin_state &state, bp_plugin_comm &comm,
                                           const bp_collective_args &a, Shape shape, bp_plugin_request **out,
                                           bp_error_sink *sink) {
  const bp_host_services *services = state.services;
  if (!shape.nothing_to_do) {
    BP_CPU_CHECK(dispatch_apart(Call{services, sink, comm, a, shape.n, shape.block, shape.total, true}));
  }
  try {
    state.async_queue.start(services);
  } catch (const std::system_error &e) {
    // Nothing was ever queued then (the thread starts with the first
    // request), so the call may complete right here, still in order.
    log(services, BP_LOG_WARN, "cannot start the thread for _async collectives (%s); they complete on the "
        "calling thread", e.what());
    if (shape.nothing_to_do) return BP_OK;
    return dispatch_apart(Call{services, sink, comm, a, shape.n, shape.block, shape.total});
  }
  auto request = std::make_unique<bp_plugin_request>();
  request->comm = &comm;
  bp_collective_args &copy = request->args;
  copy.struct_size = sizeof copy;
  copy.collective = a.collective;
  copy.dtype = a.dtype;
  copy.reduce_op = a.reduce_op;
  copy.root = a.root;
  copy.count = a.count;
  copy.rank_count = a.rank_count;
  if (!shape.nothing_to_do) {
    request->buffers.reserve(2 * shape.n);
    request->buffers.insert(request->buffers.end(), a.send, a.send + shape.n);
    request->buffers.insert(request->buffers.end(), a.recv, a.recv + shape.n);
    copy.send = request->buffers.data();
    copy.recv = request->buffers.data() + shape.n;
  }
  request->block = shape.block;
  request->total = shape.total;
  request->nothing_to_do = shape.nothing_to_do;
  comm.in_flight.fetch_add(1, std::memory_order_relaxed);
  state.async_queue.push(request.get());
  *out = request.release();
  return BP_OK;
}

}  // namespace

std::int32_t Backend::comm_create(bp_plugin_state &state, std::span<const std::uint32_t> devices,
                                  bp_plugin_comm **out, bp_error_sink *) {
  auto comm = std::make_unique<bp_plugin_comm>();
  comm->devices.assign(devices.begin(), devices.end());
  comm->inputs.resize(devices.size());
  comm->outputs.resize(devices.size());

  std::lock_guard<std::mutex> lock(state.mutex);
  // The pool starts with the first group (never inside a collective), and
  // lives until destroy or a configure that changes the thread count.
  if (state.pool == nullptr && state.threads > 1) {
    try {
      state.pool = std::make_unique<ThreadPool>(state.threads - 1);
      log(state.services, BP_LOG_DEBUG, "thread pool of %u workers started; kernels run on %s",
          static_cast<unsigned>(state.threads - 1), kernel_target_name());
    } catch (const std::system_error &e) {
      // Still correct on one thread, only slower.
      log(state.services, BP_LOG_WARN, "cannot start a thread pool of %u workers (%s); collectives run on the "
          "calling thread", static_cast<unsigned>(state.threads - 1), e.what());
    }
  }
  comm->pool = state.pool.get();
  comm->threads = comm->pool != nullptr ? comm->pool->workers() + 1 : 1;
  comm->parallel_threshold_bytes = state.parallel_threshold_bytes;
  comm->streaming_threshold_bytes = state.streaming_threshold_bytes;
  comm->async_threshold_bytes = state.async_threshold_bytes;
  *out = comm.release();
  return BP_OK;
}

void Backend::comm_destroy(bp_plugin_state &, bp_plugin_comm *comm) {
  // The host destroys a comm only once its requests were released, so this
  // is a single load, but for the queue's last touch of the count, which
  // follows the last request's completion.
  wait_for_comm(comm->in_flight);
  delete comm;
}

std::int32_t Backend::collective_start(bp_plugin_state &state, bp_plugin_comm &comm, const bp_collective_args &a,
                                       bp_plugin_request **out, bp_error_sink *sink) {
  const bp_host_services *services = state.services;
  // A 1.0/1.1 host sends no flags, and waits for every request itself.
  const bool caller_waits =
      a.struct_size < BP_COLLECTIVE_ARGS_SIZE_V1_2 || (a.flags & BP_COLLECTIVE_CALLER_WAITS) != 0;
  Shape shape;
  BP_CPU_CHECK(check_shape(services, sink, comm, a, shape));
  // The one atomic of the hot path: anything of this comm queued or running?
  const bool behind_requests = comm.in_flight.load(std::memory_order_acquire) != 0;
  if (!caller_waits && (behind_requests || (!shape.nothing_to_do &&
                                            traffic_bytes(a.collective, shape) >= comm.async_threshold_bytes)))
      [[unlikely]] {
    return start_async(state, comm, a, shape, out, sink);
  }
  // On this thread, with the pool: at once, or once the comm's earlier
  // requests ran (the caller waits anyway).
  if (behind_requests) [[unlikely]] wait_for_comm(comm.in_flight);
  if (shape.nothing_to_do) return BP_OK;
  return dispatch(Call{services, sink, comm, a, shape.n, shape.block, shape.total});
}

std::int32_t run_request(const bp_host_services *services, bp_error_sink *sink,
                         bp_plugin_request &request) noexcept {
  try {
    bp_plugin_comm &comm = *request.comm;
    return dispatch_apart(
        Call{services, sink, comm, request.args, comm.devices.size(), request.block, request.total});
  } catch (...) {  // nothing in a collective throws; a bug if it does
    return fail(services, sink, BP_INTERNAL, "cpu %s: internal error while running",
                collective_name(request.args.collective));
  }
}

}  // namespace backplane::cpu
