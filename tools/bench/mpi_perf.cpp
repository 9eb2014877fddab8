// The Open MPI reference of tools/bench/compare: one MPI collective over
// MPI_COMM_WORLD (f32, sum where it reduces) across a range of sizes, in
// nccl-tests' columns, each size's result checked. Run under mpirun:
//   mpirun -np 2 mpi_perf -c all_reduce -b 8 -e 64M -f 2 [-n 20] [-w 5] [--json]
#include <mpi.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "perf_common.hpp"

namespace {

using bench::value;

constexpr const char *kUsage =
    "usage: mpirun -np N mpi_perf -c all_reduce|all_gather|broadcast|reduce_scatter|all_to_all\n"
    "         [-b 8] [-e 64M] [-f 2] [--sizes 8,1M,64M] [-n SAMPLES] [-w WARMUP] [-d float] [--json]\n";

// How many blocks of `count` elements the largest buffer holds, as nccl-tests
// (and `backplane run`) size these collectives: `size` is that buffer.
int blocks_for(const std::string &collective, int ranks) {
  if (collective == "all_gather" || collective == "reduce_scatter" || collective == "all_to_all") return ranks;
  return 1;
}

struct Measure {
  int rank = 0, ranks = 1;
  const std::string &collective;
  float *send, *recv;

