// What the reference programs of tools/bench share: size lists, the
// nccl-tests columns `backplane run` prints (so tools/bench/compare reads all
// of them alike), their --json form, and buffers that fault no page while
// timed.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bench {

// "8", "8B", "64K", "64KiB", "1M", "2G": powers of 1024, as nccl-tests and
// fleet files read them. Throws std::invalid_argument with the text.
inline uint64_t parse_size(const std::string &text) {
  size_t used = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &used);
  } catch (const std::exception &) {
    throw std::invalid_argument("not a size: '" + text + "'");
  }
  std::string unit = text.substr(used);
  for (char &c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  uint64_t scale = 0;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB")
    scale = uint64_t{1} << 10;
  else if (unit == "M" || unit == "MB" || unit == "MIB")
    scale = uint64_t{1} << 20;
  else if (unit == "G" || unit == "GB" || unit == "GIB")
    scale = uint64_t{1} << 30;
  else
    throw std::invalid_argument("not a size: '" + text + "' (units: B, K, M, G)");
  return value * scale;
}

// nccl-tests' -b/-e/-f: from `begin`, multiplied by `factor`, up to `end`.
inline std::vector<uint64_t> size_range(uint64_t begin, uint64_t end, uint64_t factor) {
  if (factor < 2) throw std::invalid_argument("-f must be at least 2");
  if (begin == 0 || begin > end) throw std::invalid_argument("need 0 < -b <= -e");
  std::vector<uint64_t> sizes;
  for (uint64_t size = begin; size <= end; size *= factor) sizes.push_back(size);
  return sizes;
}

// "8,1M,64M".
inline std::vector<uint64_t> parse_size_list(const std::string &text) {
  std::vector<uint64_t> sizes;
  size_t from = 0;
  for (;;) {
    const size_t comma = text.find(',', from);
    const uint64_t size = parse_size(text.substr(from, comma == std::string::npos ? comma : comma - from));
    if (size == 0) throw std::invalid_argument("sizes must be at least 1 byte");
    sizes.push_back(size);
    if (comma == std::string::npos) return sizes;
    from = comma + 1;
  }
}

inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

// nccl-tests' bus bandwidth factors (its doc/PERFORMANCE.md), as in
// tools/cli/cmd_run.cpp.
inline double bus_factor(std::string_view collective, int ranks) {
  const double n = ranks;
  if (collective == "all_reduce") return 2 * (n - 1) / n;
  if (collective == "reduce_scatter" || collective == "all_gather" || collective == "all_to_all") return (n - 1) / n;
  return 1;  // broadcast, memcpy
}

// One row of the table; `rw_gbps` (bytes read + written per second) only
// where a program prints that column.
struct Row {
  uint64_t size = 0;  // bytes of a rank's largest buffer
  uint64_t count = 0; // elements of that buffer
  double time_us = 0;
  double algbw = 0, busbw = 0;  // GB/s
  uint64_t wrong = 0;
  double rw_gbps = -1;
  uint32_t batch = 1;  // calls timed back to back per sample
};

// printf into a string.
[[gnu::format(printf, 1, 2)]] inline std::string format(const char *pattern, ...) {
  char text[512];
  std::va_list args;
  va_start(args, pattern);
  std::vsnprintf(text, sizeof text, pattern, args);
  va_end(args);
  return text;
}

inline std::string format_time(double micros) {
  if (micros >= 10000.0) return format("%7.0f", micros);
  if (micros >= 100.0) return format("%7.1f", micros);
  return format("%7.2f", micros);
}

// The widths of nccl-tests' common.cu (and of `backplane run`), out of place
// only.
inline void print_header(bool rw_column) {
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s%s\n", "size", "count", "type", "redop", "root", "time",
              "algbw", "busbw", "#wrong", rw_column ? "  r+w GB/s" : "");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s%s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)",
              "(GB/s)", "", rw_column ? "  (read+written)" : "");
}

