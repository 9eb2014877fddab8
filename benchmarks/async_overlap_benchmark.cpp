// How much host work an _async collective lets the caller overlap, on the
// opencl plugin over two PoCL devices (POCL_DEVICES="pthread pthread"), or
// with --kind=vulkan on the vulkan plugin over two ranks of its first
// physical device (ranks_per_device 2; lavapipe here):
//   BM_AllReduceAsyncWaited      (a) bp_all_reduce_async of 64 MiB f32 per
//                                    rank (sum, out of place), then
//                                    bp_event_wait
//   BM_HostWork/<KiB>            (b) passes over a separate host array of
//                                    <KiB>, as many as take as long as (a)
//                                    (calibrated at start-up): 64 KiB stays
//                                    in the core's cache and competes with
//                                    PoCL only for cores, 1024 KiB does not
//                                    and competes for memory bandwidth too
//   BM_AllReduceOverlapped/<KiB> (c) start (a), do (b), then wait; each
//                                    iteration also times (a) and (b) alone
//                                    beside it, and the counter `overlap` is
//                                    (c) / max(a, b) over the iterations: 1
//                                    is perfect overlap, 2 none at all
//                                    (a + b run one after the other).
// All times are wall-clock. PoCL's (and llvmpipe's) worker threads run on
// the same cores as the host work, so on a machine of few cores the overlap is bounded by
// the cores (and memory bandwidth), not by the plugin: read `overlap` with
// the core count.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "backplane/backplane.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kRanks = 2;
constexpr std::size_t kCount = std::size_t{16} << 20;  // f32 elements: 64 MiB per buffer
constexpr std::size_t kHostArrayKiB[] = {64, 1024};  // the host work's arrays

std::string message_of(bp_error *error) {
  std::string text = bp_error_message(error);
  bp_error_destroy(error);
  return text;
}

double seconds(Clock::duration duration) { return std::chrono::duration<double>(duration).count(); }

// The plugins the benchmark can time: the kind, its plugin file and the
// options that give it two devices.
struct Kind {
  const char *name;
  const char *plugin;
  const char *options_json;
};
constexpr Kind kKinds[] = {
    {"opencl", BACKPLANE_BENCH_OPENCL_PLUGIN, nullptr},
#if defined(BACKPLANE_BENCH_VULKAN_PLUGIN)
    {"vulkan", BACKPLANE_BENCH_VULKAN_PLUGIN, R"({"vulkan": {"ranks_per_device": 2}})"},
#endif
};

// A host with only `kind`'s plugin, a group of <kind>:0 and <kind>:1, and a
// send and a recv buffer per rank. `error` is non-empty when any step
// failed.
struct Setup {
  explicit Setup(const Kind &kind) {
    bp_host_options options{};
    options.struct_size = sizeof options;
    options.flags = BP_HOST_IGNORE_ENV_PATH | BP_HOST_IGNORE_INSTALL_PATH;
    options.plugin_options_json = kind.options_json;
    if (!check(bp_host_create(&options, &host)) || !check(bp_host_load_plugin(host, kind.plugin))) return;
    bp_device *devices[kRanks] = {};
    const std::vector<float> inputs(kCount, 1.0f);
    for (std::size_t rank = 0; rank < kRanks; ++rank) {
      const std::string name = std::string(kind.name) + ":" + std::to_string(rank);
      if (!check(bp_host_find_device(host, name.c_str(), &devices[rank])) ||
          !check(bp_buffer_create(devices[rank], kCount * sizeof(float), &send[rank])) ||
          !check(bp_buffer_create(devices[rank], kCount * sizeof(float), &recv[rank])) ||
          !check(bp_buffer_write(send[rank], 0, inputs.data(), kCount * sizeof(float))))
        return;
    }
    check(bp_group_create(host, devices, kRanks, nullptr, &group));
  }
  ~Setup() {
    bp_group_destroy(group);
    for (std::size_t rank = 0; rank < kRanks; ++rank) {
      bp_buffer_destroy(send[rank]);
      bp_buffer_destroy(recv[rank]);
    }
    bp_host_destroy(host);
  }
  Setup(const Setup &) = delete;
  Setup &operator=(const Setup &) = delete;

