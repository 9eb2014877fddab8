// Groups across device kinds, staged through host memory (staging.hpp), with
// the real cpu, OpenCL (PoCL) and Vulkan (lavapipe) plugins: every pair of
// the kinds here and the triple, the nine collectives against the reference
// (collective_runner.hpp), in place, out of place and mixed, every root,
// counts 0, 1, odd and large; the "reject" policy; groups that cannot be
// staged; on_unsupported "stage" for what a kind lacks (f16 on PoCL),
// counted; bp_group_plan and bp_group_check; groups staged from 4 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backplane_reference/collective_reference.hpp"
#include "collective_runner.hpp"
#include "test_support.hpp"

namespace {

using namespace backplane::testing::collectives;
using backplane::testing::devices_of_kind;

// One host for the binary: 8 cpu devices, the first OpenCL device, and two
// Vulkan devices on lavapipe's one (ranks_per_device), so that a group can
// hold two ranks of a kind other than cpu.
Host &shared_host() {
  static Host host =
      backplane::testing::make_builtin_host(R"({"cpu": {"devices": 8}, "vulkan": {"ranks_per_device": 2}})");
  return host;
}

#define REQUIRE_KINDS(...) BACKPLANE_REQUIRE_KINDS(shared_host(), __VA_ARGS__)

// Ranks of the mixed groups; cpu ranks are not cpu:0, so that the cpu
// devices staging lends to the other ranks are not the group's own.
struct Mix {
  const char *label;
  std::vector<std::string> devices;
  const bp_group_options *options = nullptr;
};

// lavapipe computes on the host's cores, so only "always" runs two vulkan
// ranks locally first on this machine.
bp_group_options local_first(bp_local_first when) {
  bp_group_options options{};
  options.struct_size = sizeof options;
  options.local_first = when;
  return options;
}
const bp_group_options kLocalFirst = local_first(BP_LOCAL_FIRST_ALWAYS);
const std::vector<Mix> &mixes() {
  static const std::vector<Mix> all = {
      {"cpu_opencl", {"cpu:3", "opencl:0"}},
      {"vulkan_cpu", {"vulkan:0", "cpu:5"}},
      {"opencl_vulkan", {"opencl:0", "vulkan:0"}},
      {"opencl_cpu_vulkan", {"opencl:0", "cpu:2", "vulkan:0"}},
      // Two ranks of one kind: they reduce (or broadcast) among themselves
      // first, and the leader is the root where the root is one of them.
      {"vulkan_cpu_vulkan", {"vulkan:1", "cpu:4", "vulkan:0"}, &kLocalFirst},
  };
  return all;
}

struct StagedCase {
  Case call;
  size_t mix;
};

void PrintTo(const StagedCase &c, std::ostream *out) { *out << mixes()[c.mix].label << "_" << case_name(c.call); }

class StagedCollectives : public ::testing::TestWithParam<StagedCase> {};

// Counts 0, 1 and 37 at every root, through the three entry points; then
// 65537 elements at the last root.
TEST_P(StagedCollectives, MatchesReference) {
  const StagedCase c = GetParam();
  const Mix &mix = mixes()[c.mix];
  for (const std::string &device : mix.devices) {
    const std::string kind = device.substr(0, device.find(':'));
    REQUIRE_KINDS(kind);
  }
  Host &host = shared_host();
  const size_t n = mix.devices.size();
  auto path_for = [](size_t count) {
    return count == 1 ? Path::request_blocking : count == 37 ? Path::named_async : Path::named_blocking;
  };
  std::vector<uint32_t> roots{0};
  if (ref::is_rooted(c.call.collective))
    for (uint32_t root = 1; root < n; ++root) roots.push_back(root);
  for (size_t count : {size_t{0}, size_t{1}, size_t{37}}) {
    for (uint32_t root : roots) {
      SCOPED_TRACE("count " + std::to_string(count) + ", root " + std::to_string(root) + ", through " +
                   path_name(path_for(count)));
      Runner(host, c.call, mix.devices, count, root, path_for(count), mix.options).run();
      if (HasFailure()) return;
    }
  }
  SCOPED_TRACE("count 65537, root " + std::to_string(n - 1));
  Runner(host, c.call, mix.devices, 65537, static_cast<uint32_t>(n - 1), Path::named_blocking, mix.options).run();
}

std::vector<StagedCase> staged_cases() {
  std::vector<StagedCase> cases;
  for (size_t mix = 0; mix < mixes().size(); ++mix) {
    for (bp_collective c : {BP_ALL_REDUCE, BP_REDUCE, BP_BROADCAST, BP_ALL_GATHER, BP_REDUCE_SCATTER, BP_GATHER,
                            BP_SCATTER, BP_ALL_TO_ALL}) {
      // The mix of two vulkan ranks is about the collectives a local kind changes.
      if (std::string(mixes()[mix].label) == "vulkan_cpu_vulkan" &&
          !(c == BP_ALL_REDUCE || c == BP_REDUCE || c == BP_BROADCAST || c == BP_ALL_GATHER))
        continue;
      for (Placement p : {Placement::out_of_place, Placement::in_place, Placement::mixed}) {
        if (ref::is_reducing(c)) {
          cases.push_back({{c, BP_F32, BP_SUM, p}, mix});
          cases.push_back({{c, BP_I32, BP_MAX, p}, mix});
          if (p == Placement::out_of_place) {
            cases.push_back({{c, BP_F16, BP_AVG, p}, mix});
            cases.push_back({{c, BP_U8, BP_PROD, p}, mix});
            cases.push_back({{c, BP_F64, BP_MIN, p}, mix});
          }
        } else {
          cases.push_back({{c, BP_BF16, BP_SUM, p}, mix});
          if (p == Placement::out_of_place) cases.push_back({{c, BP_U64, BP_SUM, p}, mix});
        }
      }
    }
    cases.push_back({{BP_BARRIER, BP_U8, BP_SUM, Placement::out_of_place}, mix});
  }
  return cases;
}

std::string staged_name(const ::testing::TestParamInfo<StagedCase> &info) {
  return std::string(mixes()[info.param.mix].label) + "_" + case_name(info.param.call);
}

INSTANTIATE_TEST_SUITE_P(Mixes, StagedCollectives, ::testing::ValuesIn(staged_cases()), staged_name);

// ---- large calls, in chunks --------------------------------------------------

// staging.hpp: a chunk area holds 4 MiB of a rank's buffer, so these counts
// make two whole chunks and a part one, for every collective.
constexpr size_t kAreaBytes = size_t{4} << 20;
size_t chunked_count(const Case &call, size_t ranks) {
  const size_t blocks = ref::blocks_per_buffer(call.collective, ranks);
  return 2 * (kAreaBytes / (blocks * bp_dtype_size(call.dtype))) + 3;
}

class StagedInChunks : public ::testing::TestWithParam<Case> {};

// The triple of kinds, at the last root: chunk k is copied back by the
// group's worker while chunk k+1 is copied up.
TEST_P(StagedInChunks, MatchesReference) {
  REQUIRE_KINDS("opencl", "vulkan");
  const Case call = GetParam();
  const std::vector<std::string> devices{"opencl:0", "cpu:2", "vulkan:0"};
  const size_t count = chunked_count(call, devices.size());
  SCOPED_TRACE("count " + std::to_string(count));
  Runner(shared_host(), call, devices, count, 2, Path::named_blocking).run();
}

std::vector<Case> chunked_cases() {
  std::vector<Case> cases;
  for (bp_collective c : {BP_ALL_REDUCE, BP_REDUCE, BP_BROADCAST, BP_ALL_GATHER, BP_REDUCE_SCATTER, BP_GATHER,
                          BP_SCATTER, BP_ALL_TO_ALL}) {
    for (Placement p : {Placement::out_of_place, Placement::in_place}) {
      if (ref::is_reducing(c))
        cases.push_back({c, BP_I32, BP_SUM, p});
      else
        cases.push_back({c, BP_BF16, BP_SUM, p});
    }
  }
  cases.push_back({BP_ALL_REDUCE, BP_F32, BP_MAX, Placement::mixed});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Triple, StagedInChunks, ::testing::ValuesIn(chunked_cases()),
                         [](const ::testing::TestParamInfo<Case> &info) { return case_name(info.param); });

// ---- policy, refusals, plan, counters --------------------------------------

std::vector<Device> find_devices(Host &host, const std::vector<std::string> &names) {
  std::vector<Device> devices;
  for (const std::string &name : names) {
    Result<Device> device = host.find_device(name.c_str());
    EXPECT_TRUE(device) << name;
    if (device) devices.push_back(*device);
  }
  return devices;
}

bp_group_counters counters_of(const Group &group) {
  bp_group_counters counters{};
  counters.struct_size = sizeof counters;
  Status read(bp_group_get_counters(group.get(), &counters));
  EXPECT_TRUE(read) << read.error().json();
  return counters;
}

// Buffers of `bytes` on each device, filled with a pattern of `seed`.
std::vector<Buffer> filled_buffers(const std::vector<Device> &devices, size_t bytes, unsigned seed) {
  std::vector<Buffer> buffers;
  for (size_t r = 0; r < devices.size(); ++r) {
    Result<Buffer> buffer = Buffer::create(devices[r], bytes);
    EXPECT_TRUE(buffer);
    std::vector<unsigned char> pattern(bytes);
    for (size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<unsigned char>(seed + 13 * r + i);
    EXPECT_TRUE(buffer->write(0, pattern.data(), bytes));
    buffers.push_back(std::move(buffer).value());
  }
  return buffers;
}

std::vector<bp_buffer *> raw(const std::vector<Buffer> &buffers) {
  std::vector<bp_buffer *> handles;
  for (const Buffer &buffer : buffers) handles.push_back(buffer.get());
  return handles;
}

std::vector<std::vector<unsigned char>> contents(const std::vector<Buffer> &buffers) {
  std::vector<std::vector<unsigned char>> all;
  for (const Buffer &buffer : buffers) {
    std::vector<unsigned char> bytes(buffer.size());
    EXPECT_TRUE(buffer.read(0, bytes.data(), bytes.size()));
    all.push_back(std::move(bytes));
  }
  return all;
}

TEST(StagingPolicy, RejectRefusesWithTheKindsNamedAndLeavesTheBuffers) {
  REQUIRE_KINDS("opencl");
  Host &host = shared_host();
  const std::vector<Device> ranks = find_devices(host, {"cpu:1", "opencl:0"});
  Result<Group> group = host.create_group(ranks, "rejecting", BP_POLICY_REJECT);
  ASSERT_TRUE(group) << group.error().json();
  std::vector<Buffer> send = filled_buffers(ranks, 64, 3), recv = filled_buffers(ranks, 64, 9);
  const auto send_before = contents(send), recv_before = contents(recv);

  Status status = group->all_reduce(raw(send), raw(recv), 16, BP_F32, BP_SUM);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().code(), BP_MIXED_DEVICE_KINDS);
  const std::string message(status.error().message());
  EXPECT_NE(message.find("cpu, opencl"), std::string::npos) << message;
  EXPECT_NE(message.find("'reject'"), std::string::npos) << message;
  EXPECT_EQ(status.error().field("kinds"), R"(["cpu","opencl"])");
  EXPECT_EQ(contents(send), send_before);
  EXPECT_EQ(contents(recv), recv_before);

  Status check(bp_group_check(group->get(), BP_ALL_REDUCE, BP_F32, BP_SUM));
  ASSERT_FALSE(check);
  EXPECT_EQ(check.error().code(), BP_MIXED_DEVICE_KINDS);
  const bp_group_counters counters = counters_of(*group);
  EXPECT_EQ(counters.refused_calls, 1u);  // the call, not the check
  EXPECT_EQ(counters.staged_calls, 0u);
}

TEST(StagingPolicy, PlanAndCheckSayWhatStagingRuns) {
  REQUIRE_KINDS("opencl", "vulkan");
  Host &host = shared_host();
  const std::vector<Device> ranks = find_devices(host, {"vulkan:0", "opencl:0", "cpu:4"});
  Result<Group> group = host.create_group(ranks);
  ASSERT_TRUE(group) << group.error().json();
  bp_group_path path = BP_PATH_NATIVE;
  Status plan(bp_group_plan(group->get(), BP_REDUCE_SCATTER, BP_BF16, BP_MAX, &path));
  ASSERT_TRUE(plan) << plan.error().json();
  EXPECT_EQ(path, BP_PATH_STAGED);
  EXPECT_TRUE(Status(bp_group_check(group->get(), BP_ALL_TO_ALL, BP_U64, BP_SUM)));
  // The cpu plugin, which computes staged collectives, averages floats only.
  Status avg(bp_group_check(group->get(), BP_ALL_REDUCE, BP_I32, BP_AVG));
  ASSERT_FALSE(avg);
  EXPECT_EQ(avg.error().code(), BP_UNSUPPORTED_REDUCE_OP);
  EXPECT_NE(avg.error().message().find("runs through host memory"), std::string::npos) << avg.error().message();
  EXPECT_EQ(avg.error().field("path"), "staged");
  Status bad(bp_group_plan(group->get(), BP_ALL_REDUCE, BP_F32, BP_SUM, nullptr));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), BP_INVALID_ARGUMENT);

  Result<Group> cpu = host.create_group(find_devices(host, {"cpu:0", "cpu:1"}));
  ASSERT_TRUE(cpu);
  ASSERT_TRUE(Status(bp_group_plan(cpu->get(), BP_ALL_REDUCE, BP_F32, BP_SUM, &path)));
  EXPECT_EQ(path, BP_PATH_NATIVE);
}

