// The mpi plugin's objects (a transport, plugin.h "transports"): the state
// of each host that loaded it, the transport each host opened, one group's
// comm, one exchange in flight; and the process-wide MPI bookkeeping they
// share. README.md has the rules these follow.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backplane/plugin.h"
#include "plugin_support/host_link.hpp"

namespace backplane::mpi {

inline constexpr const char *kName = "mpi";
inline constexpr const char *kVersion = "0.1.0";
// How long a wait polls MPI_Test flat out before it yields and sleeps.
inline constexpr std::uint64_t kDefaultSpinUs = 50;
inline constexpr std::uint64_t kMaxSpinUs = 1000000;
// all_reduce exchanges of at most this many bytes go by recursive doubling
// on point-to-point messages (doubling.cpp) rather than MPI_Iallreduce.
inline constexpr std::uint64_t kDefaultDoublingBytes = 16384;
// Larger ones up to this many bytes go by recursive halving and doubling
// (Rabenseifner's), the same way: by default all of them, which matched or
// beat MPI_Iallreduce's ring at every size from 32 KiB to 64 MiB here
// (2x at 1 MiB; docs/PERFORMANCE.md). 0 leaves them to Open MPI.
inline constexpr std::uint64_t kMaxHalvingBytes = std::uint64_t{1} << 62;
inline constexpr std::uint64_t kDefaultHalvingBytes = kMaxHalvingBytes;
inline constexpr std::uint64_t kMaxDoublingBytes = std::uint64_t{1} << 30;

// Host memory a comm lends its exchanges for what lands beside their data,
// kept for later exchanges when handed back (not when abandoned in flight).
struct SpareMemory {
  std::unique_ptr<unsigned char[]> memory;
  std::size_t bytes = 0;
};

// A recursive-doubling all_reduce in flight (doubling.cpp).
struct Doubling;
struct DoublingDeleter {
  void operator()(Doubling *doubling) const;
};

}  // namespace backplane::mpi

// One per bp_plugin_entry: the host's services and what this state declares.
struct bp_plugin_state {
  const bp_host_services *services = nullptr;
  std::vector<bp_capability> rows;  // narrowed to the host's minor
  bp_transport_table table{};
  bp_plugin_descriptor descriptor{};
};

// One host's transport: its own duplicate of MPI_COMM_WORLD or of the
// application's communicator.
struct bp_transport {
  MPI_Comm comm = MPI_COMM_NULL;
  int process_index = 0;
  int process_count = 1;
  std::chrono::nanoseconds spin{};
  std::uint64_t doubling_bytes = backplane::mpi::kDefaultDoublingBytes;  // option "doubling_bytes"
  std::uint64_t halving_bytes = backplane::mpi::kDefaultHalvingBytes;    // option "halving_bytes"
  std::string library;  // MPI_Get_library_version's first line
  std::string details;
  // Comms are MPI_Comm_idup'ed from `comm`; MPI wants one thread at a time
  // to start a collective on a communicator.
  std::mutex start_mutex;
  // A comm_create timed out and its MPI_Comm_idup may still complete:
  // `comm` is then never freed.
  std::atomic<bool> abandoned{false};
};

// One group's side: an MPI_Comm_idup of the transport's, and how many
// blocks each process holds.
struct bp_transport_comm {
  bp_transport *transport = nullptr;
  MPI_Comm comm = MPI_COMM_NULL;
  int process_index = 0;
  int process_count = 1;
  std::unique_ptr<std::uint64_t[]> process_ranks;
  std::vector<std::uint64_t> first_block;  // process_count + 1 prefix sums of process_ranks
  // Exchanges left in flight for good (timed out, or released unfinished):
  // while any is, MPI may still use `comm`.
  std::atomic<int> abandoned{0};
  // Exchanges started, the same count on every process: the tag of a
  // point-to-point exchange, so that two in flight never match each other's messages.
  std::uint32_t exchanges_started = 0;
  // The transport's options as every process agreed at comm_create (the smallest).
  std::uint64_t doubling_bytes = 0, halving_bytes = 0;
  // Spare memory of at least `bytes` (none for 0): one kept, or new.
  backplane::mpi::SpareMemory borrow(std::size_t bytes);
  void give_back(backplane::mpi::SpareMemory spare);
  std::mutex spare_mutex;
  std::vector<backplane::mpi::SpareMemory> spares;  // at most kKeptSpares, largest kept
};

// One exchange, heap-allocated at its start. What MPI reads or writes
// while it is in flight (counts, displacements, the block type, scratch)
// lives here, so an exchange that timed out is leaked whole (README.md).
struct bp_plugin_request {
  bp_transport_comm *comm = nullptr;
  MPI_Request request = MPI_REQUEST_NULL;
  const char *mpi_call = "";  // the MPI function that started it, for messages
  std::uint32_t collective = 0, dtype = 0, reduce_op = 0;
  std::size_t count = 0;
  std::vector<int> counts, displacements;
  MPI_Datatype block_type = MPI_DATATYPE_NULL;  // ours to free, when made
  // In-place reduce_scatter: MPI writes `scratch`, copied to `scratch_destination` once complete.
  std::vector<std::byte> scratch;
  void *scratch_destination = nullptr;
  // BP_AVG: the elements divided by average_over once complete.
  void *average_memory = nullptr;
  std::size_t average_elements = 0;
  std::uint64_t average_over = 0;
  // An all_reduce by recursive doubling: its messages in place of `request`.
  std::unique_ptr<backplane::mpi::Doubling, backplane::mpi::DoublingDeleter> doubling;
  bool done = false;
  bool timed_out = false;     // left in flight for good (a timeout, or released unfinished): abandon() counted it
  int failure = MPI_SUCCESS;  // MPI's error, once MPI_Test reported one
};

