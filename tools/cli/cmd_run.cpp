// `backplane run [FLEET.json]`: brings a fleet up and runs each entry of its
// workload over its sizes, one row per size in nccl-tests' columns (out of
// place, then in place), each result checked against the reference
// (reference.hpp); `--json` for machines. `run --sweep` is cmd_sweep.cpp.
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>

#include "cli.hpp"
#include "reference.hpp"

namespace backplane::cli {
namespace {

using Json = nlohmann::ordered_json;

// What output regions hold before a checked call, so that a plugin that
// leaves its output untouched cannot pass.
constexpr std::byte kSentinel{0xA5};
// Sentinel regions are written in pieces of this many bytes.
constexpr size_t kSentinelChunk = size_t{1} << 20;

// nccl-tests' bus bandwidth factors (its doc/PERFORMANCE.md): what turns
// algorithm bandwidth into the bandwidth each link needs, comparable across
// collectives and group sizes.
double bus_factor(bp_collective collective, size_t ranks) {
  const double n = static_cast<double>(ranks);
  switch (collective) {
    case BP_ALL_REDUCE:
      return 2 * (n - 1) / n;
    case BP_REDUCE_SCATTER:
    case BP_ALL_GATHER:
    case BP_ALL_TO_ALL:
    case BP_GATHER:
    case BP_SCATTER:
      return (n - 1) / n;
    default:  // reduce, broadcast (barrier moves no bytes)
      return 1;
  }
}

// One mode (out of place or in place) of one row.
struct ModeResult {
  bool requested = false;
  double micros = 0, algbw = 0, busbw = 0;  // time: median; GB/s
  std::optional<size_t> wrong;              // nothing when not checked
  std::optional<Error> error;               // the call, or a buffer's write or read, failed
};

struct Row {
  uint64_t size = 0;  // bytes of a rank's largest buffer
  size_t count = 0;   // elements of that buffer
  ModeResult modes[2];  // out of place, in place
};

// One buffer's bytes before a call: the sentinel everywhere but the rank's
// contribution at `offset` (bytes).
struct Image {
  Buffer *buffer = nullptr;
  size_t bytes = 0, offset = 0;
  const std::vector<std::byte> *contribution = nullptr;  // may be empty
};

Status write_image(const Image &image) {
  static const std::vector<std::byte> sentinel(kSentinelChunk, kSentinel);
  const size_t contribution = image.contribution ? image.contribution->size() : 0;
  auto fill = [&](size_t from, size_t to) -> Status {
    for (size_t at = from; at < to; at += kSentinelChunk)
      if (Status written = image.buffer->write(at, sentinel.data(), std::min(kSentinelChunk, to - at)); !written)
        return written;
    return {};
  };
  if (Status filled = fill(0, image.offset); !filled) return filled;
  if (Status filled = fill(image.offset + contribution, image.bytes); !filled) return filled;
  if (contribution == 0) return {};
  return image.buffer->write(image.offset, image.contribution->data(), contribution);
}

// Runs one workload entry: buffers made once at its largest size, then per
// size and mode the warmup calls, the timed calls, and the check. Not
// stage_case(), which makes buffers per case and holds whole images in host
// memory; fleet sizes can be large, so images here are written in pieces.
class EntryRunner {
 public:
  EntryRunner(WorkloadInfo entry, std::vector<Device> ranks) : entry_(std::move(entry)), ranks_(std::move(ranks)) {}

  // The count argument of a call whose largest buffer is `size` bytes,
  // rounded down to whole elements and, where that buffer holds a block per
  // rank, whole blocks.
  size_t count_for(uint64_t size) const {
    return static_cast<size_t>(size / (bp_dtype_size(entry_.dtype) * blocks()));
  }
  size_t blocks() const { return blocks_per_buffer(entry_.collective, ranks_.size()); }

