// One collective over a list of sizes, timed and checked, and its rows in
// nccl-tests' columns; see collective_rows.hpp.
#include "collective_rows.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <tuple>

namespace backplane::cli {
namespace {

using Json = nlohmann::ordered_json;

// What output regions hold before a checked call, so that a plugin that
// leaves its output untouched cannot pass.
constexpr std::byte kSentinel{0xA5};
// Sentinel regions are written in pieces of this many bytes.
constexpr size_t kSentinelChunk = size_t{1} << 20;

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

// nccl-tests' widths (its common.cu): the first five columns take 50
// characters after the leading two, each mode block 32; the traffic
// columns add 16 to each mode block.
constexpr size_t kModesStart = 52, kModeWidth = 32, kTrafficWidth = 16;

std::string format_time(double micros) {
  if (micros >= 10000.0) return format("%7.0f", micros);
  if (micros >= 100.0) return format("%7.1f", micros);
  return format("%7.2f", micros);
}

std::string mode_cells(const ModeResult &mode, bool traffic) {
  std::string cells;
  if (!mode.requested)
    cells = format("  %7s  %6s  %6s  %5s", "-", "-", "-", "-");
  else if (mode.error)
    cells = format("  %7s  %6s  %6s  %5s", "-", "-", "-", "error");
  else
    cells = format("  %7s  %6.2f  %6.2f  %5s", format_time(mode.micros).c_str(), mode.algbw, mode.busbw,
                   mode.wrong ? std::to_string(*mode.wrong).c_str() : "N/A");
  if (!traffic) return cells;
  // Padded back to full width: format() drops trailing blanks.
  if (cells.size() < kModeWidth) cells.resize(kModeWidth, ' ');
  if (mode.requested && !mode.error && mode.traffic_gbps && mode.peak_percent)
    return cells + format("  %7.2f  %5.1f", *mode.traffic_gbps, *mode.peak_percent);
  return cells + format("  %7s  %5s", "-", "-");
}

Json mode_json(const ModeResult &mode) {
  if (!mode.requested) return nullptr;
  if (mode.error) return {{"error", Json::parse(mode.error->json(), nullptr, false)}};
  Json out = {{"time_us", mode.micros}, {"algbw", mode.algbw}, {"busbw", mode.busbw}};
  out["wrong"] = mode.wrong ? Json(*mode.wrong) : Json(nullptr);
  if (mode.traffic_gbps) out["traffic_gbps"] = *mode.traffic_gbps;
  if (mode.copy_micros) {
    out["copy_us"] = *mode.copy_micros;
    if (mode.peak_percent) out["copy_percent"] = *mode.peak_percent;
  } else if (mode.peak_percent) {
    out["peak_percent"] = *mode.peak_percent;
  }
  return out;
}

}  // namespace

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

// ---- CollectiveRunner ---------------------------------------------------

CollectiveRunner::CollectiveRunner(Host &host, WorkloadInfo entry, std::vector<Device> ranks)
    : entry_(std::move(entry)), ranks_(std::move(ranks)), global_ranks_(ranks_.size()) {
  Result<bp_group_span_info> span = entry_.group.span();
  if (!span || span->process_count < 2) return;
  global_ranks_ = span->global_size;
  first_rank_ = span->first_rank;
  processes_ = span->process_count;
  bp_group_options options{};
  options.struct_size = sizeof options;
  options.span = BP_SPAN_WORLD;
  std::vector<Device> one = {ranks_[0]};
  // Every process makes it, as it makes the group the entry runs on.
  if (Result<Group> group = host.create_group(one, options); group) {
    tally_group_ = std::move(*group);
    tally_memory_ = std::make_unique<uint64_t[]>(2);
  }
  else
    print_error(group.error());
}

void CollectiveRunner::add_across_processes(ModeResult &result) {
  if (!tally_group_) return;
  uint64_t *const totals = tally_memory_.get();  // the runner's, not this frame's: a timed-out exchange may write it later
  totals[0] = result.wrong.value_or(0);
  totals[1] = result.error ? 1u : 0u;
  Result<Buffer> wrapped = Buffer::wrap_host(ranks_[0], totals, 2 * sizeof *totals);
  if (!wrapped) {
    print_error(wrapped.error());
    return;
  }
  std::vector<bp_buffer *> handles = {wrapped->get()};
  if (Status added = tally_group_->all_reduce(handles, handles, 2, BP_U64, BP_SUM); !added) {
    if (!result.error) result.error = added.error();
    return;
  }
  if (result.wrong) result.wrong = totals[0];
  result.errors_elsewhere = totals[1] - (result.error ? 1 : 0);
}

size_t CollectiveRunner::count_for(uint64_t size) const {
  return static_cast<size_t>(size / (bp_dtype_size(entry_.dtype) * blocks()));
}

std::optional<Error> CollectiveRunner::allocate(size_t max_count) {
  const size_t es = bp_dtype_size(entry_.dtype);
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const RankLayout l = rank_layout(make_case(max_count, false), first_rank_ + r);
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

ModeResult CollectiveRunner::run(size_t count, bool in_place,
                                 const std::vector<std::vector<std::byte>> &contributions) {
  ModeResult result = run_here(count, in_place, contributions);
  add_across_processes(result);
  return result;
}

ModeResult CollectiveRunner::run_barrier() {
  ModeResult result = run_barrier_here();
  add_across_processes(result);
  return result;
}

ModeResult CollectiveRunner::run_here(size_t count, bool in_place,
                                      const std::vector<std::vector<std::byte>> &contributions) {
  ModeResult result;
  result.requested = true;
  const CollectiveCase c = make_case(count, in_place);
  // Local rank r is the group's rank first_rank_ + r; the others' results are checked where they are.
  const size_t local = ranks_.size(), es = bp_dtype_size(c.dtype);

  std::vector<Image> images;
  std::vector<bp_buffer *> send(local, nullptr), recv(local, nullptr);
  std::vector<const Buffer *> result_buffer(global_ranks_, nullptr);
  for (size_t r = 0; r < local; ++r) {
    const RankLayout l = rank_layout(c, first_rank_ + r);
    if (l.in_place) {
      images.push_back({&first_[r], l.send * es, l.input_offset * es, &contributions[first_rank_ + r]});
      send[r] = recv[r] = first_[r].get();
      result_buffer[first_rank_ + r] = &first_[r];
      continue;
    }
    if (l.has_send) {
      images.push_back({&first_[r], l.send * es, l.input_offset * es, &contributions[first_rank_ + r]});
      send[r] = first_[r].get();
    }
    if (l.has_recv) {
      Buffer &buffer = l.has_send ? second_[r] : first_[r];
      images.push_back({&buffer, l.recv * es, 0, nullptr});
      recv[r] = buffer.get();
      result_buffer[first_rank_ + r] = &buffer;
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
  result.busbw = result.algbw * bus_factor(c.collective, global_ranks_);
  if (!entry_.check) return result;

  Result<std::vector<Comparison>> compared = check_results(c, contributions, result_buffer);
  if (!compared) {
    result.error = compared.error();
    return result;
  }
  size_t wrong = 0;
  for (size_t r = 0; r < global_ranks_; ++r) {
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

ModeResult CollectiveRunner::run_barrier_here() {
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

std::string CollectiveRunner::describe() const {
  if (entry_.collective == BP_BARRIER) return "barrier";
  std::string text = std::string(bp_collective_name(entry_.collective)) + "(" + bp_dtype_name(entry_.dtype);
  if (is_reducing(entry_.collective)) text += std::string(", ") + bp_reduce_op_name(entry_.reduce_op);
  return text + ")";
}

CollectiveCase CollectiveRunner::make_case(size_t count, bool in_place) const {
  return {entry_.collective, entry_.dtype, entry_.reduce_op, count, global_ranks_, entry_.root, in_place};
}

namespace {

// The round of median time (of the lower two for an even count); a failed
// round, if any, stands for the mode; a wrong result in any round counts.
ModeResult median_round(std::vector<ModeResult> rounds) {
  for (ModeResult &round : rounds)
    if (round.error) return std::move(round);
  std::optional<size_t> most_wrong;
  for (const ModeResult &round : rounds)
    if (round.wrong && (!most_wrong || *round.wrong > *most_wrong)) most_wrong = round.wrong;
  size_t errors_elsewhere = 0;
  for (const ModeResult &round : rounds) errors_elsewhere = std::max(errors_elsewhere, round.errors_elsewhere);
  std::sort(rounds.begin(), rounds.end(), [](const ModeResult &a, const ModeResult &b) { return a.micros < b.micros; });
  ModeResult &chosen = rounds[(rounds.size() - 1) / 2];
  chosen.wrong = most_wrong;
  chosen.errors_elsewhere = errors_elsewhere;
  return std::move(chosen);
}

}  // namespace

Result<std::vector<Row>> run_rows(CollectiveRunner &runner, const std::function<void(Row &)> &on_row,
                                  const RowTiming &timing) {
  const WorkloadInfo &entry = runner.entry();
  std::vector<Row> rows;
  // A call that fails says why on stderr; its row says "error".
  auto report = [](const ModeResult &mode) {
    if (mode.error) print_error(*mode.error);
  };
  if (entry.collective == BP_BARRIER) {
    Row row;
    std::vector<ModeResult> rounds;
    for (unsigned round = 0; round < std::max(1u, timing.rounds); ++round) rounds.push_back(runner.run_barrier());
    report(row.modes[0] = median_round(std::move(rounds)));
    if (on_row) on_row(row);
    rows.push_back(std::move(row));
    return rows;
  }
  size_t max_count = 0;
  for (uint64_t size : entry.sizes) max_count = std::max(max_count, runner.count_for(size));
  if (std::optional<Error> failed = runner.allocate(max_count)) return *failed;
  const size_t es = bp_dtype_size(entry.dtype);
  for (uint64_t size : entry.sizes) {
    const size_t count = runner.count_for(size);
    Row row;
    row.count = count * runner.blocks();
    row.size = row.count * es;
    std::vector<std::vector<std::byte>> contributions;
    for (size_t r = 0; r < runner.ranks(); ++r)
      contributions.push_back(make_contribution(runner.make_case(count, false), r));
    std::vector<ModeResult> rounds[2];
    std::vector<double> reference_micros[2];
    for (unsigned round = 0; round < std::max(1u, timing.rounds); ++round) {
      for (bool in_place : {false, true}) {
        if (!(entry.modes & (in_place ? BP_WORKLOAD_IN_PLACE : BP_WORKLOAD_OUT_OF_PLACE))) continue;
        ModeResult mode = runner.run(count, in_place, contributions);
        if (timing.reference && !mode.error)
          if (std::optional<double> micros = timing.reference(count, in_place)) reference_micros[in_place].push_back(*micros);
        rounds[in_place].push_back(std::move(mode));
      }
    }
    for (int m = 0; m < 2; ++m) {
      if (rounds[m].empty()) continue;
      report(row.modes[m] = median_round(std::move(rounds[m])));
      if (!reference_micros[m].empty()) row.modes[m].copy_micros = median(reference_micros[m]);
    }
    if (on_row) on_row(row);
    rows.push_back(std::move(row));
  }
  return rows;
}

// ---- output ------------------------------------------------------------

void print_timing_note(const WorkloadInfo &entry) {
  const bool checked = entry.check && entry.collective != BP_BARRIER;
  std::printf("# time: median of %u call%s after %u warmup (nccl-tests prints a mean); #wrong: %s\n",
              entry.iterations, entry.iterations == 1 ? "" : "s", entry.warmup,
              checked ? "elements that differ from the reference after the last call" : "not checked");
}

void print_column_header(bool traffic, const char *reference_title) {
  const size_t width = kModeWidth + (traffic ? kTrafficWidth : 0);
  std::string modes(kModesStart + 2 * width, ' ');
  modes[0] = '#';
  modes.replace(kModesStart + 10, 12, "out-of-place");
  modes.replace(kModesStart + width + 12, 8, "in-place");
  modes.resize(kModesStart + width + 12 + 8);
  std::printf("%s\n", modes.c_str());
  std::string titles = format("# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
  std::string units = format("# %10s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
  for (int mode = 0; mode < 2; ++mode) {
    titles += format("  %7s  %6s  %6s %6s", "time", "algbw", "busbw", "#wrong");
    std::string unit = format("  %7s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)");
    if (traffic) {
      titles += format("  %7s  %5s", "traffic", reference_title);
      if (unit.size() < kModeWidth) unit.resize(kModeWidth, ' ');
      unit += format("  %7s", "(GB/s)");
    }
    units.resize(kModesStart + mode * width, ' ');
    units += unit;
  }
  std::printf("%s\n%s\n", titles.c_str(), units.c_str());
}

std::string row_line(const WorkloadInfo &entry, const Row &row, bool traffic) {
  const bool barrier = entry.collective == BP_BARRIER;
  std::string line =
      barrier ? format("%12d  %12d  %8s  %6s  %6s", 0, 0, "none", "none", "-1")
              : format("%12llu  %12zu  %8s  %6s  %6s", static_cast<unsigned long long>(row.size), row.count,
                       bp_dtype_name(entry.dtype),
                       is_reducing(entry.collective) ? bp_reduce_op_name(entry.reduce_op) : "none",
                       is_rooted(entry.collective) ? std::to_string(entry.root).c_str() : "-1");
  line += mode_cells(row.modes[0], traffic);
  line += mode_cells(row.modes[1], traffic);
  line.erase(line.find_last_not_of(' ') + 1);
  return line;
}

Json row_json(const WorkloadInfo &entry, const Row &row) {
  const bool barrier = entry.collective == BP_BARRIER;
  Json out = {{"size", row.size}, {"count", row.count}};
  out["type"] = barrier ? Json(nullptr) : Json(bp_dtype_name(entry.dtype));
  out["redop"] = is_reducing(entry.collective) ? Json(bp_reduce_op_name(entry.reduce_op)) : Json(nullptr);
  out["root"] = is_rooted(entry.collective) ? Json(entry.root) : Json(nullptr);
  out["out_of_place"] = mode_json(row.modes[0]);
  out["in_place"] = mode_json(row.modes[1]);
  return out;
}

void Tally::add(const std::vector<Row> &rows, bool barrier) {
  for (const Row &row : rows) {
    for (const ModeResult &mode : row.modes) {
      if (!mode.requested) continue;
      errors += mode.errors_elsewhere;
      if (mode.error) {
        ++errors;
        continue;
      }
      wrong += mode.wrong.value_or(0);
      if (!barrier) {
        busbw_sum += mode.busbw;
        ++busbw_count;
      }
    }
  }
}

void print_footer(const Tally &tally, bool barrier) {
  std::printf("# Out of bounds values : %zu %s\n", tally.wrong, tally.wrong ? "FAILED" : "OK");
  if (barrier)
    std::printf("# Avg bus bandwidth    : N/A\n");
  else
    std::printf("# Avg bus bandwidth    : %g\n", tally.avg_busbw());
  if (tally.errors) std::printf("# Errors               : %zu (see stderr)\n", tally.errors);
}

}  // namespace backplane::cli
