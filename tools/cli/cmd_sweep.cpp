// `backplane run --sweep`: on cpu:0..cpu:3, runs every collective the fleet
// supports over a spread of element types, ops, modes and sizes, checks every
// result against the reference (tools/reference) and prints one row per case.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "backplane_reference/staged_case.hpp"
#include "cli.hpp"
#include "table.hpp"

namespace backplane::cli {
namespace {

using reference::blocks_per_buffer;
using reference::check_results;
using reference::CollectiveCase;
using reference::Comparison;
using reference::is_reducing;
using reference::make_request;
using reference::stage_case;
using reference::StagedCase;
using reference::write_images;

// The default fleet: the first four cpu devices in one group.
constexpr size_t kDefaultFleetSize = 4;
// A spread of element types: both 16-bit floats, the wide ones, and an
// integer of each width the plugins vectorise differently.
constexpr bp_dtype kDtypes[] = {BP_F32, BP_F64, BP_F16, BP_BF16, BP_I32, BP_I64, BP_U8};
// What uninitialised output regions are filled with, so that a plugin that
// leaves its output untouched cannot pass.
constexpr std::byte kSentinel{0xA5};

// The counts a case runs at. Sizes are as nccl-tests counts them: bytes of
// the largest buffer of a rank (for all_gather, the gathered result).
// Every (type, op, mode) runs at one element and at about 1000 bytes (an
// odd count for most types, so vector tails run). The larger sizes, where
// the time goes, run for sum and the plain copies only; 16 MiB and the
// empty call for f32 out of place only. Together the run stays within
// seconds on two cores.
std::vector<size_t> counts_for(bp_collective collective, bp_dtype dtype, bp_reduce_op op, bool in_place, size_t ranks) {
  const size_t block_bytes = bp_dtype_size(dtype) * blocks_per_buffer(collective, ranks);
  auto fitting = [&](size_t bytes) { return std::max<size_t>(1, bytes / block_bytes); };
  std::vector<size_t> counts{1, fitting(1000)};
  const bool common = !is_reducing(collective) || op == BP_SUM;
  if (common) counts.push_back(fitting(size_t{1} << 20));
  if (common && dtype == BP_F32 && !in_place) {
    counts.push_back(fitting(size_t{16} << 20));
    counts.push_back(0);
  }
  return counts;
}

bool is_unsupported(bp_code code) {
  return code == BP_UNSUPPORTED_DEVICE || code == BP_UNSUPPORTED_COLLECTIVE || code == BP_UNSUPPORTED_DTYPE ||
         code == BP_UNSUPPORTED_REDUCE_OP;
}

struct Outcome {
  std::string result;  // "ok", "WRONG n elements", or the error code's name
  bool ok = false;
  bool error = false;  // a refusal or failure, rather than a wrong result
  double micros = 0;   // median time of the calls
  size_t bytes = 0;    // bytes of the largest buffer of a rank
};

class Runner {
 public:
  Runner(Group &group, std::vector<Device> ranks) : group_(group), ranks_(std::move(ranks)) {}

  Outcome run(const CollectiveCase &c) {
    Outcome outcome;
    outcome.bytes = c.count * blocks_per_buffer(c.collective, c.ranks) * bp_dtype_size(c.dtype);
    Result<StagedCase> staged = stage_case(c, ranks_, kSentinel);
    if (!staged) {
      fail(outcome, staged.error());
      return outcome;
    }
    const bp_collective_request request = make_request(*staged);

    // Every call starts from the same images (in place overwrites the
    // input), so each timed call does the same work and the last is checked.
    const uint32_t iterations = outcome.bytes <= (size_t{64} << 10) ? 5 : 3;
    Result<std::vector<double>> micros = time_calls(
        0, iterations, [&] { return group_.run(request); }, [&](uint32_t) { return write_images(*staged); });
    if (!micros) {
      fail(outcome, micros.error());
      return outcome;
    }
    outcome.micros = median(*micros);

    Result<std::vector<Comparison>> compared = check_results(*staged);
    if (!compared) {
      fail(outcome, compared.error());
      return outcome;
    }
    size_t wrong = 0;
    for (size_t r = 0; r < compared->size(); ++r) {
      const Comparison &comparison = (*compared)[r];
      if (comparison.wrong && !wrong)
        std::fprintf(stderr, "wrong: %s %s%s%s %s count %zu: rank %zu, element %zu: got %s, expected %s\n",
                     bp_collective_name(c.collective), bp_dtype_name(c.dtype), is_reducing(c.collective) ? " " : "",
                     is_reducing(c.collective) ? bp_reduce_op_name(c.op) : "", c.in_place ? "in-place" : "out-of-place",
                     c.count, r, comparison.first_index, comparison.got.c_str(), comparison.expected.c_str());
      wrong += comparison.wrong;
    }
    outcome.ok = wrong == 0;
    outcome.result = wrong ? "WRONG " + std::to_string(wrong) + (wrong == 1 ? " element" : " elements") : "ok";
    return outcome;
  }

  Outcome run_barrier() {
    Outcome outcome;
    Result<std::vector<double>> micros = time_calls(0, 5, [&] { return group_.barrier(); });
    if (!micros) {
      fail(outcome, micros.error());
      return outcome;
    }
    outcome.micros = median(*micros);
    outcome.ok = true;
    outcome.result = "ok";
    return outcome;
  }

 private:
  static void fail(Outcome &outcome, const Error &error) {
    print_error(error);
    outcome.error = true;
    outcome.result = std::string(error.code_name());
  }

