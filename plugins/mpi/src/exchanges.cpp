// Exchanges: every collective of plugin.h's transport table as one of
// MPI's nonblocking collectives on the group's communicator, waited for
// by polling (request_wait.cpp). Process p holds blocks[p] blocks of
// `count` elements; MPI's counts and displacements are in elements, or in
// whole blocks through a contiguous type when elements would overflow
// MPI's int. A reduction's count must fit in an int (MPI has no type that
// reduces in larger units with its own ops): larger ones are refused, for
// the host to split.
#include <climits>
#include <cstring>

#include "half_float.hpp"
#include "mpi_plugin.hpp"

namespace backplane::mpi {
namespace {

// Point-to-point tags go round at MPI_TAG_UB's least guaranteed value.
constexpr std::uint32_t kTagsInTurn = 32768;

const char *const kCollectiveNames[BP_COLLECTIVE_COUNT] = {
    "all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter", "gather", "scatter", "all_to_all", "barrier"};
const char *const kDtypeNames[BP_DTYPE_COUNT] = {"f16", "bf16", "f32", "f64", "i8", "u8", "i32", "u32", "i64", "u64"};
const char *const kOpNames[BP_REDUCE_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};
constexpr std::size_t kElementBytes[BP_DTYPE_COUNT] = {2, 2, 4, 8, 1, 1, 4, 4, 8, 8};

MPI_Datatype element_type(std::uint32_t dtype) {
  switch (dtype) {
    case BP_F16:
    case BP_BF16: return MPI_UINT16_T;  // reduced by the plugin's own ops
    case BP_F32: return MPI_FLOAT;
    case BP_F64: return MPI_DOUBLE;
    case BP_I8: return MPI_INT8_T;
    case BP_U8: return MPI_UINT8_T;
    case BP_I32: return MPI_INT32_T;
    case BP_U32: return MPI_UINT32_T;
    case BP_I64: return MPI_INT64_T;
    default: return MPI_UINT64_T;
  }
}

MPI_Op reduce_op(std::uint32_t dtype, std::uint32_t op) {
  const std::uint32_t summed = op == BP_AVG ? static_cast<std::uint32_t>(BP_SUM) : op;
  if (dtype == BP_F16 || dtype == BP_BF16) return half_float_op(dtype, summed);
  if ((dtype == BP_I8 || dtype == BP_U8) && summed == BP_SUM) return half_float_op(dtype, summed);
  switch (summed) {
    case BP_SUM: return MPI_SUM;
    case BP_PROD: return MPI_PROD;
    case BP_MIN: return MPI_MIN;
    default: return MPI_MAX;
  }
}

bool reduces(std::uint32_t collective) {
  return collective == BP_ALL_REDUCE || collective == BP_REDUCE || collective == BP_REDUCE_SCATTER;
}
bool rooted(std::uint32_t collective) {
  return collective == BP_REDUCE || collective == BP_BROADCAST || collective == BP_GATHER || collective == BP_SCATTER;
}
bool is_float(std::uint32_t dtype) { return dtype == BP_F16 || dtype == BP_BF16 || dtype == BP_F32 || dtype == BP_F64; }
bool fits_int(std::uint64_t value) { return value <= static_cast<std::uint64_t>(INT_MAX); }

// "an all_reduce of 1024 f32", "a barrier": what messages call an exchange.
std::string describe(const bp_plugin_request &request) {
  const char *name = kCollectiveNames[request.collective];
  const char *article = name[0] == 'a' ? "an" : "a";
  if (request.collective == BP_BARRIER) return std::string(article) + " " + name;
  std::string text = std::string(article) + " " + name;
  if (reduces(request.collective)) text += std::string(" (") + kOpNames[request.reduce_op] + ")";
  return text + " of " + std::to_string(request.count) + " " + kDtypeNames[request.dtype];
}

// Divides each element by `over` in place, at any alignment: BP_AVG.
template <class T>
void divide(void *memory, std::size_t elements, std::uint64_t over) {
  auto *bytes = static_cast<unsigned char *>(memory);
  const T divisor = static_cast<T>(over);
  for (std::size_t i = 0; i < elements; ++i) {
    T value;
    std::memcpy(&value, bytes + i * sizeof(T), sizeof(T));
    value /= divisor;
    std::memcpy(bytes + i * sizeof(T), &value, sizeof(T));
  }
}

template <float (*Widen)(std::uint16_t), std::uint16_t (*Narrow)(float)>
void divide_16(void *memory, std::size_t elements, std::uint64_t over) {
  auto *bytes = static_cast<unsigned char *>(memory);
  const auto divisor = static_cast<float>(over);
  for (std::size_t i = 0; i < elements; ++i) {
    std::uint16_t value;
    std::memcpy(&value, bytes + 2 * i, 2);
    value = Narrow(Widen(value) / divisor);
    std::memcpy(bytes + 2 * i, &value, 2);
  }
}

// What happens once MPI reports the request complete: the in-place
// reduce_scatter's copy, then avg's division.
void finish(bp_plugin_request &request) {
  if (request.scratch_destination != nullptr)
    std::memcpy(request.scratch_destination, request.scratch.data(), request.scratch.size());
  if (void *memory = request.average_memory; memory != nullptr) {
    const std::size_t elements = request.average_elements;
    const std::uint64_t over = request.average_over;
    switch (request.dtype) {
      case BP_F16: divide_16<half_to_float, float_to_half>(memory, elements, over); break;
      case BP_BF16: divide_16<bfloat_to_float, float_to_bfloat>(memory, elements, over); break;
      case BP_F32: divide<float>(memory, elements, over); break;
      default: divide<double>(memory, elements, over); break;
    }
  }
  if (request.block_type != MPI_DATATYPE_NULL) MPI_Type_free(&request.block_type);
  request.done = true;
}

// A request left in flight for good, counted once on its comm and in the
// library (whose user ops then outlive the transports); and one of those
// seen complete after all.
void abandon(bp_plugin_request &request) {
  if (request.timed_out) return;
  request.timed_out = true;
  request.comm->abandoned.fetch_add(1);
  note_abandoned_request();
}
void recovered(bp_plugin_request &request) {
  if (!request.timed_out) return;
  request.timed_out = false;
  request.comm->abandoned.fetch_sub(1);
  note_recovered_request();
}

// Frees what a request owns; only for one MPI no longer uses (a doubling
// whose start failed with a message posted is left to MPI).
void discard(bp_plugin_request *request) {
  if (request->doubling && library_usable() && doubling_in_flight(*request->doubling)) return;
  if (request->block_type != MPI_DATATYPE_NULL && library_usable()) MPI_Type_free(&request->block_type);
  delete request;
}

// The layout of the non-reducing collectives' v-arguments: `units[p]`
// blocks of process p (at block `first[p]`), as MPI counts. In elements of
// the base type when the largest buffer's elements fit in an int, else in
// whole blocks of a contiguous type made for the exchange.
std::int32_t lay_out(const TableCall &call, bp_plugin_request &request, MPI_Datatype element,
                     const std::vector<std::uint64_t> &units, const std::vector<std::uint64_t> &first,
                     std::uint64_t total_units, MPI_Datatype &type) {
  const std::uint64_t count = request.count;
  std::uint64_t total_elements = 0;
  std::uint64_t scale = count;
  type = element;
  if (__builtin_mul_overflow(count, total_units, &total_elements) || !fits_int(total_elements)) {
    if (!fits_int(count) || !fits_int(total_units))
      return call.fail(BP_INVALID_ARGUMENT,
                       "%s on %zu blocks is too large for MPI's int counts (at most %d elements a block and %d "
                       "blocks); the host must split it",
                       describe(request).c_str(), static_cast<std::size_t>(total_units), INT_MAX, INT_MAX);
    if (const int error = MPI_Type_contiguous(static_cast<int>(count), element, &request.block_type);
        error != MPI_SUCCESS)
      return call.fail(BP_DEVICE_FAILURE, "MPI_Type_contiguous failed: %s", mpi_error_text(error).c_str());
    MPI_Type_commit(&request.block_type);
    type = request.block_type;
    scale = 1;
  }
  const std::size_t processes = units.size();
  request.counts.resize(processes);
  request.displacements.resize(processes);
  for (std::size_t p = 0; p < processes; ++p) {
    request.counts[p] = static_cast<int>(units[p] * scale);  // within total_units x scale, which fits
    request.displacements[p] = static_cast<int>(first[p] * scale);
  }
  return BP_OK;
}

}  // namespace

std::int32_t start_exchange(bp_plugin_state &state, bp_transport_comm &comm, const bp_transport_exchange &x,
                            bp_plugin_request **out, bp_error_sink *sink) {
  const TableCall call{state.services, sink, kName, "exchange_start"};
  const int me = comm.process_index, processes = comm.process_count;
  const auto P = static_cast<std::size_t>(processes);
  const auto self = static_cast<std::size_t>(me);
  // The host checked all of this against the rows and the sizes; checked
  // again where a wrong value would index out of an array or hand MPI a
  // NULL buffer.
  if (x.collective >= BP_COLLECTIVE_COUNT)
    return call.fail(BP_INVALID_ARGUMENT, "collective %u does not exist", static_cast<unsigned>(x.collective));
  const std::uint32_t collective = x.collective;
  if (collective != BP_BARRIER && x.dtype >= BP_DTYPE_COUNT)
    return call.fail(BP_INVALID_ARGUMENT, "element type %u does not exist", static_cast<unsigned>(x.dtype));
  if (reduces(collective)) {
    if (x.reduce_op >= BP_REDUCE_OP_COUNT)
      return call.fail(BP_INVALID_ARGUMENT, "reduce op %u does not exist", static_cast<unsigned>(x.reduce_op));
    if (x.reduce_op == BP_AVG && !is_float(x.dtype))
      return call.fail(BP_UNSUPPORTED_REDUCE_OP, "avg is declared for floating-point types only, not %s",
                       kDtypeNames[x.dtype]);
    if (x.reduce_op == BP_AVG && x.average_over == 0)
      return call.fail(BP_INVALID_ARGUMENT, "avg with average_over 0");
  }
  if (rooted(collective) && x.root >= static_cast<std::uint32_t>(processes))
    return call.fail(BP_INVALID_ARGUMENT, "root %u is not a process of the group's %d", static_cast<unsigned>(x.root),
                     processes);
  const bool at_root = static_cast<int>(x.root) == me;

  // Counted alike on every process: the tag of a point-to-point exchange.
  const int tag = static_cast<int>(comm.exchanges_started++ % kTagsInTurn);
  auto request = std::make_unique<bp_plugin_request>();
  request->comm = &comm;
  request->collective = collective;
  request->dtype = collective == BP_BARRIER ? 0 : x.dtype;
  request->reduce_op = reduces(collective) ? x.reduce_op : 0;
  request->count = x.count;
  if (collective == BP_BARRIER) {
    request->mpi_call = "MPI_Ibarrier";
    if (const int error = MPI_Ibarrier(comm.comm, &request->request); error != MPI_SUCCESS)
      return fail(state.services, sink, BP_DEVICE_FAILURE, "MPI_Ibarrier failed on process %d of %d: %s", me,
                  processes, mpi_error_text(error).c_str());
    *out = request.release();
    return BP_OK;
  }
  // Every process sees the same count, so all of them skip it alike.
  if (x.count == 0) {
    *out = nullptr;
    return BP_OK;
  }

  // Blocks per process: its ranks in the group, or one each.
  const bool one_each = (x.flags & BP_EXCHANGE_ONE_BLOCK_PER_PROCESS) != 0;
  std::vector<std::uint64_t> blocks(P), first(P);
  for (std::size_t p = 0; p < P; ++p) {
    blocks[p] = one_each ? 1 : comm.process_ranks[p];
    first[p] = one_each ? p : comm.first_block[p];
  }
  const std::uint64_t mine = blocks[self], all = one_each ? P : comm.first_block[P];
  const std::size_t element_bytes = kElementBytes[x.dtype];
  const MPI_Datatype element = element_type(x.dtype);
  const bool in_place = x.send != nullptr && x.send == x.recv;
  void *send = const_cast<void *>(x.send);  // MPI's C API takes no const for a root's broadcast buffer
  void *recv = x.recv;

  // The buffers each process must pass (plugin.h's table), so that MPI is
  // never handed NULL for memory it would touch.
  const bool needs_send = collective != BP_BROADCAST && collective != BP_SCATTER ? true : at_root;
  const bool needs_recv = collective == BP_REDUCE || collective == BP_GATHER ? at_root
                          : collective == BP_BROADCAST                       ? !at_root
                                                                             : true;
  if ((needs_send && send == nullptr) || (needs_recv && recv == nullptr))
    return call.fail(BP_INVALID_ARGUMENT, "%s on process %d of %d: %s is NULL", describe(*request).c_str(), me,
                     processes, needs_send && send == nullptr ? "send" : "recv");

  int error = MPI_SUCCESS;
  if (reduces(collective)) {
    std::uint64_t reduced = x.count;  // the elements one MPI call reduces: every process's, for reduce_scatter
    if (collective == BP_REDUCE_SCATTER && __builtin_mul_overflow(reduced, all, &reduced)) reduced = UINT64_MAX;
    if (!fits_int(reduced))
      return call.fail(BP_INVALID_ARGUMENT,
                       "%s reduces %llu elements in one MPI call, more than MPI's int counts hold (%d); the host "
                       "must split it",
                       describe(*request).c_str(), static_cast<unsigned long long>(reduced), INT_MAX);
    const MPI_Op op = reduce_op(x.dtype, x.reduce_op);
    if (op == MPI_OP_NULL)
      return call.fail(BP_INTERNAL, "no MPI op for %s (no transport open?)", describe(*request).c_str());
    const int n = static_cast<int>(x.count);
    if (x.reduce_op == BP_AVG) request->average_over = x.average_over;
    switch (collective) {
      case BP_ALL_REDUCE:
        request->average_memory = recv;
        request->average_elements = x.count;
        // Two processes only, for now: with three under heavy oversubscription
        // (two busy loops beside mpirun -np 3 on 2 cores) a run of the mpi
        // tests stalled with these exchanges and passed without them; the
        // cause is not found yet (README.md, "All-reduce on point-to-point messages").
        if (const std::uint64_t bytes = x.count * element_bytes;
            P == 2 && (bytes <= comm.doubling_bytes || bytes <= comm.halving_bytes)) {
          const bool halving = bytes > comm.doubling_bytes;
          request->mpi_call = halving ? "MPI_Isend/MPI_Irecv (recursive halving and doubling)"
                                      : "MPI_Isend/MPI_Irecv (recursive doubling)";
          error = start_doubling(*request, send, recv, n, element_bytes, element, op, tag, halving);
          break;
        }
        request->mpi_call = "MPI_Iallreduce";
        error = MPI_Iallreduce(in_place ? MPI_IN_PLACE : send, recv, n, element, op, comm.comm, &request->request);
        break;
      case BP_REDUCE:
        request->mpi_call = "MPI_Ireduce";
        if (at_root) {
          request->average_memory = recv;
          request->average_elements = x.count;
        }
        error = MPI_Ireduce(at_root && in_place ? MPI_IN_PLACE : send, at_root ? recv : nullptr, n, element, op,
                            static_cast<int>(x.root), comm.comm, &request->request);
        break;
      default: {  // BP_REDUCE_SCATTER: recvcounts[p] = blocks[p] x count
        request->mpi_call = "MPI_Ireduce_scatter";
        request->counts.resize(P);
        for (std::size_t p = 0; p < P; ++p) request->counts[p] = static_cast<int>(blocks[p] * x.count);
        void *result = recv;
        if (in_place) {
          // In place, this process's part is its part of send (as for the
          // other in-place collectives), and the other blocks are left as
          // they were: MPI_IN_PLACE would write the part at the start, so
          // MPI writes scratch, copied to the part once complete.
          request->scratch.resize(mine * x.count * element_bytes);
          request->scratch_destination = static_cast<unsigned char *>(recv) + first[self] * x.count * element_bytes;
          result = request->scratch.data();
        }
        request->average_memory = in_place ? request->scratch_destination : recv;
        request->average_elements = mine * x.count;
        error = MPI_Ireduce_scatter(send, result, request->counts.data(), element, op, comm.comm, &request->request);
        break;
      }
    }
    if (x.reduce_op != BP_AVG) request->average_memory = nullptr;
  } else if (collective == BP_BROADCAST) {
    if (!fits_int(x.count))
      return call.fail(BP_INVALID_ARGUMENT,
                       "%s is more than MPI's int counts hold (%d elements); the host must split it",
                       describe(*request).c_str(), INT_MAX);
    request->mpi_call = "MPI_Ibcast";
    error = MPI_Ibcast(at_root ? send : recv, static_cast<int>(x.count), element, static_cast<int>(x.root),
                       comm.comm, &request->request);
  } else {
    // all_gather, gather, scatter: process p's part is blocks[p] blocks at
    // block first[p] of the big buffer. all_to_all: to and from process q
    // go mine x blocks[q] blocks, in process order.
    std::vector<std::uint64_t> units = blocks, at = first;
    std::uint64_t total = all;
    if (collective == BP_ALL_TO_ALL) {
      // mine x blocks[q] <= mine x all; an overflow of that makes lay_out refuse before it reads units.
      if (__builtin_mul_overflow(mine, all, &total)) total = UINT64_MAX;
      for (std::size_t q = 0; q < P; ++q) {
        units[q] = mine * blocks[q];
        at[q] = mine * first[q];
      }
    }
    MPI_Datatype type = element;
    if (const std::int32_t refused = lay_out(call, *request, element, units, at, total, type); refused != BP_OK)
      return refused;
    const int *counts = request->counts.data(), *displacements = request->displacements.data();
    switch (collective) {
      case BP_ALL_GATHER:
        // In place, this process's part is already at its offset of recv:
        // MPI_IN_PLACE's meaning for MPI_Allgatherv exactly.
        request->mpi_call = "MPI_Iallgatherv";
        error = MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, counts[self], type, recv, counts, displacements, type,
                                comm.comm, &request->request);
        break;
      case BP_GATHER:
        request->mpi_call = "MPI_Igatherv";
        error = MPI_Igatherv(at_root && in_place ? MPI_IN_PLACE : send, counts[self], type, at_root ? recv : nullptr,
                             counts, displacements, type, static_cast<int>(x.root), comm.comm, &request->request);
        break;
      case BP_SCATTER:
        // In place at the root, its part stays where it is in send.
        request->mpi_call = "MPI_Iscatterv";
        error = MPI_Iscatterv(at_root ? send : nullptr, counts, displacements, type,
                              at_root && in_place ? MPI_IN_PLACE : recv, counts[self], type,
                              static_cast<int>(x.root), comm.comm, &request->request);
        break;
      default:  // BP_ALL_TO_ALL; in place, recv's blocks are replaced (what goes and what comes match in size)
        request->mpi_call = "MPI_Ialltoallv";
        error = MPI_Ialltoallv(in_place ? MPI_IN_PLACE : send, counts, displacements, type, recv, counts,
                               displacements, type, comm.comm, &request->request);
        break;
    }
  }
  if (error != MPI_SUCCESS) {
    const std::int32_t code = fail(state.services, sink, BP_DEVICE_FAILURE, "%s failed on process %d of %d: %s",
                                   request->mpi_call, me, processes, mpi_error_text(error).c_str());
    discard(request.release());
    return code;
  }
  *out = request.release();
  return BP_OK;
}

