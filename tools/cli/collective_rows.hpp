// One collective timed and checked over a list of sizes, and its rows in
// nccl-tests' columns: what `backplane run` (a fleet's workload entries) and
// `backplane bench` (the sizes of its flags) share, so that both print the
// same table and the same JSON rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backplane_reference/staged_case.hpp"
#include "cli.hpp"

namespace backplane::cli {

// The reference (tools/reference) under the names the runner and its
// commands use.
using reference::blocks_per_buffer;
using reference::check_results;
using reference::CollectiveCase;
using reference::Comparison;
using reference::is_reducing;
using reference::is_rooted;
using reference::make_contribution;
using reference::make_request;
using reference::rank_layout;
using reference::RankLayout;

// nccl-tests' bus bandwidth factors (its doc/PERFORMANCE.md): what turns
// algorithm bandwidth into the bandwidth each link needs, comparable across
// collectives and group sizes. all_reduce 2(n-1)/n; reduce_scatter,
// all_gather, all_to_all, gather, scatter (n-1)/n; reduce, broadcast 1.
double bus_factor(bp_collective collective, size_t ranks);

// One mode (out of place or in place) of one row.
struct ModeResult {
  bool requested = false;
  double micros = 0, algbw = 0, busbw = 0;  // time: median; GB/s
  std::optional<size_t> wrong;              // nothing when not checked
  std::optional<Error> error;               // the call, or a buffer's write or read, failed
  // `bench` on cpu and opencl groups only: bytes read + written per second
  // by the plugins' traffic model (memory_bandwidth.hpp), in GB/s, and that
  // as a percentage of the reference: the memory bandwidth probe (cpu), or
  // a copy kernel moving the same bytes on the same device, whose median
  // time is copy_micros (opencl: the percentage is copy time / this time).
  std::optional<double> traffic_gbps, peak_percent, copy_micros;
  // A group across processes: the modes that failed on the other processes
  // (the row's `wrong` is already every process's).
  size_t errors_elsewhere = 0;
};

struct Row {
  uint64_t size = 0;    // bytes of a rank's largest buffer
  size_t count = 0;     // elements of that buffer
  ModeResult modes[2];  // out of place, in place
};

// Runs one workload entry: buffers made once at its largest size, then per
// size and mode the warmup calls, the timed calls, and the check. Not
// stage_case(), which makes buffers per case and holds whole images in host
// memory; sizes here can be large, so images are written in pieces.
class CollectiveRunner {
 public:
  // `ranks`: this process's devices of the entry's group, in its order.
  CollectiveRunner(Host &host, WorkloadInfo entry, std::vector<Device> ranks);

  const WorkloadInfo &entry() const { return entry_; }
  // The group's ranks: of every process for a group across processes,
  // whose ranks first_rank() .. + local ranks - 1 are this process's.
  size_t ranks() const { return global_ranks_; }
  size_t first_rank() const { return first_rank_; }
  // The count argument of a call whose largest buffer is `size` bytes,
  // rounded down to whole elements and, where that buffer holds a block per
  // rank, whole blocks (as nccl-tests rounds).
  size_t count_for(uint64_t size) const;
  size_t blocks() const { return blocks_per_buffer(entry_.collective, global_ranks_); }

  // Per local rank: a first buffer (send, the one buffer in place, or recv
  // for a rank that only receives) and, out of place, a second (recv).
  std::optional<Error> allocate(size_t max_count);
  // One mode at one count; `contributions` per rank, make_contribution() of
  // make_case(count, false).
  ModeResult run(size_t count, bool in_place, const std::vector<std::vector<std::byte>> &contributions);
  ModeResult run_barrier();

  // "all_reduce(f32, sum)", "all_gather(f32)", "barrier".
  std::string describe() const;
  CollectiveCase make_case(size_t count, bool in_place) const;

 private:
  // Across processes: the wrong elements and failed modes of every process,
  // added up (a sum all_reduce over a group of one cpu rank per process),
  // so that every process reports the same totals. Once per mode.
  void add_across_processes(ModeResult &result);
  ModeResult run_here(size_t count, bool in_place, const std::vector<std::vector<std::byte>> &contributions);
  ModeResult run_barrier_here();

  WorkloadInfo entry_;
  std::vector<Device> ranks_;  // this process's
  size_t global_ranks_ = 0, first_rank_ = 0, processes_ = 1;
  std::optional<Group> tally_group_;
  std::unique_ptr<uint64_t[]> tally_memory_;
  std::vector<Buffer> first_, second_;  // per rank; an empty Buffer where the rank needs none
};

// How run_rows times each size.
struct RowTiming {
  // Each mode of a size is timed this many times, the modes (and the
  // reference) taking turns, and reported by the round of median time: on
  // a shared machine a burst of other work then spoils one round, not the
  // row, and a mode and its reference see the same moments of the machine.
  unsigned rounds = 1;
  // Times a reference right after each timing of a mode (bench's copy
  // kernel on opencl groups), in microseconds, or nothing where it has none
  // for that size; its median over the rounds is ModeResult::copy_micros.
  std::function<std::optional<double>(size_t count, bool in_place)> reference;
};

// Every size of the runner's entry (one row for a barrier), each mode the
// entry asks for. `on_row` sees each row as it completes, to print progress
// or add columns. A failed allocation is the error; a failed call is in its
// row (ModeResult::error), after print_error() on stderr.
Result<std::vector<Row>> run_rows(CollectiveRunner &runner, const std::function<void(Row &)> &on_row = {},
                                  const RowTiming &timing = {});

// ---- output ------------------------------------------------------------

// "# time: median of N calls after W warmup (nccl-tests prints a mean); #wrong: ...".
void print_timing_note(const WorkloadInfo &entry);
// nccl-tests' column header (three lines); `traffic` adds the traffic
// column and the reference's percentage (titled `reference_title`, "%peak"
// or "%copy") to each mode.
void print_column_header(bool traffic, const char *reference_title = "%peak");
// One row: `size count type redop root`, then per mode `time algbw busbw
// #wrong` (and `traffic %peak`).
std::string row_line(const WorkloadInfo &entry, const Row &row, bool traffic);
// {size, count, type, redop, root, out_of_place, in_place}; a mode is null
// when not run, {"error": ...} when it failed, else {time_us, algbw, busbw,
// wrong[, traffic_gbps, peak_percent | copy_us, copy_percent]}.
nlohmann::ordered_json row_json(const WorkloadInfo &entry, const Row &row);

// Totals of some rows: wrong elements, failed modes, and nccl-tests' average
// bus bandwidth (over every mode of every row that ran).
struct Tally {
  size_t wrong = 0, errors = 0;
  double busbw_sum = 0;
  size_t busbw_count = 0;
  void add(const std::vector<Row> &rows, bool barrier);
  double avg_busbw() const { return busbw_count ? busbw_sum / static_cast<double>(busbw_count) : 0; }
};
// "# Out of bounds values : N OK|FAILED", "# Avg bus bandwidth    : X" and,
// when there were any, the errors.
void print_footer(const Tally &tally, bool barrier);

}  // namespace backplane::cli
