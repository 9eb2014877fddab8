// Communicators and the nine collectives of the opencl plugin.
//
// Every kernel of a comm runs on one device, rank 0's (the comm's "lead"),
// on a queue of the comm's own: its platform's context holds every device of
// the platform, so the lead's kernels read and write any rank's buffer on
// that platform directly, and the runtime moves the data if the devices
// have separate memories. A collective enqueues its kernels back to back
// (PoCL: ~7 us per queued kernel against ~30 us for each launch-and-wait).
// A blocking call (BP_COLLECTIVE_CALLER_WAITS, or a 1.0/1.1 host) then
// waits once with clFinish and returns no request, allocating nothing; an
// _async call flushes the queue and returns a request holding the event of
// its last command (requests.cpp). The comm's queue is in order, so
// requests complete in start order and each sees the results of the ones
// before it.
//
// Ranks on another platform than the lead ("foreign" ranks) cannot be
// reached from the lead's context. Their data goes through host memory:
// their inputs are read into a host staging area and written into proxy
// buffers in the lead's context, the kernels run on the proxies, and the
// results go back the same way. comm_info says which route a comm takes.
// That route stays synchronous: the staging reads and writes are blocking,
// so collective_start completes such a comm's collectives (barrier
// included) before it returns, and returns no request, whatever the flags.
//
// Kernels (kernels/collectives.cl) take up to kMaxBuffers buffers on each
// side; a comm of up to that many ranks reduces with kernels built for its
// rank count (program_cache.cpp), larger ones with generic kernels. Cost,
// with n ranks and B = count * element size bytes per block (bytes read +
// written, n <= 8; more ranks add passes through scratch):
//   all_reduce      one kernel: n*B read, n*B written
//   reduce          one kernel: n*B read, B written
//   reduce_scatter  n kernels, one per block: n*n*B read, n*B written
//   broadcast       B read (once per output, from cache), n*B written
//   all_gather      n*B read, n*n*B written
//   gather, scatter n*B read, n*B written
//   all_to_all      n*n*B read, n*n*B written; a rank in place first
//                   copies its n blocks to scratch (n*B more each way)
//
// Scratch (reductions over more than 8 ranks, in-place all_to_all) and the
// proxies and staging of foreign ranks are per comm and grow on demand: a
// call that needs more than any call before it allocates, no other does.
// Growing first waits for the comm's queue, so no request in flight still
// uses the buffer that goes.
#include <algorithm>
#include <array>
#include <cstring>

#include "capabilities.hpp"
#include "plugin_state.hpp"
#include "program_cache.hpp"

namespace backplane::opencl {
namespace {

// Buffers one kernel launch takes on each side (kernels/collectives.cl).
constexpr std::size_t kMaxBuffers = 8;
// A specialised kernel takes every rank's buffer at once.
static_assert(kMaxSpecializedRanks <= kMaxBuffers);
// A launch's global size is a multiple of this, so that the runtime can
// pick full work-groups; the items past the last multiple go in a second
// launch (Call::launch).
constexpr std::size_t kWorkGroupMultiple = 256;
// The copy kernels' units, widest first: copy_u128, copy_u32, copy_u8.
constexpr std::size_t kCopyUnits[] = {16, 4, 1};
constexpr const char *kCopyKernelNames[] = {"copy_u128", "copy_u32", "copy_u8"};
constexpr std::size_t kCopyKernelCount = sizeof kCopyUnits / sizeof kCopyUnits[0];

const char *const kDtypeNames[BP_DTYPE_COUNT] = {"f16", "bf16", "f32", "f64", "i8", "u8", "i32", "u32", "i64", "u64"};
const std::size_t kDtypeSizes[BP_DTYPE_COUNT] = {2, 2, 4, 8, 1, 1, 4, 4, 8, 8};
const char *const kOpNames[BP_REDUCE_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};
const char *const kCollectiveNames[BP_COLLECTIVE_COUNT] = {
    "all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter", "gather", "scatter", "all_to_all", "barrier"};

struct NamedKernel {
  KernelHandle kernel;
  std::string name;  // for error messages
};

// A place in a buffer: offset in elements of whatever the kernel works in.
struct Span {
  cl_mem mem = nullptr;
  std::size_t offset = 0;
};

}  // namespace
}  // namespace backplane::opencl

// The plugin's side of a group: the lead device's queue and kernels, and
// the per-call arrays, sized here so that a call allocates nothing.
struct bp_plugin_comm {
  const bp_plugin_state *state = nullptr;
  std::vector<const backplane::opencl::Device *> ranks;  // rank r's device
  const backplane::opencl::Device *lead = nullptr;        // rank 0's: every kernel runs there
  cl_context context = nullptr;                           // the lead's platform's, borrowed
  backplane::opencl::QueueHandle queue;                   // on the lead, this comm's own
  // The program's kernels are built for this comm's rank count when it is
  // at most kMaxSpecializedRanks (`ranks_class` = n), else generic (0).
  std::size_t ranks_class = 0;
  // [dtype][op], empty for what the lead does not run. Specialised: n
  // inputs to n outputs (all) and to one (one); generic: any arity.
  using KernelTable = std::array<std::array<backplane::opencl::NamedKernel, BP_REDUCE_OP_COUNT>, BP_DTYPE_COUNT>;
  KernelTable reduce_all, reduce_one, reduce_generic;
  std::array<backplane::opencl::NamedKernel, backplane::opencl::kCopyKernelCount> copy;
  std::string route;  // comm_info's line

