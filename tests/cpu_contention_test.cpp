// The cpu plugin's multi-threaded paths: collectives stay prompt while another
// process keeps a core busy (a pool that only spun would take milliseconds
// per call there), and every collective is right when forced through the
// thread pool and streaming stores at sizes and alignments that exercise
// the chunking, the SIMD loop's ends and its f16/bf16 rounding.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <latch>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backplane_reference/collective_reference.hpp"
#include "test_support.hpp"

namespace {

using backplane::Buffer;
using backplane::Device;
using backplane::Group;
using backplane::Host;
using backplane::Result;
using backplane::Status;
using backplane::testing::make_cpu_host;
namespace ref = backplane::reference;

// ---- a busy process -----------------------------------------------------

// A child process spinning in a shell loop, optionally pinned to one CPU;
// killed (and reaped) when the object goes, whatever the test did. If this
// process dies first, the kernel kills the child (PR_SET_PDEATHSIG).
class BusyChild {
 public:
  explicit BusyChild(std::optional<int> cpu) {
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid_ == 0) {
      // Only async-signal-safe calls until exec: this process has threads.
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(1);
      if (cpu) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(*cpu, &set);
        sched_setaffinity(0, sizeof set, &set);
      }
      execl("/bin/sh", "sh", "-c", "while :; do :; done", static_cast<char *>(nullptr));
      _exit(127);
    }
  }
  ~BusyChild() {
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  BusyChild(const BusyChild &) = delete;
  BusyChild &operator=(const BusyChild &) = delete;

  // CPU seconds the child has used (user + system), from /proc.
  double cpu_seconds() const {
    std::ifstream stat("/proc/" + std::to_string(pid_) + "/stat");
    std::string line;
    std::getline(stat, line);
    const std::size_t close = line.rfind(')');  // the command may hold spaces
    if (close == std::string::npos) return 0;
    std::istringstream fields(line.substr(close + 2));
    std::string field;
    unsigned long long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && fields >> field; ++i) {
      if (i == 14) utime = std::stoull(field);
      if (i == 15) stime = std::stoull(field);
    }
    return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }

 private:
  pid_t pid_ = -1;
};

// The last CPU this process may run on.
int last_allowed_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  int last = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) last = c;
  return last;
}

std::vector<Device> devices_of(Host &host, std::size_t n) {
  std::vector<Device> devices;
  for (std::size_t r = 0; r < n; ++r) devices.push_back(host.find_device("cpu:" + std::to_string(r)).value());
  return devices;
}

// 200 all_reduce f32 sum of 8 MiB on 4 devices while a busy process holds a
// core: each must finish promptly and right. Pure spinning would take
// milliseconds to seconds per call here; the bounds (median 50 ms, slowest
// 500 ms, or 4 and 40 times the uncontended time where that is more, as in
// sanitizer builds) are generous beyond that: about 1-3 ms per call on an
// idle 2-core machine.
void run_under_contention(std::optional<int> cpu) {
  constexpr std::size_t n = 4, count = (std::size_t{8} << 20) / sizeof(float), iterations = 200;
  Host host = make_cpu_host(R"({"cpu": {"devices": 4}})");
  std::vector<Device> devices = devices_of(host, n);
  Group group = host.create_group(devices).value();
  std::vector<Buffer> send, recv;
  std::vector<bp_buffer *> raw_send, raw_recv;
  std::vector<float> values(count);
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<float>(i % 1000) + static_cast<float>(r);
    send.push_back(Buffer::create(devices[r], count * sizeof(float)).value());
    recv.push_back(Buffer::create(devices[r], count * sizeof(float)).value());
    ASSERT_TRUE(send.back().write(0, values.data(), count * sizeof(float)));
    raw_send.push_back(send.back().get());
    raw_recv.push_back(recv.back().get());
  }
  const std::vector<float> poison(count, -1.0f);
  auto check = [&](std::size_t iteration) {
    for (std::size_t r = 0; r < n; ++r) {
      ASSERT_TRUE(recv[r].read(0, values.data(), count * sizeof(float)));
      for (std::size_t i = 0; i < count; ++i) {
        const float want = static_cast<float>(n * (i % 1000) + n * (n - 1) / 2);
        ASSERT_EQ(values[i], want) << "iteration " << iteration << ", rank " << r << ", element " << i;
      }
    }
  };

  // The same calls without the busy process: sanitizer builds are several
  // times slower, and the bounds scale with them.
  std::vector<double> alone;
  for (std::size_t k = 0; k < 5; ++k) {
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(group.all_reduce(raw_send, raw_recv, count, BP_F32, BP_SUM));
    alone.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(alone.begin(), alone.end());
  const double baseline = alone[alone.size() / 2];
  const double median_bound = std::max(50.0, 4 * baseline), max_bound = std::max(500.0, 40 * baseline);

  BusyChild busy(cpu);
  std::vector<double> ms;
  for (std::size_t k = 0; k < iterations; ++k) {
    const bool verify = k % 20 == 0 || k + 1 == iterations;
    if (verify) {
      for (Buffer &b : recv) ASSERT_TRUE(b.write(0, poison.data(), count * sizeof(float)));
    }
    const auto start = std::chrono::steady_clock::now();
    Status status = group.all_reduce(raw_send, raw_recv, count, BP_F32, BP_SUM);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    ASSERT_TRUE(status) << status.error().json();
    if (verify) {
      check(k);
      if (::testing::Test::HasFailure()) return;
    }
  }
  const double child_cpu = busy.cpu_seconds();
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2], max = ms.back();
  std::cout << "all_reduce 4 x 8 MiB with a busy process" << (cpu ? " pinned to cpu " + std::to_string(*cpu) : "")
            << ": median " << median << " ms, p90 " << ms[ms.size() * 9 / 10] << " ms, max " << max
            << " ms (alone: " << baseline << " ms); the busy process used " << child_cpu << " s of CPU\n";
  EXPECT_LT(median, median_bound) << "median time per call";
  EXPECT_LT(max, max_bound) << "slowest call";
}

