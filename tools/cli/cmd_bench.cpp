// `backplane bench COLLECTIVE|all`: a collective timed over a range of
// sizes, in the conventions of NVIDIA's nccl-tests (all_reduce_perf and its
// siblings): their flags, defaults, columns, size rounding and bus bandwidth
// factors, with times the median of the iterations rather than the mean.
// On cpu groups each mode also gets the memory traffic it implies and that
// as a share of a memory bandwidth probe taken in the same run
// (memory_bandwidth.hpp); on opencl and vulkan groups, that traffic against
// a copy moving the same bytes on rank 0's device, size by size
// (copy_reference.hpp). Every result is checked against the reference
// unless -c 0. The rows are collective_rows.hpp, shared with `run`.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "collective_rows.hpp"
#include "memory_bandwidth.hpp"
#include "copy_reference.hpp"
#include "staged_copies.hpp"
#include "table.hpp"

namespace backplane::cli {
namespace {

using Json = nlohmann::ordered_json;

// More sizes than this is a typo (-i 1 up to 64M), not a benchmark.
constexpr size_t kMaxSizes = 10000;
// The most -n and -w take, as a fleet's "iterations" and "warmup"
// (configs/schema.json): each timed call keeps its time, so -n is memory.
constexpr uint32_t kMaxIterations = 1000000;

// A name and the other names it is known by: ours first, then nccl-tests'.
template <typename Enum>
struct Spelling {
  Enum value;
  std::vector<const char *> names;
};

const std::vector<Spelling<bp_dtype>> &dtype_spellings() {
  static const std::vector<Spelling<bp_dtype>> spellings = {
      {BP_I8, {"i8", "int8", "char"}},       {BP_U8, {"u8", "uint8"}},
      {BP_I32, {"i32", "int32", "int"}},     {BP_U32, {"u32", "uint32"}},
      {BP_I64, {"i64", "int64"}},            {BP_U64, {"u64", "uint64"}},
      {BP_F16, {"f16", "half", "float16"}},  {BP_F32, {"f32", "float", "float32"}},
      {BP_F64, {"f64", "double", "float64"}}, {BP_BF16, {"bf16", "bfloat16"}},
  };
  return spellings;
}

// nccl-tests' programs are all_reduce_perf, all_gather_perf, alltoall_perf,
// reduce_scatter_perf, ...: their stems are accepted as well.
const std::vector<Spelling<bp_collective>> &collective_spellings() {
  static const std::vector<Spelling<bp_collective>> spellings = {
      {BP_ALL_REDUCE, {"all_reduce", "allreduce"}},
      {BP_REDUCE, {"reduce"}},
      {BP_BROADCAST, {"broadcast"}},
      {BP_ALL_GATHER, {"all_gather", "allgather"}},
      {BP_REDUCE_SCATTER, {"reduce_scatter", "reducescatter"}},
      {BP_GATHER, {"gather"}},
      {BP_SCATTER, {"scatter"}},
      {BP_ALL_TO_ALL, {"all_to_all", "alltoall"}},
      {BP_BARRIER, {"barrier"}},
  };
  return spellings;
}

std::string lowered(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c); });
  return text;
}

// Finds `given` among the spellings, or prints the usage error naming the
// closest known name (closest_name(), as `explain` suggests) and every name.
template <typename Enum>
std::optional<Enum> parse_spelling(const char *what, const std::string &given,
                                   const std::vector<Spelling<Enum>> &spellings,
                                   const std::vector<std::string> &extra_names = {}) {
  const std::string name = lowered(given);
  std::vector<std::string> known = extra_names;
  // "f16 (half, float16), bf16 (bfloat16), ...": each of ours, then its other names.
  std::string listing;
  for (const std::string &extra : extra_names) listing += (listing.empty() ? "" : ", ") + extra;
  for (const Spelling<Enum> &spelling : spellings) {
    for (const char *spelled : spelling.names) {
      if (name == spelled) return spelling.value;
      known.emplace_back(spelled);
    }
    listing += (listing.empty() ? "" : ", ") + std::string(spelling.names.front());
    for (size_t i = 1; i < spelling.names.size(); ++i)
      listing += std::string(i == 1 ? " (" : ", ") + spelling.names[i] + (i + 1 == spelling.names.size() ? ")" : "");
  }
  std::string message = "unknown " + std::string(what) + " '" + given + "'";
  if (const std::string closest = closest_name(given, known); !closest.empty())
    message += "; did you mean '" + closest + "'?";
  print_usage_error(message + " (known: " + listing + ")");
  return std::nullopt;
}