  // Per call: rank r's send and recv as the kernels see them (a foreign
  // rank's proxies in its place).
  std::vector<cl_mem> send, recv;
  std::vector<backplane::opencl::Span> inputs, outputs;  // n entries each, filled per reduction
  std::vector<bool> foreign;                             // rank on another platform than the lead
  bool any_foreign = false;
  // Per foreign rank: proxies in the lead's context and host staging.
  std::vector<backplane::opencl::MemHandle> proxy_send, proxy_recv;
  std::vector<std::size_t> proxy_send_bytes, proxy_recv_bytes;
  std::vector<std::vector<std::byte>> staging;
  backplane::opencl::MemHandle scratch;
  std::size_t scratch_bytes = 0;
  // An _async barrier's markers, one per rank's device queue.
  std::vector<cl_event> barrier_markers;
};

namespace backplane::opencl {
namespace {

// One collective call: its arguments, sizes, and the enqueueing helpers.
struct Call {
  const bp_plugin_state &state;
  bp_error_sink *sink;
  bp_plugin_comm &comm;
  const bp_collective_args &args;
  std::size_t n;        // ranks
  std::size_t element;  // bytes of one element
  std::size_t block;    // bytes of `count` elements
  // An _async call's event of its latest command on the comm's queue (one
  // reference, NULL until the first); NULL on the blocking path, whose
  // commands then create no events.
  cl_event *last_event;

  const char *device_name() const { return comm.lead->name.c_str(); }
  // In place: the rank passes one buffer as send and recv.
  bool in_place(std::size_t r) const { return args.send[r] != nullptr && args.send[r] == args.recv[r]; }

  std::int32_t cl_failed(cl_int status, const char *call, const char *what) const {
    return fail_cl(state.services, sink, status, call, what, device_name());
  }

  // Where the next command's event goes: the previous one is let go, since
  // on an in-order queue the last command completes after all before it.
  cl_event *record() const {
    if (last_event == nullptr) return nullptr;
    if (*last_event != nullptr) clReleaseEvent(*last_event);
    *last_event = nullptr;
    return last_event;
  }

  // A buffer of `bytes` in the lead's context, grown (never shrunk) to fit.
  // Requests in flight on the comm may still use the old one: they finish
  // first (growing is rare, so waiting for them costs little).
  std::int32_t grow(MemHandle &mem, std::size_t &capacity, std::size_t bytes, const char *what) const {
    if (bytes <= capacity) return BP_OK;
    if (mem) {
      const cl_int finished = clFinish(comm.queue.get());
      if (finished != CL_SUCCESS) return cl_failed(finished, "clFinish", what);
    }
    mem.reset();
    capacity = 0;
    cl_int status = CL_SUCCESS;
    mem = MemHandle(clCreateBuffer(comm.context, CL_MEM_READ_WRITE, bytes, nullptr, &status));
    if (status != CL_SUCCESS) return cl_failed(status, "clCreateBuffer", what);
    capacity = bytes;
    return BP_OK;
  }

  std::int32_t set_arg(cl_kernel kernel, cl_uint index, std::size_t size, const void *value, const char *name) const {
    const cl_int status = clSetKernelArg(kernel, index, size, value);
    return status == CL_SUCCESS ? BP_OK : cl_failed(status, "clSetKernelArg", name);
  }

  // Work items 0..items-1: the whole work-groups in one launch, the rest
  // in a second one at a global offset (the kernels have no bound test).
  std::int32_t launch(const NamedKernel &kernel, std::size_t items) const {
    const std::size_t whole = items / kWorkGroupMultiple * kWorkGroupMultiple;
    const std::size_t tail = items - whole;
    const std::size_t tail_offset = whole;
    cl_int status = CL_SUCCESS;
    if (whole != 0) {
      status = clEnqueueNDRangeKernel(comm.queue.get(), kernel.kernel.get(), 1, nullptr, &whole, nullptr, 0, nullptr,
                                      record());
    }
    if (status == CL_SUCCESS && tail != 0) {
      status = clEnqueueNDRangeKernel(comm.queue.get(), kernel.kernel.get(), 1, &tail_offset, &tail, nullptr, 0,
                                      nullptr, record());
    }
    return status == CL_SUCCESS ? BP_OK : cl_failed(status, "clEnqueueNDRangeKernel", kernel.name.c_str());
  }

