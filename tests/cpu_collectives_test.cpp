// The cpu plugin's nine collectives against the reference (tools/reference): every collective
// x element type x reduce op x placement, over group sizes, counts and roots. Every
// byte of every buffer passed is checked, guard bytes past the end included.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backplane_reference/collective_reference.hpp"
#include "collective_runner.hpp"
#include "test_support.hpp"

namespace {

using namespace backplane::testing::collectives;

constexpr std::size_t kDevices = 8;
constexpr std::size_t kLargeCount = 65537;  // 32 chunks of 2048 and one more element

// Ranks map to devices in a shuffled order (3 is coprime with 8), so a
// rank/device mix-up shows.
std::vector<std::string> device_names(std::size_t n) {
  std::vector<std::string> names;
  for (std::size_t rank = 0; rank < n; ++rank) names.push_back("cpu:" + std::to_string((rank * 3 + 1) % kDevices));
  return names;
}

// One host for the whole binary: creating it per case would only measure the loader.
Host &shared_host() {
  static Host host = backplane::testing::make_cpu_host(R"({"cpu": {"devices": 8}})");
  return host;
}

// Roots swept for a group of n: every root while the group is small, else
// the first, a middle one and the last.
std::vector<std::uint32_t> roots_for(std::size_t n) {
  std::vector<std::uint32_t> roots;
  if (n <= 4) {
    for (std::uint32_t r = 0; r < n; ++r) roots.push_back(r);
  } else {
    roots = {0, static_cast<std::uint32_t>(n / 2 + 1), static_cast<std::uint32_t>(n - 1)};
  }
  return roots;
}

class CpuCollectives : public ::testing::TestWithParam<Case> {};

// Group sizes 1, 2, 3, 4, 8 x counts 0, 1, 37 (every root of rooted
// collectives), then 65537 elements for a group of 3, and of 8 where buffers
// do not grow with the group. The count picks the entry point, so every
// collective and type goes through all three.
TEST_P(CpuCollectives, MatchesReference) {
  const Case c = GetParam();
  Host &host = shared_host();
  ASSERT_GE(host.devices().size(), kDevices);
  auto path_for = [](std::size_t count) {
    return count == 1 ? Path::request_blocking : count == 37 ? Path::named_async : Path::named_blocking;
  };
  for (std::size_t n : {1, 2, 3, 4, 8}) {
    for (std::size_t count : {0, 1, 37}) {
      const std::vector<std::uint32_t> roots =
          ref::is_rooted(c.collective) ? roots_for(n) : std::vector<std::uint32_t>{0};
      for (std::uint32_t root : roots) {
        SCOPED_TRACE("group of " + std::to_string(n) + ", count " + std::to_string(count) + ", root " +
                     std::to_string(root) + ", through " + path_name(path_for(count)));
        Runner(host, c, device_names(n), count, root, path_for(count)).run();
        if (HasFailure()) return;  // one broken configuration is enough to read
      }
    }
  }
  // Buffers of count * n elements (and reduce_scatter's n reductions of
  // count) make a group of 8 cost 8 times more; those run large at 3 only.
  const bool blocks_scale_with_n = c.collective == BP_ALL_GATHER || c.collective == BP_REDUCE_SCATTER ||
                                   c.collective == BP_GATHER || c.collective == BP_SCATTER ||
                                   c.collective == BP_ALL_TO_ALL;
  for (std::size_t n : {3, 8}) {
    if (n == 8 && blocks_scale_with_n) continue;
    const std::uint32_t root = static_cast<std::uint32_t>(n - 1);
    SCOPED_TRACE("group of " + std::to_string(n) + ", count " + std::to_string(kLargeCount) + ", root " +
                 std::to_string(root) + ", through " + path_name(Path::named_blocking));
    Runner(host, c, device_names(n), kLargeCount, root, Path::named_blocking).run();
    if (HasFailure()) return;
  }
}

constexpr bp_dtype kAllDtypes[] = {BP_F16, BP_BF16, BP_F32, BP_F64, BP_I8, BP_U8, BP_I32, BP_U32, BP_I64, BP_U64};

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (bp_collective c : {BP_ALL_REDUCE, BP_REDUCE, BP_BROADCAST, BP_ALL_GATHER, BP_REDUCE_SCATTER, BP_GATHER,
                          BP_SCATTER, BP_ALL_TO_ALL}) {
    for (bp_dtype t : kAllDtypes) {
      for (Placement p : {Placement::out_of_place, Placement::in_place}) {
        if (!ref::is_reducing(c)) {
          cases.push_back({c, t, BP_SUM, p});
          continue;
        }
        for (bp_reduce_op op : {BP_SUM, BP_PROD, BP_MIN, BP_MAX, BP_AVG}) {
          if (op == BP_AVG && !ref::is_float_dtype(t)) continue;  // refused; tested below
          cases.push_back({c, t, op, p});
        }
      }
    }
  }
  return cases;
}