std::optional<bp_reduce_op> parse_op(const std::string &given) {
  std::vector<Spelling<bp_reduce_op>> spellings;
  for (uint32_t i = 0; i < BP_REDUCE_OP_COUNT; ++i)
    spellings.push_back({static_cast<bp_reduce_op>(i), {bp_reduce_op_name(static_cast<bp_reduce_op>(i))}});
  return parse_spelling("reduce op", given, spellings);
}

// The collectives asked for: one, or for "all" every collective that moves
// data (a barrier has no size to sweep; `bench barrier` times it alone).
std::optional<std::vector<bp_collective>> parse_collectives(const std::string &given) {
  std::string name = lowered(given);
  // all_reduce_perf, as nccl-tests calls its program, is all_reduce.
  if (name.size() > 5 && name.ends_with("_perf")) name.resize(name.size() - 5);
  if (name == "all") {
    std::vector<bp_collective> every;
    for (uint32_t i = 0; i < BP_COLLECTIVE_COUNT; ++i)
      if (static_cast<bp_collective>(i) != BP_BARRIER) every.push_back(static_cast<bp_collective>(i));
    return every;
  }
  std::optional<bp_collective> one = parse_spelling("collective", name, collective_spellings(), {"all"});
  if (!one) return std::nullopt;
  return std::vector<bp_collective>{*one};
}

// One size, "8", "64K", "32M", "1G" (powers of 1024, as nccl-tests reads
// them, in either case; "KiB" and "B" too), by the host's parser of fleet
// sizes.
std::optional<uint64_t> parse_size(const char *flag, const std::string &text) {
  std::string unit_upper = text;
  if (!unit_upper.empty() && (unit_upper.back() == 'k' || unit_upper.back() == 'm' || unit_upper.back() == 'g'))
    unit_upper.back() = static_cast<char>(unit_upper.back() - 'a' + 'A');
  Result<std::vector<uint64_t>> sizes = parse_sizes(unit_upper);
  if (!sizes || sizes->size() != 1) {
    print_usage_error(std::string(flag) + " '" + text + "' is not a size such as 8, 64K, 32M or 1G" +
                      (sizes ? "" : ": " + std::string(sizes.error().message())));
    return std::nullopt;
  }
  return sizes->front();
}

// The sizes of the flags, by nccl-tests' loop: from -b while at most -e,
// times -f when it is above 1, else plus -i.
struct SizeSweep {
  uint64_t min = 0, max = 0, step_bytes = 0;
  std::vector<uint64_t> sizes;
};

std::optional<SizeSweep> size_sweep(const BenchOptions &bench) {
  std::optional<uint64_t> min = parse_size("-b", bench.min_bytes), max = parse_size("-e", bench.max_bytes);
  std::optional<uint64_t> step = parse_size("-i", bench.step_bytes);
  if (!min || !max || !step) return std::nullopt;
  if (*min > *max) {
    print_usage_error("-b " + bench.min_bytes + " is above -e " + bench.max_bytes);
    return std::nullopt;
  }
  const bool factor = bench.step_factor > 1;
  if ((factor && *min == 0) || (!factor && *step == 0 && *min < *max)) {
    print_usage_error(factor ? "-b 0 with -f never grows: start at 1 or more" : "-i 0 never grows: use -i 1 or more");
    return std::nullopt;
  }
  SizeSweep sweep{*min, *max, *step, {}};
  for (uint64_t size = *min; size <= *max;) {
    if (sweep.sizes.size() == kMaxSizes) {
      print_usage_error("more than " + std::to_string(kMaxSizes) + " sizes from -b " + bench.min_bytes + " to -e " +
                        bench.max_bytes + ": use a larger -i or -f");
      return std::nullopt;
    }
    sweep.sizes.push_back(size);
    const uint64_t next = factor ? size * bench.step_factor : size + *step;
    if (next <= size || (factor && next / bench.step_factor != size)) break;  // no step, or overflow
    size = next;
  }
  return sweep;
}

