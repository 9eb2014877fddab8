// Micro-benchmarks of the host against DESIGN.md's "Performance targets"
// (README.md here says how to run them and what the numbers mean):
//   BM_DirectPluginCall/<plugin> and BM_CApiCall/<plugin>: one all_reduce of
//     2 f32 over 2 ranks, through the plugin's function table (dlopen'ed and
//     driven by hand) and through bp_all_reduce. Target: the C API costs at
//     most 50 ns more, and allocates nothing on success.
//   BM_LayeredCApiCall/<layer>/wrapped:<n>: the same bp_all_reduce (8 bytes
//     a rank) on the trivial plugin with the first n ranks wrapped in one
//     layer each: "empty" (the fixture layer whose hooks return at once) and
//     "trace". Targets over BM_CApiCall/trivial, a call (whatever the number
//     of layered ranks): at most 20 ns and 150 ns, no allocation. The
//     summary also prints the overhead divided among the layered ranks.
//   BM_HostCreate16Plugins: bp_host_create over a directory of 16 plugin
//     files, then bp_host_destroy. Target: at most 10 ms (median).
// After the runs, a summary prints the differences and whether each target
// is met (--check_allocations / --check_targets turn a miss into exit 1).
#include <dlfcn.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <benchmark/benchmark.h>

#include "backplane/backplane.h"
#include "backplane/plugin.h"
#include "bench_paths.h"
#include "counting_allocator.hpp"

// The sink of the direct calls: this file plays the host there.
struct bp_error_sink {
  int32_t code;
  char message[256];
};

namespace {

using backplane::bench::allocation_counts;
using backplane::bench::AllocationCounts;

constexpr size_t kRanks = 2;
constexpr size_t kCount = 2;  // f32 elements per rank
constexpr size_t kBytes = kCount * sizeof(float);
constexpr float kInputs[kRanks][kCount] = {{1.0f, 2.0f}, {10.0f, 20.0f}};
constexpr float kSums[kCount] = {11.0f, 22.0f};
constexpr size_t kHostCreatePlugins = 16;

constexpr double kOverheadTargetNs = 50.0;

// A layer both ranks of the layered benchmark are wrapped in.
struct LayerUnderTest {
  const char *name;
  const char *plugin_file;  // "" when the build has no such plugin
  double target_ns;         // over the bare C API call
  size_t wrapped_ranks;     // ranks 0 .. wrapped_ranks - 1 carry the layer