// Without the cpu plugin nothing computes in host memory: a group of the
// mock and narrow fixtures' kinds is created, and refused with that reason
// and the plugin to load.
TEST(StagingPolicy, AGroupWithoutTheCpuPluginIsRefusedNamingIt) {
  backplane::testing::TempDir dir;
  dir.copy_in(backplane::testing::fixture_path("good"));
  dir.copy_in(backplane::testing::fixture_path("narrow"));
  Host host = backplane::testing::make_host({dir.path().string()});
  const std::vector<Device> ranks = find_devices(host, {"mock:0", "narrow:0"});
  ASSERT_EQ(ranks.size(), 2u);
  Result<Group> group = host.create_group(ranks);
  ASSERT_TRUE(group) << group.error().json();
  bp_group_path path = BP_PATH_NATIVE;
  for (Status status : {Status(bp_group_check(group->get(), BP_BROADCAST, BP_U8, BP_SUM)),
                        Status(bp_group_plan(group->get(), BP_BROADCAST, BP_U8, BP_SUM, &path))}) {
    ASSERT_FALSE(status);
    EXPECT_EQ(status.error().code(), BP_MIXED_DEVICE_KINDS);
    EXPECT_NE(status.error().field("staging").find("needs the cpu plugin (libbackplane_cpu.so)"), std::string::npos)
        << status.error().json();
  }
  std::vector<Buffer> send = filled_buffers(ranks, 16, 1), recv = filled_buffers(ranks, 16, 2);
  const auto recv_before = contents(recv);
  Status status = group->broadcast(raw(send), raw(recv), 16, BP_U8, 0);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().code(), BP_MIXED_DEVICE_KINDS);
  EXPECT_EQ(contents(recv), recv_before);
  EXPECT_EQ(counters_of(*group).refused_calls, 1u);
}