  bp_event *start() {
    bp_event *event = nullptr;
    if (bp_error *failure = bp_all_reduce_async(group, send, recv, kCount, BP_F32, BP_SUM, &event)) {
      error = message_of(failure);
      return nullptr;
    }
    return event;
  }
  bool wait(bp_event *event) {
    const bool ok = check(bp_event_wait(event, -1));
    bp_event_destroy(event);
    return ok;
  }
  // (a): false, with `error` set, on failure.
  bool all_reduce() {
    bp_event *event = start();
    return event != nullptr && wait(event);
  }
  // Empty when every recv holds the sum (2.0).
  std::string verify() {
    std::vector<float> result(kCount);
    for (std::size_t rank = 0; rank < kRanks; ++rank) {
      if (bp_error *failure = bp_buffer_read(recv[rank], 0, result.data(), kCount * sizeof(float)))
        return message_of(failure);
      if (std::any_of(result.begin(), result.end(), [](float value) { return value != 2.0f; }))
        return "wrong all_reduce result on rank " + std::to_string(rank);
    }
    return {};
  }

  std::string error;
  bp_host *host = nullptr;
  bp_group *group = nullptr;
  bp_buffer *send[kRanks] = {};
  bp_buffer *recv[kRanks] = {};

 private:
  bool check(bp_error *failure) {
    if (!failure) return true;
    error = message_of(failure);
    return false;
  }
};

// (b): `passes` passes over a host array that nothing else touches.
void host_work(std::vector<float> &array, std::size_t passes) {
  for (std::size_t pass = 0; pass < passes; ++pass) {
    for (float &value : array) value = value * 0.5f + 1.0f;
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(array.data());
}

template <typename Body>
Clock::duration timed(Body &&body) {
  const Clock::time_point start = Clock::now();
  body();
  return Clock::now() - start;
}

template <typename Body>
Clock::duration median_of(std::size_t runs, Body &&body) {
  std::vector<Clock::duration> times;
  for (std::size_t run = 0; run < runs; ++run) times.push_back(timed(body));
  std::nth_element(times.begin(), times.begin() + runs / 2, times.end());
  return times[runs / 2];
}

// What one benchmark runs: the setup, and one host array with the passes
// over it that take as long as (a).
struct Context {
  Setup *setup = nullptr;
  std::vector<float> *array = nullptr;
  std::size_t passes = 1;
};

void BM_AllReduceAsyncWaited(benchmark::State &state, Context context) {
  for (auto _ : state) {
    if (!context.setup->all_reduce()) {
      state.SkipWithError(context.setup->error.c_str());
      return;
    }
  }
}

void BM_HostWork(benchmark::State &state, Context context) {
  for (auto _ : state) host_work(*context.array, context.passes);
  state.counters["passes"] = static_cast<double>(context.passes);
}

// Manual time: (c) only; (a) and (b) alone run beside it in each iteration,
// so that the ratio compares times taken under the same load.
void BM_AllReduceOverlapped(benchmark::State &state, Context context) {
  Setup &setup = *context.setup;
  Clock::duration total_a{}, total_b{}, total_c{};
  for (auto _ : state) {
    bool ok = true;
    const Clock::duration a = timed([&] { ok = setup.all_reduce(); });
    const Clock::duration b = timed([&] { host_work(*context.array, context.passes); });
    const Clock::duration c = timed([&] {
      bp_event *event = setup.start();
      host_work(*context.array, context.passes);
      ok = ok && event != nullptr && setup.wait(event);
    });
    if (!ok) {
      state.SkipWithError(setup.error.c_str());
      return;
    }
    state.SetIterationTime(seconds(c));
    total_a += a;
    total_b += b;
    total_c += c;
  }
  const double iterations = static_cast<double>(state.iterations());
  state.counters["a_ms"] = seconds(total_a) * 1e3 / iterations;
  state.counters["b_ms"] = seconds(total_b) * 1e3 / iterations;
  state.counters["overlap"] = seconds(total_c) / seconds(std::max(total_a, total_b));
}

}  // namespace

