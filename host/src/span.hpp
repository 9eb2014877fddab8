// Groups that span processes (backplane.h, "transports"): the host's open
// transport, and a group's side of it.
//
// A collective on such a group runs in three phases on this process's
// thread: its local ranks work on their own plugin (a local reduce, gather
// or scatter over the group's own comm), one exchange per process crosses
// through the transport on host memory, and the result goes back to the
// local ranks (a local broadcast or scatter). The local ranks' buffers are
// host memory (plugin ABI 1.4 buffer_host_memory), so the exchange works on
// them in place: no copy of a cpu rank's data, except where a collective's
// layout differs between the ranks and the processes (all_to_all) or the
// result has no buffer of its own on this process (a reduce's or gather's
// partial result off the root), where the group keeps host memory of its own.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backplane/backplane.h"
#include "backplane/plugin.h"
#include "error.hpp"
#include "staging.hpp"

struct bp_group;
struct bp_host;

namespace backplane {

struct LoadedPlugin;
enum class HostLock;

// How long a call waits for the other processes when the application says 0.
inline constexpr int64_t kDefaultTransportTimeoutNs = int64_t{60} * 1000 * 1000 * 1000;

// The fragment of a pipelined collective across processes (Span::fragment_bytes).
inline constexpr size_t kDefaultFragmentBytes = size_t{256} << 10;  // measured: docs/PERFORMANCE.md

// The host's transport (bp_host_open_transport): one per host.
struct OpenTransport {
  LoadedPlugin *plugin = nullptr;
  bp_transport *handle = nullptr;
  int64_t timeout_ns = kDefaultTransportTimeoutNs;  // negative: no limit
  std::string library, details;
  uint32_t process_index = 0, process_count = 1;
  OpenTransport() = default;
  OpenTransport(const OpenTransport &) = delete;
  OpenTransport &operator=(const OpenTransport &) = delete;
  ~OpenTransport();  // the plugin's close
};

// Host memory a spanning group keeps for the exchanges that need memory of
// their own, grown and kept for later calls.
struct HostArea {
  std::byte *memory = nullptr;
  size_t bytes = 0;
  HostArea() = default;
  HostArea(const HostArea &) = delete;
  HostArea &operator=(const HostArea &) = delete;
  ~HostArea();
  Status ensure(size_t wanted);
};

// A group's side of the transport.
struct Span {
  OpenTransport *transport = nullptr;
  bp_transport_comm *comm = nullptr;
  // Per process, its ranks in the group and its first rank (process-major).
  std::vector<uint64_t> process_ranks, process_first;
  uint32_t process_index = 0, process_count = 1;
  uint64_t global_size = 0, first_rank = 0;
  bool several_local = false;  // some process has more than one rank: calls are pipelined alike everywhere
  bool guard = false;
  // all_reduce, reduce and broadcast with several local ranks run in
  // fragments of this many bytes (0: in one piece); every process uses the
  // smallest any of them asked for (kDefaultFragmentBytes, or
  // BACKPLANE_SPAN_FRAGMENT_BYTES in its environment).
  size_t fragment_bytes = 0;
  uint64_t group_digest = 0;  // the group's name and size, for the guard's fingerprint
  // Calls started on the group, the same on every process (the guard's sequence number).
  uint64_t calls = 0;
  // Set once an exchange timed out or failed: the processes may be in
  // different calls, so the group runs nothing more. `broken_reason` is
  // written before `broken` is set, both under the start claim.
  std::atomic<bool> broken{false};
  std::string broken_reason;
  // Exchanges that timed out: in flight for good, released at destruction.
  std::vector<bp_plugin_request *> abandoned;
  HostArea scratch, packed;
  // Ranks of several kinds or with device memory (bp_group.staging): each
  // call copies each rank's data to rank_areas[rank] and back, and the local
  // phases run on the staging's cpu comm. A cpu rank takes part directly.
  bool staged = false;
  std::unique_ptr<HostArea[]> rank_areas;
  std::vector<bp_plugin_buffer *> staged_send, staged_recv;  // the copies' buffers, per call
  // Local rank r's device in the plugin the local phases run on.
  std::vector<uint32_t> local_devices;
  // The guard's exchanges: two hashes, this process's fingerprint, every
  // process's (allocated with the group when it has the guard).
  std::unique_ptr<uint64_t[]> guard_memory;
  // _async calls run on `runner`, apart from their caller, one at a time:
  // job `runner_job` runs `handed` and leaves `outcome`.
  struct Handed {
    bp_collective_request request{};
    std::vector<bp_plugin_buffer *> send, recv;  // the ranks' buffers, as dispatch checked them
  } handed;
  Status outcome;
  uint64_t runner_job = 0;
  OrderedThread runner;  // last: its thread stops before the rest goes
  Span() = default;
  Span(const Span &) = delete;
  Span &operator=(const Span &) = delete;
  ~Span();  // releases what is abandoned, then the transport's comm
};

// bp_host_open_transport's work; takes the host's lock.
Status open_transport(bp_host &host, const bp_transport_options &options);

// At group creation, for span BP_SPAN_WORLD: every local rank must be a
// host-memory device of the group's one kind, without layers; then the
// transport's comm, made with every other process. Narrows the group's
// capabilities to what the transport carries.
Status prepare_span(bp_group &group, bool guard, HostLock host_lock);

// The transport's rows refuse (collective, dtype, op, mode): the refusal
// names the transport; NULL (ok) when it carries it.
Status transport_carries(const bp_group &group, uint32_t collective, uint32_t dtype, uint32_t op, uint32_t mode_flags);

// One collective on a spanning group, arguments already checked (the
// group's send_handles and recv_handles are set): the guard, then the
// phases. Completes before it returns.
Status run_spanning(bp_group &group, const bp_collective_request &request);

// An _async call: hands the call (copied) to the group's runner thread;
// false when there is no thread to be had (the caller then runs it). The
// caller holds the group's start claim and nothing else is in flight on it.
bool start_spanning_apart(bp_group &group, const bp_collective_request &request);
// Waits for the handed call, at most `timeout_ns` (negative: no limit; the
// transport's timeout bounds the call itself), and takes its outcome;
// false when it is still in flight after the timeout.
bool wait_spanning(Span &span, int64_t timeout_ns, Status &outcome);
// Whether it finished (wait_spanning then returns at once).
bool spanning_finished(Span &span);

// The refusal of every call on a broken group.
Error broken_group(const bp_group &group);

}  // namespace backplane
