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
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "mpi_plugin.hpp"

namespace backplane::mpi {
namespace {

enum class StepKind {
  kSend,        // hand my data to the partner
  kReceive,     // take the partner's data and reduce it with mine
  kSwap,        // both of those at once
  kHalve,       // send one part, take the partner's other part and reduce it into mine
  kShare,       // send my reduced part, take the partner's into place
  kTakeResult,  // the partner's result replaces my data
  kGiveResult,  // my result to the partner
};

// Elements [first, first + count) of the data.
struct Part {
  std::size_t first = 0, count = 0;
};

struct Step {
  StepKind kind;
  int partner;
  Part send, recv;  // the whole data but for kHalve and kShare
};

}  // namespace

struct Doubling {
  MPI_Comm comm = MPI_COMM_NULL;
  bp_transport_comm *comm_side = nullptr;  // whose spare memory this borrows
  int me = 0, tag = 0, count = 0;
  std::size_t element_bytes = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
  std::size_t bytes = 0;
  unsigned char *result = nullptr;  // the caller's recv
  // The running value is in `mine`, the partner's arrives in `theirs`; both
  // point into {result, spare} and swap when a reduction lands in `theirs`.
  // `spare` is the comm's, handed back when the exchange is released.
  SpareMemory spare;
  unsigned char *mine = nullptr, *theirs = nullptr;
  // Out of place, the first halving reads the caller's send (no copy of it):
  // the partner's part lands in `mine`, and `source`'s part is reduced into it.
  const unsigned char *source = nullptr;
  std::vector<Step> steps;
  std::size_t next = 0;
  MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int posted = 0;
};

void DoublingDeleter::operator()(Doubling *doubling) const {
  if (doubling->spare.bytes && doubling->comm_side) doubling->comm_side->give_back(std::move(doubling->spare));
  delete doubling;
}

namespace {

// The processes that take part after the fold: my number among them, or -1
// for an even process of the first 2 x rem, which only hands over and takes back.
struct Fold {
  int p2 = 1, rem = 0, renumbered = -1;
  int real(int renumbered_other) const { return renumbered_other < rem ? renumbered_other * 2 + 1 : renumbered_other + rem; }
};

Fold fold_of(int me, int processes) {
  Fold fold;
  while (fold.p2 * 2 <= processes) fold.p2 *= 2;
  fold.rem = processes - fold.p2;
  if (me >= 2 * fold.rem) fold.renumbered = me - fold.rem;
  else if (me % 2 == 1) fold.renumbered = me / 2;
  return fold;
}

// Recursive doubling: the whole data at every step.
std::vector<Step> doubling_schedule(int me, int processes, std::size_t count) {
  const Fold fold = fold_of(me, processes);
  const Part whole{0, count};
  if (fold.renumbered < 0) return {{StepKind::kSend, me + 1, whole, whole}, {StepKind::kTakeResult, me + 1, whole, whole}};
  std::vector<Step> steps;
  if (me < 2 * fold.rem) steps.push_back({StepKind::kReceive, me - 1, whole, whole});
  for (int distance = 1; distance < fold.p2; distance *= 2)
    steps.push_back({StepKind::kSwap, fold.real(fold.renumbered ^ distance), whole, whole});
  if (me < 2 * fold.rem) steps.push_back({StepKind::kGiveResult, me - 1, whole, whole});
  return steps;
}

// Rabenseifner's: a reduce_scatter by recursive halving (each step sends
// half of what is left and reduces the other half), then an all_gather by
// recursive doubling of the reduced parts. Block b (of p2, `count` split as
// evenly as can be) is reduced by one process alone, so every process gets
// the same bits.
std::vector<Step> halving_schedule(int me, int processes, std::size_t count) {
  const Fold fold = fold_of(me, processes);
  const Part whole{0, count};
  if (fold.renumbered < 0) return {{StepKind::kSend, me + 1, whole, whole}, {StepKind::kTakeResult, me + 1, whole, whole}};
  const auto p2 = static_cast<std::size_t>(fold.p2);
  auto block_first = [&](std::size_t block) { return block * (count / p2) + std::min(block, count % p2); };
  auto blocks = [&](std::size_t from, std::size_t to) { return Part{block_first(from), block_first(to) - block_first(from)}; };
  std::vector<Step> steps;
  if (me < 2 * fold.rem) steps.push_back({StepKind::kReceive, me - 1, whole, whole});
  // Which blocks I hold, [low, high): halved at each step.
  std::size_t low = 0, high = p2;
  const auto renumbered = static_cast<std::size_t>(fold.renumbered);
  std::vector<std::pair<std::size_t, std::size_t>> held;  // before each halving, to retrace
  for (std::size_t distance = p2 / 2; distance >= 1; distance /= 2) {
    const std::size_t middle = low + (high - low) / 2;
    const bool lower = (renumbered & distance) == 0;
    const int partner = fold.real(static_cast<int>(renumbered ^ distance));
    held.push_back({low, high});
    const Part keep = lower ? blocks(low, middle) : blocks(middle, high);
    const Part give = lower ? blocks(middle, high) : blocks(low, middle);
    steps.push_back({StepKind::kHalve, partner, give, keep});
    if (lower) high = middle;
    else low = middle;
  }
  // Back up: at each level the partner holds the other half of what I held.
  for (std::size_t distance = 1; distance < p2; distance *= 2) {
    const auto [was_low, was_high] = held.back();
    held.pop_back();
    const int partner = fold.real(static_cast<int>(renumbered ^ distance));
    const Part mine = blocks(low, high);
    const Part theirs = low == was_low ? blocks(high, was_high) : blocks(was_low, low);
    steps.push_back({StepKind::kShare, partner, mine, theirs});
    low = was_low;
    high = was_high;
  }
  if (me < 2 * fold.rem) steps.push_back({StepKind::kGiveResult, me - 1, whole, whole});
  return steps;
}

int post(Doubling &d, const Step &step) {
  d.posted = 0;
  const bool sends = step.kind != StepKind::kReceive && step.kind != StepKind::kTakeResult;
  const bool receives = step.kind != StepKind::kSend && step.kind != StepKind::kGiveResult;
  auto at = [&](unsigned char *data, const Part &part) { return data + part.first * d.element_bytes; };
  const bool from_source = step.kind == StepKind::kHalve && d.source != nullptr;
  if (receives) {
    // A share and a result land in place; what is reduced lands beside it.
    const bool in_place = step.kind == StepKind::kTakeResult || step.kind == StepKind::kShare || from_source;
    // What is reduced lands at the start of `theirs`, which holds one part.
    unsigned char *into = in_place ? at(d.mine, step.recv) : d.theirs;
    if (const int error = MPI_Irecv(into, static_cast<int>(step.recv.count),
                                    d.type, step.partner, d.tag, d.comm, &d.requests[d.posted]);
        error != MPI_SUCCESS)
      return error;
    ++d.posted;
  }
  if (sends) {
    const unsigned char *from = from_source ? d.source : d.mine;
    if (const int error = MPI_Isend(at(const_cast<unsigned char *>(from), step.send),
                                    static_cast<int>(step.send.count), d.type, step.partner, d.tag, d.comm,
                                    &d.requests[d.posted]);
        error != MPI_SUCCESS)
      return error;
    ++d.posted;
  }
  return MPI_SUCCESS;
}

// The step's messages arrived: its reduction. A whole swap reduces the
// lower process's operand first; a halving's part is reduced by me alone.
int land(Doubling &d, const Step &step) {
  if (step.kind == StepKind::kHalve) {
    const std::size_t offset = step.recv.first * d.element_bytes;
    const int count = static_cast<int>(step.recv.count);
    if (d.source != nullptr) {
      const unsigned char *source = std::exchange(d.source, nullptr);  // from here on, mine holds my data
      return MPI_Reduce_local(source + offset, d.mine + offset, count, d.type, d.op);
    }
    return MPI_Reduce_local(d.theirs, d.mine + offset, count, d.type, d.op);
  }
  if (step.kind != StepKind::kReceive && step.kind != StepKind::kSwap) return MPI_SUCCESS;
  if (step.partner < d.me) return MPI_Reduce_local(d.theirs, d.mine, d.count, d.type, d.op);
  if (const int error = MPI_Reduce_local(d.mine, d.theirs, d.count, d.type, d.op); error != MPI_SUCCESS) return error;
  std::swap(d.mine, d.theirs);
  return MPI_SUCCESS;
}

}  // namespace

int start_doubling(bp_plugin_request &request, const void *send, void *recv, int count, std::size_t element_bytes,
                   MPI_Datatype type, MPI_Op op, int tag, bool halving) {
  bp_transport_comm &comm = *request.comm;
  auto d = std::unique_ptr<Doubling, DoublingDeleter>(new Doubling);
  d->comm = comm.comm;
  d->me = comm.process_index;
  d->tag = tag;
  d->count = count;
  d->type = type;
  d->op = op;
  d->bytes = static_cast<std::size_t>(count) * element_bytes;
  d->comm_side = &comm;
  d->result = static_cast<unsigned char *>(recv);
  d->element_bytes = element_bytes;
  const auto elements = static_cast<std::size_t>(count);
  const Fold fold = fold_of(comm.process_index, comm.process_count);
  d->steps = halving ? halving_schedule(comm.process_index, comm.process_count, elements)
                     : doubling_schedule(comm.process_index, comm.process_count, elements);
  // A halving that starts with its own part reads send where it is; every
  // other exchange works on a copy of it in recv.
  const bool reads_send = halving && comm.process_index >= 2 * fold.rem && fold.p2 > 1;
  if (send != recv) {
    if (reads_send) d->source = static_cast<const unsigned char *>(send);
    else std::memcpy(recv, send, d->bytes);
  }
  // What lands beside my data: the whole of it for a doubling or a fold's
  // first step, else a halving's largest part (half the blocks, each at
  // most count / p2 + 1 elements). An even process of the fold needs none.
  const bool folds_in = comm.process_index < 2 * fold.rem;
  const bool needs_spare = fold.renumbered >= 0 && (fold.p2 > 1 || folds_in);
  const std::size_t largest_part = (elements / 2 + static_cast<std::size_t>(fold.p2)) * element_bytes;
  const std::size_t spare_bytes = halving && !folds_in ? std::min(d->bytes, largest_part) : d->bytes;
  d->spare = comm.borrow(needs_spare ? spare_bytes : 0);
  d->mine = d->result;
  d->theirs = d->spare.memory.get();
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