  std::string benchmark_name() const {
    return std::string("BM_LayeredCApiCall/") + name + "/wrapped:" + std::to_string(wrapped_ranks);
  }
};
// The traced benchmark's iterations stay within one ring (2 events a call).
constexpr size_t kTraceRingEvents = size_t{1} << 20;
constexpr size_t kTraceIterations = kTraceRingEvents / kRanks / 2;
constexpr LayerUnderTest kLayers[] = {
    {"empty", BACKPLANE_BENCH_EMPTY_LAYER_PLUGIN, 20.0, 1},
    {"empty", BACKPLANE_BENCH_EMPTY_LAYER_PLUGIN, 20.0, kRanks},
    {"trace", BACKPLANE_BENCH_TRACE_PLUGIN, 150.0, 1},
    {"trace", BACKPLANE_BENCH_TRACE_PLUGIN, 150.0, kRanks},
};
constexpr double kHostCreateTargetMs = 10.0;

// A plugin both sides of the dispatch comparison load.
struct PluginUnderTest {
  const char *label;  // in the benchmark's name
  const char *file;
  const char *kind;
};

constexpr PluginUnderTest kCpuPlugin{"cpu", BACKPLANE_BENCH_CPU_PLUGIN, "cpu"};
constexpr PluginUnderTest kTrivialPlugin{"trivial", BACKPLANE_BENCH_TRIVIAL_PLUGIN, "k0"};
constexpr PluginUnderTest kPlugins[] = {kCpuPlugin, kTrivialPlugin};

std::string message_of(bp_error *error) {
  std::string text = bp_error_message(error);
  bp_error_destroy(error);
  return text;
}

// ---- the direct side: this file as a minimal host ------------------------

void direct_report_error(bp_error_sink *sink, int32_t code, const char *message) {
  if (!sink) return;
  sink->code = code;
  std::snprintf(sink->message, sizeof sink->message, "%s", message ? message : "");
}

void direct_log(void *, int32_t, const char *, const char *) {}

const bp_host_services kServices = {
    .struct_size = sizeof(bp_host_services),
    .next = nullptr,
    .report_error = direct_report_error,
    .log = direct_log,
    .host_context = nullptr,
    .describe_device = nullptr,
    .describe_buffer = nullptr,
    .read_buffer = nullptr,
};

// One plugin loaded by hand: two buffers per rank on devices 0 and 1, and a
// communicator over them. `error` is non-empty when any step failed.
class DirectPlugin {
 public:
  explicit DirectPlugin(const PluginUnderTest &plugin) {
    library_ = dlopen(plugin.file, RTLD_NOW | RTLD_LOCAL);
    if (!library_) {
      error = std::string("dlopen: ") + dlerror();
      return;
    }
    auto entry = reinterpret_cast<bp_plugin_entry_fn>(dlsym(library_, BP_PLUGIN_ENTRY_SYMBOL));
    if (!entry) {
      error = std::string(plugin.file) + " has no " + BP_PLUGIN_ENTRY_SYMBOL;
      return;
    }
    bp_error_sink sink{};
    bp_plugin_entry_args args{};
    args.struct_size = sizeof args;
    args.host_abi_major = BP_PLUGIN_ABI_MAJOR;
    args.host_abi_minor = BP_PLUGIN_ABI_MINOR;
    args.services = &kServices;
    args.sink = &sink;
    if (entry(&args) != BP_OK || !args.descriptor || !args.descriptor->functions) {
      error = std::string("bp_plugin_entry refused: ") + sink.message;
      return;
    }
    state = args.state;
    functions = args.descriptor->functions;
    for (kind_ = 0; kind_ < args.descriptor->device_kind_count; ++kind_) {
      if (std::string_view(args.descriptor->device_kinds[kind_]) == plugin.kind) break;
    }
    if (kind_ == args.descriptor->device_kind_count) {
      error = std::string("no device kind '") + plugin.kind + "'";
      return;
    }
    const uint32_t kind = static_cast<uint32_t>(kind_);
    for (uint32_t rank = 0; rank < kRanks; ++rank) {
      if (!check(functions->buffer_create(state, kind, rank, kBytes, &send[rank], &sink), sink) ||
          !check(functions->buffer_create(state, kind, rank, kBytes, &recv[rank], &sink), sink) ||
          !check(functions->buffer_write(state, send[rank], 0, kInputs[rank], kBytes, &sink), sink))
        return;
    }
    const uint32_t devices[kRanks] = {0, 1};
    check(functions->comm_create(state, kind, devices, kRanks, &comm, &sink), sink);
  }

  ~DirectPlugin() {
    if (comm) functions->comm_destroy(state, comm);
    for (size_t rank = 0; rank < kRanks; ++rank) {
      if (send[rank]) functions->buffer_destroy(state, send[rank]);
      if (recv[rank]) functions->buffer_destroy(state, recv[rank]);
    }
    if (state) functions->destroy(state);
    if (library_) dlclose(library_);
  }

  DirectPlugin(const DirectPlugin &) = delete;
  DirectPlugin &operator=(const DirectPlugin &) = delete;

  // Empty when every rank's recv holds the sums.
  std::string verify() {
    for (size_t rank = 0; rank < kRanks; ++rank) {
      float result[kCount] = {};
      bp_error_sink sink{};
      if (functions->buffer_read(state, recv[rank], 0, result, kBytes, &sink) != BP_OK) return sink.message;
      if (std::memcmp(result, kSums, kBytes) != 0) return "wrong all_reduce result on rank " + std::to_string(rank);
    }
    return {};
  }

  std::string error;
  const bp_plugin_functions *functions = nullptr;
  bp_plugin_state *state = nullptr;
  bp_plugin_buffer *send[kRanks] = {};
  bp_plugin_buffer *recv[kRanks] = {};
  bp_plugin_comm *comm = nullptr;

 private:
  bool check(int32_t code, const bp_error_sink &sink) {
    if (code == BP_OK) return true;
    error = sink.message;
    return false;
  }

