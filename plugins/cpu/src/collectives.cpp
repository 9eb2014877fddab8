// Communicators and the nine collectives of the cpu plugin. Every rank lives
// in this process, so one call on the calling thread drives all of them and
// completes before returning; nothing here allocates or starts a thread.
//
// Cost of each algorithm, with n ranks and B = count * element size bytes
// per block (reads + writes of buffer memory):
//   all_reduce      n*B read, n*B written (one pass, chunked accumulator)
//   reduce          n*B read, B written
//   reduce_scatter  n*n*B read, n*B written (n reductions of one block)
//   broadcast       B read n times (cache-hot after the first), n*B written
//   all_gather      n*n*B copied; gather, scatter: n*B copied
//   all_to_all      n*n*B copied; in place: n*(n-1)/2 block swaps
#include <cstring>
#include <memory>

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

// One collective call, its arguments checked and its sizes computed.
struct Call {
  const bp_plugin_state &state;
  bp_error_sink *sink;
  bp_plugin_comm &comm;
  const bp_collective_args &args;
  std::size_t n;      // ranks
  std::size_t block;  // bytes of `count` elements
  std::size_t total;  // bytes of `count * n` elements

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
      return fail(state.services, sink, BP_INVALID_ARGUMENT, "cpu %s: %s buffer of rank %zu is NULL",
                  collective_name(args.collective), which, r);
    }
    if (buffer->bytes < bytes) {
      return fail(state.services, sink, BP_INVALID_ARGUMENT,
                  "cpu %s: %s buffer of rank %zu holds %zu bytes, %zu needed", collective_name(args.collective),
                  which, r, buffer->bytes, bytes);
    }
    return BP_OK;
  }
  std::int32_t need_send(std::size_t r, std::size_t bytes) const { return need(args.send, "send", r, bytes); }
  std::int32_t need_recv(std::size_t r, std::size_t bytes) const { return need(args.recv, "recv", r, bytes); }

  std::int32_t reduce(const ReduceIo &io) const {
    if (!reduce_elements(args.dtype, args.reduce_op, io, 0, args.count)) {
      return fail(state.services, sink, BP_INTERNAL, "cpu %s: no kernel for %s with reduce op %u",
                  collective_name(args.collective), dtype_name(args.dtype),
                  static_cast<unsigned>(args.reduce_op));
    }
    return BP_OK;
  }
};

#define BP_CPU_CHECK(expression)                       \
  do {                                                 \
    const std::int32_t bp_cpu_status_ = (expression); \
    if (bp_cpu_status_ != BP_OK) return bp_cpu_status_; \
  } while (0)

std::int32_t all_reduce(const Call &c) {
  for (std::size_t r = 0; r < c.n; ++r) {
    BP_CPU_CHECK(c.need_send(r, c.block));
    BP_CPU_CHECK(c.need_recv(r, c.block));
  }
  for (std::size_t r = 0; r < c.n; ++r) {
    c.comm.inputs[r] = c.send(r)->data;
    c.comm.outputs[r] = c.recv(r)->data;
  }
  return c.reduce(ReduceIo{c.comm.inputs.data(), c.n, c.comm.outputs.data(), c.n});
}

std::int32_t reduce(const Call &c) {
  const std::size_t root = c.args.root;
  for (std::size_t r = 0; r < c.n; ++r) BP_CPU_CHECK(c.need_send(r, c.block));
  BP_CPU_CHECK(c.need_recv(root, c.block));
  for (std::size_t r = 0; r < c.n; ++r) c.comm.inputs[r] = c.send(r)->data;
  c.comm.outputs[0] = c.recv(root)->data;
  return c.reduce(ReduceIo{c.comm.inputs.data(), c.n, c.comm.outputs.data(), 1});
}

// Block b of every send is reduced into rank b's result. In place that is
// block b of send[b]: no other block's reduction reads it, and its own
// reduction reads each chunk before writing it.
std::int32_t reduce_scatter(const Call &c) {
  for (std::size_t r = 0; r < c.n; ++r) {
    BP_CPU_CHECK(c.need_send(r, c.total));
    if (!c.in_place(r)) BP_CPU_CHECK(c.need_recv(r, c.block));
  }
  for (std::size_t b = 0; b < c.n; ++b) {
    for (std::size_t r = 0; r < c.n; ++r) c.comm.inputs[r] = c.send(r)->data + b * c.block;
    c.comm.outputs[0] = c.in_place(b) ? c.send(b)->data + b * c.block : c.recv(b)->data;
    BP_CPU_CHECK(c.reduce(ReduceIo{c.comm.inputs.data(), c.n, c.comm.outputs.data(), 1}));
  }
  return BP_OK;
}