TEST(CpuContention, AllReduceStaysPromptWhileAPinnedProcessHoldsACore) {
  run_under_contention(last_allowed_cpu());
}

TEST(CpuContention, AllReduceStaysPromptWhileAnUnpinnedProcessSpins) { run_under_contention(std::nullopt); }

// ---- every collective through the pool ---------------------------------

// Thresholds of 0: every call, however small, is chunked across the pool
// and written with streaming stores where the alignment allows.
Host &forced_host() {
  static Host host = make_cpu_host(
      R"({"cpu": {"devices": 8, "parallel_threshold_bytes": 0, "streaming_threshold_bytes": 0}})");
  return host;
}

enum class Placement { out_of_place, in_place, mixed };

struct Scenario {
  bp_collective collective;
  bp_dtype dtype;
  bp_reduce_op op;
  std::size_t n;
  std::size_t count;
  Placement placement;
};

std::string describe(const Scenario &s) {
  static const char *const placements[] = {"out of place", "in place", "mixed"};
  std::string text = std::string(bp_collective_name(s.collective)) + "(" + bp_dtype_name(s.dtype);
  if (ref::is_reducing(s.collective)) text += std::string(", ") + bp_reduce_op_name(s.op);
  return text + ") on " + std::to_string(s.n) + " ranks, count " + std::to_string(s.count) + ", " +
         placements[static_cast<int>(s.placement)];
}

