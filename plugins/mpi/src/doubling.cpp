// A small all_reduce by recursive doubling on point-to-point messages.
// Open MPI's MPI_Iallreduce (coll/libnbc) builds a schedule per call and
// runs it through its progress engine, which costs about 1 µs more than the
// blocking MPI_Allreduce below 16 KiB here (docs/PERFORMANCE.md); the same
// exchange as MPI_Isend/MPI_Irecv pairs and MPI_Reduce_local costs little
// more than the messages themselves, and stays non-blocking, so the host's
// timeout still holds.
//
// The schedule, for P processes (p2 the largest power of two <= P, rem =
// P - p2): the first 2 x rem processes pair up, the even one handing its
// data to the odd one and waiting for the result; the p2 that remain swap
// and reduce with the process at distance 1, 2, 4, ... of their renumbering;
// the odd ones then hand the result back. Every reduction computes the
// lower process's operand first (MPI_Reduce_local(lower, higher)), so every
// process holds the same bits whatever the op does with NaNs.
#include <cstring>
#include <vector>

#include "mpi_plugin.hpp"

namespace backplane::mpi {
namespace {

enum class StepKind {
  kSend,          // hand my data to the partner
  kReceive,       // take the partner's data and reduce it with mine
  kSwap,          // both of those at once
  kTakeResult,    // the partner's result replaces my data
  kGiveResult,    // my result to the partner
};

struct Step {
  StepKind kind;
  int partner;
};

}  // namespace

struct Doubling {
  MPI_Comm comm = MPI_COMM_NULL;
  int me = 0, tag = 0, count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
  std::size_t bytes = 0;
  unsigned char *result = nullptr;  // the caller's recv
  // The running value is in `mine`, the partner's arrives in `theirs`; both
  // point into {result, spare} and swap when a reduction lands in `theirs`.
  std::vector<unsigned char> spare;
  unsigned char *mine = nullptr, *theirs = nullptr;
  std::vector<Step> steps;
  std::size_t next = 0;
  MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int posted = 0;
};

void DoublingDeleter::operator()(Doubling *doubling) const { delete doubling; }

namespace {

std::vector<Step> schedule(int me, int processes) {
  std::vector<Step> steps;
  int p2 = 1;
  while (p2 * 2 <= processes) p2 *= 2;
  const int rem = processes - p2;
  int renumbered = me - rem;
  if (me < 2 * rem) {
    if (me % 2 == 0) return {{StepKind::kSend, me + 1}, {StepKind::kTakeResult, me + 1}};
    steps.push_back({StepKind::kReceive, me - 1});
    renumbered = me / 2;
  }
  for (int distance = 1; distance < p2; distance *= 2) {
    const int other = renumbered ^ distance;
    steps.push_back({StepKind::kSwap, other < rem ? other * 2 + 1 : other + rem});
  }
  if (me < 2 * rem) steps.push_back({StepKind::kGiveResult, me - 1});
  return steps;
}

int post(Doubling &d, const Step &step) {
  d.posted = 0;
  const bool sends = step.kind == StepKind::kSend || step.kind == StepKind::kSwap || step.kind == StepKind::kGiveResult;
  const bool receives = step.kind == StepKind::kReceive || step.kind == StepKind::kSwap ||
                        step.kind == StepKind::kTakeResult;
  if (receives) {
    void *into = step.kind == StepKind::kTakeResult ? d.mine : d.theirs;
    if (const int error = MPI_Irecv(into, d.count, d.type, step.partner, d.tag, d.comm, &d.requests[d.posted]);
        error != MPI_SUCCESS)
      return error;
    ++d.posted;
  }
  if (sends) {
    if (const int error = MPI_Isend(d.mine, d.count, d.type, step.partner, d.tag, d.comm, &d.requests[d.posted]);
        error != MPI_SUCCESS)
      return error;
    ++d.posted;
  }
  return MPI_SUCCESS;
}

// The step's messages arrived: its reduction, lower process first.
int land(Doubling &d, const Step &step) {
  if (step.kind != StepKind::kReceive && step.kind != StepKind::kSwap) return MPI_SUCCESS;
  if (step.partner < d.me) return MPI_Reduce_local(d.theirs, d.mine, d.count, d.type, d.op);
  if (const int error = MPI_Reduce_local(d.mine, d.theirs, d.count, d.type, d.op); error != MPI_SUCCESS) return error;
  std::swap(d.mine, d.theirs);
  return MPI_SUCCESS;
}

}  // namespace

int start_doubling(bp_plugin_request &request, const void *send, void *recv, int count, std::size_t element_bytes,
                   MPI_Datatype type, MPI_Op op, int tag) {
  bp_transport_comm &comm = *request.comm;
  auto d = std::unique_ptr<Doubling, DoublingDeleter>(new Doubling);
  d->comm = comm.comm;
  d->me = comm.process_index;
  d->tag = tag;
  d->count = count;
  d->type = type;
  d->op = op;
  d->bytes = static_cast<std::size_t>(count) * element_bytes;
  d->result = static_cast<unsigned char *>(recv);
  if (send != recv) std::memcpy(recv, send, d->bytes);
  d->spare.resize(d->bytes);
  d->mine = d->result;
  d->theirs = d->spare.data();
  d->steps = schedule(comm.process_index, comm.process_count);
  request.doubling = std::move(d);
  int error = MPI_SUCCESS;
  (void)progress_doubling(*request.doubling, error);  // its first messages go now
  return error;
}

WaitResult progress_doubling(Doubling &d, int &mpi_error) {
  for (;;) {
    if (d.posted > 0) {
      int flag = 0;
      if (const int error = MPI_Testall(d.posted, d.requests, &flag, MPI_STATUSES_IGNORE); error != MPI_SUCCESS) {
        mpi_error = error;
        return WaitResult::kFailed;
      }
      if (flag == 0) return WaitResult::kTimedOut;
      d.posted = 0;
      if (const int error = land(d, d.steps[d.next]); error != MPI_SUCCESS) {
        mpi_error = error;
        return WaitResult::kFailed;
      }
      ++d.next;
    }
    if (d.next == d.steps.size()) {
      if (d.mine != d.result) {
        std::memcpy(d.result, d.mine, d.bytes);
        d.mine = d.result;
      }
      return WaitResult::kDone;
    }
    if (const int error = post(d, d.steps[d.next]); error != MPI_SUCCESS) {
      mpi_error = error;
      return WaitResult::kFailed;
    }
  }
}

bool doubling_in_flight(Doubling &d) {
  if (d.posted == 0) return false;
  int flag = 0;
  if (MPI_Testall(d.posted, d.requests, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS) return true;  // left alone
  if (flag != 0) d.posted = 0;
  return d.posted > 0;
}

}  // namespace backplane::mpi
