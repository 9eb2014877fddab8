// Collectives through host memory (DESIGN.md, "Dispatch", step 4): a group
// whose ranks are of several kinds (policy "stage"), or a request a group's
// own kind does not declare (on_unsupported "stage"). Each rank's plugin
// copies its data to host memory, the cpu plugin computes the collective
// there with its own kernels (the staging memory is wrapped as cpu buffers:
// no reduction code of the host's own), and each rank's plugin copies the
// result back.
//
// A large call is cut into chunks along the count (every block of a rank's
// buffer contributes the same element range to a chunk) and pipelined: a
// worker thread of the group's copies chunk k back down while the calling
// thread copies chunk k+1 up and has it computed. Staging memory is two
// slots of chunk areas (send, recv) per rank it copies, at most
// kMaxAreaBytes each: allocated at the first call that needs it, grown only
// up to that bound, and kept for the group's later calls. A call of one chunk runs on the calling
// thread alone, and a rank that is itself a cpu device then takes part with
// its own buffers, without a copy; so it does in every chunk of an
// all_reduce, reduce or broadcast (the chunk is a range of its buffer,
// which the host wraps in place: plugin ABI 1.4 buffer_host_memory), and is
// copied like the others where a chunk is one range of each block.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backplane/backplane.h"
#include "capability_table.hpp"
#include "error.hpp"

struct bp_group;

namespace backplane {

struct DeviceKind;
enum class HostLock;
struct StagedCall;  // staging.cpp: one call's chunks

// The bytes of one chunk area: what a rank's buffer contributes to one chunk.
inline constexpr size_t kMaxAreaBytes = size_t{4} << 20;
// Chunk k uses slot k % kSlots: chunk k+1 is copied up while k is copied back.
inline constexpr size_t kSlots = 2;

// A thread that runs jobs 0, 1, 2, ... one at a time in the order they are
// given, each through `run(context, job)`.
class OrderedThread {
 public:
  using Run = void (*)(void *context, uint64_t job);
  OrderedThread() = default;
  OrderedThread(const OrderedThread &) = delete;
  OrderedThread &operator=(const OrderedThread &) = delete;
  ~OrderedThread();

  // Starts the thread unless it runs; false when no thread can be had (a
  // warning says what `purpose` does without it).
  bool ensure_started(Run run, void *context, const char *purpose);
  // Gives the next job and returns its number.
  uint64_t give();
  uint64_t given();
  // Waits until every job below `count` ran, at most `timeout_ns`
  // (negative: no limit); false when they had not by then.
  bool wait_done(uint64_t count, int64_t timeout_ns = -1);
  // Lets the jobs given run, then ends the thread (the destructor's work).
  void stop();

 private:
  void run_jobs();

  std::mutex mutex_;
  std::condition_variable wake_thread_, wake_waiters_;
  uint64_t given_ = 0, done_ = 0;
  bool stopping_ = false;
  Run run_ = nullptr;
  void *context_ = nullptr;
  std::thread thread_;
};

// One staged call's arguments, kept by the group's Staging so that an
// _async call runs on after its start returned (the caller's arrays are
// borrowed for the start only). Sized once; one call is staged at a time.
struct StagedArgs {
  uint32_t collective = 0, dtype = 0, reduce_op = 0, root = 0;
  size_t count = 0;
  std::vector<bp_plugin_buffer *> send, recv;  // each rank's plugin buffers
  std::vector<uint8_t> in_place;               // the rank passed one bp_buffer as send and recv
};

// The reducer's side of a group: a cpu comm over one cpu device per rank,
// the staging memory, the local comms of kinds with several ranks, the
// worker that copies results back, and the runner that runs _async calls
// apart from their caller.
struct Staging {
  DeviceKind *reducer = nullptr;  // the cpu kind
  bp_plugin_comm *comm = nullptr;
  std::vector<uint32_t> reducer_devices;  // rank r's cpu device in `comm`
  std::vector<bool> direct;               // rank r is a cpu device: its own buffers take part in one-chunk calls
  CapabilitySet capabilities;             // what staging runs: the reducer's, less what a direct rank lacks

  // Per slot and rank (index slot * ranks + rank): a send and a recv area
  // of `bytes` each, in one allocation, and the cpu buffers that wrap them;
  // made for a rank whose data a call copies (never for a cpu rank that
  // takes part in its own memory).
  struct Area {
    std::byte *send_memory = nullptr, *recv_memory = nullptr;
    size_t bytes = 0;
    bp_plugin_buffer *send = nullptr, *recv = nullptr;
  };
  std::vector<Area> areas;
  // The reducer call's handles, sized once.
  std::vector<bp_plugin_buffer *> send_handles, recv_handles;
  // The ranks a call over `comm` stages: every rank, each its own home.
  std::vector<size_t> every_rank;