std::string param_name(const ::testing::TestParamInfo<Case> &info) { return case_name(info.param); }

INSTANTIATE_TEST_SUITE_P(Sweep, CpuCollectives, ::testing::ValuesIn(all_cases()), param_name);

// Some ranks in place and others not, in one call.
std::vector<Case> mixed_cases() {
  std::vector<Case> cases;
  for (bp_collective c : {BP_ALL_REDUCE, BP_REDUCE, BP_BROADCAST, BP_ALL_GATHER, BP_REDUCE_SCATTER, BP_GATHER,
                          BP_SCATTER, BP_ALL_TO_ALL})
    for (bp_dtype t : {BP_BF16, BP_I32, BP_U64}) cases.push_back({c, t, BP_SUM, Placement::mixed});
  return cases;
}
INSTANTIATE_TEST_SUITE_P(MixedPlacement, CpuCollectives, ::testing::ValuesIn(mixed_cases()), param_name);

// NULL where types.h says a rank's buffer is not used.
std::vector<Case> null_unused_cases() {
  std::vector<Case> cases;
  for (bp_collective c : {BP_REDUCE, BP_BROADCAST, BP_GATHER, BP_SCATTER})
    for (bp_dtype t : {BP_F16, BP_F32, BP_U8})
      for (Placement p : {Placement::out_of_place, Placement::in_place})
        cases.push_back({c, t, BP_MAX, p, Unused::null});
  return cases;
}
INSTANTIATE_TEST_SUITE_P(NullUnused, CpuCollectives, ::testing::ValuesIn(null_unused_cases()), param_name);

// ---- the reference itself --------------------------------------------------