  // One call with `count` as MPI takes it: elements per block.
  void call(int count) const {
    if (collective == "all_reduce")
      MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (collective == "all_gather")
      MPI_Allgather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, MPI_COMM_WORLD);
    else if (collective == "broadcast")  // in place: root 0's send is everyone's buffer
      MPI_Bcast(rank == 0 ? send : recv, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
    else if (collective == "reduce_scatter")
      MPI_Reduce_scatter_block(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else  // all_to_all
      MPI_Alltoall(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, MPI_COMM_WORLD);
  }

  // Inputs for a call of `count` elements per block.
  void fill(size_t count) const {
    const size_t send_elements = collective == "reduce_scatter" || collective == "all_to_all"
                                     ? count * static_cast<size_t>(ranks)
                                     : count;
    for (size_t i = 0; i < send_elements; ++i) send[i] = value(rank, i);
  }

  // Elements of this rank's result that differ from the definition.
  uint64_t check(size_t count) const {
    const float *got = collective == "broadcast" && rank == 0 ? send : recv;
    const size_t n = static_cast<size_t>(ranks), r = static_cast<size_t>(rank);
    uint64_t wrong = 0;
    auto expect = [&](size_t at, float want) { wrong += got[at] != want; };
    if (collective == "all_reduce") {
      for (size_t i = 0; i < count; ++i) {
        float sum = 0;
        for (int q = 0; q < ranks; ++q) sum += value(q, i);
        expect(i, sum);
      }
    } else if (collective == "all_gather") {
      for (size_t q = 0; q < n; ++q)
        for (size_t i = 0; i < count; ++i) expect(q * count + i, value(static_cast<int>(q), i));
    } else if (collective == "broadcast") {
      for (size_t i = 0; i < count; ++i) expect(i, value(0, i));
    } else if (collective == "reduce_scatter") {
      for (size_t i = 0; i < count; ++i) {
        float sum = 0;
        for (int q = 0; q < ranks; ++q) sum += value(q, r * count + i);
        expect(i, sum);
      }
    } else {  // all_to_all: block q of rank r's result is block r of rank q's input
      for (size_t q = 0; q < n; ++q)
        for (size_t i = 0; i < count; ++i) expect(q * count + i, value(static_cast<int>(q), r * count + i));
    }
    return wrong;
  }
};

// The slowest rank's value of `mine`.
double slowest(double mine) {
  double out = 0;
  MPI_Allreduce(&mine, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

int run(int argc, char **argv, int rank, int ranks) {
  bench::Options o;
  try {
    o = bench::parse_options(argc, argv, {}, {});
  } catch (const std::exception &e) {
    if (rank == 0) std::fprintf(stderr, "mpi_perf: %s\n%s", e.what(), kUsage);
    return 2;
  }
  const std::string &c = o.collective;
  if (c != "all_reduce" && c != "all_gather" && c != "broadcast" && c != "reduce_scatter" && c != "all_to_all") {
    if (rank == 0) std::fprintf(stderr, "mpi_perf: unknown collective '%s'\n%s", c.c_str(), kUsage);
    return 2;
  }
  const int blocks = blocks_for(c, ranks);
  const uint64_t max_size = *std::max_element(o.sizes.begin(), o.sizes.end());
  bench::HugeBuffer send(max_size), recv(max_size);
  const Measure m{rank, ranks, c, send.floats(), recv.floats()};

  if (rank == 0 && !o.json) {
    char library[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(library, &length);
    std::string version(library, static_cast<size_t>(length));
    version = version.substr(0, version.find_first_of(",\n"));
    const char *names[] = {"all_reduce", "MPI_Allreduce(float, sum)", "all_gather", "MPI_Allgather(float)",
                           "broadcast", "MPI_Bcast(float, root 0, in place)", "reduce_scatter",
                           "MPI_Reduce_scatter_block(float, sum)", "all_to_all", "MPI_Alltoall(float)"};
    const char *name = "";
    for (size_t i = 0; i < std::size(names); i += 2)
      if (c == names[i]) name = names[i + 1];
    std::printf("# mpi_perf: %s over %d ranks (%s)\n", name, ranks, version.c_str());
    std::printf("# time: median of %d samples of the slowest rank's time per call; a sample is one call, or a batch of\n"
                "# back-to-back calls (>= 50 us) divided by its length; %d warmup calls; #wrong: checked after the timing\n",
                o.samples, o.warmup);
    bench::print_header(false);
  }

  std::vector<bench::Row> rows;
  for (uint64_t requested : o.sizes) {
    const size_t count = requested / (sizeof(float) * static_cast<size_t>(blocks));  // per block
    bench::Row row;
    row.count = count * static_cast<size_t>(blocks);
    row.size = row.count * sizeof(float);
    m.fill(count);
    const int call_count = static_cast<int>(count);

    for (int i = 0; i < o.warmup; ++i) m.call(call_count);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < bench::kProbeCalls; ++i) m.call(call_count);
    // The same batch on every rank: it comes from one reduction.
    row.batch = bench::batch_for(slowest((MPI_Wtime() - t0) / bench::kProbeCalls * 1e6));

    std::vector<double> micros;
    for (int s = 0; s < o.samples; ++s) {
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      for (uint32_t k = 0; k < row.batch; ++k) m.call(call_count);
      micros.push_back(slowest((MPI_Wtime() - t0) * 1e6 / row.batch));
    }
    row.time_us = bench::median(micros);
    row.algbw = row.time_us > 0 ? static_cast<double>(row.size) / (row.time_us * 1e3) : 0;
    row.busbw = row.algbw * bench::bus_factor(c, ranks);

    // The checked call starts from a result buffer that holds no answer.
    std::fill(m.recv, m.recv + row.count, -1.0f);
    m.call(call_count);
    unsigned long long wrong = m.check(count), total = 0;
    MPI_Reduce(&wrong, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    row.wrong = total;
    rows.push_back(row);
    if (rank == 0 && !o.json) bench::print_row(row, "float", c == "all_reduce" || c == "reduce_scatter" ? "sum" : "none",
                                              c == "broadcast" ? 0 : -1, false);
  }
  if (rank == 0) {
    if (o.json)
      bench::print_json("mpi_perf", c, ranks, 1, rows);
    else
      bench::print_footer(rows);
  }
  for (const bench::Row &row : rows)
    if (row.wrong) return 1;
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  int status = 0;
  try {
    status = run(argc, argv, rank, ranks);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "mpi_perf (rank %d): %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