// Runs one scenario (root n - 1) and checks every byte of every buffer,
// 16 guard bytes past the end included.
void run_scenario(const Scenario &s) {
  SCOPED_TRACE(describe(s));
  constexpr std::size_t guard = 16;
  const std::size_t size = ref::element_size(s.dtype), n = s.n, count = s.count;
  const std::size_t root = n - 1;
  Host &host = forced_host();
  std::vector<Device> devices = devices_of(host, n);
  Group group = host.create_group(devices).value();
  auto in_place = [&](std::size_t r) {
    return s.placement == Placement::in_place || (s.placement == Placement::mixed && r % 2 == 0);
  };
  // Rank r's layout comes from the case with in_place(r).
  auto reference_case = [&](bool rank_in_place) {
    return ref::CollectiveCase{s.collective, s.dtype, s.op, count, n, static_cast<std::uint32_t>(root), rank_in_place};
  };

  struct Slot {
    Buffer buffer;
    std::vector<std::uint8_t> expected;
  };
  std::vector<Slot> slots;
  std::vector<std::optional<std::size_t>> send_slot(n), recv_slot(n);
  std::vector<ref::RankLayout> layouts;
  for (std::size_t r = 0; r < n; ++r) {
    const ref::RankLayout &l = layouts.emplace_back(ref::rank_layout(reference_case(in_place(r)), r));
    auto add = [&](std::size_t elements) {
      const std::size_t bytes = elements * size + guard;
      Slot slot{Buffer::create(devices[r], bytes).value(), std::vector<std::uint8_t>(bytes)};
      for (std::size_t b = 0; b < bytes; ++b) slot.expected[b] = static_cast<std::uint8_t>(0x5A ^ (b * 7 + r));
      slots.push_back(std::move(slot));
      return slots.size() - 1;
    };
    if (l.in_place) {
      send_slot[r] = recv_slot[r] = add(l.send);
    } else {
      if (l.has_send) send_slot[r] = add(l.send);
      if (l.has_recv) recv_slot[r] = add(l.recv);
    }
  }

  // Inputs, written into the expected images before the call.
  std::vector<std::vector<std::byte>> contributions(n);
  for (std::size_t r = 0; r < n; ++r) {
    contributions[r] = ref::make_contribution(reference_case(false), r);
    if (contributions[r].empty()) continue;
    std::memcpy(slots[*send_slot[r]].expected.data() + layouts[r].input_offset * size, contributions[r].data(),
                contributions[r].size());
  }
  for (Slot &slot : slots) ASSERT_TRUE(slot.buffer.write(0, slot.expected.data(), slot.expected.size()));

  // What every buffer must hold afterwards.
  for (std::size_t r = 0; r < n; ++r) {
    const std::vector<std::byte> result = ref::reference_result(reference_case(false), contributions, r);
    if (result.empty()) continue;
    std::memcpy(slots[*recv_slot[r]].expected.data() + layouts[r].result_offset * size, result.data(),
                result.size());
  }

  std::vector<bp_buffer *> send(n, nullptr), recv(n, nullptr);
  for (std::size_t r = 0; r < n; ++r) {
    if (send_slot[r]) send[r] = slots[*send_slot[r]].buffer.get();
    if (recv_slot[r]) recv[r] = slots[*recv_slot[r]].buffer.get();
  }
  bp_collective_request request{};
  request.struct_size = sizeof request;
  request.collective = s.collective;
  request.dtype = s.dtype;
  request.reduce_op = s.op;
  request.root = static_cast<std::uint32_t>(root);
  request.count = count;
  request.send = send.data();
  request.recv = recv.data();
  Status status = group.run(request);
  ASSERT_TRUE(status) << status.error().json();

  for (std::size_t k = 0; k < slots.size(); ++k) {
    std::vector<std::uint8_t> actual(slots[k].expected.size());
    ASSERT_TRUE(slots[k].buffer.read(0, actual.data(), actual.size()));
    const auto mismatch = std::mismatch(actual.begin(), actual.end(), slots[k].expected.begin());
    ASSERT_TRUE(mismatch.first == actual.end())
        << "buffer " << k << ": first wrong byte at " << (mismatch.first - actual.begin()) << " of " << actual.size()
        << " (guard starts at " << actual.size() - guard << ")";
  }
}

// Counts around the chunk and vector boundaries: 1, a few vectors and a
// ragged end, and enough for several chunks per thread.
constexpr std::size_t kCounts[] = {1, 4099, 70001};

TEST(CpuForcedParallel, ReductionsMatchTheReference) {
  struct Typed {
    bp_dtype dtype;
    bp_reduce_op op;
  };
  // f32 sum and f64 avg (SIMD), bf16 and f16 sums (SIMD rounding), i8 prod
  // (no 8-bit lane multiply: the scalar path), u64 max, i32 min.
  const Typed typed[] = {{BP_F32, BP_SUM}, {BP_F64, BP_AVG}, {BP_BF16, BP_SUM}, {BP_F16, BP_MAX},
                         {BP_I8, BP_PROD}, {BP_U64, BP_MAX}, {BP_I32, BP_MIN}};
  for (bp_collective c : {BP_ALL_REDUCE, BP_REDUCE, BP_REDUCE_SCATTER})
    for (const Typed &t : typed)
      for (std::size_t n : {1, 3, 8})
        for (std::size_t count : kCounts)
          for (Placement p : {Placement::out_of_place, Placement::in_place, Placement::mixed}) {
            if (c == BP_REDUCE_SCATTER && n == 8 && count > 4099) continue;  // n*n blocks: keep it quick
            run_scenario({c, t.dtype, t.op, n, count, p});
            if (HasFailure()) return;
          }
}