  // Sets the 8 buffer arguments from `first` and their 8 offsets; unused
  // ones are NULL buffers at offset 0, which the kernel never touches.
  std::int32_t set_spans(const NamedKernel &kernel, cl_uint first, const Span *spans, std::size_t count) const {
    for (std::size_t k = 0; k < kMaxBuffers; ++k) {
      const cl_mem mem = k < count ? spans[k].mem : nullptr;
      const cl_ulong offset = k < count ? spans[k].offset : 0;
      BP_OPENCL_CHECK(set_arg(kernel.kernel.get(), first + static_cast<cl_uint>(k), sizeof mem, &mem,
                              kernel.name.c_str()));
      BP_OPENCL_CHECK(set_arg(kernel.kernel.get(), first + static_cast<cl_uint>(kMaxBuffers + k), sizeof offset,
                              &offset, kernel.name.c_str()));
    }
    return BP_OK;
  }

  // One reduce kernel: outputs[k] = op over inputs, `count` elements.
  std::int32_t reduce_once(const NamedKernel &kernel, const Span *inputs, std::size_t input_count,
                           const Span *outputs, std::size_t output_count) const {
    const cl_uint in_count = static_cast<cl_uint>(input_count);
    const cl_uint out_count = static_cast<cl_uint>(output_count);
    const cl_uint ranks = static_cast<cl_uint>(n);
    const cl_kernel k = kernel.kernel.get();
    BP_OPENCL_CHECK(set_spans(kernel, 0, inputs, input_count));
    BP_OPENCL_CHECK(set_arg(k, 16, sizeof in_count, &in_count, kernel.name.c_str()));
    BP_OPENCL_CHECK(set_spans(kernel, 17, outputs, output_count));
    BP_OPENCL_CHECK(set_arg(k, 33, sizeof out_count, &out_count, kernel.name.c_str()));
    BP_OPENCL_CHECK(set_arg(k, 34, sizeof ranks, &ranks, kernel.name.c_str()));
    return launch(kernel, args.count);
  }

  // Copies `bytes` for each pair (inputs[k] -> outputs[k], offsets in
  // bytes), kMaxBuffers pairs a launch, in the widest unit that divides
  // every offset and the length. No output may overlap another pair's input.
  std::int32_t copy_pairs(const Span *inputs, const Span *outputs, std::size_t pairs, std::size_t bytes) const {
    if (pairs == 0 || bytes == 0) return BP_OK;
    std::size_t which = 0;
    for (; which + 1 < kCopyKernelCount; ++which) {
      const std::size_t unit = kCopyUnits[which];
      bool fits = bytes % unit == 0;
      for (std::size_t k = 0; k < pairs && fits; ++k) {
        fits = inputs[k].offset % unit == 0 && outputs[k].offset % unit == 0;
      }
      if (fits) break;
    }
    const std::size_t unit = kCopyUnits[which];
    const NamedKernel &kernel = comm.copy[which];
    std::array<Span, kMaxBuffers> in{}, out{};
    for (std::size_t first = 0; first < pairs; first += kMaxBuffers) {
      const std::size_t batch = std::min(kMaxBuffers, pairs - first);
      for (std::size_t k = 0; k < batch; ++k) {
        in[k] = {inputs[first + k].mem, inputs[first + k].offset / unit};
        out[k] = {outputs[first + k].mem, outputs[first + k].offset / unit};
      }
      const cl_uint batch_pairs = static_cast<cl_uint>(batch);
      BP_OPENCL_CHECK(set_spans(kernel, 0, in.data(), batch));
      BP_OPENCL_CHECK(set_spans(kernel, 16, out.data(), batch));
      BP_OPENCL_CHECK(set_arg(kernel.kernel.get(), 32, sizeof batch_pairs, &batch_pairs, kernel.name.c_str()));
      BP_OPENCL_CHECK(launch(kernel, bytes / unit));
    }
    return BP_OK;
  }