// A host whose cpu plugin has 1 device cannot lend one to each of 2 ranks:
// the group is created and its calls are refused with the reason.
TEST(StagingPolicy, AGroupThatCannotBeStagedIsRefusedWithTheReason) {
  REQUIRE_KINDS("opencl", "vulkan");
  {
    Host host = backplane::testing::make_builtin_host(R"({"cpu": {"devices": 1}})");
    const std::vector<Device> ranks = find_devices(host, {"opencl:0", "vulkan:0"});
    Result<Group> group = host.create_group(ranks);
    ASSERT_TRUE(group) << group.error().json();
    Status check(bp_group_check(group->get(), BP_ALL_REDUCE, BP_F32, BP_SUM));
    ASSERT_FALSE(check);
    EXPECT_EQ(check.error().code(), BP_MIXED_DEVICE_KINDS);
    EXPECT_NE(check.error().message().find("a cpu device for each of the group's 2 ranks, and the cpu plugin has 1"),
              std::string::npos)
        << check.error().message();
    std::vector<Buffer> send = filled_buffers(ranks, 32, 1), recv = filled_buffers(ranks, 32, 2);
    const auto recv_before = contents(recv);
    Status status = group->all_gather(raw(send), raw(recv), 4, BP_U32);
    ASSERT_FALSE(status);
    EXPECT_EQ(status.error().code(), BP_MIXED_DEVICE_KINDS);
    EXPECT_EQ(contents(recv), recv_before);
    EXPECT_EQ(counters_of(*group).refused_calls, 1u);
  }
}

