// One group's side of the transport: a communicator of its own (so that
// groups never match each other's messages) and every process's rank
// count, both made with nonblocking calls waited for with the host's
// timeout. What MPI may still write after a timeout is leaked, never freed.
#include <algorithm>
#include "mpi_plugin.hpp"

namespace backplane::mpi {
namespace {

using Clock = std::chrono::steady_clock;

std::int64_t time_left(std::int64_t timeout_ns, Clock::time_point start) {
  if (timeout_ns < 0) return -1;
  const std::int64_t spent = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  return spent >= timeout_ns ? 0 : timeout_ns - spent;
}

}  // namespace

std::int32_t create_comm(bp_plugin_state &state, bp_transport &transport, const bp_transport_comm_args &args,
                         bp_transport_comm_info &info, bp_transport_comm **out, bp_error_sink *sink) {
  const TableCall call{state.services, sink, kName, "comm_create"};
  const int me = transport.process_index, processes = transport.process_count;
  if (args.local_ranks == 0)
    return call.fail(BP_INVALID_ARGUMENT, "local_ranks is 0 on process %d of %d: a process holds at least one rank",
                     me, processes);
  const auto timed_out = [&](const char *phase) {
    note_abandoned_request();
    return fail(state.services, sink, BP_TIMEOUT,
                "the mpi transport timed out after %s making a group (process %d of %d, %s): another process did "
                "not arrive",
                seconds_text(args.timeout_ns).c_str(), me, processes, phase);
  };
  const auto failed = [&](const char *what, int error) {
    return fail(state.services, sink, BP_DEVICE_FAILURE, "%s failed on process %d of %d: %s", what, me, processes,
                mpi_error_text(error).c_str());
  };
  // A group whose making timed out left its idup in flight: every later
  // one would be paired one call off with the other processes' and time
  // out in turn, so the transport makes no more.
  if (transport.abandoned.load())
    return call.fail(BP_DEVICE_FAILURE,
                     "an earlier group on this transport timed out while it was made (process %d of %d): the "
                     "processes no longer agree on which group is which; make a new host",
                     me, processes);
  const Clock::time_point start = Clock::now();
  int mpi_error = MPI_SUCCESS;

  // MPI writes the new communicator when the idup completes: after a
  // timeout that may still happen, so its handle's memory is then leaked.
  auto group_comm = std::make_unique<MPI_Comm>(MPI_COMM_NULL);
  MPI_Request request = MPI_REQUEST_NULL;
  {
    const std::lock_guard<std::mutex> lock(transport.start_mutex);
    if (const int error = MPI_Comm_idup(transport.comm, group_comm.get(), &request); error != MPI_SUCCESS)
      return failed("MPI_Comm_idup", error);
  }
  switch (wait_for(request, args.timeout_ns, transport.spin, mpi_error)) {
    case WaitResult::kDone: break;
    case WaitResult::kFailed: return failed("MPI_Comm_idup", mpi_error);
    case WaitResult::kTimedOut:
      transport.abandoned.store(true);
      (void)group_comm.release();
      return timed_out("duplicating its communicator");
  }
  MPI_Comm_set_errhandler(*group_comm, MPI_ERRORS_RETURN);

  // processes + 1 rows: the gathered ones, then this process's own (the
  // send buffer), since MPI reads and writes both until the gather
  // completes. A row: the process's rank count, and its doubling_bytes and
  // halving_bytes, which every process must use alike (the smallest wins).
  constexpr std::size_t kRow = 3;
  const auto P = static_cast<std::size_t>(processes);
  auto gathered = std::make_unique<std::uint64_t[]>((P + 1) * kRow);
  gathered[P * kRow] = args.local_ranks;
  gathered[P * kRow + 1] = transport.doubling_bytes;
  gathered[P * kRow + 2] = transport.halving_bytes;
  if (const int error = MPI_Iallgather(&gathered[P * kRow], kRow, MPI_UINT64_T, gathered.get(), kRow, MPI_UINT64_T,
                                       *group_comm, &request);
      error != MPI_SUCCESS) {
    MPI_Comm_free(group_comm.get());
    return failed("MPI_Iallgather", error);
  }
  switch (wait_for(request, time_left(args.timeout_ns, start), transport.spin, mpi_error)) {
    case WaitResult::kDone: break;
    case WaitResult::kFailed:
      MPI_Comm_free(group_comm.get());
      return failed("MPI_Iallgather", mpi_error);
    case WaitResult::kTimedOut:
      // The communicator and both buffers stay MPI's.
      (void)group_comm.release();
      (void)gathered.release();
      return timed_out("gathering the processes' rank counts");
  }

  auto comm = std::make_unique<bp_transport_comm>();
  comm->transport = &transport;
  comm->comm = *group_comm;
  comm->process_index = me;
  comm->process_count = processes;
  comm->first_block.assign(P + 1, 0);
  comm->process_ranks = std::make_unique<std::uint64_t[]>(P);
  comm->doubling_bytes = transport.doubling_bytes;
  comm->halving_bytes = transport.halving_bytes;
  for (std::size_t p = 0; p < P; ++p) {
    comm->process_ranks[p] = gathered[p * kRow];
    comm->doubling_bytes = std::min(comm->doubling_bytes, gathered[p * kRow + 1]);
    comm->halving_bytes = std::min(comm->halving_bytes, gathered[p * kRow + 2]);
    // Every process refuses 0 itself before the gather, so none arrives here.
    if (__builtin_add_overflow(comm->first_block[p], comm->process_ranks[p], &comm->first_block[p + 1])) {
      MPI_Comm_free(&comm->comm);
      return call.fail(BP_INVALID_ARGUMENT, "the processes' rank counts overflow 64 bits");
    }
  }
  if (comm->doubling_bytes != transport.doubling_bytes || comm->halving_bytes != transport.halving_bytes)
    plugin_support::log(state.services, BP_LOG_WARN, kName,
                        "comm_create: the processes' options differ; this group uses the smallest, doubling_bytes "
                        "%llu and halving_bytes %llu",
                        static_cast<unsigned long long>(comm->doubling_bytes),
                        static_cast<unsigned long long>(comm->halving_bytes));
  if (info.struct_size >= BP_STRUCT_SIZE(bp_transport_comm_info, process_index))
    info.process_index = static_cast<std::uint32_t>(me);
  if (info.struct_size >= BP_STRUCT_SIZE(bp_transport_comm_info, process_count))
    info.process_count = static_cast<std::uint32_t>(processes);
  if (info.struct_size >= BP_STRUCT_SIZE(bp_transport_comm_info, process_ranks))
    info.process_ranks = comm->process_ranks.get();
  *out = comm.release();
  return BP_OK;
}

void destroy_comm(bp_plugin_state &state, bp_transport_comm *comm) {
  if (library_usable()) {
    if (comm->abandoned.load() > 0)
      plugin_support::log(state.services, BP_LOG_WARN, kName,
                          "comm_destroy: an exchange of this group timed out and is still in flight; its "
                          "communicator is left to MPI");
    else
      MPI_Comm_free(&comm->comm);
  }
  delete comm;
}

}  // namespace backplane::mpi

namespace {
// Two exchanges are in flight at most on a comm (a pipelined call's).
constexpr std::size_t kKeptSpares = 2;
}  // namespace

backplane::mpi::SpareMemory bp_transport_comm::borrow(std::size_t bytes) {
  if (bytes == 0) return {};
  {
    const std::lock_guard<std::mutex> lock(spare_mutex);
    for (auto it = spares.begin(); it != spares.end(); ++it) {
      if (it->bytes < bytes) continue;
      backplane::mpi::SpareMemory kept = std::move(*it);
      spares.erase(it);
      return kept;
    }
  }
  // Not zeroed: every byte read was first received.
  return {std::unique_ptr<unsigned char[]>(new unsigned char[bytes]), bytes};
}

void bp_transport_comm::give_back(backplane::mpi::SpareMemory spare) {
  const std::lock_guard<std::mutex> lock(spare_mutex);
  spares.push_back(std::move(spare));
  if (spares.size() <= kKeptSpares) return;
  // Keep the largest: the next exchange of a size already seen allocates nothing.
  auto smallest = std::min_element(spares.begin(), spares.end(),
                                   [](const auto &a, const auto &b) { return a.bytes < b.bytes; });
  spares.erase(smallest);
}