std::int32_t broadcast(const Call &c) {
  const std::size_t root = c.args.root;
  BP_CPU_CHECK(c.need_send(root, c.block));
  for (std::size_t r = 0; r < c.n; ++r) BP_CPU_CHECK(c.need_recv(r, c.block));
  const std::byte *source = c.send(root)->data;
  for (std::size_t r = 0; r < c.n; ++r) {
    if (r == root && c.in_place(root)) continue;
    std::memcpy(c.recv(r)->data, source, c.block);
  }
  return BP_OK;
}

// Rank j's contribution: its send buffer, or in place block j of its recv.
std::int32_t all_gather(const Call &c) {
  for (std::size_t r = 0; r < c.n; ++r) {
    if (!c.in_place(r)) BP_CPU_CHECK(c.need_send(r, c.block));
    BP_CPU_CHECK(c.need_recv(r, c.total));
  }
  for (std::size_t j = 0; j < c.n; ++j) {
    const std::byte *source = c.in_place(j) ? c.recv(j)->data + j * c.block : c.send(j)->data;
    for (std::size_t r = 0; r < c.n; ++r) {
      if (r == j && c.in_place(j)) continue;
      std::memcpy(c.recv(r)->data + j * c.block, source, c.block);
    }
  }
  return BP_OK;
}

std::int32_t gather(const Call &c) {
  const std::size_t root = c.args.root;
  for (std::size_t r = 0; r < c.n; ++r) {
    if (!(r == root && c.in_place(root))) BP_CPU_CHECK(c.need_send(r, c.block));
  }
  BP_CPU_CHECK(c.need_recv(root, c.total));
  for (std::size_t j = 0; j < c.n; ++j) {
    if (j == root && c.in_place(root)) continue;  // already at block root
    std::memcpy(c.recv(root)->data + j * c.block, c.send(j)->data, c.block);
  }
  return BP_OK;
}

std::int32_t scatter(const Call &c) {
  const std::size_t root = c.args.root;
  BP_CPU_CHECK(c.need_send(root, c.total));
  for (std::size_t r = 0; r < c.n; ++r) {
    if (!(r == root && c.in_place(root))) BP_CPU_CHECK(c.need_recv(r, c.block));
  }
  const std::byte *source = c.send(root)->data;
  for (std::size_t r = 0; r < c.n; ++r) {
    if (r == root && c.in_place(root)) continue;  // stays at block root
    std::memcpy(c.recv(r)->data, source + r * c.block, c.block);
  }
  return BP_OK;
}

// Exchanges two equal, disjoint ranges through a stack bounce buffer.
void swap_blocks(std::byte *a, std::byte *b, std::size_t bytes) {
  alignas(64) std::byte bounce[4096];
  for (std::size_t done = 0; done < bytes; done += sizeof bounce) {
    const std::size_t step = bytes - done < sizeof bounce ? bytes - done : sizeof bounce;
    std::memcpy(bounce, a + done, step);
    std::memcpy(a + done, b + done, step);
    std::memcpy(b + done, bounce, step);
  }
}

// Block j of rank i goes to block i of rank j: a block transposition. Each
// unordered pair {i, j} owns exactly two source blocks and two destination
// blocks that no other pair touches, so pairs are handled one at a time,
// in whatever mix of in-place and out-of-place ranks the call has.
std::int32_t all_to_all(const Call &c) {
  for (std::size_t r = 0; r < c.n; ++r) {
    BP_CPU_CHECK(c.need_send(r, c.total));
    if (!c.in_place(r)) BP_CPU_CHECK(c.need_recv(r, c.total));
  }
  const std::size_t block = c.block;
  for (std::size_t i = 0; i < c.n; ++i) {
    if (!c.in_place(i)) std::memcpy(c.recv(i)->data + i * block, c.send(i)->data + i * block, block);
    for (std::size_t j = i + 1; j < c.n; ++j) {
      std::byte *to_j = c.send(i)->data + j * block;  // ends at block i of recv[j]
      std::byte *to_i = c.send(j)->data + i * block;  // ends at block j of recv[i]
      std::byte *at_j = c.recv(j)->data + i * block;
      std::byte *at_i = c.recv(i)->data + j * block;
      if (c.in_place(i) && c.in_place(j)) {
        swap_blocks(to_j, to_i, block);
      } else if (c.in_place(i)) {  // at_i is to_j: move to_j out before overwriting it
        std::memcpy(at_j, to_j, block);
        std::memcpy(at_i, to_i, block);
      } else if (c.in_place(j)) {  // at_j is to_i
        std::memcpy(at_i, to_i, block);
        std::memcpy(at_j, to_j, block);
      } else {
        std::memcpy(at_j, to_j, block);
        std::memcpy(at_i, to_i, block);
      }
    }
  }
  return BP_OK;
}

}  // namespace