  void *library_ = nullptr;
  size_t kind_ = 0;
};

// ---- the C API side ------------------------------------------------------

// A host with exactly one plugin file loaded, buffers as above, and a group.
class HostSetup {
 public:
  // With `layer`, the first layer->wrapped_ranks ranks' devices are wrapped in it (a trace goes to a
  // file in the working directory, removed afterwards).
  explicit HostSetup(const PluginUnderTest &plugin, const LayerUnderTest *layer = nullptr) {
    bp_host_options options{};
    options.struct_size = sizeof options;
    options.flags = BP_HOST_IGNORE_ENV_PATH | BP_HOST_IGNORE_INSTALL_PATH;
    if (!check(bp_host_create(&options, &host)) || !check(bp_host_load_plugin(host, plugin.file))) return;
    if (layer && !check(bp_host_load_plugin(host, layer->plugin_file))) return;
    bp_device *devices[kRanks] = {};
    for (size_t rank = 0; rank < kRanks; ++rank) {
      const std::string name = std::string(plugin.kind) + ":" + std::to_string(rank);
      if (!check(bp_host_find_device(host, name.c_str(), &devices[rank]))) return;
      if (layer && rank < layer->wrapped_ranks) {
        static int setups = 0;
        if (rank == 0) ++setups;
        trace_file = "dispatch_benchmark_trace_" + std::to_string(getpid()) + "_" + std::to_string(setups) + ".json";
        // A ring that holds every event of the timed calls: this measures
        // recording; writing the file out is paid once the ring fills, by
        // the call that finds it full (docs/PERFORMANCE.md has both).
        const std::string layer_options =
            std::string("trace") == layer->name
                ? R"({"trace": {"file": ")" + trace_file + R"(", "ring_events": )" +
                      std::to_string(kTraceRingEvents) + "}}"
                : "";
        bp_device_wrap_options wrap{};
        wrap.struct_size = sizeof wrap;
        wrap.over = devices[rank];
        wrap.layers = &layer->name;
        wrap.layer_count = 1;
        wrap.options_json = layer_options.empty() ? nullptr : layer_options.c_str();
        if (!check(bp_device_wrap(host, &wrap, &devices[rank]))) return;
      }
      if (!check(bp_buffer_create(devices[rank], kBytes, &send[rank])) ||
          !check(bp_buffer_create(devices[rank], kBytes, &send[rank])) ||
          !check(bp_buffer_create(devices[rank], kBytes, &recv[rank])) ||
          !check(bp_buffer_write(send[rank], 0, kInputs[rank], kBytes)))
        return;
    }
    check(bp_group_create(host, devices, kRanks, nullptr, &group));
  }

  ~HostSetup() {
    bp_group_destroy(group);
    for (size_t rank = 0; rank < kRanks; ++rank) {
      bp_buffer_destroy(send[rank]);
      bp_buffer_destroy(recv[rank]);
    }
    bp_host_destroy(host);
    if (!trace_file.empty()) std::remove(trace_file.c_str());
  }

  HostSetup(const HostSetup &) = delete;
  HostSetup &operator=(const HostSetup &) = delete;

  std::string verify() {
    for (size_t rank = 0; rank < kRanks; ++rank) {
      float result[kCount] = {};
      if (bp_error *error = bp_buffer_read(recv[rank], 0, result, kBytes)) return message_of(error);
      if (std::memcmp(result, kSums, kBytes) != 0) return "wrong all_reduce result on rank " + std::to_string(rank);
    }
    return {};
  }

  std::string error;
  bp_host *host = nullptr;
  bp_group *group = nullptr;
  bp_buffer *send[kRanks] = {};
  bp_buffer *recv[kRanks] = {};
  std::string trace_file;