TEST(CpuCollectivesReference, HalfEncodingsMatchKnownBitPatterns) {
  EXPECT_EQ(ref::Half::encode(1.0), 0x3C00);
  EXPECT_EQ(ref::Half::encode(-2.0), 0xC000);
  EXPECT_EQ(ref::Half::encode(65504.0), 0x7BFF);
  EXPECT_EQ(ref::Half::encode(65520.0), 0x7C00);             // halfway to 65536: ties to even, Inf
  EXPECT_EQ(ref::Half::encode(std::ldexp(1.0, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(ref::Half::encode(std::ldexp(1.0, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(ref::Half::encode(std::ldexp(1.0, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(ref::Half::encode(2049.0), 0x6800);              // tie between 2048 and 2050: 2048
  EXPECT_EQ(ref::Half::encode(2051.0), 0x6802);              // tie between 2050 and 2052: 2052
  EXPECT_EQ(ref::Half::decode(0x3555), 0.333251953125);
  EXPECT_EQ(ref::BFloat16::encode(1.0), 0x3F80);
  EXPECT_EQ(ref::BFloat16::encode(-3.0), 0xC040);
  EXPECT_EQ(ref::BFloat16::encode(257.0), 0x4380);  // tie between 256 and 258: 256
  EXPECT_EQ(ref::BFloat16::encode(259.0), 0x4382);  // tie between 258 and 260: 260
  EXPECT_EQ(ref::BFloat16::decode(0x4049), 3.140625);
  for (std::uint32_t bits = 0; bits < 0x7C00; ++bits) {
    ASSERT_EQ(ref::Half::encode(ref::Half::decode(static_cast<std::uint16_t>(bits))), bits);
    ASSERT_EQ(ref::BFloat16::encode(ref::BFloat16::decode(static_cast<std::uint16_t>(bits))), bits);
  }
}

// ---- semantics the sweep cannot show ----------------------------------------

struct RoundingCase {
  bp_dtype dtype;
  std::vector<double> inputs;  // one per rank
  double expected;
};

// f16/bf16 sum in f32 and round once, to nearest even: 2048 + 1 + 1 is 2050
// in f32 and in f16, but 2048 when rounded after every step.
TEST(CpuCollectivesSemantics, HalfTypesAccumulateInF32AndRoundOnceToNearestEven) {
  Host &host = shared_host();
  const std::vector<RoundingCase> cases = {
      {BP_F16, {2048, 1, 1}, 2050},    {BP_F16, {2048, 1}, 2048},  {BP_F16, {2048, 3}, 2052},
      {BP_F16, {2048, 1, 1, 1}, 2052}, {BP_F16, {65504, 8}, 65504}, {BP_F16, {65504, 32}, INFINITY},
      {BP_BF16, {256, 1, 1}, 258},     {BP_BF16, {256, 1}, 256},   {BP_BF16, {256, 3}, 260},
      {BP_BF16, {1, 1.0 / 256, 1.0 / 256}, 1.0078125},
  };
  for (const RoundingCase &rc : cases) {
    const std::size_t n = rc.inputs.size();
    SCOPED_TRACE(std::string(bp_dtype_name(rc.dtype)) + " sum of " + std::to_string(n) + " ranks");
    std::vector<Device> devices;
    for (std::size_t r = 0; r < n; ++r) devices.push_back(host.find_device("cpu:" + std::to_string(r)).value());
    Group group = host.create_group(devices).value();
    std::vector<Buffer> buffers;
    std::vector<bp_buffer *> raw;
    for (std::size_t r = 0; r < n; ++r) {
      const std::uint16_t in =
          rc.dtype == BP_F16 ? ref::Half::encode(rc.inputs[r]) : ref::BFloat16::encode(rc.inputs[r]);
      ASSERT_EQ(rc.dtype == BP_F16 ? ref::Half::decode(in) : ref::BFloat16::decode(in), rc.inputs[r]);
      buffers.push_back(Buffer::create(devices[r], 2).value());
      ASSERT_TRUE(buffers.back().write(0, &in, 2));
      raw.push_back(buffers.back().get());
    }
    Status status = group.all_reduce(raw, raw, 1, rc.dtype, BP_SUM);
    ASSERT_TRUE(status) << status.error().json();
    const std::uint16_t want =
        rc.dtype == BP_F16 ? ref::Half::encode(rc.expected) : ref::BFloat16::encode(rc.expected);
    for (std::size_t r = 0; r < n; ++r) {
      std::uint16_t got = 0;
      ASSERT_TRUE(buffers[r].read(0, &got, 2));
      EXPECT_EQ(got, want) << "rank " << r << ": expected " << rc.expected << ", got "
                           << (rc.dtype == BP_F16 ? ref::Half::decode(got) : ref::BFloat16::decode(got));
    }
  }
}

TEST(CpuCollectivesSemantics, BarrierCompletesOnEveryGroupSize) {
  Host &host = shared_host();
  for (std::size_t n : {1, 2, 3, 4, 8}) {
    std::vector<Device> devices;
    for (std::size_t r = 0; r < n; ++r) devices.push_back(host.find_device("cpu:" + std::to_string(r)).value());
    Group group = host.create_group(devices).value();
    Status status = group.barrier();
    EXPECT_TRUE(status) << status.error().json();
    bp_event *raw = nullptr;
    bp_error *error = bp_barrier_async(group.get(), &raw);
    ASSERT_EQ(error, nullptr) << bp_error_json(error);
    Event event(raw);
    Status waited = event.wait(1'000'000'000);
    EXPECT_TRUE(waited) << waited.error().json();
    EXPECT_TRUE(event.test());
  }
}

// The plugin declares every collective for every type and op, except avg
// on integers.
TEST(CpuCollectivesSemantics, DeclaresEverythingButIntegerAvg) {
  Host &host = shared_host();
  std::vector<Device> devices = {host.find_device("cpu:0").value(), host.find_device("cpu:1").value()};
  Group group = host.create_group(devices).value();
  for (int c = 0; c < BP_COLLECTIVE_COUNT; ++c) {
    for (bp_dtype t : kAllDtypes) {
      for (int op = 0; op < BP_REDUCE_OP_COUNT; ++op) {
        const auto collective = static_cast<bp_collective>(c);
        Status status = group.check(collective, t, static_cast<bp_reduce_op>(op));
        const bool refused = ref::is_reducing(collective) && op == BP_AVG && !ref::is_float_dtype(t);
        if (refused) {
          ASSERT_FALSE(status) << bp_collective_name(collective) << " " << bp_dtype_name(t) << " avg";
          EXPECT_EQ(status.error().code(), BP_UNSUPPORTED_REDUCE_OP) << status.error().json();
        } else {
          EXPECT_TRUE(status) << bp_collective_name(collective) << " " << bp_dtype_name(t) << " "
                              << bp_reduce_op_name(static_cast<bp_reduce_op>(op)) << ": "
                              << status.error().json();
        }
      }
    }
  }
}

// Integer avg is refused with UNSUPPORTED_REDUCE_OP, by every entry point,
// and nothing is written.
TEST(CpuCollectivesSemantics, AvgOnIntegersIsUnsupportedReduceOp) {
  Host &host = shared_host();
  constexpr std::size_t n = 3, count = 5;
  std::vector<Device> devices;
  for (std::size_t r = 0; r < n; ++r) devices.push_back(host.find_device("cpu:" + std::to_string(r)).value());
  Group group = host.create_group(devices).value();
  for (bp_dtype t : {BP_I8, BP_U8, BP_I32, BP_U32, BP_I64, BP_U64}) {
    const std::size_t bytes = count * n * bp_dtype_size(t);
    std::vector<Buffer> send, recv;
    std::vector<bp_buffer *> raw_send, raw_recv;
    const std::vector<std::uint8_t> sentinel(bytes, 0x5A);
    for (std::size_t r = 0; r < n; ++r) {
      send.push_back(Buffer::create(devices[r], bytes).value());
      recv.push_back(Buffer::create(devices[r], bytes).value());
      ASSERT_TRUE(send.back().write(0, sentinel.data(), bytes));
      ASSERT_TRUE(recv.back().write(0, sentinel.data(), bytes));
      raw_send.push_back(send.back().get());
      raw_recv.push_back(recv.back().get());
    }
    for (bp_collective c : {BP_ALL_REDUCE, BP_REDUCE, BP_REDUCE_SCATTER}) {
      SCOPED_TRACE(std::string(bp_collective_name(c)) + "(" + bp_dtype_name(t) + ", avg)");
      std::vector<Status> outcomes;
      switch (c) {
        case BP_ALL_REDUCE: outcomes.push_back(group.all_reduce(raw_send, raw_recv, count, t, BP_AVG)); break;
        case BP_REDUCE: outcomes.push_back(group.reduce(raw_send, raw_recv, count, t, BP_AVG, 1)); break;
        default: outcomes.push_back(group.reduce_scatter(raw_send, raw_recv, count, t, BP_AVG)); break;
      }
      bp_collective_request request{};
      request.struct_size = sizeof request;
      request.collective = c;
      request.dtype = t;
      request.reduce_op = BP_AVG;
      request.root = 1;
      request.count = count;
      request.send = raw_send.data();
      request.recv = raw_recv.data();
      outcomes.push_back(group.run(request));
      Result<Event> started = group.start(request);
      ASSERT_FALSE(started) << "started an integer avg";
      EXPECT_EQ(started.error().code(), BP_UNSUPPORTED_REDUCE_OP) << started.error().json();
      outcomes.push_back(group.check(c, t, BP_AVG));
      for (const Status &status : outcomes) {
        ASSERT_FALSE(status);
        EXPECT_EQ(status.error().code(), BP_UNSUPPORTED_REDUCE_OP) << status.error().json();
      }
      for (std::size_t r = 0; r < n; ++r) {
        std::vector<std::uint8_t> after(bytes);
        ASSERT_TRUE(send[r].read(0, after.data(), bytes));
        EXPECT_EQ(after, sentinel) << "send of rank " << r << " was written";
        ASSERT_TRUE(recv[r].read(0, after.data(), bytes));
        EXPECT_EQ(after, sentinel) << "recv of rank " << r << " was written";
      }
    }
  }
}

// ---- zero-copy host memory ---------------------------------------------------

// bp_buffer_wrap_host wraps the caller's arrays: the collective reads what the
// caller wrote after wrapping, and the caller's arrays hold the result.
TEST(CpuZeroCopy, AllReduceInPlaceOnWrappedVectors) {
  Host &host = shared_host();
  constexpr std::size_t n = 4, count = 1001;
  std::vector<Device> devices;
  for (std::size_t r = 0; r < n; ++r) devices.push_back(host.find_device("cpu:" + std::to_string(r)).value());
  Group group = host.create_group(devices).value();
  std::vector<std::vector<float>> arrays(n, std::vector<float>(count, -1.0f));
  std::vector<Buffer> buffers;
  std::vector<bp_buffer *> raw;
  for (std::size_t r = 0; r < n; ++r) {
    Result<Buffer> wrapped = Buffer::wrap_host(devices[r], arrays[r].data(), count * sizeof(float));
    ASSERT_TRUE(wrapped) << wrapped.error().json();
    EXPECT_EQ(wrapped->size(), count * sizeof(float));
    buffers.push_back(std::move(wrapped).value());
    raw.push_back(buffers.back().get());
  }
  // Written after wrapping: a copy taken at wrap time would miss these.
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t i = 0; i < count; ++i) arrays[r][i] = static_cast<float>((r + 1) * 1000 + i);
  Status status = group.all_reduce(raw, raw, count, BP_F32, BP_SUM);
  ASSERT_TRUE(status) << status.error().json();
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < count; ++i) {
      const float want = static_cast<float>((1 + 2 + 3 + 4) * 1000 + n * i);
      ASSERT_EQ(arrays[r][i], want) << "rank " << r << " element " << i;
    }
  }
  // And the buffer reads back the caller's memory.
  arrays[2][7] = 12345.0f;
  float seen = 0;
  ASSERT_TRUE(buffers[2].read(7 * sizeof(float), &seen, sizeof seen));
  EXPECT_EQ(seen, 12345.0f);
}

TEST(CpuZeroCopy, OutOfPlaceLeavesTheCallersSendArraysAlone) {
  Host &host = shared_host();
  constexpr std::size_t n = 3, count = 37;
  std::vector<Device> devices;
  for (std::size_t r = 0; r < n; ++r) devices.push_back(host.find_device("cpu:" + std::to_string(r)).value());
  Group group = host.create_group(devices).value();
  std::vector<std::vector<std::int64_t>> send(n, std::vector<std::int64_t>(count)), recv(n);
  std::vector<Buffer> buffers;
  std::vector<bp_buffer *> raw_send, raw_recv;
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < count; ++i) send[r][i] = static_cast<std::int64_t>(r * 100 + i) - 50;
    recv[r].assign(count * n, 7);
    buffers.push_back(Buffer::wrap_host(devices[r], send[r].data(), count * 8).value());
    raw_send.push_back(buffers.back().get());
    buffers.push_back(Buffer::wrap_host(devices[r], recv[r].data(), count * n * 8).value());
    raw_recv.push_back(buffers.back().get());
  }
  const auto before = send;
  Status status = group.all_gather(raw_send, raw_recv, count, BP_I64);
  ASSERT_TRUE(status) << status.error().json();
  EXPECT_EQ(send, before);
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t i = 0; i < count; ++i)
        ASSERT_EQ(recv[r][j * count + i], send[j][i]) << "rank " << r << " block " << j << " element " << i;
}

// Wrapped memory need not be aligned to the element size.
TEST(CpuZeroCopy, UnalignedWrappedMemory) {
  Host &host = shared_host();
  constexpr std::size_t n = 2, count = 37;
  std::vector<Device> devices = {host.find_device("cpu:5").value(), host.find_device("cpu:6").value()};
  Group group = host.create_group(devices).value();
  std::vector<std::vector<std::uint8_t>> storage(n, std::vector<std::uint8_t>(count * 8 + 1 + kGuardBytes, 0xEE));
  std::vector<Buffer> buffers;
  std::vector<bp_buffer *> raw;
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < count; ++i) {
      const double value = static_cast<double>(r + 1) * 0.5 + static_cast<double>(i);
      std::memcpy(storage[r].data() + 1 + i * 8, &value, 8);
    }
    buffers.push_back(Buffer::wrap_host(devices[r], storage[r].data() + 1, count * 8).value());
    raw.push_back(buffers.back().get());
  }
  Status status = group.all_reduce(raw, raw, count, BP_F64, BP_SUM);
  ASSERT_TRUE(status) << status.error().json();
  for (std::size_t r = 0; r < n; ++r) {
    EXPECT_EQ(storage[r][0], 0xEE) << "byte before the wrapped memory was written";
    for (std::size_t i = 0; i < count; ++i) {
      double got = 0;
      std::memcpy(&got, storage[r].data() + 1 + i * 8, 8);
      ASSERT_EQ(got, 1.5 + 2.0 * static_cast<double>(i)) << "rank " << r << " element " << i;
    }
    for (std::size_t b = 1 + count * 8; b < storage[r].size(); ++b)
      ASSERT_EQ(storage[r][b], 0xEE) << "byte past the wrapped memory was written";
  }
}

}  // namespace