inline void print_row(const Row &row, const char *type, const char *redop, int root, bool rw_column) {
  std::string line = format("%12llu  %12llu  %8s  %6s  %6d  %7s  %6.2f  %6.2f  %5llu",
                            static_cast<unsigned long long>(row.size), static_cast<unsigned long long>(row.count), type,
                            redop, root, format_time(row.time_us).c_str(), row.algbw, row.busbw,
                            static_cast<unsigned long long>(row.wrong));
  if (rw_column) line += format("  %9.2f", row.rw_gbps);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

inline void print_footer(const std::vector<Row> &rows) {
  uint64_t wrong = 0;
  double busbw = 0;
  for (const Row &row : rows) {
    wrong += row.wrong;
    busbw += row.busbw;
  }
  std::printf("# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(wrong), wrong ? "FAILED" : "OK");
  std::printf("# Avg bus bandwidth    : %g\n", rows.empty() ? 0.0 : busbw / static_cast<double>(rows.size()));
}

// {"tool":..., "collective":..., "ranks":..., "threads":..., "rows":[...]}:
// what tools/bench/compare reads.
inline void print_json(const char *tool, const std::string &collective, int ranks, int threads,
                       const std::vector<Row> &rows) {
  std::printf("{\"tool\": \"%s\", \"collective\": \"%s\", \"dtype\": \"f32\", \"ranks\": %d, \"threads\": %d, \"rows\": [",
              tool, collective.c_str(), ranks, threads);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row &r = rows[i];
    std::printf("%s\n  {\"size\": %llu, \"count\": %llu, \"time_us\": %.6g, \"algbw\": %.6g, \"busbw\": %.6g, "
                "\"wrong\": %llu, \"batch\": %u",
                i ? "," : "", static_cast<unsigned long long>(r.size), static_cast<unsigned long long>(r.count),
                r.time_us, r.algbw, r.busbw, static_cast<unsigned long long>(r.wrong), r.batch);
    if (r.rw_gbps >= 0) std::printf(", \"rw_gbps\": %.6g", r.rw_gbps);
    std::printf("}");
  }
  std::printf("\n]}\n");
  std::fflush(stdout);
}

// Buffers for timed loops. From 2 MiB on: 2 MiB aligned, whole huge pages,
// advised MADV_HUGEPAGE; always touched here, so that no first-touch page
// fault (11-16 us per 4 KiB page on these machines) lands in a measurement.
class HugeBuffer {
 public:
  HugeBuffer() = default;
  explicit HugeBuffer(size_t bytes) {
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t align = bytes >= kHuge ? kHuge : 64;
    bytes_ = std::max<size_t>((bytes + align - 1) / align * align, align);
    data_ = std::aligned_alloc(align, bytes_);
    if (!data_) throw std::runtime_error(format("cannot allocate %zu bytes", bytes_));
    if (align == kHuge) madvise(data_, bytes_, MADV_HUGEPAGE);  // advice: failure only costs speed
    std::memset(data_, 0, bytes_);
  }
  HugeBuffer(HugeBuffer &&other) noexcept : data_(other.data_), bytes_(other.bytes_) {
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  HugeBuffer &operator=(HugeBuffer &&other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  HugeBuffer(const HugeBuffer &) = delete;
  HugeBuffer &operator=(const HugeBuffer &) = delete;
  ~HugeBuffer() { std::free(data_); }

  float *floats() const { return static_cast<float *>(data_); }
  void *data() const { return data_; }

 private:
  void *data_ = nullptr;
  size_t bytes_ = 0;
};

// Input values whose sums over up to 1024 ranks are exact in f32, so every
// check is an equality.
inline float value(int rank, size_t index) { return static_cast<float>((index * 7 + static_cast<size_t>(rank) * 3) % 61); }

// The calls of one sample: enough back to back that the sample lasts
// `target_us`, so clock reads and rank skew vanish from short calls' times.
// `estimate_us` comes from kProbeCalls calls timed after the warmup.
constexpr int kProbeCalls = 3;
inline uint32_t batch_for(double estimate_us, double target_us = 50) {
  if (!(estimate_us > 0)) return 1;
  return static_cast<uint32_t>(std::clamp(std::floor(target_us / estimate_us), 1.0, 100000.0));
}

// The options every program takes, nccl-tests' letters where it has one.
struct Options {
  std::string collective = "all_reduce";
  std::vector<uint64_t> sizes;
  uint64_t begin = 8, end = 64 << 20, factor = 2;
  int samples = 20;  // -n: timed samples per size
  int warmup = 5;    // -w: untimed calls per size, before the probe that sizes a sample's batch
  bool json = false;
  std::vector<std::pair<std::string, std::string>> extra;  // a program's own options, with their values

  // The value of a program's own option, or `fallback`.
  std::string get(const std::string &name, const std::string &fallback) const {
    for (const auto &[key, value] : extra)
      if (key == name) return value;
    return fallback;
  }
  bool has(const std::string &name) const {
    for (const auto &[key, value] : extra)
      if (key == name) return true;
    return false;
  }
};

// A whole number of at least `least`; throws std::invalid_argument.
inline int parse_count(const std::string &text, int least) {
  char *end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (errno || end == text.c_str() || *end || v < least || v > 100000000)
    throw std::invalid_argument("not a count of at least " + std::to_string(least) + ": '" + text + "'");
  return static_cast<int>(v);
}

// Parses the shared options and a program's own: `with_value` take the next
// word, `flags` none. Throws std::invalid_argument on anything else.
inline Options parse_options(int argc, char **argv, const std::vector<std::string> &with_value,
                             const std::vector<std::string> &flags) {
  Options o;
  auto value_of = [&](int &i) -> std::string {
    if (i + 1 >= argc) throw std::invalid_argument(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  auto listed = [](const std::vector<std::string> &names, const std::string &name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-c" || arg == "--collective")
      o.collective = value_of(i);
    else if (arg == "-b" || arg == "--minbytes")
      o.begin = parse_size(value_of(i));
    else if (arg == "-e" || arg == "--maxbytes")
      o.end = parse_size(value_of(i));
    else if (arg == "-f" || arg == "--stepfactor")
      o.factor = parse_size(value_of(i));
    else if (arg == "--sizes")  // a list instead of -b/-e/-f: "8,1M,64M"
      o.sizes = parse_size_list(value_of(i));
    else if (arg == "-n" || arg == "--iters")
      o.samples = parse_count(value_of(i), 1);
    else if (arg == "-w" || arg == "--warmup_iters")
      o.warmup = parse_count(value_of(i), 0);
    else if (arg == "-d" || arg == "--datatype") {
      const std::string type = value_of(i);
      if (type != "float" && type != "f32")
        throw std::invalid_argument("-d: only float (f32) is measured, not '" + type + "'");
    } else if (arg == "--json")
      o.json = true;
    else if (listed(with_value, arg))
      o.extra.emplace_back(arg, value_of(i));
    else if (listed(flags, arg))
      o.extra.emplace_back(arg, "");
    else
      throw std::invalid_argument("unknown option '" + arg + "'");
  }
  if (o.sizes.empty()) o.sizes = size_range(o.begin, o.end, o.factor);
  return o;
}

}  // namespace bench