TEST(CpuForcedParallel, DataMovementMatchesTheReference) {
  // u8 blocks of odd length put most blocks at odd addresses: streaming is
  // then off for them (or reached after an aligning head); f32 and f64
  // blocks keep 4- and 8-byte alignment.
  for (bp_collective c : {BP_BROADCAST, BP_ALL_GATHER, BP_GATHER, BP_SCATTER, BP_ALL_TO_ALL})
    for (bp_dtype t : {BP_U8, BP_F32, BP_F64})
      for (std::size_t n : {1, 3, 8})
        for (std::size_t count : kCounts)
          for (Placement p : {Placement::out_of_place, Placement::in_place, Placement::mixed}) {
            if (n == 8 && count > 4099 && c != BP_BROADCAST) continue;  // n*n blocks: keep it quick
            run_scenario({c, t, BP_SUM, n, count, p});
            if (HasFailure()) return;
          }
}

// Two threads, each with its own group, run forced-parallel all_reduces at
// once: one owns the pool, the other finds it busy and runs inline; both
// must be right every time.
TEST(CpuForcedParallel, TwoGroupsShareOnePool) {
  constexpr std::size_t count = 50001, rounds = 40;
  Host &host = forced_host();
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  std::latch go(2);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      std::vector<Device> devices = {host.find_device("cpu:" + std::to_string(2 * t)).value(),
                                     host.find_device("cpu:" + std::to_string(2 * t + 1)).value()};
      Group group = host.create_group(devices).value();
      std::vector<Buffer> buffers;
      std::vector<bp_buffer *> raw;
      for (const Device &d : devices) {
        buffers.push_back(Buffer::create(d, count * 8).value());
        raw.push_back(buffers.back().get());
      }
      std::vector<std::uint64_t> values(count);
      go.arrive_and_wait();
      for (std::size_t k = 0; k < rounds; ++k) {
        for (std::size_t r = 0; r < 2; ++r) {
          for (std::size_t i = 0; i < count; ++i) values[i] = (t + 1) * 1000003 * k + r * 7 + i;
          if (!buffers[r].write(0, values.data(), count * 8)) return;
        }
        Status status = group.all_reduce(raw, raw, count, BP_U64, BP_SUM);
        if (!status) {
          std::lock_guard<std::mutex> lock(failures_mutex);
          failures.push_back(std::string(status.error().message()));
          return;
        }
        for (std::size_t r = 0; r < 2; ++r) {
          if (!buffers[r].read(0, values.data(), count * 8)) return;
          for (std::size_t i = 0; i < count; ++i) {
            const std::uint64_t want = 2 * ((t + 1) * 1000003 * k + i) + 7;
            if (values[i] != want) {
              std::lock_guard<std::mutex> lock(failures_mutex);
              failures.push_back("thread " + std::to_string(t) + " round " + std::to_string(k) + " rank " +
                                 std::to_string(r) + " element " + std::to_string(i) + ": expected " +
                                 std::to_string(want) + ", got " + std::to_string(values[i]));
              return;
            }
          }
        }
      }
    });
  }
  for (std::thread &thread : threads) thread.join();
  for (const std::string &failure : failures) ADD_FAILURE() << failure;
}

// ---- the SIMD path's f16/bf16 rounding ---------------------------------

// The sweep's inputs sum exactly; here every f16 and bf16 bit pattern is
// summed with another value in the SIMD loop (65536 elements), so results
// need rounding (ties included), overflow to Inf, underflow to subnormals,
// and NaN must stay NaN. The expected value is the f32 sum (in rank order)
// rounded once to nearest even.
template <class Codec>
void check_half_rounding(bp_dtype dtype, bp_reduce_op op) {
  constexpr std::size_t n = 3, count = 65536;
  Host &host = forced_host();
  std::vector<Device> devices = devices_of(host, n);
  Group group = host.create_group(devices).value();
  std::vector<std::vector<std::uint16_t>> inputs(n, std::vector<std::uint16_t>(count));
  for (std::size_t i = 0; i < count; ++i) {
    inputs[0][i] = static_cast<std::uint16_t>(i);
    inputs[1][i] = static_cast<std::uint16_t>((i * 40503u + 12345u) & 0xffffu);
    inputs[2][i] = static_cast<std::uint16_t>(i & 0x83ffu);  // small values, both signs
  }
  std::vector<Buffer> send, recv;
  std::vector<bp_buffer *> raw_send, raw_recv;
  for (std::size_t r = 0; r < n; ++r) {
    send.push_back(Buffer::create(devices[r], count * 2).value());
    recv.push_back(Buffer::create(devices[r], count * 2).value());
    ASSERT_TRUE(send.back().write(0, inputs[r].data(), count * 2));
    raw_send.push_back(send.back().get());
    raw_recv.push_back(recv.back().get());
  }
  Status status = group.all_reduce(raw_send, raw_recv, count, dtype, op);
  ASSERT_TRUE(status) << status.error().json();
  std::vector<std::uint16_t> got(count);
  for (std::size_t r = 0; r < n; ++r) {
    ASSERT_TRUE(recv[r].read(0, got.data(), count * 2));
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) {
      float acc = static_cast<float>(Codec::decode(inputs[0][i]));
      for (std::size_t k = 1; k < n; ++k) acc += static_cast<float>(Codec::decode(inputs[k][i]));
      if (op == BP_AVG) acc /= static_cast<float>(n);
      const double result = Codec::decode(got[i]);
      const bool ok = std::isnan(acc) ? std::isnan(result) : got[i] == Codec::encode(static_cast<double>(acc));
      if (!ok && ++wrong <= 5) {
        ADD_FAILURE() << bp_dtype_name(dtype) << " " << bp_reduce_op_name(op) << " rank " << r << " element " << i
                      << ": expected " << acc << " (0x" << std::hex << Codec::encode(static_cast<double>(acc))
                      << "), got 0x" << got[i] << std::dec;
      }
    }
    ASSERT_EQ(wrong, 0u);
  }
}