  // Per rank: a first buffer (send, the one buffer in place, or recv for a
  // rank that only receives) and, out of place, a second (recv).
  std::optional<Error> allocate(size_t max_count) {
    const size_t es = bp_dtype_size(entry_.dtype);
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const RankLayout l = rank_layout(make_case(max_count, false), r);
      // In place needs the larger of the two sides in one buffer.
      const size_t first = l.has_send && l.has_recv ? std::max(l.send, l.recv) : l.has_send ? l.send : l.recv;
      const bool uses_first = l.has_send || l.has_recv;
      const bool uses_second = l.has_send && l.has_recv && (entry_.modes & BP_WORKLOAD_OUT_OF_PLACE);
      const size_t second = l.recv;
      first_.emplace_back();
      second_.emplace_back();
      for (auto [used, elements, slot] : {std::tuple{uses_first, first, &first_.back()},
                                          std::tuple{uses_second, second, &second_.back()}}) {
        if (!used) continue;
        Result<Buffer> buffer = Buffer::create(ranks_[r], std::max<size_t>(elements, 1) * es);
        if (!buffer) return buffer.error();
        *slot = std::move(*buffer);
      }
    }
    return std::nullopt;
  }

  ModeResult run(size_t count, bool in_place, const std::vector<std::vector<std::byte>> &contributions) {
    ModeResult result;
    result.requested = true;
    const CollectiveCase c = make_case(count, in_place);
    const size_t n = ranks_.size(), es = bp_dtype_size(c.dtype);

    std::vector<Image> images;
    std::vector<bp_buffer *> send(n, nullptr), recv(n, nullptr);
    std::vector<const Buffer *> result_buffer(n, nullptr);
    for (size_t r = 0; r < n; ++r) {
      const RankLayout l = rank_layout(c, r);
      if (l.in_place) {
        images.push_back({&first_[r], l.send * es, l.input_offset * es, &contributions[r]});
        send[r] = recv[r] = first_[r].get();
        result_buffer[r] = &first_[r];
        continue;
      }
      if (l.has_send) {
        images.push_back({&first_[r], l.send * es, l.input_offset * es, &contributions[r]});
        send[r] = first_[r].get();
      }
      if (l.has_recv) {
        Buffer &buffer = l.has_send ? second_[r] : first_[r];
        images.push_back({&buffer, l.recv * es, 0, nullptr});
        recv[r] = buffer.get();
        result_buffer[r] = &buffer;
      }
    }
    auto write_all = [&]() -> Status {
      for (const Image &image : images)
        if (Status written = write_image(image); !written) return written;
      return {};
    };
    const bp_collective_request request = make_request(c, send.data(), recv.data());

    // Warmup and timed calls run back to back on whatever the buffers hold
    // (in place, each call's result is the next one's input, as in
    // nccl-tests); the last call, the checked one, starts from the images.
    if (Status written = write_all(); !written) {
      result.error = written.error();
      return result;
    }
    Result<std::vector<double>> micros = time_calls(
        entry_.warmup, entry_.iterations, [&] { return entry_.group.run(request); },
        [&](uint32_t i) {
          const bool ran_since_written = i > 0 || entry_.warmup > 0;
          return entry_.check && i + 1 == entry_.iterations && ran_since_written ? write_all() : Status();
        });
    if (!micros) {
      result.error = micros.error();
      return result;
    }
    result.micros = median(*micros);
    const double bytes = static_cast<double>(c.count * blocks() * es);
    result.algbw = result.micros > 0 ? bytes / (result.micros * 1e3) : 0;  // bytes per ns = GB/s
    result.busbw = result.algbw * bus_factor(c.collective, n);
    if (!entry_.check) return result;

    Result<std::vector<Comparison>> compared = check_results(c, contributions, result_buffer);
    if (!compared) {
      result.error = compared.error();
      return result;
    }
    size_t wrong = 0;
    for (size_t r = 0; r < n; ++r) {
      const Comparison &comparison = (*compared)[r];
      if (comparison.wrong && !wrong)
        std::fprintf(stderr, "wrong: %s %s count %zu on group %s: rank %zu, element %zu: got %s, expected %s\n",
                     describe().c_str(), in_place ? "in place" : "out of place", c.count,
                     std::string(entry_.group.name()).c_str(), r, comparison.first_index, comparison.got.c_str(),
                     comparison.expected.c_str());
      wrong += comparison.wrong;
    }
    result.wrong = wrong;
    return result;
  }