// PoCL has no cl_khr_fp16: an f16 all_reduce on an OpenCL group is refused
// by default, and runs staged (counted) with on_unsupported "stage".
TEST(StagingFallback, WhatAKindLacksRunsStagedOnlyWhenAskedAndIsCounted) {
  Host &host = shared_host();
  REQUIRE_KINDS("opencl");
  const std::vector<Device> opencl = devices_of_kind(host, "opencl");
  if (Status f16(bp_group_check(host.create_group(opencl)->get(), BP_ALL_REDUCE, BP_F16, BP_SUM)); f16)
    GTEST_SKIP() << "the OpenCL device runs f16 itself";

  Result<Group> strict = host.create_group(opencl);
  ASSERT_TRUE(strict);
  std::vector<Buffer> send = filled_buffers(opencl, 16, 5), recv = filled_buffers(opencl, 16, 6);
  Status refused = strict->all_reduce(raw(send), raw(recv), 8, BP_F16, BP_SUM);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), BP_UNSUPPORTED_DTYPE);
  EXPECT_EQ(counters_of(*strict).refused_calls, 1u);
  EXPECT_EQ(counters_of(*strict).staged_calls, 0u);
  ASSERT_TRUE(strict->all_reduce(raw(send), raw(recv), 4, BP_F32, BP_SUM));
  EXPECT_EQ(counters_of(*strict).native_calls, 1u);

  bp_group_options options{};
  options.struct_size = sizeof options;
  options.on_unsupported = BP_ON_UNSUPPORTED_STAGE;
  Result<Group> lenient = host.create_group(opencl, options);
  ASSERT_TRUE(lenient) << lenient.error().json();
  bp_group_path path = BP_PATH_NATIVE;
  ASSERT_TRUE(Status(bp_group_plan(lenient->get(), BP_ALL_REDUCE, BP_F16, BP_SUM, &path)));
  EXPECT_EQ(path, BP_PATH_STAGED);
  ASSERT_TRUE(Status(bp_group_plan(lenient->get(), BP_ALL_REDUCE, BP_F32, BP_SUM, &path)));
  EXPECT_EQ(path, BP_PATH_NATIVE);
  std::vector<std::string> names;
  for (const Device &device : opencl) names.push_back(device.info()->name);
  for (Placement placement : {Placement::out_of_place, Placement::in_place}) {
    Runner(host, {BP_ALL_REDUCE, BP_F16, BP_SUM, placement}, names, 37, 0, Path::named_blocking, &options).run();
  }
  // Each Runner made a group of its own; this one counts what ran on it.
  ASSERT_TRUE(lenient->all_reduce(raw(send), raw(recv), 8, BP_F16, BP_SUM));
  ASSERT_TRUE(lenient->all_reduce(raw(send), raw(recv), 4, BP_F32, BP_SUM));
  const bp_group_counters counters = counters_of(*lenient);
  EXPECT_EQ(counters.staged_calls, 1u);
  EXPECT_EQ(counters.native_calls, 1u);
  EXPECT_EQ(counters.refused_calls, 0u);
  EXPECT_EQ(counters.staged_bytes, 2 * 16 * opencl.size());
}