  // outputs[k] = op over every rank's input, `count` elements (offsets in
  // elements); `output_count` is 1 or n. A comm of up to kMaxBuffers ranks
  // runs one kernel built for its rank count. More go through scratch: the
  // inputs are folded into it kMaxBuffers - 1 at a time (avg sums until the
  // last pass), then copied to the outputs. Every input is read before any
  // output is written, so outputs may be inputs.
  std::int32_t reduce_into(const Span *inputs, const Span *outputs, std::size_t output_count) const {
    const std::size_t input_count = n;
    if (comm.ranks_class != 0) {
      const auto &table = output_count == 1 ? comm.reduce_one : comm.reduce_all;
      return reduce_once(table[args.dtype][args.reduce_op], inputs, input_count, outputs, output_count);
    }
    const NamedKernel &kernel = comm.reduce_generic[args.dtype][args.reduce_op];
    const NamedKernel &fold =
        comm.reduce_generic[args.dtype][args.reduce_op == BP_AVG ? std::uint32_t{BP_SUM} : args.reduce_op];
    BP_OPENCL_CHECK(grow(comm.scratch, comm.scratch_bytes, block, "scratch"));
    const Span scratch{comm.scratch.get(), 0};
    std::array<Span, kMaxBuffers> pass{};
    std::size_t consumed = 0;
    bool first = true;
    for (;;) {
      std::size_t used = 0;
      if (!first) pass[used++] = scratch;
      const std::size_t take = std::min(kMaxBuffers - used, input_count - consumed);
      for (std::size_t k = 0; k < take; ++k) pass[used++] = inputs[consumed + k];
      consumed += take;
      first = false;
      const bool last = consumed == input_count;
      if (last && output_count <= kMaxBuffers) return reduce_once(kernel, pass.data(), used, outputs, output_count);
      BP_OPENCL_CHECK(reduce_once(last ? kernel : fold, pass.data(), used, &scratch, 1));
      if (last) break;
    }
    // The result to every output, in bytes.
    for (std::size_t first_output = 0; first_output < output_count; first_output += kMaxBuffers) {
      const std::size_t batch = std::min(kMaxBuffers, output_count - first_output);
      std::array<Span, kMaxBuffers> from{}, to{};
      for (std::size_t k = 0; k < batch; ++k) {
        from[k] = {scratch.mem, 0};
        to[k] = {outputs[first_output + k].mem, outputs[first_output + k].offset * element};
      }
      BP_OPENCL_CHECK(copy_pairs(from.data(), to.data(), batch, block));
    }
    return BP_OK;
  }
};

// ---- the collectives, on comm.send / comm.recv ------------------------------

std::int32_t all_reduce(const Call &c) {
  for (std::size_t r = 0; r < c.n; ++r) {
    c.comm.inputs[r] = {c.comm.send[r], 0};
    c.comm.outputs[r] = {c.comm.recv[r], 0};
  }
  return c.reduce_into(c.comm.inputs.data(), c.comm.outputs.data(), c.n);
}

std::int32_t reduce(const Call &c) {
  for (std::size_t r = 0; r < c.n; ++r) c.comm.inputs[r] = {c.comm.send[r], 0};
  const Span output{c.comm.recv[c.args.root], 0};
  return c.reduce_into(c.comm.inputs.data(), &output, 1);
}

// Rank r's result is block r of every send. In place it is written to block
// r of send[r], which no other rank's reduction reads.
std::int32_t reduce_scatter(const Call &c) {
  for (std::size_t r = 0; r < c.n; ++r) {
    for (std::size_t j = 0; j < c.n; ++j) c.comm.inputs[j] = {c.comm.send[j], r * c.args.count};
    const Span output{c.comm.recv[r], c.in_place(r) ? r * c.args.count : 0};
    BP_OPENCL_CHECK(c.reduce_into(c.comm.inputs.data(), &output, 1));
  }
  return BP_OK;
}

// Copies gathered as pairs (offsets in bytes) into comm.inputs/outputs.
struct Pairs {
  const Call &c;
  std::size_t count = 0;
  void add(cl_mem from, std::size_t from_offset, cl_mem to, std::size_t to_offset) {
    c.comm.inputs[count] = {from, from_offset};
    c.comm.outputs[count] = {to, to_offset};
    ++count;
  }
  std::int32_t run() const { return c.copy_pairs(c.comm.inputs.data(), c.comm.outputs.data(), count, c.block); }
};

std::int32_t broadcast(const Call &c) {
  const std::size_t root = c.args.root;
  Pairs pairs{c};
  for (std::size_t r = 0; r < c.n; ++r) {
    if (r == root && c.in_place(root)) continue;
    pairs.add(c.comm.send[root], 0, c.comm.recv[r], 0);
  }
  return pairs.run();
}

// Rank r's contribution (block r of its recv, in place) to block r of
// every recv: one batch of pairs per r. No pair writes what another reads:
// the outputs are blocks r of recv[j], and an in-place j's own
// contribution, block j, is not among them.
std::int32_t all_gather(const Call &c) {
  for (std::size_t r = 0; r < c.n; ++r) {
    Pairs pairs{c};
    for (std::size_t j = 0; j < c.n; ++j) {
      if (j == r && c.in_place(r)) continue;
      const cl_mem from = c.in_place(r) ? c.comm.recv[r] : c.comm.send[r];
      pairs.add(from, c.in_place(r) ? r * c.block : 0, c.comm.recv[j], r * c.block);
    }
    BP_OPENCL_CHECK(pairs.run());
  }
  return BP_OK;
}

std::int32_t gather(const Call &c) {
  const std::size_t root = c.args.root;
  Pairs pairs{c};
  for (std::size_t r = 0; r < c.n; ++r) {
    if (r == root && c.in_place(root)) continue;
    pairs.add(c.comm.send[r], 0, c.comm.recv[root], r * c.block);
  }
  return pairs.run();
}

std::int32_t scatter(const Call &c) {
  const std::size_t root = c.args.root;
  Pairs pairs{c};
  for (std::size_t r = 0; r < c.n; ++r) {
    if (r == root && c.in_place(root)) continue;
    pairs.add(c.comm.send[root], r * c.block, c.comm.recv[r], 0);
  }
  return pairs.run();
}

// Block j of send[r] to block r of recv[j]. A rank in place would have its
// blocks overwritten (by the other ranks' blocks for it) before they are
// sent, so the sends of all in-place ranks are first copied into scratch,
// slot by slot, and sent from there.
std::int32_t all_to_all(const Call &c) {
  const std::size_t all_blocks = c.block * c.n;
  std::size_t in_place_ranks = 0;
  for (std::size_t r = 0; r < c.n; ++r) in_place_ranks += c.in_place(r) ? 1 : 0;
  if (in_place_ranks != 0) {
    BP_OPENCL_CHECK(c.grow(c.comm.scratch, c.comm.scratch_bytes, in_place_ranks * all_blocks, "scratch"));
    Pairs saves{c};
    for (std::size_t r = 0; r < c.n; ++r) {
      if (c.in_place(r)) saves.add(c.comm.send[r], 0, c.comm.scratch.get(), saves.count * all_blocks);
    }
    BP_OPENCL_CHECK(c.copy_pairs(c.comm.inputs.data(), c.comm.outputs.data(), saves.count, all_blocks));
  }
  std::size_t slot = 0;
  for (std::size_t r = 0; r < c.n; ++r) {
    cl_mem from = c.comm.send[r];
    std::size_t base = 0;
    if (c.in_place(r)) {
      from = c.comm.scratch.get();
      base = slot++ * all_blocks;
    }
    Pairs pairs{c};
    for (std::size_t j = 0; j < c.n; ++j) {
      if (j == r && c.in_place(r)) continue;  // its own block stays where it is
      pairs.add(from, base + j * c.block, c.comm.recv[j], r * c.block);
    }
    BP_OPENCL_CHECK(pairs.run());
  }
  return BP_OK;
}

// ---- foreign ranks: through host memory ---------------------------------------

// The bytes of rank r's buffer the call reads (send) and writes (recv); in
// place, the whole region of the one buffer either side covers.
std::size_t staged_bytes(const Call &c, std::size_t r, bool send_side) {
  const bp_rank_buffers use = bp_rank_buffers_of(c.args.collective, c.n, r == c.args.root);
  const std::size_t send_bytes = use.send_blocks * c.block, recv_bytes = use.recv_blocks * c.block;
  if (c.in_place(r)) return std::max(send_bytes, recv_bytes);
  return send_side ? send_bytes : recv_bytes;
}

// Foreign ranks' inputs into their proxies, and comm.send/recv pointed at
// the proxies; everyone else's at their own buffers.
std::int32_t stage_in(const Call &c) {
  bp_plugin_comm &comm = c.comm;
  for (std::size_t r = 0; r < c.n; ++r) {
    comm.send[r] = c.args.send[r] != nullptr ? c.args.send[r]->mem.get() : nullptr;
    comm.recv[r] = c.args.recv[r] != nullptr ? c.args.recv[r]->mem.get() : nullptr;
    if (!comm.foreign[r]) continue;
    const Device &device = *comm.ranks[r];
    if (c.args.send[r] != nullptr) {
      const std::size_t bytes = staged_bytes(c, r, true);
      BP_OPENCL_CHECK(c.grow(comm.proxy_send[r], comm.proxy_send_bytes[r], bytes, "proxy send buffer"));
      if (comm.staging[r].size() < bytes) comm.staging[r].resize(bytes);
      cl_int status = clEnqueueReadBuffer(device.queue.get(), c.args.send[r]->mem.get(), CL_TRUE, 0, bytes,
                                          comm.staging[r].data(), 0, nullptr, nullptr);
      if (status != CL_SUCCESS) {
        return fail_cl(c.state.services, c.sink, status, "clEnqueueReadBuffer", "staging in", device.name.c_str());
      }
      status = clEnqueueWriteBuffer(comm.queue.get(), comm.proxy_send[r].get(), CL_TRUE, 0, bytes,
                                    comm.staging[r].data(), 0, nullptr, nullptr);
      if (status != CL_SUCCESS) return c.cl_failed(status, "clEnqueueWriteBuffer", "staging in");
      comm.send[r] = comm.proxy_send[r].get();
    }
    if (c.in_place(r)) {
      comm.recv[r] = comm.send[r];
    } else if (c.args.recv[r] != nullptr) {
      BP_OPENCL_CHECK(
          c.grow(comm.proxy_recv[r], comm.proxy_recv_bytes[r], staged_bytes(c, r, false), "proxy recv buffer"));
      comm.recv[r] = comm.proxy_recv[r].get();
    }
  }
  return BP_OK;
}

// Foreign ranks' results from their proxies into their own buffers, once
// the kernels are done.
std::int32_t stage_out(const Call &c) {
  bp_plugin_comm &comm = c.comm;
  for (std::size_t r = 0; r < c.n; ++r) {
    if (!comm.foreign[r] || c.args.recv[r] == nullptr) continue;
    const Device &device = *comm.ranks[r];
    const std::size_t bytes = staged_bytes(c, r, false);
    if (comm.staging[r].size() < bytes) comm.staging[r].resize(bytes);
    cl_int status = clEnqueueReadBuffer(comm.queue.get(), comm.recv[r], CL_TRUE, 0, bytes, comm.staging[r].data(), 0,
                                        nullptr, nullptr);
    if (status != CL_SUCCESS) return c.cl_failed(status, "clEnqueueReadBuffer", "staging out");
    status = clEnqueueWriteBuffer(device.queue.get(), c.args.recv[r]->mem.get(), CL_TRUE, 0, bytes,
                                  comm.staging[r].data(), 0, nullptr, nullptr);
    if (status != CL_SUCCESS) {
      return fail_cl(c.state.services, c.sink, status, "clEnqueueWriteBuffer", "staging out", device.name.c_str());
    }
  }
  return BP_OK;
}

// Every rank's earlier work done: the comm's queue and every rank's device
// queue (buffer transfers) finished.
std::int32_t barrier(const Call &c) {
  cl_int status = clFinish(c.comm.queue.get());
  if (status != CL_SUCCESS) return c.cl_failed(status, "clFinish", "barrier");
  for (const Device *device : c.comm.ranks) {
    status = clFinish(device->queue.get());
    if (status != CL_SUCCESS) {
      return fail_cl(c.state.services, c.sink, status, "clFinish", "barrier", device->name.c_str());
    }
  }
  return BP_OK;
}

// The same without waiting (one platform only): a marker on every rank's
// device queue, then one on the comm's queue that waits for them, after
// the comm's own earlier commands (in order); the last is the request's.
std::int32_t barrier_async(const Call &c) {
  bp_plugin_comm &comm = c.comm;
  std::int32_t result = BP_OK;
  std::size_t marked = 0;
  for (; marked < c.n; ++marked) {
    const Device &device = *comm.ranks[marked];
    cl_int status = clEnqueueMarkerWithWaitList(device.queue.get(), 0, nullptr, &comm.barrier_markers[marked]);
    // Another queue's command waits on these: its queue must be flushed.
    if (status == CL_SUCCESS) status = clFlush(device.queue.get());
    if (status != CL_SUCCESS) {
      if (comm.barrier_markers[marked] != nullptr) ++marked;
      result = fail_cl(c.state.services, c.sink, status, "clEnqueueMarkerWithWaitList", "barrier",
                       device.name.c_str());
      break;
    }
  }
  if (result == BP_OK) {
    const cl_int status = clEnqueueMarkerWithWaitList(comm.queue.get(), static_cast<cl_uint>(c.n),
                                                      comm.barrier_markers.data(), c.record());
    if (status != CL_SUCCESS) result = c.cl_failed(status, "clEnqueueMarkerWithWaitList", "barrier");
  }
  for (std::size_t r = 0; r < marked; ++r) {
    clReleaseEvent(comm.barrier_markers[r]);
    comm.barrier_markers[r] = nullptr;
  }
  return result;
}

std::int32_t run_collective(const Call &c) {
  switch (c.args.collective) {
    case BP_ALL_REDUCE: return all_reduce(c);
    case BP_REDUCE: return reduce(c);
    case BP_REDUCE_SCATTER: return reduce_scatter(c);
    case BP_BROADCAST: return broadcast(c);
    case BP_ALL_GATHER: return all_gather(c);
    case BP_GATHER: return gather(c);
    case BP_SCATTER: return scatter(c);
    case BP_ALL_TO_ALL: return all_to_all(c);
    default: break;
  }
  return fail(c.state.services, c.sink, BP_INVALID_ARGUMENT, "opencl collective_start: unknown collective %u",
              static_cast<unsigned>(c.args.collective));
}

// The comm's kernels, from the lead's program, by name.
std::int32_t create_kernels(const bp_plugin_state &state, bp_plugin_comm &comm, bp_error_sink *sink) {
  const Device &lead = *comm.lead;
  cl_uint count = 0;
  const cl_program program = lead.programs[comm.ranks_class].get();
  cl_int status = clCreateKernelsInProgram(program, 0, nullptr, &count);
  if (status != CL_SUCCESS) {
    return fail_cl(state.services, sink, status, "clCreateKernelsInProgram", "collectives.cl", lead.name.c_str());
  }
  std::vector<cl_kernel> kernels(count);
  status = clCreateKernelsInProgram(program, count, kernels.data(), nullptr);
  if (status != CL_SUCCESS) {
    return fail_cl(state.services, sink, status, "clCreateKernelsInProgram", "collectives.cl", lead.name.c_str());
  }
  std::vector<NamedKernel> named;
  for (cl_kernel kernel : kernels) {
    NamedKernel entry{KernelHandle(kernel), {}};
    std::size_t size = 0;
    if (clGetKernelInfo(kernel, CL_KERNEL_FUNCTION_NAME, 0, nullptr, &size) == CL_SUCCESS && size > 0) {
      entry.name.resize(size);
      clGetKernelInfo(kernel, CL_KERNEL_FUNCTION_NAME, size, entry.name.data(), nullptr);
      entry.name.resize(std::strlen(entry.name.c_str()));
    }
    named.push_back(std::move(entry));
  }
  auto take = [&](const std::string &name, NamedKernel &slot) {
    for (NamedKernel &entry : named) {
      if (entry.kernel && entry.name == name) {
        slot = std::move(entry);
        return true;
      }
    }
    return false;
  };
  for (std::size_t w = 0; w < kCopyKernelCount; ++w) {
    if (!take(kCopyKernelNames[w], comm.copy[w])) {
      return fail(state.services, sink, BP_INTERNAL, "opencl comm_create: the program for '%s' has no kernel %s",
                  lead.name.c_str(), kCopyKernelNames[w]);
    }
  }
  // Every (dtype, op) the lead declares must have its kernel; a missing one
  // is a bug of this plugin, caught here rather than in a collective.
  const std::uint32_t dtypes = device_dtypes(lead.features);
  for (std::uint32_t d = 0; d < BP_DTYPE_COUNT; ++d) {
    if (!(dtypes & (1u << d))) continue;
    for (std::uint32_t o = 0; o < BP_REDUCE_OP_COUNT; ++o) {
      bool declared = false;
      for (const bp_capability &row : state.declared.rows) {
        declared = declared || (row.collective == BP_ALL_REDUCE && (row.dtypes & (1u << d)) &&
                                (row.reduce_ops & (1u << o)));
      }
      if (!declared) continue;
      const std::string suffix = std::string(kDtypeNames[d]) + "_" + kOpNames[o];
      const std::pair<const char *, bp_plugin_comm::KernelTable *> wanted[] = {
          {"reduce_all_", &comm.reduce_all}, {"reduce_one_", &comm.reduce_one}, {"reduce_", &comm.reduce_generic}};
      for (const auto &[prefix, table] : wanted) {
        const bool specialized = std::string(prefix) != "reduce_";
        if (specialized != (comm.ranks_class != 0)) continue;
        const std::string name = prefix + suffix;
        if (!take(name, (*table)[d][o])) {
          return fail(state.services, sink, BP_INTERNAL, "opencl comm_create: the program for '%s' has no kernel %s",
                      lead.name.c_str(), name.c_str());
        }
      }
    }
  }
  return BP_OK;
}

std::string describe_route(const bp_plugin_state &state, const bp_plugin_comm &comm) {
  std::vector<std::size_t> platforms;
  for (const Device *device : comm.ranks) {
    if (std::find(platforms.begin(), platforms.end(), device->platform) == platforms.end()) {
      platforms.push_back(device->platform);
    }
  }
  if (platforms.size() == 1) {
    return "one OpenCL context (" + state.platforms[platforms[0]].name + "): device to device";
  }
  std::string names;
  for (std::size_t p : platforms) names += (names.empty() ? "" : ", ") + state.platforms[p].name;
  return "through host memory: ranks on different OpenCL platforms (" + names + ")";
}

}  // namespace

std::int32_t Backend::comm_create(bp_plugin_state &state, std::span<const std::uint32_t> devices,
                                  bp_plugin_comm **out, bp_error_sink *sink) {
  const std::size_t device_count = devices.size();
  auto comm = std::make_unique<bp_plugin_comm>();
  comm->state = &state;

  // For the programs (program_cache.cpp); the devices themselves stay as
  // they are while the comm is counted.
  std::lock_guard<std::mutex> lock(state.mutex);
  for (std::uint32_t device : devices) comm->ranks.push_back(state.devices[device].get());
  Device &lead = *state.devices[devices[0]];
  comm->lead = &lead;
  comm->context = state.platforms[lead.platform].context.get();
  comm->ranks_class = device_count <= kMaxSpecializedRanks ? device_count : 0;
  BP_OPENCL_CHECK(ensure_program(state, lead, comm->ranks_class, sink));
  cl_int status = CL_SUCCESS;
  comm->queue = QueueHandle(clCreateCommandQueue(comm->context, lead.id, 0, &status));
  if (status != CL_SUCCESS) {
    return fail_cl(state.services, sink, status, "clCreateCommandQueue", "comm", lead.name.c_str());
  }
  BP_OPENCL_CHECK(create_kernels(state, *comm, sink));

  comm->send.assign(device_count, nullptr);
  comm->recv.assign(device_count, nullptr);
  comm->inputs.assign(device_count, Span{});
  comm->outputs.assign(device_count, Span{});
  comm->foreign.assign(device_count, false);
  for (std::size_t r = 0; r < device_count; ++r) {
    comm->foreign[r] = comm->ranks[r]->platform != lead.platform;
    comm->any_foreign = comm->any_foreign || comm->foreign[r];
  }
  comm->proxy_send.resize(device_count);
  comm->proxy_recv.resize(device_count);
  comm->proxy_send_bytes.assign(device_count, 0);
  comm->proxy_recv_bytes.assign(device_count, 0);
  comm->staging.resize(device_count);
  comm->barrier_markers.assign(device_count, nullptr);
  comm->route = describe_route(state, *comm);
  log(state.services, BP_LOG_DEBUG, "comm of %zu ranks on '%s': %s", device_count, lead.name.c_str(),
      comm->route.c_str());
  *out = comm.release();
  return BP_OK;
}

void Backend::comm_destroy(bp_plugin_state &, bp_plugin_comm *comm) {
  // A host releases every request of a comm before destroying it; should
  // one still be in flight, it ends before the comm's objects go.
  if (comm->queue) clFinish(comm->queue.get());
  delete comm;
}

std::int32_t Backend::comm_info(bp_plugin_state &, bp_plugin_comm &comm, bp_plugin_comm_info &info, bp_error_sink *) {
  if (info.struct_size >= BP_STRUCT_SIZE(bp_plugin_comm_info, route)) info.route = comm.route.c_str();
  return BP_OK;
}

namespace {

// A blocking call: everything enqueued, waited for once, and complete on
// return; no request and no allocation. Also every call on a comm with
// ranks on another platform, whose staging is synchronous.
std::int32_t run_blocking(const Call &c) {
  bp_plugin_comm &comm = c.comm;
  const char *name = kCollectiveNames[c.args.collective];
  if (c.args.collective == BP_BARRIER) return barrier(c);
  if (c.args.count == 0) {
    // Nothing to move, but complete only once the comm's earlier requests are.
    const cl_int finished = clFinish(comm.queue.get());
    return finished == CL_SUCCESS ? BP_OK : c.cl_failed(finished, "clFinish", name);
  }
  std::int32_t status = stage_in(c);
  if (status == BP_OK) status = run_collective(c);
  // Wait once for everything enqueued, also after a failure: nothing may
  // touch the caller's buffers once the call returned.
  const cl_int finished = clFinish(comm.queue.get());
  if (status != BP_OK) return status;
  if (finished != CL_SUCCESS) return c.cl_failed(finished, "clFinish", name);
  if (comm.any_foreign) return stage_out(c);
  return BP_OK;
}

// An _async call on one platform: the commands enqueued and flushed, and
// a request holding the last one's event. A call that enqueues nothing
// (count 0, a rank alone in place) gets a marker, so that its request
// still completes after the comm's earlier ones.
std::int32_t run_async(const Call &c, bp_plugin_request **out) {
  bp_plugin_comm &comm = c.comm;
  const char *name = kCollectiveNames[c.args.collective];
  // Before anything is enqueued, so that running out of memory fails the
  // call before it started.
  auto request = std::make_unique<bp_plugin_request>();
  request->collective = name;
  request->device = comm.lead;
  std::int32_t status = BP_OK;
  if (c.args.collective == BP_BARRIER) {
    status = barrier_async(c);
  } else if (c.args.count != 0) {
    // On one platform stage_in only points comm.send/recv at the buffers.
    status = stage_in(c);
    if (status == BP_OK) status = run_collective(c);
  }
  if (status == BP_OK && *c.last_event == nullptr) {
    const cl_int marked = clEnqueueMarkerWithWaitList(comm.queue.get(), 0, nullptr, c.record());
    if (marked != CL_SUCCESS) status = c.cl_failed(marked, "clEnqueueMarkerWithWaitList", name);
  }
  // Started: the device may not begin queued commands until a flush.
  if (status == BP_OK) {
    const cl_int flushed = clFlush(comm.queue.get());
    if (flushed != CL_SUCCESS) status = c.cl_failed(flushed, "clFlush", name);
  }
  if (status != BP_OK) {
    // A failed call leaves nothing in flight that touches the buffers.
    clFinish(comm.queue.get());
    if (*c.last_event != nullptr) clReleaseEvent(*c.last_event);
    return status;
  }
  request->event = *c.last_event;
  *out = request.release();
  return BP_OK;
}

}  // namespace

// The host has checked the arguments (plugin.h, bp_collective_args): enums
// in range and declared for every rank's device (so every kernel a call
// picks exists, create_kernels made sure), rank_count, roots, buffers
// present, on the rank's device and large enough; the table checked that
// args is there and at least ABI 1.0's. Nothing is checked again.
std::int32_t Backend::collective_start(bp_plugin_state &state, bp_plugin_comm &comm, const bp_collective_args &args,
                                       bp_plugin_request **out, bp_error_sink *sink) {
  // A 1.0/1.1 host sends no flags and always waits at once (plugin.h).
  const bool caller_waits =
      args.struct_size < BP_COLLECTIVE_ARGS_SIZE_V1_2 || (args.flags & BP_COLLECTIVE_CALLER_WAITS) != 0;
  const std::size_t element = args.collective == BP_BARRIER ? 1 : kDtypeSizes[args.dtype];
  if (caller_waits || comm.any_foreign) {
    const Call c{state, sink, comm, args, comm.ranks.size(), element, args.count * element, nullptr};
    return run_blocking(c);
  }
  cl_event last = nullptr;
  const Call c{state, sink, comm, args, comm.ranks.size(), element, args.count * element, &last};
  return run_async(c, out);
}

}  // namespace backplane::opencl