  ModeResult run_barrier() {
    ModeResult result;
    result.requested = true;
    Result<std::vector<double>> micros =
        time_calls(entry_.warmup, entry_.iterations, [&] { return entry_.group.barrier(); });
    if (!micros)
      result.error = micros.error();
    else
      result.micros = median(*micros);
    return result;
  }

  // "all_reduce(f32, sum)", "all_gather(f32)", "barrier".
  std::string describe() const {
    if (entry_.collective == BP_BARRIER) return "barrier";
    std::string text = std::string(bp_collective_name(entry_.collective)) + "(" + bp_dtype_name(entry_.dtype);
    if (is_reducing(entry_.collective)) text += std::string(", ") + bp_reduce_op_name(entry_.reduce_op);
    return text + ")";
  }

  CollectiveCase make_case(size_t count, bool in_place) const {
    return {entry_.collective, entry_.dtype, entry_.reduce_op, count, ranks_.size(), entry_.root, in_place};
  }

 private:
  WorkloadInfo entry_;
  std::vector<Device> ranks_;
  std::vector<Buffer> first_, second_;  // per rank; an empty Buffer where the rank needs none
};

// ---- output ------------------------------------------------------------

// printf into a string, trailing blanks dropped (they only make copied
// output awkward).
[[gnu::format(printf, 1, 2)]] std::string format(const char *pattern, ...) {
  char text[256];
  std::va_list args;
  va_start(args, pattern);
  std::vsnprintf(text, sizeof text, pattern, args);
  va_end(args);
  std::string line = text;
  line.erase(line.find_last_not_of(' ') + 1);
  return line;
}

// nccl-tests' columns and widths (its common.cu), so that what reads its
// output reads ours; the time is a median where it prints a mean.
void print_column_header() {
  // The two mode blocks start at column 52 and are 32 wide.
  std::string modes(52 + 32 + 32, ' ');
  modes[0] = '#';
  modes.replace(52 + 10, 12, "out-of-place");
  modes.replace(52 + 32 + 12, 8, "in-place");
  modes.resize(52 + 32 + 12 + 8);
  std::printf("%s\n", modes.c_str());
  std::printf("%s\n", (format("# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root") +
                       format("  %7s  %6s  %6s %6s", "time", "algbw", "busbw", "#wrong") +
                       format("  %7s  %6s  %6s %6s", "time", "algbw", "busbw", "#wrong"))
                          .c_str());
  std::printf("%s\n", format("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s", "(B)", "(elements)", "",
                             "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)")
                          .c_str());
}

std::string format_time(double micros) {
  if (micros >= 10000.0) return format("%7.0f", micros);
  if (micros >= 100.0) return format("%7.1f", micros);
  return format("%7.2f", micros);
}

std::string mode_cells(const ModeResult &mode) {
  if (!mode.requested) return format("  %7s  %6s  %6s  %5s", "-", "-", "-", "-");
  if (mode.error) return format("  %7s  %6s  %6s  %5s", "-", "-", "-", "error");
  const std::string wrong = mode.wrong ? std::to_string(*mode.wrong) : "N/A";
  return format("  %7s  %6.2f  %6.2f  %5s", format_time(mode.micros).c_str(), mode.algbw, mode.busbw, wrong.c_str());
}

Json mode_json(const ModeResult &mode) {
  if (!mode.requested) return nullptr;
  if (mode.error) return {{"error", Json::parse(mode.error->json(), nullptr, false)}};
  Json out = {{"time_us", mode.micros}, {"algbw", mode.algbw}, {"busbw", mode.busbw}};
  out["wrong"] = mode.wrong ? Json(*mode.wrong) : Json(nullptr);
  return out;
}

// Totals of one entry, or of the whole run.
struct Tally {
  size_t wrong = 0, errors = 0;
  double busbw_sum = 0;
  size_t busbw_count = 0;
  void add(const ModeResult &mode) {
    if (!mode.requested) return;
    if (mode.error) {
      ++errors;
      return;
    }
    wrong += mode.wrong.value_or(0);
  }
};

}  // namespace