// The modes the capability table declares for `collective` x `dtype` on
// every kind of the group (BP_WORKLOAD_*); both where a kind has no row,
// so that the call itself answers.
uint32_t declared_modes(const Host &host, const std::vector<std::string> &kinds, bp_collective collective,
                        bp_dtype dtype) {
  uint32_t modes = BP_WORKLOAD_OUT_OF_PLACE | BP_WORKLOAD_IN_PLACE;
  const std::vector<CapabilityInfo> rows = host.capabilities();
  for (const std::string &kind : kinds) {
    bool found = false;
    uint32_t flags = 0;
    for (const CapabilityInfo &row : rows)
      if (kind == row.device_kind && row.collective == static_cast<uint32_t>(collective) &&
          (collective == BP_BARRIER || (row.dtypes & (1u << dtype)))) {
        found = true;
        flags |= row.flags;
      }
    if (!found) continue;
    uint32_t kind_modes = 0;
    if (flags & BP_CAPABILITY_OUT_OF_PLACE) kind_modes |= BP_WORKLOAD_OUT_OF_PLACE;
    if (flags & BP_CAPABILITY_IN_PLACE) kind_modes |= BP_WORKLOAD_IN_PLACE;
    modes &= kind_modes;
  }
  return modes ? modes : BP_WORKLOAD_OUT_OF_PLACE | BP_WORKLOAD_IN_PLACE;
}

// The host and the group the bench runs on: -g N (cpu:0..N-1) or a fleet's group.
struct Setup {
  std::optional<Host> host;
  Group owned;     // -g: the group made here
  GroupView group;
  std::string group_label;
};

// -g N: the global --plugin-options, with the cpu kind asked for at least N
// devices (8, the plugin's default, when it names no count).
std::string options_with_devices(const std::string &plugin_options_json, uint32_t devices) {
  Json options = plugin_options_json.empty() ? Json::object() : Json::parse(plugin_options_json);
  Json &cpu = options["cpu"];
  if (!cpu.is_object()) cpu = Json::object();
  const bool named = cpu.contains("devices") && cpu["devices"].is_number_unsigned();
  if (!named)
    cpu["devices"] = std::max<uint32_t>(devices, 8);
  else if (cpu["devices"].get<uint64_t>() < devices)
    cpu["devices"] = devices;
  return options.dump();
}

// Returns the exit code when setting up failed.
std::optional<int> set_up(const GlobalOptions &options, const BenchOptions &bench, Setup &setup) {
  if (!bench.fleet_file.empty()) {
    setup.host = open_fleet(options, bench.fleet_file);
    if (!setup.host) return kExitFailure;
    const std::vector<GroupView> groups = setup.host->groups();
    std::string names;
    for (const GroupView &known : groups) names += (names.empty() ? "" : ", ") + std::string(known.name());
    if (bench.group.empty()) {
      if (groups.size() != 1) {
        print_usage_error("--group is required: " + bench.fleet_file + " has " +
                          (groups.empty() ? "no groups" : "groups " + names));
        return kExitUsage;
      }
      setup.group = groups.front();
    } else {
      Result<GroupView> group = setup.host->find_group(bench.group);
      if (!group) {
        // A group the fleet does not have is a mistake in the arguments.
        print_error(group.error());
        std::fprintf(stderr, "groups of %s: %s\n", bench.fleet_file.c_str(), names.empty() ? "none" : names.c_str());
        return kExitUsage;
      }
      setup.group = *group;
    }
    setup.group_label = std::string(setup.group.name());
    return std::nullopt;
  }

  GlobalOptions with_devices = options;
  with_devices.plugin_options_json = options_with_devices(options.plugin_options_json, bench.devices);
  setup.host = open_host(with_devices);
  if (!setup.host) return kExitFailure;
  std::vector<Device> ranks;
  for (uint32_t i = 0; i < bench.devices; ++i) {
    Result<Device> device = setup.host->find_device("cpu:" + std::to_string(i));
    if (!device) {
      print_error(device.error());
      return kExitFailure;
    }
    ranks.push_back(*device);
  }
  setup.group_label = bench.devices == 1 ? "cpu:0" : "cpu:0.." + std::to_string(bench.devices - 1);
  Result<Group> created = setup.host->create_group(ranks, setup.group_label.c_str());
  if (!created) {
    print_error(created.error());
    return kExitFailure;
  }
  setup.owned = std::move(created).value();
  setup.group = setup.owned;
  return std::nullopt;
}