int main(int argc, char **argv) {
  // PoCL reads these at the process's first OpenCL call, which is the
  // host's loading of the plugin below; the caller's values win.
  setenv("POCL_DEVICES", "pthread pthread", 0);
  setenv("POCL_CACHE_DIR", BACKPLANE_BENCH_CACHE_DIR "/pocl", 0);
  setenv("BACKPLANE_CACHE_DIR", BACKPLANE_BENCH_CACHE_DIR "/backplane", 0);
  // --kind=NAME, taken out before Google Benchmark reads the rest.
  const Kind *kind = &kKinds[0];
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument.rfind("--kind=", 0) != 0) {
      argv[kept++] = argv[i];
      continue;
    }
    const auto found = std::find_if(std::begin(kKinds), std::end(kKinds),
                                    [&](const Kind &known) { return argument.substr(7) == known.name; });
    if (found == std::end(kKinds)) {
      std::fprintf(stderr, "async_overlap_benchmark: unknown %s (built for:", argument.c_str());
      for (const Kind &known : kKinds) std::fprintf(stderr, " %s", known.name);
      std::fprintf(stderr, ")\n");
      return 1;
    }
    kind = &*found;
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  Setup setup(*kind);
  if (!setup.error.empty()) {
    std::fprintf(stderr, "async_overlap_benchmark: no %s group of two devices: %s\n", kind->name,
                 setup.error.c_str());
    return 1;
  }
  // Warm-up (PoCL compiles each kernel at its first launch, the vulkan
  // plugin its pipeline at the first reduction) and a check of
  // the result, then the calibration of (b) against (a).
  for (int run = 0; run < 3; ++run) {
    if (!setup.all_reduce()) {
      std::fprintf(stderr, "async_overlap_benchmark: %s\n", setup.error.c_str());
      return 1;
    }
  }
  if (const std::string wrong = setup.verify(); !wrong.empty()) {
    std::fprintf(stderr, "async_overlap_benchmark: %s\n", wrong.c_str());
    return 1;
  }
  const Clock::duration collective = median_of(15, [&] { (void)setup.all_reduce(); });
  std::printf("calibration: all_reduce of 64 MiB f32 over %s:0 and %s:1 %.3f ms (median of 15); %ld cores "
              "online; POCL_DEVICES=\"%s\"\n",
              kind->name, kind->name, seconds(collective) * 1e3, sysconf(_SC_NPROCESSORS_ONLN),
              std::getenv("POCL_DEVICES"));
  benchmark::RegisterBenchmark("BM_AllReduceAsyncWaited", BM_AllReduceAsyncWaited, Context{&setup, nullptr, 0})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  std::vector<std::vector<float>> arrays;
  for (std::size_t kib : kHostArrayKiB) arrays.emplace_back(kib * 1024 / sizeof(float), 1.0f);
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    host_work(arrays[i], 10);
    const Clock::duration pass = median_of(101, [&] { host_work(arrays[i], 1); });
    const std::size_t passes = static_cast<std::size_t>(seconds(collective) / seconds(pass) + 0.5);
    const Context context{&setup, &arrays[i], std::max<std::size_t>(1, passes)};
    std::printf("calibration: host pass over %zu KiB %.1f us: %zu passes\n", kHostArrayKiB[i], seconds(pass) * 1e6,
                context.passes);
    const std::string size = "/" + std::to_string(kHostArrayKiB[i]);
    benchmark::RegisterBenchmark(("BM_HostWork" + size).c_str(), BM_HostWork, context)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("BM_AllReduceOverlapped" + size).c_str(), BM_AllReduceOverlapped, context)
        ->Unit(benchmark::kMillisecond)
        ->UseManualTime();
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