 private:
  bool check(bp_error *failure) {
    if (!failure) return true;
    error = message_of(failure);
    return false;
  }
};

// ---- the benchmarks ------------------------------------------------------

// Heap allocations per iteration, over every thread of the process.
void count_allocations(benchmark::State &state, const AllocationCounts &before) {
  const AllocationCounts after = allocation_counts();
  state.counters["allocs_per_call"] =
      benchmark::Counter(static_cast<double>(after.total() - before.total()), benchmark::Counter::kAvgIterations);
}

void BM_DirectPluginCall(benchmark::State &state, const PluginUnderTest &plugin) {
  DirectPlugin direct(plugin);
  if (!direct.error.empty()) {
    state.SkipWithError(direct.error.c_str());
    return;
  }
  // What a caller of the table fills once; the host fills it on every call,
  // which is part of the overhead measured.
  bp_collective_args args{};
  args.struct_size = sizeof args;
  args.collective = BP_ALL_REDUCE;
  args.dtype = BP_F32;
  args.reduce_op = BP_SUM;
  args.count = kCount;
  args.rank_count = kRanks;
  args.send = direct.send;
  args.recv = direct.recv;
  args.flags = BP_COLLECTIVE_CALLER_WAITS;  // what the host sends for a blocking call
  const AllocationCounts before = allocation_counts();
  for (auto _ : state) {
    bp_error_sink sink;  // a fresh sink per call, as the host makes
    sink.code = BP_OK;
    sink.message[0] = '\0';
    bp_plugin_request *request = nullptr;
    if (direct.functions->collective_start(direct.state, direct.comm, &args, &request, &sink) != BP_OK || request) {
      state.SkipWithError(request ? "the plugin handed out a request" : sink.message);
      break;
    }
  }
  count_allocations(state, before);
  if (const std::string wrong = direct.verify(); !wrong.empty()) state.SkipWithError(wrong.c_str());
}

void BM_CApiCall(benchmark::State &state, const PluginUnderTest &plugin, const LayerUnderTest *layer) {
  if (layer && !*layer->plugin_file) {
    state.SkipWithError("this build has no such layer plugin");
    return;
  }
  HostSetup setup(plugin, layer);
  if (!setup.error.empty()) {
    state.SkipWithError(setup.error.c_str());
    return;
  }
  // One call first: what a layer does at its first sight of a group (trace
  // names it once) is not the cost of a call.
  if (layer) {
    if (bp_error *error = bp_all_reduce(setup.group, setup.send, setup.recv, kCount, BP_F32, BP_SUM)) {
      state.SkipWithError(message_of(error).c_str());
      return;
    }
  }
  const AllocationCounts before = allocation_counts();
  for (auto _ : state) {
    if (bp_error *error = bp_all_reduce(setup.group, setup.send, setup.recv, kCount, BP_F32, BP_SUM)) {
      state.SkipWithError(message_of(error).c_str());
      break;
    }
  }
  count_allocations(state, before);
  if (const std::string wrong = setup.verify(); !wrong.empty()) state.SkipWithError(wrong.c_str());
}

void BM_HostCreate16Plugins(benchmark::State &state) {
  const char *const directories[] = {BACKPLANE_BENCH_PLUGIN16_DIR};
  bp_host_options options{};
  options.struct_size = sizeof options;
  options.plugin_dirs = directories;
  options.plugin_dir_count = 1;
  options.flags = BP_HOST_IGNORE_ENV_PATH | BP_HOST_IGNORE_INSTALL_PATH;
  size_t loaded = 0;
  for (auto _ : state) {
    bp_host *host = nullptr;
    if (bp_error *error = bp_host_create(&options, &host)) {
      state.SkipWithError(message_of(error).c_str());
      break;
    }
    loaded = bp_host_plugin_count(host);
    const size_t refused = bp_host_refused_count(host);
    const std::string why = refused ? bp_error_message(bp_host_refused(host, 0)) : "";
    bp_host_destroy(host);
    if (loaded != kHostCreatePlugins || refused != 0) {
      const std::string text = std::to_string(loaded) + " plugins loaded from " + BACKPLANE_BENCH_PLUGIN16_DIR +
                               ", " + std::to_string(kHostCreatePlugins) + " expected" +
                               (why.empty() ? "" : "; refused: " + why);
      state.SkipWithError(text.c_str());
      break;
    }
  }
  state.counters["plugins"] = static_cast<double>(loaded);
}

// ---- the summary ---------------------------------------------------------

std::string load_average() {
  double load[3] = {};
  if (getloadavg(load, 3) != 3) return "unknown";
  char text[64];
  std::snprintf(text, sizeof text, "%.2f %.2f %.2f", load[0], load[1], load[2]);
  return text;
}

// The console output, plus a summary at the end against the targets.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  explicit SummaryReporter(OutputOptions options) : ConsoleReporter(options) {}