// nccl-tests' first header line, less what has no meaning here (threads,
// graphs, aggregation).
std::string sweep_text(const BenchOptions &bench, const SizeSweep &sweep) {
  return "minBytes " + std::to_string(sweep.min) + " maxBytes " + std::to_string(sweep.max) + " step: " +
         (bench.step_factor > 1 ? std::to_string(bench.step_factor) + "(factor)"
                                : std::to_string(sweep.step_bytes) + "(bytes)");
}

}  // namespace

int run_bench(const GlobalOptions &options, const BenchOptions &bench) {
  // Everything typed is checked before any plugin loads: a typo is bad usage.
  std::optional<std::vector<bp_collective>> collectives = parse_collectives(bench.collective);
  if (!collectives) return kExitUsage;
  const std::optional<bp_dtype> dtype = parse_spelling("element type", bench.dtype, dtype_spellings());
  if (!dtype) return kExitUsage;
  const std::optional<bp_reduce_op> op = parse_op(bench.op);
  if (!op) return kExitUsage;
  const std::optional<SizeSweep> sweep = size_sweep(bench);
  if (!sweep) return kExitUsage;
  if (bench.iterations == 0) {
    print_usage_error("-n 0: at least one timed iteration is needed");
    return kExitUsage;
  }
  if (bench.iterations > kMaxIterations || bench.warmup > kMaxIterations) {
    const bool timed = bench.iterations > kMaxIterations;
    print_usage_error(std::string(timed ? "-n " : "-w ") + std::to_string(timed ? bench.iterations : bench.warmup) +
                      ": at most " + std::to_string(kMaxIterations) + (timed ? " timed" : " warmup") +
                      " iterations per size and mode");
    return kExitUsage;
  }
  if (!bench.fleet_file.empty() && bench.devices_given) {
    print_usage_error("-g and --fleet both choose the devices: give one");
    return kExitUsage;
  }
  if (bench.fleet_file.empty() && !bench.group.empty()) {
    print_usage_error("--group names a group of a --fleet file; without one, -g N benches cpu:0..N-1");
    return kExitUsage;
  }
  if (bench.fleet_file.empty() && bench.devices == 0) {
    print_usage_error("-g 0: a group needs at least one device");
    return kExitUsage;
  }

  Setup setup;
  if (std::optional<int> failed = set_up(options, bench, setup)) return *failed;
  GroupView group = setup.group;
  const size_t n = group.size();
  // A group across processes: a root is a rank of every process's.
  Result<bp_group_span_info> span = group.span();
  const size_t global = span ? static_cast<size_t>(span->global_size) : n;
  if (bench.root >= global) {
    print_usage_error("-r " + std::to_string(bench.root) + ": group " + setup.group_label + " has ranks 0.." +
                      std::to_string(global - 1));
    return kExitUsage;
  }
  Result<GroupDescription> described = describe_group(*setup.host, group);
  if (!described) {
    print_error(described.error());
    return kExitFailure;
  }
  std::vector<std::string> kinds, rank_kinds;
  std::vector<std::pair<std::string, std::string>> device_lines;  // name, description
  std::vector<std::pair<std::string, std::string>> first_device_properties;
  for (size_t r = 0; r < n; ++r) {
    Result<DeviceInfo> info = group.device(r).info();
    if (!info) {
      print_error(info.error());
      return kExitFailure;
    }
    if (std::find(kinds.begin(), kinds.end(), info->kind) == kinds.end()) kinds.push_back(info->kind);
    rank_kinds.push_back(info->kind);
    device_lines.emplace_back(info->name, info->description);
    if (r == 0) first_device_properties = info->properties;
  }
  // Memory traffic is the cpu, opencl and vulkan plugins' account of their
  // own work (each input read once, each output written once): only a
  // group of one of those kinds alone has it.
  const bool cpu_group = kinds == std::vector<std::string>{"cpu"};

  // The group's answers first: a refusal is reported, never run into, and
  // when nothing would run there is nothing to probe or print a table for.
  std::vector<std::optional<Error>> refusals;
  for (bp_collective collective : *collectives) {
    Status status = group.check(collective, *dtype, *op);
    refusals.push_back(status ? std::nullopt : std::optional<Error>(status.error()));
  }
  const size_t refused = static_cast<size_t>(
      std::count_if(refusals.begin(), refusals.end(), [](const std::optional<Error> &e) { return e.has_value(); }));
  const bool any_runs = refused < collectives->size();
  bool moves_bytes = false;  // something that will run is not a barrier
  for (size_t i = 0; i < collectives->size(); ++i) moves_bytes |= !refusals[i] && (*collectives)[i] != BP_BARRIER;

  std::optional<BandwidthProbe> probe;
  if (cpu_group && moves_bytes) {
    try {
      probe = probe_memory_bandwidth();
    } catch (const std::exception &e) {
      // The bench still runs; only the traffic columns need the probe.
      std::fprintf(stderr, "note: no memory bandwidth probe (%s): no traffic columns\n", e.what());
    }
  }
  // A device group of one kind is measured against a copy on rank 0's device.
  std::unique_ptr<CopyReference> copy_reference;
  if (kinds.size() == 1 && !cpu_group && moves_bytes) {
    try {
      copy_reference = make_copy_reference(kinds.front(), first_device_properties);
    } catch (const std::exception &e) {
      std::fprintf(stderr, "note: no copy reference (%s): no traffic columns\n", e.what());
    }
  }
  // A group across kinds runs staged: it is measured against the bare copies that needs.
  std::unique_ptr<StagedCopies> staged_copies;
  if (kinds.size() > 1 && moves_bytes) {
    std::vector<Device> ranks;
    for (size_t r = 0; r < n; ++r) ranks.push_back(group.device(r));
    staged_copies = std::make_unique<StagedCopies>(std::move(ranks), rank_kinds);
  }
  Json machine = {{"cpus", usable_cpus()}};
  machine["memory_bandwidth_gbps"] = probe ? Json(probe->gbps) : Json(nullptr);
  machine["probe"] = probe ? Json{{"method", "memcpy"}, {"threads", probe->threads}, {"bytes", probe->bytes},
                                  {"runs", probe->runs}, {"median_gbps", probe->gbps}, {"best_gbps", probe->best_gbps}}
                           : Json(nullptr);

  if (!bench.json && any_runs) {
    std::printf("# backplane bench %s: group %s (%s), plugin %s\n", bench.collective.c_str(),
                setup.group_label.c_str(), described->device_text().c_str(), described->plugin_text().c_str());
    std::printf("# nRanks %zu %s warmup iters: %u iters: %u validation: %d rounds: %u\n", n,
                sweep_text(bench, *sweep).c_str(), bench.warmup, bench.iterations, bench.check ? 1 : 0,
                bench.rounds);
    if (probe) {
      std::printf("# memory bandwidth probe: %.1f GB/s read+written (memcpy, %u thread%s, %s)\n", probe->gbps,
                  probe->threads, probe->threads == 1 ? "" : "s", format_bytes(probe->bytes).c_str());
      std::printf("# traffic: bytes read + written per second as the cpu plugin moves them (see `backplane bench "
                  "--help`); %%peak: traffic / probe\n");
    }
    if (staged_copies) {
      std::printf("# copy reference: the bare copies staging needs, %s (every byte of a send side once up, of a "
                  "recv side once down), median of the same iterations, timed right after the collective in every "
                  "round\n",
                  staged_copies->label().c_str());
      std::printf("# traffic: bytes read + written per second, each input read once and each output written once; "
                  "%%copy: copy time / collective time\n");
    }
    if (copy_reference) {
      std::printf("# copy reference: %s, moving each row's traffic bytes (half read, half written), median of "
                  "the same iterations, timed right after the collective in every round\n",
                  copy_reference->label().c_str());
      std::printf("# traffic: bytes read + written per second, each input read once and each output written once; "
                  "%%copy: copy time / collective time\n");
    }
    std::printf("#\n# Using devices\n");
    for (size_t r = 0; r < n; ++r)
      std::printf("#  Rank %2zu device %s: %s\n", r, device_lines[r].first.c_str(), device_lines[r].second.c_str());
  }

  Json results = Json::array();
  Tally total;
  size_t ran = 0;
  for (size_t i = 0; i < collectives->size(); ++i) {
    const bp_collective collective = (*collectives)[i];
    WorkloadInfo entry;
    entry.group = group;
    entry.collective = collective;
    entry.dtype = *dtype;
    entry.reduce_op = *op;
    entry.root = bench.root;
    entry.sizes = sweep->sizes;
    entry.iterations = bench.iterations;
    entry.warmup = bench.warmup;
    entry.modes = declared_modes(*setup.host, kinds, collective, *dtype);
    entry.check = bench.check != 0;
    CollectiveRunner runner(*setup.host, entry, [&] {
      std::vector<Device> ranks;
      for (size_t r = 0; r < n; ++r) ranks.push_back(group.device(r));
      return ranks;
    }());
    const bool barrier = collective == BP_BARRIER;

    Json out = {{"tool", "backplane bench"}, {"machine", machine}, {"collective", bp_collective_name(collective)}};
    out["dtype"] = barrier ? Json(nullptr) : Json(bp_dtype_name(*dtype));
    out["reduce_op"] = is_reducing(collective) ? Json(bp_reduce_op_name(*op)) : Json(nullptr);
    out["root"] = is_rooted(collective) ? Json(bench.root) : Json(nullptr);
    out["group"] = setup.group_label;
    out["ranks"] = n;
    out["devices"] = described->devices;
    out["plugin"] = described->plugins.empty() ? Json(nullptr)
                                               : Json{{"name", described->plugins[0].name},
                                                      {"version", described->plugins[0].version}};
    out["iterations"] = bench.iterations;
    out["warmup"] = bench.warmup;
    out["rounds"] = bench.rounds;
    out["check"] = entry.check && !barrier;
    out["time"] = "median";

    if (const std::optional<Error> &refusal = refusals[i]) {
      out["refused"] = Json::parse(refusal->json(), nullptr, false);
      out["rows"] = Json::array();
      results.push_back(std::move(out));
      if (!any_runs || collectives->size() == 1)
        print_refusal(stderr, *refusal);
      else if (!bench.json)
        std::printf("#\n# %s: not run, refused: %s\n", runner.describe().c_str(),
                    std::string(refusal->message()).c_str());
      continue;
    }
    ++ran;

    const bool copies = copy_reference != nullptr || staged_copies != nullptr;
    const bool traffic = (probe.has_value() || copies) && !barrier;  // a barrier moves no bytes
    if (!bench.json) {
      std::printf("#\n# %s on group %s\n", runner.describe().c_str(), setup.group_label.c_str());
      print_timing_note(entry);
      print_column_header(traffic, copies ? "%copy" : "%peak");
    }
    RowTiming timing;
    timing.rounds = bench.rounds;
    std::set<uint64_t> copy_failed;  // byte counts it could not move: said once, not retried
    if (copy_reference && !barrier) {
      timing.reference = [&](size_t count, bool in_place) -> std::optional<double> {
        const uint64_t bytes = traffic_bytes(collective, n, count, bp_dtype_size(*dtype), in_place);
        if (copy_failed.count(bytes)) return std::nullopt;
        try {
          return copy_reference->time_copy(bytes, bench.iterations, bench.warmup);
        } catch (const std::exception &e) {
          // Past the device's allocation limit, say: the row stands without it.
          std::fprintf(stderr, "note: no copy time for %llu bytes: %s\n",
                       static_cast<unsigned long long>(bytes), e.what());
          copy_failed.insert(bytes);
          return std::nullopt;
        }
      };
    }
    if (staged_copies && !barrier) {
      timing.reference = [&](size_t count, bool in_place) -> std::optional<double> {
        const uint64_t bytes = count * bp_dtype_size(*dtype);
        if (copy_failed.count(bytes)) return std::nullopt;
        try {
          return staged_copies->time_copies(collective, count, bp_dtype_size(*dtype), bench.root, in_place,
                                            bench.iterations, bench.warmup);
        } catch (const std::exception &e) {
          std::fprintf(stderr, "note: no copy time for %llu bytes a block: %s\n",
                       static_cast<unsigned long long>(bytes), e.what());
          copy_failed.insert(bytes);
          return std::nullopt;
        }
      };
    }
    Result<std::vector<Row>> rows = run_rows(runner, [&](Row &row) {
      if (traffic) {
        const size_t count = barrier ? 0 : row.count / runner.blocks();
        for (bool in_place : {false, true}) {
          ModeResult &mode = row.modes[in_place ? 1 : 0];
          if (!mode.requested || mode.error || mode.micros <= 0) continue;
          const uint64_t bytes = traffic_bytes(collective, n, count, bp_dtype_size(*dtype), in_place);
          mode.traffic_gbps = static_cast<double>(bytes) / (mode.micros * 1e3);
          if (probe)
            mode.peak_percent = probe->gbps > 0 ? *mode.traffic_gbps / probe->gbps * 100 : 0;
          else if (mode.copy_micros)
            mode.peak_percent = *mode.copy_micros / mode.micros * 100;
        }
      }
      if (bench.json) return;
      std::printf("%s\n", row_line(entry, row, traffic).c_str());
      std::fflush(stdout);
    }, timing);
    if (!rows) {
      print_error(rows.error());
      ++total.errors;
      out["error"] = Json::parse(rows.error().json(), nullptr, false);
      out["rows"] = Json::array();
      results.push_back(std::move(out));
      continue;
    }
    Tally tally;
    tally.add(*rows, barrier);
    total.wrong += tally.wrong;
    total.errors += tally.errors;
    Json out_rows = Json::array();
    for (const Row &row : *rows) out_rows.push_back(row_json(entry, row));
    out["rows"] = std::move(out_rows);
    out["out_of_bounds"] = tally.wrong;
    out["errors"] = tally.errors;
    out["avg_busbw"] = barrier ? Json(nullptr) : Json(tally.avg_busbw());
    results.push_back(std::move(out));
    if (!bench.json) print_footer(tally, barrier);
  }

  // One collective asked for and refused, or `all` and none ran: a refusal.
  const bool ok = total.wrong == 0 && total.errors == 0 && ran > 0 && (collectives->size() > 1 || refused == 0);
  if (bench.json) {
    std::printf("%s\n", (collectives->size() == 1 ? results.front() : results).dump(2).c_str());
  } else if (collectives->size() > 1) {
    std::printf("#\n# %zu collective%s run, %zu refused: %zu out of bounds value%s, %zu error%s: %s\n", ran,
                ran == 1 ? "" : "s", refused, total.wrong, total.wrong == 1 ? "" : "s", total.errors,
                total.errors == 1 ? "" : "s", ok ? "OK" : "FAILED");
  }
  return ok ? kExitOk : kExitFailure;
}

}  // namespace backplane::cli
