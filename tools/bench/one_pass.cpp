// The memory-bound references of tools/bench/compare, in nccl-tests' columns
// plus the bytes read + written per second:
//   one_pass -k reduce -g N -t T: the all_reduce of N in-process buffers done
//     as one vectorised pass (out_r[i] = sum over q of in_q[i], for every r:
//     N·size read, N·size written), split across T threads;
//   one_pass -k memcpy -t T: memcpy of `size` bytes, split across T threads.
// Buffers are allocated once, advised huge pages and touched before timing.
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "perf_common.hpp"

namespace {

using bench::value;

constexpr const char *kUsage =
    "usage: one_pass [-k reduce|memcpy] [-g RANKS] [-t THREADS] [-b 8M] [-e 64M] [-f 2] [--sizes 8M,64M] [-n SAMPLES] [-w WARMUP]\n"
    "         [-d float] [--json]\n";

// One pass over [begin, end) for a compile-time rank count: every input
// element is loaded once and every output element stored once, with the sum
// in a register. `ivdep` tells the vectoriser the N inputs and N outputs do
// not overlap (they are distinct buffers); without it GCC gives up on the
// N×N run-time alias checks. Built with -fopt-info-vec, the build log shows
// this loop "vectorized using 64 byte vectors" (AVX-512) or 32 (AVX2).
template <int N>
void reduce_pass(const float *const *in, float *const *out, size_t begin, size_t end) {
  const float *src[N];
  float *dst[N];
  for (int r = 0; r < N; ++r) {
    src[r] = in[r];
    dst[r] = out[r];
  }
#pragma GCC ivdep
  for (size_t i = begin; i < end; ++i) {
    float sum = src[0][i];
    for (int r = 1; r < N; ++r) sum += src[r][i];
    for (int r = 0; r < N; ++r) dst[r][i] = sum;
  }
}

using PassFn = void (*)(const float *const *, float *const *, size_t, size_t);

template <int... Ns>
PassFn pass_for(int ranks, std::integer_sequence<int, Ns...>) {
  PassFn fn = nullptr;
  ((ranks == Ns + 1 ? (fn = &reduce_pass<Ns + 1>, 0) : 0), ...);
  return fn;
}

// T-1 workers and the calling thread each take one contiguous slice of the
// elements; a std::barrier starts and ends each call (libstdc++'s spins
// briefly, then blocks), about a microsecond: nothing beside a pass over
// megabytes.
class Team {
 public:
  explicit Team(int threads) : start_(threads), done_(threads) {
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this, t] { work(t); });
  }
  ~Team() {
    stop_ = true;
    start_.arrive_and_wait();
    for (std::thread &w : workers_) w.join();
  }
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs job(slice) on every thread, slice 0 on the caller.
  void run(const std::function<void(int)> &job) {
    if (workers_.empty()) return job(0);
    job_ = &job;
    start_.arrive_and_wait();
    job(0);
    done_.arrive_and_wait();
  }

 private:
  void work(int slice) {
    for (;;) {
      start_.arrive_and_wait();
      if (stop_) return;
      (*job_)(slice);
      done_.arrive_and_wait();
    }
  }
  std::barrier<> start_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int)> *job_ = nullptr;
  std::atomic<bool> stop_{false};
};

// [begin, end) of slice t of T over `count` elements, in whole 64-byte lines.
std::pair<size_t, size_t> slice_of(size_t count, int t, int threads, size_t line) {
  const size_t lines = (count + line - 1) / line;
  const size_t begin = std::min(count, lines * static_cast<size_t>(t) / static_cast<size_t>(threads) * line);
  const size_t end = std::min(count, lines * static_cast<size_t>(t + 1) / static_cast<size_t>(threads) * line);
  return {begin, end};
}