TEST(CpuSimdRounding, HalfSumsRoundOnceToNearestEven) {
  check_half_rounding<ref::Half>(BP_F16, BP_SUM);
  check_half_rounding<ref::Half>(BP_F16, BP_AVG);
}

TEST(CpuSimdRounding, BfloatSumsRoundOnceToNearestEven) {
  check_half_rounding<ref::BFloat16>(BP_BF16, BP_SUM);
  check_half_rounding<ref::BFloat16>(BP_BF16, BP_AVG);
}

// Wrapped memory at odd addresses, some outputs sharing a misalignment and
// some not: streaming must only be used where every output can be aligned.
TEST(CpuForcedParallel, WrappedMemoryAtAnyAlignment) {
  constexpr std::size_t n = 3, count = 20011;
  Host &host = forced_host();
  std::vector<Device> devices = devices_of(host, n);
  Group group = host.create_group(devices).value();
  struct Shift {
    std::size_t all, per_rank;
  };
  for (const Shift shift : {Shift{0, 0}, Shift{4, 0}, Shift{0, 4}, Shift{0, 8}, Shift{4, 12}}) {
    SCOPED_TRACE("memory at 64k + " + std::to_string(shift.all) + " + rank * " + std::to_string(shift.per_rank));
    std::vector<std::vector<std::uint8_t>> storage(n, std::vector<std::uint8_t>(count * 4 + 256, 0xEE));
    std::vector<Buffer> buffers;
    std::vector<bp_buffer *> raw;
    std::vector<float *> at(n);
    for (std::size_t r = 0; r < n; ++r) {
      // 64-aligned base plus a per-rank shift: equal shifts share a misalignment.
      auto base = reinterpret_cast<std::uintptr_t>(storage[r].data());
      const std::size_t pad = (64 - base % 64) % 64 + shift.all + (r * shift.per_rank) % 64;
      at[r] = reinterpret_cast<float *>(storage[r].data() + pad);
      for (std::size_t i = 0; i < count; ++i) {
        const float v = static_cast<float>(i % 4096) * 0.5f + static_cast<float>(r);
        std::memcpy(reinterpret_cast<std::uint8_t *>(at[r]) + i * 4, &v, 4);
      }
      buffers.push_back(Buffer::wrap_host(devices[r], at[r], count * 4).value());
      raw.push_back(buffers.back().get());
    }
    Status status = group.all_reduce(raw, raw, count, BP_F32, BP_SUM);
    ASSERT_TRUE(status) << status.error().json();
    for (std::size_t r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < count; ++i) {
        float got;
        std::memcpy(&got, reinterpret_cast<std::uint8_t *>(at[r]) + i * 4, 4);
        ASSERT_EQ(got, static_cast<float>(i % 4096) * 1.5f + 3.0f) << "rank " << r << " element " << i;
      }
      const auto *end = reinterpret_cast<std::uint8_t *>(at[r]) + count * 4;
      for (const std::uint8_t *b = storage[r].data(); b < reinterpret_cast<std::uint8_t *>(at[r]); ++b)
        ASSERT_EQ(*b, 0xEE) << "byte before rank " << r << "'s memory was written";
      for (const std::uint8_t *b = end; b < storage[r].data() + storage[r].size(); ++b)
        ASSERT_EQ(*b, 0xEE) << "byte after rank " << r << "'s memory was written";
    }
  }
}

}  // namespace