namespace backplane::mpi {

using plugin_support::fail;
using plugin_support::TableCall;

// ---- the MPI library, process-wide (mpi_library.cpp) -------------------

// What open learns while it claims the library.
struct LibraryFacts {
  std::string library;  // first line of MPI_Get_library_version
  int thread_level = MPI_THREAD_SINGLE;
  bool initialised_by_plugin = false;
};

// Counts one more open transport: initialises MPI when nobody has
// (MPI_THREAD_MULTIPLE), or checks the application's thread level, and
// makes the 16-bit user ops for the first transport. BP_PLUGIN_INIT (or
// BP_INVALID_ARGUMENT for a given handle without MPI) reported through `call`.
std::int32_t claim_library(const TableCall &call, bool given_handle, LibraryFacts &facts);
// Uncounts one; the last finalises MPI when the plugin initialised it.
void release_library(const bp_host_services *services);
// An MPI request left in flight for good (a timeout): from then on the
// user ops are never freed (MPI may still call them).
void note_abandoned_request();
// One of those completed after all (seen by a later wait or at release).
void note_recovered_request();
// False once MPI_Finalize ran (the application's or ours): no MPI call may follow.
bool library_usable();

// The user op of `reduce_op` on 16-bit `dtype` (BP_F16, BP_BF16), and the
// wrapping sum of BP_I8 and BP_U8 (Open MPI's saturates), valid while a
// transport is open; MPI_OP_NULL for any other pair.
MPI_Op half_float_op(std::uint32_t dtype, std::uint32_t reduce_op);
// Makes and frees the eight ops (half_float_ops.cpp); under the library's lock.
int create_half_float_ops();
void free_half_float_ops();

// MPI_Error_string of `code`, as one line of ASCII.
std::string mpi_error_text(int code);
// "MPI_THREAD_MULTIPLE", ...
const char *thread_level_name(int level);
// `text` as one line of printable ASCII, trimmed (valid UTF-8 by construction).
std::string one_line(const char *text, std::size_t length);

// ---- waiting (request_wait.cpp) ---------------------------------------

enum class WaitResult { kDone, kTimedOut, kFailed };
// Polls MPI_Test on `request` until it completes, fails (*mpi_error) or
// `timeout_ns` passes (negative: never): flat out for `spin`, then
// yielding and sleeping, 1 µs growing to 100 µs, so that a process that
// shares a core with the one it waits for lets it run.
WaitResult wait_for(MPI_Request &request, std::int64_t timeout_ns, std::chrono::nanoseconds spin, int &mpi_error);
// The same over any progress: `poll(context, mpi_error)` returns kDone,
// kFailed, or kTimedOut for "not yet".
using Poll = WaitResult (*)(void *context, int &mpi_error);
WaitResult wait_until(Poll poll, void *context, std::int64_t timeout_ns, std::chrono::nanoseconds spin,
                      int &mpi_error);

// ---- recursive doubling (doubling.cpp) ----------------------------------

// Starts an all_reduce of `count` elements (x `element_bytes`) of `recv`
// (`send` copied there first unless in place) by recursive doubling, or by
// recursive halving and doubling (`halving`), with the other processes of
// `comm`, its first messages posted; `tag` is the same on every process.
// MPI's error, or MPI_SUCCESS.
int start_doubling(bp_plugin_request &request, const void *send, void *recv, int count, std::size_t element_bytes,
                   MPI_Datatype type, MPI_Op op, int tag, bool halving);
// Moves it on without blocking: kDone once recv holds the result.
WaitResult progress_doubling(Doubling &doubling, int &mpi_error);
// Whether messages of it may still be in flight (MPI may use its memory);
// tests them without reducing what arrived.
bool doubling_in_flight(Doubling &doubling);
// "2.0 s", "0.25 s": a timeout as messages show it.
std::string seconds_text(std::int64_t ns);

// ---- the table's bodies ---------------------------------------------

std::int32_t open_transport(bp_plugin_state &state, const bp_transport_open_args &args, bp_transport **out,
                            bp_error_sink *sink);
void close_transport(bp_plugin_state &state, bp_transport *transport);
std::int32_t describe_transport(bp_plugin_state &state, bp_transport &transport, bp_transport_info &out,
                                bp_error_sink *sink);
std::int32_t create_comm(bp_plugin_state &state, bp_transport &transport, const bp_transport_comm_args &args,
                         bp_transport_comm_info &info, bp_transport_comm **out, bp_error_sink *sink);
void destroy_comm(bp_plugin_state &state, bp_transport_comm *comm);
std::int32_t start_exchange(bp_plugin_state &state, bp_transport_comm &comm, const bp_transport_exchange &exchange,
                            bp_plugin_request **out, bp_error_sink *sink);
std::int32_t wait_exchange(bp_plugin_state &state, bp_plugin_request &request, std::int64_t timeout_ns,
                           bp_error_sink *sink);
void release_exchange(bp_plugin_state &state, bp_plugin_request *request);

}  // namespace backplane::mpi