int run(int argc, char **argv) {
  bench::Options o;
  try {
    o = bench::parse_options(argc, argv, {"-k", "-g", "-t"}, {});
  } catch (const std::exception &e) {
    std::fprintf(stderr, "one_pass: %s\n%s", e.what(), kUsage);
    return 2;
  }
  const std::string kernel = o.get("-k", "reduce");
  int ranks = 0, threads = 0;
  try {
    ranks = bench::parse_count(o.get("-g", "2"), 1);
    threads = bench::parse_count(o.get("-t", "1"), 1);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "one_pass: %s\n%s", e.what(), kUsage);
    return 2;
  }
  constexpr int kMaxRanks = 16;
  if (kernel != "reduce" && kernel != "memcpy") {
    std::fprintf(stderr, "one_pass: unknown kernel '%s'\n%s", kernel.c_str(), kUsage);
    return 2;
  }
  if (kernel == "memcpy") ranks = 1;
  if (ranks > kMaxRanks) {
    std::fprintf(stderr, "one_pass: at most %d ranks\n", kMaxRanks);
    return 2;
  }
  const bool reduce = kernel == "reduce";
  const PassFn pass = pass_for(ranks, std::make_integer_sequence<int, kMaxRanks>{});

  const uint64_t max_size = *std::max_element(o.sizes.begin(), o.sizes.end());
  std::vector<bench::HugeBuffer> in, out;
  for (int r = 0; r < ranks; ++r) {
    in.emplace_back(max_size);
    out.emplace_back(max_size);
  }
  std::vector<const float *> in_ptr;
  std::vector<float *> out_ptr;
  for (int r = 0; r < ranks; ++r) {
    in_ptr.push_back(in[static_cast<size_t>(r)].floats());
    out_ptr.push_back(out[static_cast<size_t>(r)].floats());
  }
  Team team(threads);

  if (!o.json) {
    if (reduce)
      std::printf("# one_pass: all_reduce(float, sum) of %d in-process buffers, one vectorised pass, %d thread%s\n",
                  ranks, threads, threads == 1 ? "" : "s");
    else
      std::printf("# one_pass: memcpy, %d thread%s\n", threads, threads == 1 ? "" : "s");
    std::printf("# time: median of %d samples per call (a sample: a batch of calls >= 50 us); %d warmup calls;\n"
                "# r+w GB/s: bytes read + written per second (%s)\n",
                o.samples, o.warmup, reduce ? "2·ranks·size" : "2·size");
    bench::print_header(true);
  }

  std::vector<bench::Row> rows;
  for (uint64_t requested : o.sizes) {
    const size_t count = requested / sizeof(float);
    bench::Row row;
    row.count = count;
    row.size = count * sizeof(float);
    for (int r = 0; r < ranks; ++r)
      for (size_t i = 0; i < count; ++i) in[static_cast<size_t>(r)].floats()[i] = value(r, i);
    const std::function<void(int)> job = [&](int t) {
      if (reduce) {
        const auto [begin, end] = slice_of(count, t, threads, 16);
        pass(in_ptr.data(), out_ptr.data(), begin, end);
      } else {
        const auto [begin, end] = slice_of(row.size, t, threads, 64);
        std::memcpy(reinterpret_cast<char *>(out_ptr[0]) + begin, reinterpret_cast<const char *>(in_ptr[0]) + begin,
                    end - begin);
      }
    };

    using Clock = std::chrono::steady_clock;
    for (int i = 0; i < o.warmup; ++i) team.run(job);
    auto t0 = Clock::now();
    for (int i = 0; i < bench::kProbeCalls; ++i) team.run(job);
    row.batch = bench::batch_for(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
                                 bench::kProbeCalls);
    std::vector<double> micros;
    for (int s = 0; s < o.samples; ++s) {
      t0 = Clock::now();
      for (uint32_t k = 0; k < row.batch; ++k) team.run(job);
      micros.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / row.batch);
    }
    row.time_us = bench::median(micros);
    row.algbw = row.time_us > 0 ? static_cast<double>(row.size) / (row.time_us * 1e3) : 0;
    row.busbw = row.algbw * (reduce ? bench::bus_factor("all_reduce", ranks) : 1.0);
    row.rw_gbps = row.algbw * 2 * ranks;

    for (int r = 0; r < ranks; ++r) std::fill(out_ptr[static_cast<size_t>(r)], out_ptr[static_cast<size_t>(r)] + count, -1.0f);
    team.run(job);
    for (size_t i = 0; i < count; ++i) {
      float want = value(0, i);
      if (reduce) {
        want = 0;
        for (int q = 0; q < ranks; ++q) want += value(q, i);
      }
      for (int r = 0; r < ranks; ++r) row.wrong += out_ptr[static_cast<size_t>(r)][i] != want;
    }
    rows.push_back(row);
    if (!o.json) bench::print_row(row, "float", reduce ? "sum" : "none", -1, true);
  }
  if (o.json)
    bench::print_json("one_pass", reduce ? "all_reduce" : "memcpy", ranks, threads, rows);
  else
    bench::print_footer(rows);
  for (const bench::Row &row : rows)
    if (row.wrong) return 1;
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "one_pass: %s\n", e.what());
    return 1;
  }
}
