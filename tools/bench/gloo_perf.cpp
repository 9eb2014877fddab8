// The Gloo reference of tools/bench/compare: Gloo's allreduce (f32, sum,
// out of place) across N ranks over its TCP transport on loopback (Debian's
// libgloo has TCP and ibverbs; no libuv, no shared memory), in nccl-tests'
// columns, each size's result checked. Ranks are either
//   processes: mpirun -np N gloo_perf --store DIR   (rank and size from
//     Open MPI's environment, or --rank R --size N; rendezvous through a
//     gloo::rendezvous::FileStore in DIR, which must be empty and shared), or
//   threads:   gloo_perf --threads N   (one process; rendezvous through an
//     in-memory gloo::rendezvous::HashStore, still TCP between the threads).
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <mutex>
#include <thread>

#include "perf_common.hpp"

namespace {

using bench::value;

constexpr const char *kUsage =
    "usage: mpirun -np N gloo_perf --store DIR [--rank R --size N]   (one rank per process)\n"
    "       gloo_perf --threads N                                   (one rank per thread)\n"
    "         [-a ring|bcube] [-b 8] [-e 64M] [-f 2] [--sizes 8,1M,64M] [-n SAMPLES] [-w WARMUP] [-d float] [--json]\n";

using Clock = std::chrono::steady_clock;
using ReduceFn = void (*)(void *, const void *, const void *, size_t);

constexpr uint32_t kTagData = 1, kTagTiming = 2, kTagBarrier = 3;

// The slowest rank's value of `mine`.
double slowest(const std::shared_ptr<gloo::Context> &context, double mine) {
  gloo::AllreduceOptions opts(context);
  opts.setInput(&mine, 1);
  opts.setOutput(&mine, 1);
  opts.setReduceFunction(static_cast<ReduceFn>(&gloo::max<double>));
  opts.setTag(kTagTiming);
  gloo::allreduce(opts);
  return mine;
}

// Lines the ranks up before a sample. A one-element allreduce, not
// gloo::barrier: with Debian's Gloo an allreduce that follows gloo::barrier
// takes ~4 ms here whatever its size (against ~0.1-0.3 ms after another
// allreduce), which would measure the barrier's aftermath, not allreduce.
void barrier(const std::shared_ptr<gloo::Context> &context) {
  float token = 0;
  gloo::AllreduceOptions opts(context);
  opts.setInput(&token, 1);
  opts.setOutput(&token, 1);
  opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
  opts.setTag(kTagBarrier);
  gloo::allreduce(opts);
}

// One rank's whole run; rows are printed by rank 0.
void run_rank(const std::shared_ptr<gloo::Context> &context, const bench::Options &o, const std::string &mode) {
  const int rank = context->rank, ranks = context->size;
  const auto algorithm = o.get("-a", "ring") == "bcube" ? gloo::AllreduceOptions::Algorithm::BCUBE
                                                        : gloo::AllreduceOptions::Algorithm::RING;
  const uint64_t max_size = *std::max_element(o.sizes.begin(), o.sizes.end());
  bench::HugeBuffer send(max_size), recv(max_size);
  float *in = send.floats(), *out = recv.floats();

  if (rank == 0 && !o.json) {
    std::printf("# gloo_perf: gloo::allreduce(float, sum, %s) over %d ranks as %s, TCP on loopback\n",
                o.get("-a", "ring").c_str(), ranks, mode.c_str());
    std::printf("# time: median of %d samples of the slowest rank's time per call; a sample is one call, or a batch of\n"
                "# back-to-back calls (>= 50 us) divided by its length; %d warmup calls; #wrong: checked after the timing\n",
                o.samples, o.warmup);
    bench::print_header(false);
  }
  std::vector<bench::Row> rows;
  for (uint64_t requested : o.sizes) {
    const size_t count = requested / sizeof(float);
    bench::Row row;
    row.count = count;
    row.size = count * sizeof(float);
    for (size_t i = 0; i < count; ++i) in[i] = value(rank, i);
    gloo::AllreduceOptions opts(context);
    opts.setAlgorithm(algorithm);
    opts.setInput(in, count);
    opts.setOutput(out, count);
    opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
    opts.setTag(kTagData);

    for (int i = 0; i < o.warmup; ++i) gloo::allreduce(opts);
    barrier(context);
    auto t0 = Clock::now();
    for (int i = 0; i < bench::kProbeCalls; ++i) gloo::allreduce(opts);
    // The same batch on every rank: it comes from one reduction.
    row.batch = bench::batch_for(slowest(
        context, std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / bench::kProbeCalls));
    std::vector<double> micros;
    for (int s = 0; s < o.samples; ++s) {
      barrier(context);
      t0 = Clock::now();
      for (uint32_t k = 0; k < row.batch; ++k) gloo::allreduce(opts);
      micros.push_back(
          slowest(context, std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / row.batch));
    }
    row.time_us = bench::median(micros);
    row.algbw = row.time_us > 0 ? static_cast<double>(row.size) / (row.time_us * 1e3) : 0;
    row.busbw = row.algbw * bench::bus_factor("all_reduce", ranks);

    std::fill(out, out + count, -1.0f);
    gloo::allreduce(opts);
    double wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int q = 0; q < ranks; ++q) want += value(q, i);
      wrong += out[i] != want;
    }
    // Every rank's count of wrong elements, added up (exact in a double).
    {
      gloo::AllreduceOptions sum(context);
      sum.setInput(&wrong, 1);
      sum.setOutput(&wrong, 1);
      sum.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<double>));
      sum.setTag(kTagTiming);
      gloo::allreduce(sum);
    }
    row.wrong = static_cast<uint64_t>(wrong);
    rows.push_back(row);
    if (rank == 0 && !o.json) bench::print_row(row, "float", "sum", -1, false);
  }
  if (rank == 0) {
    if (o.json)
      bench::print_json("gloo_perf", "all_reduce", ranks, mode == "threads" ? ranks : 1, rows);
    else
      bench::print_footer(rows);
  }
  for (const bench::Row &row : rows)
    if (row.wrong) throw std::runtime_error("wrong results");
}