  void ReportRuns(const std::vector<Run> &runs) override {
    for (const Run &run : runs) record(run);
    ConsoleReporter::ReportRuns(runs);
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    print_summary();
  }

  bool allocations_missed() const { return allocations_missed_; }
  bool timing_missed() const { return timing_missed_; }

 private:
  struct Result {
    double real_ns = NAN, cpu_ns = NAN, allocs = NAN;
    bool median = false;  // from the median aggregate, not one run
    bool failed = false;
    std::string error;
  };

  void record(const Run &run) {
    Result &result = results_[run.run_name.function_name];
    if (run.error_occurred) {
      result.failed = true;
      result.error = run.error_message;
      return;
    }
    const bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
    if (run.run_type == Run::RT_Aggregate && !median) return;
    if (result.median && !median) return;
    const double to_ns = 1e9 / benchmark::GetTimeUnitMultiplier(run.time_unit);
    result.real_ns = run.GetAdjustedRealTime() * to_ns;
    result.cpu_ns = run.GetAdjustedCPUTime() * to_ns;
    if (auto counter = run.counters.find("allocs_per_call"); counter != run.counters.end())
      result.allocs = counter->second.value;
    result.median = median;
  }

  const Result *find(const std::string &name) const {
    auto found = results_.find(name);
    return found == results_.end() ? nullptr : &found->second;
  }

  void print_summary() {
    std::FILE *out = stdout;
    std::fflush(out);
    std::fprintf(out, "\nSummary (%s; load average now %s)\n",
                 any_median() ? "medians over the repetitions" : "single runs: pass --benchmark_repetitions=10",
                 load_average().c_str());
    for (const PluginUnderTest &plugin : kPlugins) {
      const Result *direct = find(std::string("BM_DirectPluginCall/") + plugin.label);
      const Result *api = find(std::string("BM_CApiCall/") + plugin.label);
      if (!direct || !api) continue;
      if (direct->failed || api->failed) {
        std::fprintf(out, "  %-8s failed: %s\n", plugin.label, (direct->failed ? direct : api)->error.c_str());
        allocations_missed_ = timing_missed_ = true;
        continue;
      }
      const double overhead_cpu = api->cpu_ns - direct->cpu_ns, overhead_real = api->real_ns - direct->real_ns;
      const bool time_ok = overhead_cpu <= kOverheadTargetNs;
      const bool allocs_ok = api->allocs == 0.0;
      timing_missed_ = timing_missed_ || !time_ok;
      allocations_missed_ = allocations_missed_ || !allocs_ok;
      std::fprintf(out,
                   "  %-8s C API %.1f ns - direct %.1f ns = %.1f ns overhead (cpu time; real time: %.1f - %.1f = "
                   "%.1f ns); target <= %.0f ns: %s\n",
                   plugin.label, api->cpu_ns, direct->cpu_ns, overhead_cpu, api->real_ns, direct->real_ns,
                   overhead_real, kOverheadTargetNs, time_ok ? "met" : "MISSED");
      std::fprintf(out, "  %-8s heap allocations per C API call: %g (direct: %g); target 0: %s\n", plugin.label,
                   api->allocs, direct->allocs, allocs_ok ? "met" : "MISSED");
    }
    if (const Result *bare = find("BM_CApiCall/trivial"); bare && !bare->failed) {
      for (const LayerUnderTest &layer : kLayers) {
        const Result *layered = find(layer.benchmark_name());
        if (!layered) continue;
        if (layered->failed) {
          std::fprintf(out, "  layer %-6s on %zu of %zu ranks failed: %s\n", layer.name, layer.wrapped_ranks,
                       kRanks, layered->error.c_str());
          continue;
        }
        const double overhead = layered->cpu_ns - bare->cpu_ns;
        const double per_device = overhead / static_cast<double>(layer.wrapped_ranks);
        const bool time_ok = overhead <= layer.target_ns, allocs_ok = layered->allocs == 0.0;
        timing_missed_ = timing_missed_ || !time_ok;
        allocations_missed_ = allocations_missed_ || !allocs_ok;
        std::fprintf(out,
                     "  layer %-6s on %zu of %zu ranks: %.1f ns - bare %.1f ns = %.1f ns a call (%.1f ns a layered "
                     "rank; cpu time); target <= %.0f ns a call: %s; heap allocations per call: %g: %s\n",
                     layer.name, layer.wrapped_ranks, kRanks, layered->cpu_ns, bare->cpu_ns, overhead, per_device,
                     layer.target_ns, time_ok ? "met" : "MISSED", layered->allocs, allocs_ok ? "met" : "MISSED");
      }
    }
    if (const Result *create = find("BM_HostCreate16Plugins")) {
      if (create->failed) {
        std::fprintf(out, "  host create failed: %s\n", create->error.c_str());
        timing_missed_ = true;
      } else {
        const double ms = create->real_ns / 1e6;
        const bool ok = ms <= kHostCreateTargetMs;
        timing_missed_ = timing_missed_ || !ok;
        std::fprintf(out,
                     "  host create + %zu plugins + destroy: %.2f ms (real time; cpu %.2f ms); target <= %.0f ms: "
                     "%s\n",
                     kHostCreatePlugins, ms, create->cpu_ns / 1e6, kHostCreateTargetMs, ok ? "met" : "MISSED");
      }
    }
    std::fflush(out);
  }