std::int32_t wait_exchange(bp_plugin_state &state, bp_plugin_request &request, std::int64_t timeout_ns,
                           bp_error_sink *sink) {
  if (request.done) return BP_OK;
  bp_transport_comm &comm = *request.comm;
  int mpi_error = request.failure;
  if (mpi_error == MPI_SUCCESS) {
    const WaitResult waited =
        request.doubling ? wait_until([](void *d, int &error) { return progress_doubling(*static_cast<Doubling *>(d), error); },
                                      request.doubling.get(), timeout_ns, comm.transport->spin, mpi_error)
                         : wait_for(request.request, timeout_ns, comm.transport->spin, mpi_error);
    switch (waited) {
      case WaitResult::kDone:
        recovered(request);  // a wait after a timeout, which this host never makes
        finish(request);
        return BP_OK;
      case WaitResult::kFailed: request.failure = mpi_error; break;
      case WaitResult::kTimedOut: break;
    }
  }
  if (mpi_error != MPI_SUCCESS)  // MPI freed the request: each later wait says the same
    return fail(state.services, sink, BP_DEVICE_FAILURE, "%s failed on process %d of %d: %s", request.mpi_call,
                comm.process_index, comm.process_count, mpi_error_text(mpi_error).c_str());
  // Left in flight, as plugin.h asks: the host calls the group broken and
  // only releases the request at comm_destroy, which must not block on it.
  abandon(request);
  return fail(state.services, sink, BP_TIMEOUT,
              "the mpi transport timed out after %s waiting for %s (process %d of %d): another process did not "
              "call it",
              seconds_text(timeout_ns).c_str(), describe(request).c_str(), comm.process_index, comm.process_count);
}