TEST(StagingOptions, UnknownValuesAreInvalidArguments) {
  Host &host = shared_host();
  const std::vector<Device> ranks = find_devices(host, {"cpu:0"});
  bp_group_options options{};
  options.struct_size = sizeof options;
  options.on_unsupported = 7;
  Result<Group> group = host.create_group(ranks, options);
  ASSERT_FALSE(group);
  EXPECT_EQ(group.error().code(), BP_INVALID_ARGUMENT);
  options.on_unsupported = BP_ON_UNSUPPORTED_ERROR;
  options.policy = 9;
  Result<Group> policy = host.create_group(ranks, options);
  ASSERT_FALSE(policy);
  EXPECT_EQ(policy.error().code(), BP_INVALID_ARGUMENT);
  options.policy = BP_POLICY_STAGE;
  options.local_first = 3;
  Result<Group> local = host.create_group(ranks, options);
  ASSERT_FALSE(local);
  EXPECT_EQ(local.error().code(), BP_INVALID_ARGUMENT);
  options.local_first = BP_LOCAL_FIRST_AUTO;
  // A 1.0 struct (no on_unsupported) is read as "error".
  options.policy = BP_POLICY_STAGE;
  options.on_unsupported = 0xFFFF;
  options.struct_size = BP_GROUP_OPTIONS_SIZE_V1_0;
  EXPECT_TRUE(host.create_group(ranks, options));
  bp_group_counters small{};
  small.struct_size = 8;
  Result<Group> good = host.create_group(ranks);
  Status read(bp_group_get_counters(good->get(), &small));
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error().code(), BP_INVALID_ARGUMENT);
}