  Group &group_;
  std::vector<Device> ranks_;
};

}  // namespace

int run_sweep(const GlobalOptions &options) {
  std::optional<Host> host = open_host(options);
  if (!host) return kExitFailure;

  // The default fleet: cpu:0..3, or fewer when the cpu plugin was asked
  // for fewer devices. No cpu:0 at all is a refusal, with the host's reason.
  std::vector<Device> ranks;
  for (size_t i = 0; i < kDefaultFleetSize; ++i) {
    Result<Device> device = host->find_device("cpu:" + std::to_string(i));
    if (!device) {
      if (i > 0) break;
      print_error(device.error());
      return kExitFailure;
    }
    ranks.push_back(*device);
  }
  Result<Group> created = host->create_group(ranks, "default");
  if (!created) {
    print_error(created.error());
    return kExitFailure;
  }
  Group group = std::move(created).value();
  const size_t n = ranks.size();
  const auto root = static_cast<uint32_t>(n - 1);  // a root other than 0 catches more

  std::string names, kind;
  for (const Device &device : ranks) {
    Result<DeviceInfo> info = device.info();
    if (!info) {
      print_error(info.error());
      return kExitFailure;
    }
    names += (names.empty() ? "" : " ") + info->name;
    kind = info->kind;
  }
  std::printf("fleet: %s (one group of %zu; rooted collectives use root %u)\n\n", names.c_str(), n, root);

  // In place / out of place are capability flags per (kind, collective, dtype).
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> place_flags;
  for (const CapabilityInfo &row : host->capabilities())
    if (row.device_kind == kind)
      for (uint32_t dtype = 0; dtype < BP_DTYPE_COUNT; ++dtype)
        if (row.dtypes & (1u << dtype)) place_flags[{row.collective, dtype}] |= row.flags;

  Table table({{"collective", Align::left, 14},
               {"type", Align::left, 4},
               {"op", Align::left, 4},
               {"mode", Align::left, 12},
               {"count", Align::right, 8},
               {"size", Align::right, 8},
               {"time µs", Align::right, 8},
               {"result"}});
  table.print_header(stdout);

  Runner runner(group, ranks);
  size_t cases = 0, ok = 0, wrong = 0, errors = 0, unsupported = 0;
  auto record = [&](const Outcome &outcome, std::vector<std::string> cells) {
    ++cases;
    if (outcome.ok)
      ++ok;
    else if (outcome.error)
      ++errors;
    else
      ++wrong;
    cells.push_back(outcome.error ? "-" : format_micros(outcome.micros));
    cells.push_back(outcome.result);
    table.print_row(stdout, cells);
    std::fflush(stdout);
  };
  auto start = std::chrono::steady_clock::now();

  for (uint32_t ci = 0; ci < BP_COLLECTIVE_COUNT; ++ci) {
    const auto collective = static_cast<bp_collective>(ci);
    const char *collective_name = bp_collective_name(collective);
    if (collective == BP_BARRIER) {
      Status status = group.check(BP_BARRIER, BP_U8);
      if (!status && is_unsupported(status.error().code())) {
        ++unsupported;
        continue;
      }
      Outcome outcome;
      if (!status) {
        print_error(status.error());
        outcome.error = true;
        outcome.result = status.error().code_name();
      } else {
        outcome = runner.run_barrier();
      }
      record(outcome, {collective_name, "-", "-", "-", "-", "-"});
      continue;
    }
    for (bp_dtype dtype : kDtypes) {
      const uint32_t op_count = is_reducing(collective) ? BP_REDUCE_OP_COUNT : 1;
      for (uint32_t oi = 0; oi < op_count; ++oi) {
        const auto op = static_cast<bp_reduce_op>(oi);
        const std::string op_name = is_reducing(collective) ? bp_reduce_op_name(op) : "-";
        // An UNSUPPORTED answer is the fleet declining, not a failure; any
        // other answer to a check is a refusal and fails the run.
        Status status = group.check(collective, dtype, op);
        if (!status && is_unsupported(status.error().code())) {
          ++unsupported;
          continue;
        }
        if (!status) {
          print_error(status.error());
          Outcome outcome{std::string(status.error().code_name()), false, true, 0, 0};
          record(outcome, {collective_name, bp_dtype_name(dtype), op_name, "-", "-", "-"});
          continue;
        }
        const uint32_t flags = place_flags[{ci, static_cast<uint32_t>(dtype)}];
        for (bool in_place : {false, true}) {
          if (!(flags & (in_place ? BP_CAPABILITY_IN_PLACE : BP_CAPABILITY_OUT_OF_PLACE))) {
            ++unsupported;
            continue;
          }
          for (size_t count : counts_for(collective, dtype, op, in_place, n)) {
            CollectiveCase c{collective, dtype, op, count, n, root, in_place};
            Outcome outcome = runner.run(c);
            record(outcome, {collective_name, bp_dtype_name(dtype), op_name, in_place ? "in-place" : "out-of-place",
                             std::to_string(c.count), format_bytes(outcome.bytes)});
          }
        }
      }
    }
  }

  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "\n%zu cases: %zu ok, %zu wrong, %zu failed to run; %zu combinations the fleet does not "
      "support were not run; %.1f s\n",
      cases, ok, wrong, errors, unsupported, seconds);
  return wrong == 0 && errors == 0 ? kExitOk : kExitFailure;
}

}  // namespace backplane::cli