std::int32_t comm_create(bp_plugin_state &state, std::uint32_t kind, const std::uint32_t *devices,
                         std::size_t device_count, bp_plugin_comm **out, bp_error_sink *sink) {
  if (const std::int32_t status = check_kind(state, kind, sink); status != BP_OK) return status;
  if (out == nullptr) return fail(state.services, sink, BP_INVALID_ARGUMENT, "cpu comm_create: out is NULL");
  *out = nullptr;
  if (device_count == 0 || devices == nullptr) {
    return fail(state.services, sink, BP_INVALID_ARGUMENT, "cpu comm_create: a group needs at least one device");
  }
  auto comm = std::make_unique<bp_plugin_comm>();
  comm->devices.assign(devices, devices + device_count);
  comm->inputs.resize(device_count);
  comm->outputs.resize(device_count);

  std::lock_guard<std::mutex> lock(state.mutex);
  for (std::size_t r = 0; r < device_count; ++r) {
    if (devices[r] >= state.device_count) {
      return fail(state.services, sink, BP_INVALID_ARGUMENT,
                  "cpu comm_create: rank %zu names device %u, which does not exist (%u cpu devices)", r,
                  static_cast<unsigned>(devices[r]), static_cast<unsigned>(state.device_count));
    }
  }
  ++state.live_objects;
  *out = comm.release();
  return BP_OK;
}

void comm_destroy(bp_plugin_state &state, bp_plugin_comm *comm) {
  if (comm == nullptr) return;
  delete comm;
  std::lock_guard<std::mutex> lock(state.mutex);
  --state.live_objects;
}

std::int32_t collective_start(bp_plugin_state &state, bp_plugin_comm &comm, const bp_collective_args *args,
                              bp_plugin_request **out, bp_error_sink *sink) {
  const bp_host_services *services = state.services;
  if (out == nullptr) return fail(services, sink, BP_INVALID_ARGUMENT, "cpu collective_start: out is NULL");
  *out = nullptr;  // every collective completes before this returns
  if (args == nullptr || args->struct_size < BP_COLLECTIVE_ARGS_SIZE_V1_0) {
    return fail(services, sink, BP_INVALID_ARGUMENT, "cpu collective_start: args is NULL or smaller than ABI 1.0's");
  }
  const bp_collective_args &a = *args;
  const char *name = collective_name(a.collective);
  const std::size_t n = comm.devices.size();
  if (a.collective >= BP_COLLECTIVE_COUNT) {
    return fail(services, sink, BP_UNSUPPORTED_COLLECTIVE, "cpu collective_start: collective %u does not exist",
                static_cast<unsigned>(a.collective));
  }
  if (a.rank_count != n) {
    return fail(services, sink, BP_INVALID_ARGUMENT, "cpu %s: %zu ranks given to a group of %zu", name,
                a.rank_count, n);
  }
  // All ranks are driven by this one call, so they have all arrived.
  if (a.collective == BP_BARRIER) return BP_OK;

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
  if (a.count == 0) return BP_OK;
  if (a.send == nullptr || a.recv == nullptr) {
    return fail(services, sink, BP_INVALID_ARGUMENT, "cpu %s: send or recv array is NULL", name);
  }
  std::size_t block = 0;
  std::size_t total = 0;
  if (__builtin_mul_overflow(a.count, element, &block) || __builtin_mul_overflow(block, n, &total)) {
    return fail(services, sink, BP_INVALID_ARGUMENT, "cpu %s: %zu elements of %s overflow the address space",
                name, a.count, dtype_name(a.dtype));
  }

  const Call call{state, sink, comm, a, n, block, total};
  switch (a.collective) {
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
      return fail(services, sink, BP_INTERNAL, "cpu %s: not dispatched", name);
  }
}

}  // namespace backplane::cpu