  bool any_median() const {
    for (const auto &[name, result] : results_)
      if (result.median) return true;
    return false;
  }

  std::map<std::string, Result> results_;
  bool allocations_missed_ = false, timing_missed_ = false;
};

// The counters must see allocations made inside libbackplane and inside a
// dlopen'ed plugin, or "0 allocations" would prove nothing.
bool allocation_counting_works() {
  const AllocationCounts before = allocation_counts();
  bp_host_options options{};
  options.struct_size = sizeof options;
  options.flags = BP_HOST_IGNORE_ENV_PATH | BP_HOST_IGNORE_INSTALL_PATH;
  bp_host *host = nullptr;
  if (bp_error *error = bp_host_create(&options, &host)) {
    std::fprintf(stderr, "bp_host_create: %s\n", message_of(error).c_str());
    return false;
  }
  bp_host_destroy(host);
  const AllocationCounts after_host = allocation_counts();
  DirectPlugin plugin(kTrivialPlugin);  // its entry allocates its state with new (std::nothrow)
  const AllocationCounts after_plugin = allocation_counts();
  if (!plugin.error.empty()) {
    std::fprintf(stderr, "loading %s: %s\n", kTrivialPlugin.file, plugin.error.c_str());
    return false;
  }
  if (after_host.total() == before.total() || after_plugin.operator_new == after_host.operator_new) {
    std::fprintf(stderr, "the counting allocator does not see %s's allocations\n",
                 after_host.total() == before.total() ? "libbackplane" : "a plugin");
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char **argv) {
  // Our own flags, taken out before Google Benchmark reads the rest.
  bool check_allocations = false, check_targets = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--check_allocations") {
      check_allocations = true;
    } else if (flag == "--check_targets") {
      check_allocations = check_targets = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (!allocation_counting_works()) return 1;

  for (const PluginUnderTest &plugin : kPlugins) {
    benchmark::RegisterBenchmark((std::string("BM_DirectPluginCall/") + plugin.label).c_str(), BM_DirectPluginCall,
                                 plugin);
    benchmark::RegisterBenchmark((std::string("BM_CApiCall/") + plugin.label).c_str(), BM_CApiCall, plugin,
                                 nullptr);
  }
  for (const LayerUnderTest &layer : kLayers) {
    benchmark::internal::Benchmark *layered =
        benchmark::RegisterBenchmark(layer.benchmark_name().c_str(), BM_CApiCall, kTrivialPlugin, &layer);
    if (std::string_view(layer.name) == "trace") layered->Iterations(kTraceIterations);
  }
  benchmark::RegisterBenchmark("BM_HostCreate16Plugins", BM_HostCreate16Plugins)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();

  std::printf("load average before: %s\n", load_average().c_str());
  SummaryReporter reporter(isatty(STDOUT_FILENO) ? benchmark::ConsoleReporter::OO_ColorTabular
                                                 : benchmark::ConsoleReporter::OO_Tabular);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  if (check_allocations && reporter.allocations_missed()) return 1;
  if (check_targets && reporter.timing_missed()) return 1;
  return 0;
}