// Four threads, each with a mixed group of its own, staging at once: small
// calls, then calls of three chunks (each group's worker copying back while
// its caller copies up).
TEST(StagingConcurrency, MixedGroupsFromFourThreads) {
  REQUIRE_KINDS("opencl");
  Host &host = shared_host();
  std::vector<std::thread> threads;
  std::vector<std::string> failures(4);
  for (size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<Device> ranks = find_devices(host, {"cpu:" + std::to_string(t + 1), "opencl:0"});
      Result<Group> group = host.create_group(ranks);
      if (!group) return void(failures[t] = group.error().json());
      size_t calls_made = 0;
      const std::pair<size_t, int> rounds[] = {{1024, 20}, {kAreaBytes * 5 / 2 / 4, 2}};  // u32s, calls
      for (const auto &[ints, calls] : rounds) {
        std::vector<Buffer> send = filled_buffers(ranks, ints * 4, static_cast<unsigned>(t)),
                            recv = filled_buffers(ranks, ints * 4, 99);
        const auto inputs = contents(send);
        for (int call = 0; call < calls; ++call, ++calls_made) {
          if (Status status = group->all_reduce(raw(send), raw(recv), ints, BP_U32, BP_SUM); !status)
            return void(failures[t] = status.error().json());
        }
        for (const auto &result : contents(recv)) {
          for (size_t i = 0; i < ints; ++i) {
            uint32_t a, b, got;
            std::memcpy(&a, inputs[0].data() + 4 * i, 4);
            std::memcpy(&b, inputs[1].data() + 4 * i, 4);
            std::memcpy(&got, result.data() + 4 * i, 4);
            if (got != a + b)
              return void(failures[t] = "wrong sum at element " + std::to_string(i) + " of " + std::to_string(ints));
          }
        }
      }
      if (counters_of(*group).staged_calls != calls_made) failures[t] = "staged_calls is not " + std::to_string(calls_made);
    });
  }
  for (std::thread &thread : threads) thread.join();
  for (size_t t = 0; t < 4; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
}

// An _async call on a mixed group runs on the group's runner thread: it
// returns while the copies and the sum are under way, and the group's next
// call (here one that reads what the first writes) waits for it.
TEST(StagingAsync, AnAsyncCallReturnsInFlightAndTheNextCallWaitsForIt) {
  REQUIRE_KINDS("opencl");
  Host &host = shared_host();
  const std::vector<Device> ranks = find_devices(host, {"cpu:7", "opencl:0"});
  Result<Group> group = host.create_group(ranks);
  ASSERT_TRUE(group) << group.error().json();
  constexpr size_t kInts = size_t{4} << 20;  // 16 MiB a buffer: milliseconds of copies
  std::vector<Buffer> send = filled_buffers(ranks, kInts * 4, 11), recv = filled_buffers(ranks, kInts * 4, 12);
  const auto inputs = contents(send);
  // A call that completed inside its start would always test complete at
  // once; a few tries keep a stall of this thread from passing for that.
  bool seen_in_flight = false;
  for (int attempt = 0; attempt < 5 && !seen_in_flight; ++attempt) {
    bp_event *started = nullptr;
    ASSERT_TRUE(Status(bp_all_reduce_async(group->get(), raw(send).data(), raw(recv).data(), kInts, BP_U32, BP_SUM,
                                           &started)));
    Event event(started);
    seen_in_flight = !event.test();
    if (seen_in_flight) {
      const Status now = event.wait(0);
      EXPECT_TRUE(now || now.error().code() == BP_TIMEOUT) << now.error().json();
    }
    ASSERT_TRUE(event.wait());
    EXPECT_TRUE(event.test());
  }
  EXPECT_TRUE(seen_in_flight) << "every _async call was complete when its start returned";

  // Started, not waited for: the in-place call after it sums its results.
  bp_event *started = nullptr;
  ASSERT_TRUE(Status(bp_all_reduce_async(group->get(), raw(send).data(), raw(recv).data(), kInts, BP_U32, BP_SUM,
                                         &started)));
  Event first(started);
  ASSERT_TRUE(group->all_reduce(raw(recv), raw(recv), kInts, BP_U32, BP_SUM));
  EXPECT_TRUE(first.test());
  ASSERT_TRUE(first.wait());
  for (const auto &result : contents(recv)) {
    for (size_t i = 0; i < kInts; i += 4099) {
      uint32_t a, b, got;
      std::memcpy(&a, inputs[0].data() + 4 * i, 4);
      std::memcpy(&b, inputs[1].data() + 4 * i, 4);
      std::memcpy(&got, result.data() + 4 * i, 4);
      ASSERT_EQ(got, 2 * (a + b)) << "element " << i;
    }
  }
}