std::shared_ptr<gloo::transport::Device> loopback_device() {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  attr.ai_family = AF_INET;
  return gloo::transport::tcp::CreateDevice(attr);
}

std::shared_ptr<gloo::Context> connect(gloo::rendezvous::Store &store, int rank, int ranks) {
  auto device = loopback_device();
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, ranks);
  context->setTimeout(std::chrono::seconds(120));  // a 64 MiB ring over TCP takes a while
  context->connectFullMesh(store, device);
  return context;
}

int env_int(const char *name, int fallback) {
  const char *text = std::getenv(name);
  return text ? std::atoi(text) : fallback;
}

int run(int argc, char **argv) {
  bench::Options o;
  try {
    o = bench::parse_options(argc, argv, {"--threads", "--store", "--rank", "--size", "--prefix", "-a"}, {});
    if (o.collective != "all_reduce") throw std::invalid_argument("only all_reduce is measured with Gloo");
    const std::string a = o.get("-a", "ring");
    if (a != "ring" && a != "bcube") throw std::invalid_argument("-a: ring or bcube, not '" + a + "'");
    if (o.has("--threads") == o.has("--store")) throw std::invalid_argument("give one of --threads N and --store DIR");
  } catch (const std::exception &e) {
    std::fprintf(stderr, "gloo_perf: %s\n%s", e.what(), kUsage);
    return 2;
  }

  if (o.has("--threads")) {
    const int ranks = bench::parse_count(o.get("--threads", "2"), 1);
    gloo::rendezvous::HashStore store;
    std::vector<std::thread> threads;
    std::mutex failed_lock;
    std::string failed;
    for (int r = 0; r < ranks; ++r)
      threads.emplace_back([&, r] {
        try {
          run_rank(connect(store, r, ranks), o, "threads");
        } catch (const std::exception &e) {
          std::lock_guard<std::mutex> lock(failed_lock);
          failed += "rank " + std::to_string(r) + ": " + e.what() + "\n";
        }
      });
    for (std::thread &t : threads) t.join();
    if (!failed.empty()) {
      std::fprintf(stderr, "gloo_perf: %s", failed.c_str());
      return 1;
    }
    return 0;
  }

  const int rank = bench::parse_count(o.get("--rank", std::to_string(env_int("OMPI_COMM_WORLD_RANK", -1))), 0);
  const int ranks = bench::parse_count(o.get("--size", std::to_string(env_int("OMPI_COMM_WORLD_SIZE", -1))), 1);
  gloo::rendezvous::FileStore files(o.get("--store", ""));
  gloo::rendezvous::PrefixStore store(o.get("--prefix", "gloo_perf"), files);
  try {
    run_rank(connect(store, rank, ranks), o, "processes");
  } catch (const std::exception &e) {
    std::fprintf(stderr, "gloo_perf (rank %d): %s\n", rank, e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "gloo_perf: %s\n", e.what());
    return 1;
  }
}