void release_exchange(bp_plugin_state &state, bp_plugin_request *request) {
  if (!request->done && request->doubling && library_usable()) {
    // Released, it reduces nothing more into the caller's memory, which
    // may be gone: its messages are only looked at.
    if (doubling_in_flight(*request->doubling)) {
      // Point-to-point messages of a collective that other processes still
      // expect: cancelling them would leave those waiting. Leaked, as below.
      plugin_support::log(state.services, BP_LOG_WARN, kName,
                          "exchange_release: %s is still in flight on process %d of %d; its messages and what they "
                          "use are left allocated",
                          describe(*request).c_str(), request->comm->process_index, request->comm->process_count);
      abandon(*request);
      return;
    }
  } else if (!request->done && request->request != MPI_REQUEST_NULL && library_usable()) {
    // One last look, which never blocks: a request that completed late can
    // still be freed.
    int flag = 0;
    const bool failed = MPI_Test(&request->request, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS;
    if (!failed && flag == 0) {
      // A collective's request cannot be cancelled, and MPI may yet read
      // and write everything the request holds: leaked, by design.
      plugin_support::log(state.services, BP_LOG_WARN, kName,
                          "exchange_release: %s is still in flight on process %d of %d; its MPI request and what "
                          "it uses are left allocated",
                          describe(*request).c_str(), request->comm->process_index, request->comm->process_count);
      abandon(*request);
      return;
    }
  }
  recovered(*request);  // it completed after all: MPI no longer uses it
  discard(request);
}

}  // namespace backplane::mpi