// What a staged call copies, counted. The cpu rank's own buffers take part
// in a call of one chunk, and its views in every chunk of an all_reduce or a
// broadcast; a chunk of an all_gather is a range of each block, which is
// copied, the cpu rank's too.
TEST(StagingCounters, StagedBytesCountEveryCopy) {
  REQUIRE_KINDS("opencl");
  Host &host = shared_host();
  const std::vector<Device> ranks = find_devices(host, {"cpu:6", "opencl:0"});
  Result<Group> group = host.create_group(ranks);
  ASSERT_TRUE(group) << group.error().json();
  const size_t small = 1000, large = kAreaBytes / 4 * 2 + 1;  // u32s: one chunk; three
  std::vector<Buffer> send = filled_buffers(ranks, large * 4, 5), recv = filled_buffers(ranks, large * 4, 6);
  uint64_t expected = 0;
  ASSERT_TRUE(group->all_reduce(raw(send), raw(recv), small, BP_U32, BP_SUM));
  EXPECT_EQ(counters_of(*group).staged_bytes, expected += 2 * small * 4);  // the opencl rank's, up and down
  ASSERT_TRUE(group->all_reduce(raw(send), raw(recv), large, BP_U32, BP_SUM));
  EXPECT_EQ(counters_of(*group).staged_bytes, expected += 2 * large * 4);
  // In place: the root (cpu:6) is the source, the other rank only copies back.
  ASSERT_TRUE(group->broadcast(raw(send), raw(send), large, BP_U32, 0));
  EXPECT_EQ(counters_of(*group).staged_bytes, expected += large * 4);
  // Two chunks of two blocks each: both ranks copy one block up, two back.
  const size_t gathered = kAreaBytes / 4;
  ASSERT_TRUE(group->all_gather(raw(send), raw(recv), gathered, BP_U32));
  EXPECT_EQ(counters_of(*group).staged_bytes, expected += 2 * 3 * gathered * 4);
  const auto inputs = contents(send), results = contents(recv);
  for (size_t rank = 0; rank < 2; ++rank)
    for (size_t block = 0; block < 2; ++block)
      EXPECT_EQ(std::memcmp(results[rank].data() + block * gathered * 4, inputs[block].data(), gathered * 4), 0)
          << "rank " << rank << ", block " << block;
}