int run_run(const GlobalOptions &options, const std::string &fleet_file, bool json, bool sweep) {
  if (sweep) {
    if (!fleet_file.empty() || json) {
      print_usage_error(std::string("--sweep runs on cpu:0..cpu:3 and prints a table; it takes ") +
                        (json ? "no --json" : "no fleet file ('" + fleet_file + "')"));
      return kExitUsage;
    }
    return run_sweep(options);
  }
  std::optional<Host> host = open_fleet(options, fleet_file);
  if (!host) return kExitFailure;
  Result<std::vector<WorkloadInfo>> entries = host->workloads();
  if (!entries) {
    print_error(entries.error());
    return kExitFailure;
  }

  Json out_entries = Json::array();
  Tally total;
  size_t rows_run = 0;
  if (!json) std::printf("# fleet: %s\n", fleet_label(fleet_file).c_str());
  if (entries->empty() && !json) std::printf("# the fleet has no workload: nothing to run\n");

  for (const WorkloadInfo &entry : *entries) {
    GroupView group = entry.group;
    Json out = {{"group", std::string(group.name())}, {"operation", bp_collective_name(entry.collective)}};
    if (entry.collective != BP_BARRIER) out["dtype"] = bp_dtype_name(entry.dtype);
    if (is_reducing(entry.collective)) out["reduce_op"] = bp_reduce_op_name(entry.reduce_op);
    if (is_rooted(entry.collective)) out["root"] = entry.root;
    out["iterations"] = entry.iterations;
    out["warmup"] = entry.warmup;
    out["check"] = entry.check && entry.collective != BP_BARRIER;

    auto entry_failed = [&](const Error &error) {
      print_error(error);
      ++total.errors;
      out["error"] = Json::parse(error.json(), nullptr, false);
      out_entries.push_back(std::move(out));
    };
    Result<GroupDescription> described = describe_group(*host, group);
    if (!described) {
      entry_failed(described.error());
      continue;
    }
    std::vector<Device> ranks;
    for (size_t r = 0; r < group.size(); ++r) ranks.push_back(group.device(r));
    EntryRunner runner(entry, ranks);
    out["devices"] = described->devices;
    if (!described->plugins.empty())
      out["plugin"] = {{"name", described->plugins[0].name}, {"version", described->plugins[0].version}};

    if (!json) {
      std::printf("#\n# %s on group %s: %s (plugin %s)\n", runner.describe().c_str(), std::string(group.name()).c_str(),
                  described->device_text().c_str(), described->plugin_text().c_str());
      std::printf("# time: median of %u call%s after %u warmup (nccl-tests prints a mean); #wrong: %s\n",
                  entry.iterations, entry.iterations == 1 ? "" : "s", entry.warmup,
                  out["check"].get<bool>() ? "elements that differ from the reference after the last call"
                                           : "not checked");
      print_column_header();
    }

    std::vector<Row> rows;
    Tally tally;
    // A call that fails says why on stderr; its row says "error".
    auto report = [](const ModeResult &mode) {
      if (mode.error) print_error(*mode.error);
    };
    const bool barrier = entry.collective == BP_BARRIER;
    if (barrier) {
      Row row;
      row.modes[0] = runner.run_barrier();
      report(row.modes[0]);
      rows.push_back(std::move(row));
    } else {
      size_t max_count = 0;
      for (uint64_t size : entry.sizes) max_count = std::max(max_count, runner.count_for(size));
      if (std::optional<Error> failed = runner.allocate(max_count)) {
        entry_failed(*failed);
        continue;
      }
      const size_t es = bp_dtype_size(entry.dtype);
      for (uint64_t size : entry.sizes) {
        const size_t count = runner.count_for(size);
        Row row;
        row.count = count * runner.blocks();
        row.size = row.count * es;
        std::vector<std::vector<std::byte>> contributions;
        for (size_t r = 0; r < ranks.size(); ++r)
          contributions.push_back(make_contribution(runner.make_case(count, false), r));
        if (entry.modes & BP_WORKLOAD_OUT_OF_PLACE) report(row.modes[0] = runner.run(count, false, contributions));
        if (entry.modes & BP_WORKLOAD_IN_PLACE) report(row.modes[1] = runner.run(count, true, contributions));
        rows.push_back(std::move(row));
        if (!json) {
          // Printed as it completes: a long run shows its progress.
          const Row &done = rows.back();
          const bool rooted = is_rooted(entry.collective);
          std::printf("%s%s%s\n",
                      format("%12llu  %12zu  %8s  %6s  %6s", static_cast<unsigned long long>(done.size), done.count,
                             bp_dtype_name(entry.dtype),
                             is_reducing(entry.collective) ? bp_reduce_op_name(entry.reduce_op) : "none",
                             rooted ? std::to_string(entry.root).c_str() : "-1")
                          .c_str(),
                      mode_cells(done.modes[0]).c_str(), mode_cells(done.modes[1]).c_str());
          std::fflush(stdout);
        }
      }
    }
    if (barrier && !json) {
      std::printf("%s%s%s\n", format("%12d  %12d  %8s  %6s  %6s", 0, 0, "none", "none", "-1").c_str(),
                  mode_cells(rows[0].modes[0]).c_str(), mode_cells(rows[0].modes[1]).c_str());
    }

    Json out_rows = Json::array();
    for (const Row &row : rows) {
      for (const ModeResult &mode : row.modes) {
        tally.add(mode);
        if (mode.requested && !mode.error && !barrier) {
          tally.busbw_sum += mode.busbw;
          ++tally.busbw_count;
        }
      }
      out_rows.push_back({{"size", row.size},
                          {"count", row.count},
                          {"out_of_place", mode_json(row.modes[0])},
                          {"in_place", mode_json(row.modes[1])}});
    }
    rows_run += rows.size();
    total.wrong += tally.wrong;
    total.errors += tally.errors;
    const double avg_busbw = tally.busbw_count ? tally.busbw_sum / static_cast<double>(tally.busbw_count) : 0;
    out["rows"] = std::move(out_rows);
    out["out_of_bounds"] = tally.wrong;
    out["errors"] = tally.errors;
    out["avg_busbw"] = barrier ? Json(nullptr) : Json(avg_busbw);
    out_entries.push_back(std::move(out));
    if (!json) {
      std::printf("# Out of bounds values : %zu %s\n", tally.wrong, tally.wrong ? "FAILED" : "OK");
      if (barrier)
        std::printf("# Avg bus bandwidth    : N/A\n");
      else
        std::printf("# Avg bus bandwidth    : %g\n", avg_busbw);
      if (tally.errors) std::printf("# Errors               : %zu (see stderr)\n", tally.errors);
    }
  }

  const bool ok = total.wrong == 0 && total.errors == 0;
  if (json) {
    Json out = {{"fleet", fleet_file.empty() ? Json(nullptr) : Json(fleet_file)},
                {"entries", std::move(out_entries)},
                {"out_of_bounds", total.wrong},
                {"errors", total.errors},
                {"ok", ok}};
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("#\n# %zu workload entr%s, %zu row%s: %zu out of bounds value%s, %zu error%s: %s\n", entries->size(),
                entries->size() == 1 ? "y" : "ies", rows_run, rows_run == 1 ? "" : "s", total.wrong,
                total.wrong == 1 ? "" : "s", total.errors, total.errors == 1 ? "" : "s", ok ? "OK" : "FAILED");
  }
  return ok ? kExitOk : kExitFailure;
}

}  // namespace backplane::cli