  // A kind other than cpu with several ranks in the group. In an
  // all_reduce, reduce or broadcast its ranks reduce to one leader (or
  // take the leader's data) on their own plugin, and only the leader's data
  // crosses host memory: `leader_comm` stages one participant per such
  // kind beside each other rank.
  struct LocalKind {
    DeviceKind *kind = nullptr;
    bp_plugin_comm *comm = nullptr;  // over the devices of `ranks`, in that order
    std::vector<size_t> ranks;       // the group's ranks of this kind
    CapabilitySet capabilities;      // what every one of them runs
    std::vector<bp_plugin_buffer *> send, recv;  // the local call's handles
    // A reduce's local sum when the root is of another kind: a buffer on
    // the device of ranks[0], the leader then, kept for later calls.
    bp_plugin_buffer *sum = nullptr;
    size_t sum_bytes = 0;
  };
  std::vector<LocalKind> local_kinds;  // empty: every call stages every rank
  bp_plugin_comm *leader_comm = nullptr;
  // Participant p of leader_comm: the rank whose areas and cpu device it
  // uses (its kind's first rank, or a rank alone in its kind), the local
  // kind it stands for (or none), and per call the rank whose buffers it
  // moves (its kind's leader) with the arguments of the call over them.
  std::vector<size_t> leader_homes;
  std::vector<LocalKind *> leader_kinds;
  std::vector<size_t> leader_members;
  StagedArgs leader_args;
  // A direct rank's buffers in host memory in this call, and the views of
  // the chunk being computed (per rank; memory unused).
  std::vector<std::byte *> direct_send, direct_recv;
  std::vector<Area> views;

  // The copy-back worker (started by the first call of several chunks):
  // its job first_job + k copies chunk k of `call` back. Only it writes
  // `failure` (the first copy back that failed) and `staged_bytes`; the
  // caller reads them once every job of the call is done.
  OrderedThread copier;
  struct Pipeline {
    const StagedCall *call = nullptr;
    uint64_t first_job = 0;
    std::atomic<bool> failed{false};
    Status failure;
    uint64_t staged_bytes = 0;
  } pipeline;

  StagedArgs args;  // the call being staged

  // The runner (started by the first _async call): its job `runner_job`
  // runs `args` and leaves `outcome`.
  OrderedThread runner;
  uint64_t runner_job = 0;
  Status outcome;

  Staging() = default;
  Staging(const Staging &) = delete;
  Staging &operator=(const Staging &) = delete;
  ~Staging();  // the wrapped buffers, the memory, the comms (the threads go first)
};

// Who stages through the reducer's comm.
enum class StagingFor {
  calls,  // dispatch's step 4: every rank copied up, computed, copied back
  span,   // a group across processes: its local phases run on the reducer's comm (span.hpp)
};

// Sets `group.staging` up when the group is mixed (and its policy is
// stage) or asks to stage what its kind does not declare, or, for a span,
// always (its caller checked the policy); when it cannot be staged,
// `group.staging_refusal` says why ("the cpu plugin is not loaded: ..."),
// and a local group is created all the same.
void prepare_staging(bp_group &group, HostLock host_lock, StagingFor use = StagingFor::calls);

// How many kinds run locally first (Staging::LocalKind).
size_t local_kind_count(const Staging &staging);

// Keeps `request` as the group's staged call. Dispatch checked the
// arguments (the group's send_handles/recv_handles hold the ranks' plugin
// buffers) and that staging runs it, and no staged call is in flight; the
// caller holds the group's start claim.
void take_arguments(bp_group &group, const bp_collective_request &request);

// Runs the group's staged call on this thread. Returns only when nothing of
// it touches the ranks' buffers any more.
Status run_staged(bp_group &group);

// Hands the group's staged call to its runner thread; false when there is
// no thread to be had (the caller then runs it itself).
bool start_staged(bp_group &group);
// Waits for the call start_staged handed over, at most `timeout_ns`
// (negative: no limit), and takes its outcome; false when it is still in
// flight after the timeout.
bool wait_staged(Staging &staging, int64_t timeout_ns, Status &outcome);
// Whether it finished (wait_staged then returns at once).
bool staged_finished(Staging &staging);

}  // namespace backplane