// Two ranks of one kind beside a cpu rank: an all_reduce is a local reduce
// to the first vulkan rank, one staged copy up and down of its sum, and a
// local broadcast; a reduce to the cpu rank copies the vulkan sum up only; a
// broadcast from a vulkan rank copies the root's data up only. avg stages
// every rank (a mean of means is not the mean). Counted bytes say which.
TEST(StagingLocalKinds, RanksOfOneKindCrossHostMemoryOnce) {
  REQUIRE_KINDS("vulkan");
  Host &host = shared_host();
  const std::vector<Device> ranks = find_devices(host, {"vulkan:1", "cpu:6", "vulkan:0"});
  Result<Group> group = host.create_group(ranks, kLocalFirst);
  ASSERT_TRUE(group) << group.error().json();
  EXPECT_EQ(bp_group_local_kinds(group->get()), 1u);
  const size_t count = 1000, bytes = count * 4;
  std::vector<Buffer> send = filled_buffers(ranks, bytes, 7), recv = filled_buffers(ranks, bytes, 8);
  const auto inputs = contents(send);
  const auto as_u32 = [](const std::vector<unsigned char> &data, size_t i) {
    uint32_t value;
    std::memcpy(&value, data.data() + i * 4, 4);
    return value;
  };
  uint64_t expected = 0;
  ASSERT_TRUE(group->all_reduce(raw(send), raw(recv), count, BP_U32, BP_SUM));
  EXPECT_EQ(counters_of(*group).staged_bytes, expected += 2 * bytes);
  auto results = contents(recv);
  for (size_t rank = 0; rank < 3; ++rank)
    for (size_t i = 0; i < count; i += 97)
      ASSERT_EQ(as_u32(results[rank], i), as_u32(inputs[0], i) + as_u32(inputs[1], i) + as_u32(inputs[2], i))
          << "rank " << rank << ", element " << i;
  EXPECT_EQ(contents(send), inputs) << "an all_reduce out of place changed its inputs";

  ASSERT_TRUE(group->reduce(raw(send), raw(recv), count, BP_U32, BP_MAX, 1));
  EXPECT_EQ(counters_of(*group).staged_bytes, expected += bytes);
  results = contents(recv);
  for (size_t i = 0; i < count; i += 97)
    ASSERT_EQ(as_u32(results[1], i), std::max({as_u32(inputs[0], i), as_u32(inputs[1], i), as_u32(inputs[2], i)}));

  ASSERT_TRUE(group->broadcast(raw(send), raw(recv), count, BP_U32, 2));
  EXPECT_EQ(counters_of(*group).staged_bytes, expected += bytes);
  EXPECT_EQ(contents(recv), std::vector(3, inputs[2]));

  ASSERT_TRUE(group->all_reduce(raw(send), raw(recv), count, BP_F32, BP_AVG));
  EXPECT_EQ(counters_of(*group).staged_bytes, expected += 4 * bytes) << "avg stages both vulkan ranks";
  EXPECT_EQ(counters_of(*group).staged_calls, 4u);
}

// "auto" leaves devices that compute on the host's cores (lavapipe) to
// staging, as "never" leaves every kind: each vulkan rank is copied.
TEST(StagingLocalKinds, AutoAndNeverStageEveryRankOfLavapipe) {
  REQUIRE_KINDS("vulkan");
  Host &host = shared_host();
  const std::vector<Device> ranks = find_devices(host, {"vulkan:1", "cpu:6", "vulkan:0"});
  for (bp_local_first when : {BP_LOCAL_FIRST_AUTO, BP_LOCAL_FIRST_NEVER}) {
    Result<Group> group = host.create_group(ranks, local_first(when));
    ASSERT_TRUE(group) << group.error().json();
    EXPECT_EQ(bp_group_local_kinds(group->get()), 0u);
    const size_t count = 1000, bytes = count * 4;
    std::vector<Buffer> send = filled_buffers(ranks, bytes, 9), recv = filled_buffers(ranks, bytes, 10);
    ASSERT_TRUE(group->all_reduce(raw(send), raw(recv), count, BP_U32, BP_SUM));
    EXPECT_EQ(counters_of(*group).staged_bytes, 4 * bytes) << "local_first " << when;
  }
}

// Large calls with a local kind, in chunks, against the reference: the
// leader of the vulkan ranks is the root (rank 2, not the kind's first) or
// the first, and the sum at a leader off the root is a buffer of staging's.
TEST(StagingLocalKinds, ChunkedCallsMatchTheReference) {
  REQUIRE_KINDS("vulkan");
  const std::vector<std::string> devices{"vulkan:0", "cpu:3", "vulkan:1"};
  for (const Case &call : {Case{BP_ALL_REDUCE, BP_F32, BP_SUM, Placement::mixed},
                           Case{BP_REDUCE, BP_I32, BP_MIN, Placement::out_of_place},
                           Case{BP_BROADCAST, BP_U8, BP_SUM, Placement::in_place}}) {
    const size_t count = chunked_count(call, devices.size());
    for (uint32_t root : {1u, 2u}) {
      SCOPED_TRACE(case_name(call) + ", count " + std::to_string(count) + ", root " + std::to_string(root));
      Runner(shared_host(), call, devices, count, root, Path::named_blocking, &kLocalFirst).run();
      if (HasFailure()) return;
    }
  }
}

}  // namespace
