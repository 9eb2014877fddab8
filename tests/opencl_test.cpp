// The opencl plugin on the machine's OpenCL platforms (PoCL here, shown as
// kOpenclDevices devices): discovery and device properties, per-device
// capabilities, buffers, every collective against the reference, routes,
// the program cache, options, the no-platform status, the conformance
// suite, collectives in flight (_async calls), and what the plugin itself
// declares and returns through the plugin ABI. Without an OpenCL device the tests skip, unless
// BACKPLANE_REQUIRE_OPENCL=1 (CI) makes that a failure.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <latch>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backplane/plugin.h"
#include "backplane_reference/staged_case.hpp"
#include "conformance.hpp"
#include "test_support.hpp"


namespace backplane::testing {
namespace {

// PoCL shows one device unless told otherwise; the tests want several, to
// run multi-rank groups (a device may be a group's rank only once) and
// groups of more ranks than one kernel takes buffers (8), which go
// through scratch. PoCL reads this at the first OpenCL call of the process,
// so it is set before main; a value from the caller's environment wins.
constexpr std::size_t kOpenclDevices = 10;
const bool kPoclDevicesSet = [] {
  std::string devices;
  for (std::size_t i = 0; i < kOpenclDevices; ++i) devices += i == 0 ? "pthread" : " pthread";
  return setenv("POCL_DEVICES", devices.c_str(), 0) == 0;
}();

// Kernels compile into the build tree's caches (ctest sets these too).
const bool kCachesSet = [] {
  setenv("POCL_CACHE_DIR", BACKPLANE_TEST_BINARY_DIR "/test-caches/pocl", 0);
  setenv("BACKPLANE_CACHE_DIR", BACKPLANE_TEST_BINARY_DIR "/test-caches/backplane", 0);
  return true;
}();

bool opencl_required() {
  const char *value = std::getenv("BACKPLANE_REQUIRE_OPENCL");
  return value != nullptr && std::string(value) == "1";
}

// The opencl devices of `host`; skips the test (fails it under
// BACKPLANE_REQUIRE_OPENCL=1) when there are fewer than `needed`.
#define REQUIRE_OPENCL_DEVICES(host, needed, devices)                                                      \
  std::vector<Device> devices = opencl_devices(host);                                                      \
  if (devices.size() < (needed)) {                                                                         \
    const std::string why = "needs " + std::to_string(needed) + " OpenCL devices, found " +                \
                            std::to_string(devices.size()) + " (" + kind_status(host) + ")";               \
    if (opencl_required()) FAIL() << why << "; BACKPLANE_REQUIRE_OPENCL=1";                               \
    GTEST_SKIP() << why;                                                                                   \
  }

std::vector<Device> opencl_devices(const Host &host) { return devices_of_kind(host, "opencl"); }
std::string kind_status(const Host &host) { return plugin_kind_status(host, "opencl"); }

// ---- discovery and properties ---------------------------------------------

TEST(OpenclDiscovery, EveryDeviceHasItsProperties) {
  Host host = make_builtin_host();
  REQUIRE_OPENCL_DEVICES(host, 1, devices);
  EXPECT_EQ(kind_status(host), "") << "a kind with devices has nothing to say";
  for (const Device &device : devices) {
    Result<DeviceInfo> info = device.info();
    ASSERT_TRUE(info) << info.error().json();
    SCOPED_TRACE(info->name);
    EXPECT_EQ(info->plugin, "opencl");
    EXPECT_EQ(info->flags & BP_DEVICE_HOST_ADDRESSABLE, 0u);
    EXPECT_GT(info->memory_bytes, 0u);
    EXPECT_EQ(property(*info, "global_memory_bytes"), std::to_string(info->memory_bytes));
    std::vector<std::string> keys;
    for (const auto &[key, value] : info->properties) {
      keys.push_back(key);
      EXPECT_EQ(value.find('\n'), std::string::npos) << key;
    }
    for (const char *key : {"platform", "platform_version", "device", "vendor", "version", "driver_version",
                            "opencl_c_version", "type", "compute_units", "global_memory_bytes",
                            "max_allocation_bytes", "extensions"}) {
      EXPECT_NE(std::find(keys.begin(), keys.end(), key), keys.end()) << key;
    }
    EXPECT_EQ(property(*info, "version").rfind("OpenCL ", 0), 0u) << property(*info, "version");
    EXPECT_EQ(property(*info, "opencl_c_version").rfind("OpenCL C ", 0), 0u);
    const std::string type = property(*info, "type");
    EXPECT_TRUE(type == "cpu" || type == "gpu" || type == "accelerator" || type == "custom") << type;
    EXPECT_GT(std::stoull(property(*info, "compute_units")), 0u);
    EXPECT_NE(info->description.find(property(*info, "platform")), std::string::npos) << info->description;
  }
}

TEST(OpenclDiscovery, PoclShowsTheDevicesAskedFor) {
  Host host = make_builtin_host();
  REQUIRE_OPENCL_DEVICES(host, 1, devices);
  Result<DeviceInfo> first = devices[0].info();
  ASSERT_TRUE(first);
  if (property(*first, "platform") != "Portable Computing Language") GTEST_SKIP() << "not PoCL";
  EXPECT_EQ(devices.size(), kOpenclDevices) << "POCL_DEVICES=" << std::getenv("POCL_DEVICES");
  EXPECT_EQ(property(*first, "fp64"), "yes");
  EXPECT_EQ(property(*first, "fp16"), "no");
  EXPECT_EQ(first->name, "opencl:0");
}

// Hosts created on several threads at once each load the plugin, whose
// discovery then runs concurrently; PoCL crashed in its own initialisation
// until the plugin serialised it. Under ctest this test is the process's
// first OpenCL use, which is when the crash happened.
TEST(OpenclDiscovery, SeveralHostsLoadThePluginAtOnce) {
  constexpr std::size_t kHosts = 4;
  std::latch go(kHosts);
  std::vector<std::size_t> found(kHosts, 0);
  std::vector<int32_t> sums(kHosts, -1);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < kHosts; ++t) {
    threads.emplace_back([&, t] {
      go.arrive_and_wait();
      Host host = make_builtin_host();
      const std::vector<Device> devices = opencl_devices(host);
      found[t] = devices.size();
      if (devices.size() < 2) return;
      // Each builds or loads its program and runs a collective meanwhile.
      Result<Group> group = host.create_group(std::span<const Device>(devices.data(), 2));
      if (!group) return;
      std::vector<Buffer> buffers;
      std::vector<bp_buffer *> raw;
      for (std::size_t r = 0; r < 2; ++r) {
        const int32_t value = static_cast<int32_t>(t + r);
        buffers.push_back(Buffer::create(devices[r], sizeof value).value());
        if (!buffers.back().write(0, &value, sizeof value)) return;
        raw.push_back(buffers.back().get());
      }
      if (!group->all_reduce(raw, raw, 1, BP_I32, BP_SUM)) return;
      int32_t sum = 0;
      if (buffers[1].read(0, &sum, sizeof sum)) sums[t] = sum;
    });
  }
  for (std::thread &thread : threads) thread.join();
  Host host = make_builtin_host();
  REQUIRE_OPENCL_DEVICES(host, 1, devices);
  for (std::size_t t = 0; t < kHosts; ++t) {
    EXPECT_EQ(found[t], devices.size()) << "host " << t;
    if (devices.size() >= 2) {
      EXPECT_EQ(sums[t], static_cast<int32_t>(2 * t + 1)) << "host " << t;
    }
  }
}

// ---- capabilities -----------------------------------------------------------

TEST(OpenclCapabilities, KindDeclaresEveryCollectiveAndDtype) {
  Host host = make_builtin_host();
  uint32_t all_reduce_dtypes = 0, all_reduce_avg = 0;
  uint32_t collectives = 0;  // mask of (1u << bp_collective)
  for (const CapabilityInfo &row : host.capabilities()) {
    if (std::string(row.device_kind) != "opencl") continue;
    collectives |= 1u << row.collective;
    if (row.collective != BP_ALL_REDUCE) continue;
    all_reduce_dtypes |= row.dtypes;
    if (row.reduce_ops & (1u << BP_AVG)) all_reduce_avg |= row.dtypes;
  }
  EXPECT_EQ(collectives, (1u << BP_COLLECTIVE_COUNT) - 1);
  EXPECT_EQ(all_reduce_dtypes, (1u << BP_DTYPE_COUNT) - 1);
  EXPECT_EQ(all_reduce_avg, (1u << BP_F16) | (1u << BP_BF16) | (1u << BP_F32) | (1u << BP_F64));
}

// PoCL has no cl_khr_fp16: the kind declares f16, the devices do not, and
// the host says so with UNSUPPORTED_DTYPE (what the device lacks), naming
// the device, what it does run, and the cpu kind as the way out.
TEST(OpenclCapabilities, F16IsRefusedOnADeviceWithoutTheExtension) {
  Host host = make_builtin_host();
  REQUIRE_OPENCL_DEVICES(host, 2, devices);
  Result<DeviceInfo> info = devices[0].info();
  ASSERT_TRUE(info);
  if (property(*info, "fp16") != "no") GTEST_SKIP() << "the device has cl_khr_fp16";
  Result<Group> group = host.create_group(std::span<const Device>(devices.data(), 2));
  ASSERT_TRUE(group) << group.error().json();
  const Status check = group->check(BP_ALL_REDUCE, BP_F16, BP_SUM);
  ASSERT_FALSE(check);
  EXPECT_EQ(check.error().code(), BP_UNSUPPORTED_DTYPE) << check.error().json();
  const std::string message(check.error().message());
  EXPECT_NE(message.find("all_reduce(f16, sum) is not supported on devices 'opencl:0', 'opencl:1' (opencl)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("the devices declare less than their kind: 'opencl:0' supports bf16, f32, f64, i8, u8, i32, "
                         "u32, i64, u64 for all_reduce"),
            std::string::npos)
      << message;
  EXPECT_NE(check.error().field("alternatives").find("\"cpu\""), std::string::npos) << check.error().json();

  // The call itself gets the same answer and touches nothing.
  std::vector<Buffer> buffers;
  std::vector<bp_buffer *> send;
  for (size_t r = 0; r < 2; ++r) {
    buffers.push_back(Buffer::create(devices[r], 16).value());
    send.push_back(buffers.back().get());
  }
  const Status call = group->all_reduce(send, send, 8, BP_F16, BP_SUM);
  ASSERT_FALSE(call);
  EXPECT_EQ(call.error().code(), BP_UNSUPPORTED_DTYPE);
  EXPECT_TRUE(group->check(BP_ALL_REDUCE, BP_F64, BP_SUM)) << "fp64: " << property(*info, "fp64");
  EXPECT_TRUE(group->check(BP_ALL_REDUCE, BP_BF16, BP_AVG));
}

// ---- buffers ------------------------------------------------------------------

TEST(OpenclBuffers, WriteReadRoundTripAndZeroBytes) {
  Host host = make_builtin_host();
  REQUIRE_OPENCL_DEVICES(host, 1, devices);
  std::vector<uint8_t> data(100003);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + 3);
  Buffer buffer = Buffer::create(devices[0], data.size()).value();
  std::vector<uint8_t> zeros(data.size(), 0xff);
  ASSERT_TRUE(buffer.read(0, zeros.data(), zeros.size()));
  EXPECT_TRUE(std::all_of(zeros.begin(), zeros.end(), [](uint8_t b) { return b == 0; })) << "starts as zeros";
  ASSERT_TRUE(buffer.write(0, data.data(), data.size()));
  std::vector<uint8_t> back(data.size());
  ASSERT_TRUE(buffer.read(0, back.data(), back.size()));
  EXPECT_EQ(back, data);
  // At an offset, unaligned.
  const uint8_t patch[3] = {1, 2, 3};
  ASSERT_TRUE(buffer.write(77, patch, 3));
  uint8_t got[5] = {};
  ASSERT_TRUE(buffer.read(76, got, 5));
  EXPECT_EQ(got[0], data[76]);
  EXPECT_EQ(got[1], 1);
  EXPECT_EQ(got[3], 3);
  EXPECT_EQ(got[4], data[80]);

  Buffer empty = Buffer::create(devices[0], 0).value();
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_TRUE(empty.write(0, nullptr, 0));
  EXPECT_TRUE(empty.read(0, nullptr, 0));
  // Wrapping host memory is not offered.
  uint8_t host_memory[16];
  Result<Buffer> wrapped = Buffer::wrap_host(devices[0], host_memory, sizeof host_memory);
  EXPECT_FALSE(wrapped);
}

TEST(OpenclBuffers, TooLargeIsOutOfMemoryAndTheHostGoesOn) {
  Host host = make_builtin_host();
  REQUIRE_OPENCL_DEVICES(host, 2, devices);
  Result<DeviceInfo> info = devices[0].info();
  ASSERT_TRUE(info);
  const std::string limit = property(*info, "max_allocation_bytes");
  Result<Buffer> huge = Buffer::create(devices[0], std::stoull(limit) + 1);
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.error().code(), BP_OUT_OF_MEMORY) << huge.error().json();
  EXPECT_NE(huge.error().message().find("CL_DEVICE_MAX_MEM_ALLOC_SIZE = " + limit), std::string::npos)
      << huge.error().message();

  // Everything still works: an all_reduce on the same devices, and the cpu plugin.
  Group group = host.create_group(std::span<const Device>(devices.data(), 2)).value();
  std::vector<Buffer> buffers;
  std::vector<bp_buffer *> raw;
  for (size_t r = 0; r < 2; ++r) {
    const std::vector<int32_t> values = {static_cast<int32_t>(r) + 1, 10, -5};
    buffers.push_back(Buffer::create(devices[r], sizeof(int32_t) * 3).value());
    ASSERT_TRUE(buffers.back().write(std::span<const int32_t>(values)));
    raw.push_back(buffers.back().get());
  }
  ASSERT_TRUE(group.all_reduce(raw, raw, 3, BP_I32, BP_SUM));
  std::vector<int32_t> result(3);
  ASSERT_TRUE(buffers[1].read(std::span<int32_t>(result)));
  EXPECT_EQ(result, (std::vector<int32_t>{3, 20, -10}));
  Device cpu = host.find_device("cpu:0").value();
  EXPECT_TRUE(Buffer::create(cpu, 64));
}

// ---- collectives ----------------------------------------------------------------

struct CollectiveParam {
  bp_collective collective;
  bp_dtype dtype;
  bp_reduce_op op;
  bool in_place;
};

std::string param_name(const ::testing::TestParamInfo<CollectiveParam> &info) {
  const CollectiveParam &p = info.param;
  std::string name = std::string(bp_collective_name(p.collective)) + "_" + bp_dtype_name(p.dtype);
  if (reference::is_reducing(p.collective)) name += std::string("_") + bp_reduce_op_name(p.op);
  return name + (p.in_place ? "_in_place" : "_out_of_place");
}

// Every collective, over several dtypes (every one PoCL runs for the
// reductions' sum and avg) and every op for two of them, in and out of place.
std::vector<CollectiveParam> collective_params() {
  std::vector<CollectiveParam> params;
  const bp_dtype reduce_dtypes[] = {BP_BF16, BP_F32, BP_F64, BP_I8, BP_U8, BP_I32, BP_U32, BP_I64, BP_U64};
  const bp_dtype move_dtypes[] = {BP_U8, BP_BF16, BP_F32, BP_F64};  // 1, 2, 4 and 8 bytes
  for (bool in_place : {false, true}) {
    for (bp_collective c : {BP_ALL_REDUCE, BP_REDUCE, BP_REDUCE_SCATTER}) {
      for (bp_dtype d : reduce_dtypes) {
        const bool is_float = d == BP_BF16 || d == BP_F32 || d == BP_F64;
        const bool every_op = d == BP_F32 || d == BP_I32 || d == BP_I8;
        for (bp_reduce_op op : {BP_SUM, BP_PROD, BP_MIN, BP_MAX, BP_AVG}) {
          if (op == BP_AVG && !is_float) continue;
          if (!every_op && op != BP_SUM && op != BP_AVG) continue;
          params.push_back({c, d, op, in_place});
        }
      }
    }
    for (bp_collective c : {BP_BROADCAST, BP_ALL_GATHER, BP_GATHER, BP_SCATTER, BP_ALL_TO_ALL})
      for (bp_dtype d : move_dtypes) params.push_back({c, d, BP_SUM, in_place});
  }
  return params;
}

// Runs `p` on `group` (whose devices are `ranks`) at each of `counts`, on
// every root of a rooted collective for groups of up to 3 ranks (the first
// and the last on larger ones). Each result is checked against the
// reference, and every byte that is not a result must be as staged.
void expect_matches_reference(Group &group, const std::vector<Device> &ranks, const CollectiveParam &p,
                              const std::vector<size_t> &counts) {
  const size_t n = ranks.size();
  std::vector<uint32_t> roots = {0};
  if (reference::is_rooted(p.collective) && n > 1) {
    roots.clear();
    for (uint32_t root = 0; root < n; root += (n > 3 ? static_cast<uint32_t>(n) - 1 : 1)) roots.push_back(root);
  }
  for (size_t count : counts) {
    for (uint32_t root : roots) {
      const reference::CollectiveCase c{p.collective, p.dtype, p.op, count, n, root, p.in_place};
      SCOPED_TRACE("ranks " + std::to_string(n) + ", count " + std::to_string(count) + ", root " +
                   std::to_string(root));
      Result<reference::StagedCase> staged = reference::stage_case(c, ranks, std::byte{0xA5}, count + n);
      ASSERT_TRUE(staged) << staged.error().json();
      ASSERT_TRUE(reference::write_images(*staged));
      const Status status = group.run(reference::make_request(*staged));
      ASSERT_TRUE(status) << status.error().json();
      Result<std::vector<reference::Comparison>> results = reference::check_results(*staged);
      ASSERT_TRUE(results) << results.error().json();
      for (size_t r = 0; r < results->size(); ++r) {
        const reference::Comparison &cmp = (*results)[r];
        EXPECT_EQ(cmp.wrong, 0u) << "rank " << r << ": " << cmp.wrong << " wrong, first at " << cmp.first_index
                                 << ": got " << cmp.got << ", expected " << cmp.expected;
      }
      Result<reference::Change> change = reference::find_change(*staged, true);
      ASSERT_TRUE(change) << change.error().json();
      EXPECT_FALSE(change->changed) << "rank " << change->rank << " " << change->side << " element "
                                    << change->element << " changed: " << change->got << " (was "
                                    << change->expected << ")";
      if (::testing::Test::HasFailure()) return;
    }
  }
}

class OpenclCollectives : public ::testing::TestWithParam<CollectiveParam> {};

// Groups of 1, 2 and 3 ranks, and of all kOpenclDevices (past the 8 buffers a
// kernel takes); counts 0, 1, odd, and one past 64 Ki elements (a launch of
// whole work-groups and a tail).
TEST_P(OpenclCollectives, MatchesTheReference) {
  const CollectiveParam p = GetParam();
  Host host = make_builtin_host();
  REQUIRE_OPENCL_DEVICES(host, 2, devices);
  std::vector<size_t> group_sizes = {1, 2, 3, devices.size()};
  group_sizes.erase(
      std::remove_if(group_sizes.begin(), group_sizes.end(), [&](size_t n) { return n > devices.size(); }),
      group_sizes.end());
  group_sizes.erase(std::unique(group_sizes.begin(), group_sizes.end()), group_sizes.end());
  for (size_t n : group_sizes) {
    // Ranks on the devices in reverse, so a rank/device mix-up shows.
    std::vector<Device> ranks;
    for (size_t r = 0; r < n; ++r) ranks.push_back(devices[n - 1 - r]);
    Result<Group> group = host.create_group(ranks);
    ASSERT_TRUE(group) << group.error().json();
    EXPECT_EQ(group->route(), "one OpenCL context (" + property(ranks[0].info().value(), "platform") +
                                  "): device to device");
    const std::vector<size_t> counts = n > 3 ? std::vector<size_t>{1, 4099} : std::vector<size_t>{0, 1, 7, 65537};
    expect_matches_reference(*group, ranks, p, counts);
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Every, OpenclCollectives, ::testing::ValuesIn(collective_params()), param_name);

TEST(OpenclCollectivesBarrier, CompletesOnEveryGroupSize) {
  Host host = make_builtin_host();
  REQUIRE_OPENCL_DEVICES(host, 2, devices);
  for (size_t n = 1; n <= devices.size(); ++n) {
    Group group = host.create_group(std::span<const Device>(devices.data(), n)).value();
    EXPECT_TRUE(group.barrier()) << n;
  }
}

// ---- the program cache -----------------------------------------------------------

// The first host builds the program (for groups of one rank) and writes its
// binary; the second loads it; a corrupt file is rebuilt from source and
// replaced.
TEST(OpenclProgramCache, FirstHostWritesSecondHostLoads) {
  TempDir cache;
  ScopedEnvironment cache_directory("BACKPLANE_CACHE_DIR", cache.path().string());
  {
    CapturedLog log("opencl:debug");
    Host host = make_builtin_host();
    REQUIRE_OPENCL_DEVICES(host, 1, devices);
    ASSERT_TRUE(host.create_group(std::span<const Device>(devices.data(), 1)));
    EXPECT_EQ(log.mentioning("built from source").size(), 1u) << log.all();
    EXPECT_EQ(log.mentioning("loaded from the cache").size(), 0u) << log.all();
    // A second group on the same device reuses the state's program.
    ASSERT_TRUE(host.create_group(std::span<const Device>(devices.data(), 1)));
    EXPECT_EQ(log.mentioning("built from source").size(), 1u) << log.all();
  }
  ASSERT_EQ(regular_files_in(cache.path()).size(), 1u);
  const std::filesystem::path file = std::filesystem::directory_iterator(cache.path())->path();
  EXPECT_EQ(file.filename().string().rfind("opencl-", 0), 0u) << file;
  {
    CapturedLog log("opencl:debug");
    Host host = make_builtin_host();
    REQUIRE_OPENCL_DEVICES(host, 1, devices);
    ASSERT_TRUE(host.create_group(std::span<const Device>(devices.data(), 1)));
    EXPECT_EQ(log.mentioning("loaded from the cache").size(), 1u) << log.all();
    EXPECT_EQ(log.mentioning("built from source").size(), 0u) << log.all();
  }
  // Garbage in the file: rebuilt from source, and the file replaced.
  { std::ofstream(file, std::ios::binary | std::ios::trunc) << "not a program binary"; }
  {
    CapturedLog log("opencl:debug");
    Host host = make_builtin_host();
    REQUIRE_OPENCL_DEVICES(host, 1, devices);
    Group group = host.create_group(std::span<const Device>(devices.data(), 1)).value();
    EXPECT_EQ(log.mentioning("built from source").size(), 1u) << log.all();
    EXPECT_EQ(log.mentioning("is not usable").size(), 1u) << log.all();
    EXPECT_TRUE(group.barrier());
  }
  EXPECT_GT(std::filesystem::file_size(file), 100u);
  EXPECT_EQ(regular_files_in(cache.path()).size(), 1u);
}

// A cache directory that cannot be created is logged, and kernels still run.
TEST(OpenclProgramCache, UnwritableDirectoryIsLoggedAndSkipped) {
  TempDir dir;
  const std::filesystem::path blocked = dir.write_file("a-file", "x") / "cache";  // under a regular file
  ScopedEnvironment cache_directory("BACKPLANE_CACHE_DIR", blocked.string());
  CapturedLog log("opencl:debug");
  Host host = make_builtin_host();
  REQUIRE_OPENCL_DEVICES(host, 1, devices);
  Group group = host.create_group(std::span<const Device>(devices.data(), 1)).value();
  EXPECT_EQ(log.mentioning("no program cache").size(), 1u) << log.all();
  EXPECT_TRUE(group.barrier());
}

// A program the driver cannot build (build options that turn the kernels'
// `kernel` keyword into `int`) fails the group's creation with
// DEVICE_FAILURE naming clBuildProgram, the options, the status by name
// and the compiler's own log; nothing is cached, and the host goes on:
// buffers on the device and the cpu plugin's groups still work.
TEST(OpenclProgramBuild, FailureIsDeviceFailureWithTheBuildLog) {
  TempDir cache;
  ScopedEnvironment cache_directory("BACKPLANE_CACHE_DIR", cache.path().string());
  Host host = make_builtin_host(R"({"opencl": {"build_options": "-Dkernel=int"}})");
  REQUIRE_OPENCL_DEVICES(host, 1, devices);
  Result<Group> group = host.create_group(std::span<const Device>(devices.data(), 1));
  ASSERT_FALSE(group);
  EXPECT_EQ(group.error().code(), BP_DEVICE_FAILURE) << group.error().json();
  const std::string message(group.error().message());
  EXPECT_NE(message.find("clBuildProgram(collectives.cl, -cl-std=CL1.2 "), std::string::npos) << message;
  EXPECT_NE(message.find(" -Dkernel=int) on '"), std::string::npos) << message;
  EXPECT_NE(message.find("CL_BUILD_PROGRAM_FAILURE (-11); build log: "), std::string::npos) << message;
  EXPECT_NE(message.find("error"), std::string::npos) << "the compiler's log says nothing of an error: " << message;
  EXPECT_EQ(regular_files_in(cache.path()).size(), 0u);

  Buffer buffer = Buffer::create(devices[0], sizeof(float)).value();
  const float value = 1.5f;
  float back = 0;
  ASSERT_TRUE(buffer.write(0, &value, sizeof value));
  ASSERT_TRUE(buffer.read(0, &back, sizeof back));
  EXPECT_EQ(back, value);
  Group cpus = host.create_group(std::vector<Device>{host.find_device("cpu:0").value()}).value();
  EXPECT_TRUE(cpus.barrier());
}

// ---- options -------------------------------------------------------------------------

// Options the plugin refuses: the host comes up without the opencl
// plugin and lists it as refused with the plugin's CONFIG error.
std::string refusal_for_options(const std::string &options_json, bp_code *code) {
  Host host = make_builtin_host(options_json);
  EXPECT_EQ(find_plugin(host.plugins(), "opencl"), nullptr);
  for (const bp_error *refused : host.refused()) {
    const std::string message = bp_error_message(refused);
    if (message.find("opencl options") == std::string::npos) continue;
    *code = bp_error_code(refused);
    return message;
  }
  ADD_FAILURE() << "no refusal mentions the opencl options";
  return {};
}

TEST(OpenclOptions, UnknownKeyOrValueIsAConfigErrorNamingWhatIsKnown) {
  bp_code code = BP_OK;
  std::string message = refusal_for_options(R"({"opencl": {"platfrom": "PoCL"}})", &code);
  EXPECT_EQ(code, BP_CONFIG);
  EXPECT_NE(message.find("unknown key \"platfrom\" (known keys: platform, device_type, build_options)"),
            std::string::npos)
      << message;

  message = refusal_for_options(R"({"opencl": {"device_type": "fpga"}})", &code);
  EXPECT_EQ(code, BP_CONFIG);
  EXPECT_NE(message.find("\"fpga\", not one of \"all\", \"cpu\", \"gpu\", \"accelerator\""),
            std::string::npos)
      << message;

  message = refusal_for_options(R"({"opencl": {"platform": 3}})", &code);
  EXPECT_EQ(code, BP_CONFIG);
  EXPECT_NE(message.find("\"platform\" must be a string, got a number"), std::string::npos) << message;
}

TEST(OpenclOptions, FiltersNarrowTheDevicesAndSayWhy) {
  Host all = make_builtin_host();
  REQUIRE_OPENCL_DEVICES(all, 1, devices);
  const std::string platform = property(devices[0].info().value(), "platform");

  Host filtered = make_builtin_host(R"({"opencl": {"platform": ")" + platform.substr(0, 8) + R"("}})");
  EXPECT_EQ(opencl_devices(filtered).size(), devices.size());

  Host none = make_builtin_host(R"({"opencl": {"platform": "No Such Platform"}})");
  EXPECT_TRUE(opencl_devices(none).empty());
  EXPECT_NE(kind_status(none).find("no OpenCL device on a platform whose name contains 'No Such Platform'"),
            std::string::npos)
      << kind_status(none);
  EXPECT_NE(kind_status(none).find(platform), std::string::npos) << kind_status(none);

  const std::string type = property(devices[0].info().value(), "type");
  Host other_type = make_builtin_host(std::string(R"({"opencl": {"device_type": ")") +
                                      (type == "gpu" ? "cpu" : "gpu") + R"("}})");
  Host same_type = make_builtin_host(R"({"opencl": {"device_type": ")" + type + R"("}})");
  EXPECT_EQ(opencl_devices(same_type).size(), devices.size());
  if (type == "cpu") {
    EXPECT_TRUE(opencl_devices(other_type).empty()) << kind_status(other_type);
  }
}

// ---- no platform at all ----------------------------------------------------------------

// Run in a child process of this binary: with an empty vendors directory
// the plugin loads with no device and says why, and the cpu plugin still
// works.
TEST(OpenclNoPlatformChild, KindStatusSaysWhy) {
  if (std::getenv("BACKPLANE_OPENCL_TEST_NO_PLATFORM_CHILD") == nullptr) {
    GTEST_SKIP() << "runs as a child of OpenclNoPlatform.PluginLoadsWithNoDevice";
  }
  Host host = make_builtin_host();
  const std::vector<PluginInfo> plugins = host.plugins();
  const PluginInfo *plugin = find_plugin(plugins, "opencl");
  ASSERT_NE(plugin, nullptr) << "the opencl plugin did not load";
  EXPECT_TRUE(opencl_devices(host).empty());
  ASSERT_EQ(plugin->kind_status.size(), 1u);
  const std::string &status = plugin->kind_status[0];
  EXPECT_NE(status.find("no OpenCL platform: clGetPlatformIDs returned CL_PLATFORM_NOT_FOUND_KHR (-1001)"),
            std::string::npos)
      << status;
  EXPECT_NE(status.find(std::getenv("OCL_ICD_VENDORS")), std::string::npos) << status;
  // The cpu plugin runs as ever.
  std::vector<Device> cpus = {host.find_device("cpu:0").value(), host.find_device("cpu:1").value()};
  Group group = host.create_group(cpus).value();
  std::vector<Buffer> buffers;
  std::vector<bp_buffer *> raw;
  for (const Device &cpu : cpus) {
    const float value = 2.5f;
    buffers.push_back(Buffer::create(cpu, sizeof value).value());
    ASSERT_TRUE(buffers.back().write(0, &value, sizeof value));
    raw.push_back(buffers.back().get());
  }
  ASSERT_TRUE(group.all_reduce(raw, raw, 1, BP_F32, BP_SUM));
  float sum = 0;
  ASSERT_TRUE(buffers[1].read(0, &sum, sizeof sum));
  EXPECT_EQ(sum, 5.0f);
}

TEST(OpenclNoPlatform, PluginLoadsWithNoDevice) {
  TempDir vendors;  // no .icd file in it
  run_in_child("OpenclNoPlatformChild.KindStatusSaysWhy",
               {"OCL_ICD_VENDORS=" + vendors.path().string(), "BACKPLANE_OPENCL_TEST_NO_PLATFORM_CHILD=1"});
}

// ---- ranks on two platforms -------------------------------------------------------------

// A second platform on a machine without a GPU: Mesa's rusticl driving
// llvmpipe (mesa-opencl-icd), which shows its device only when asked.
constexpr const char *kRusticlIcd = "/etc/OpenCL/vendors/rusticl.icd";
constexpr const char *kRusticlEnable = "RUSTICL_ENABLE=llvmpipe";

// Run in a child process with rusticl's device enabled, beside PoCL's: a
// group whose ranks are on two platforms has no context holding them all,
// so its data goes through host memory (and its route says so); it runs
// every collective right, and gets the intersection of its devices' rows.
TEST(OpenclTwoPlatformsChild, EveryCollectiveThroughHostMemory) {
  if (std::getenv("BACKPLANE_OPENCL_TEST_TWO_PLATFORMS_CHILD") == nullptr) {
    GTEST_SKIP() << "runs as a child of OpenclTwoPlatforms.GroupsAcrossPlatformsGoThroughHostMemory";
  }
  Host host = make_builtin_host();
  const std::vector<Device> devices = opencl_devices(host);
  // The devices by platform, in the order the ICD loader lists them: the
  // "first" platform is one with two devices or more (PoCL, as this binary
  // asks it for kOpenclDevices), the "other" any other one.
  std::vector<std::pair<std::string, std::vector<Device>>> platforms;
  for (const Device &device : devices) {
    const std::string platform = property(device.info().value(), "platform");
    if (platforms.empty() || platforms.back().first != platform) platforms.push_back({platform, {}});
    platforms.back().second.push_back(device);
  }
  const auto first =
      std::find_if(platforms.begin(), platforms.end(), [](const auto &p) { return p.second.size() >= 2; });
  ASSERT_NE(first, platforms.end()) << "no platform with two devices: " << kind_status(host);
  const auto other =
      std::find_if(platforms.begin(), platforms.end(), [&](const auto &p) { return p.first != first->first; });
  ASSERT_NE(other, platforms.end()) << "only one platform has devices: " << kind_status(host);
  const std::string first_name = first->first, other_name = other->first;
  const std::vector<Device> first_platform = first->second, other_platform = other->second;
  // What a mixed group may refuse: the types one of the platforms lacks.
  auto lacks = [&](bp_dtype dtype) {
    const char *feature = dtype == BP_F64 ? "fp64" : dtype == BP_F16 ? "fp16" : nullptr;
    return feature != nullptr && (property(first_platform[0].info().value(), feature) == "no" ||
                                  property(other_platform[0].info().value(), feature) == "no");
  };

  // The lead (rank 0) on either platform, and a foreign rank among two of the lead's.
  const std::vector<std::vector<Device>> groups = {{first_platform[0], other_platform[0]},
                                                   {other_platform[0], first_platform[1], first_platform[0]}};
  for (const std::vector<Device> &ranks : groups) {
    Result<Group> group = host.create_group(ranks);
    ASSERT_TRUE(group) << group.error().json();
    const std::string lead = property(ranks[0].info().value(), "platform");
    const std::string second = lead == first_name ? other_name : first_name;
    EXPECT_EQ(group->route(),
              "through host memory: ranks on different OpenCL platforms (" + lead + ", " + second + ")");
    for (const CollectiveParam &p : collective_params()) {
      const Status check = group->check(p.collective, p.dtype, p.op);
      if (!check) {
        // Only a type one platform lacks may be refused, and as that type.
        EXPECT_TRUE(lacks(p.dtype)) << check.error().json();
        EXPECT_EQ(check.error().code(), BP_UNSUPPORTED_DTYPE) << check.error().json();
        continue;
      }
      SCOPED_TRACE(param_name(::testing::TestParamInfo<CollectiveParam>(p, 0)) + " on " + std::to_string(ranks.size()) +
                   " ranks, lead on " + lead);
      expect_matches_reference(*group, ranks, p, {0, 1, 7, 65537});
      if (HasFailure()) return;
    }
  }

  // Capabilities: the group has what both devices have. A device without
  // fp64 leaves a mixed group without f64, naming that device; a group of
  // the other platform's devices alone keeps what they have.
  for (const Device &device : devices) {
    if (property(device.info().value(), "fp64") != "no") continue;
    const Device &partner = property(device.info().value(), "platform") == first_name ? other_platform[0]
                                                                                      : first_platform[0];
    if (property(partner.info().value(), "fp64") != "yes") continue;
    Group mixed = host.create_group(std::vector<Device>{partner, device}).value();
    const Status refused = mixed.check(BP_ALL_REDUCE, BP_F64, BP_SUM);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code(), BP_UNSUPPORTED_DTYPE) << refused.error().json();
    const std::string device_name = "'opencl:" + std::to_string(device.info().value().index) + "'";
    EXPECT_NE(std::string(refused.error().message()).find(device_name), std::string::npos)
        << refused.error().message();
    Group alone = host.create_group(std::vector<Device>{partner}).value();
    const Status alone_check = alone.check(BP_ALL_REDUCE, BP_F64, BP_SUM);
    EXPECT_TRUE(alone_check) << alone_check.error().json();
    return;
  }
  ADD_FAILURE() << "no device without fp64 beside one with it: the intersection is not tested";
}

TEST(OpenclTwoPlatforms, GroupsAcrossPlatformsGoThroughHostMemory) {
  if (!std::filesystem::exists(kRusticlIcd)) {
    const std::string why = std::string("needs a second OpenCL platform: ") + kRusticlIcd +
                            " is missing (install mesa-opencl-icd)";
    if (opencl_required()) FAIL() << why << "; BACKPLANE_REQUIRE_OPENCL=1";
    GTEST_SKIP() << why;
  }
  run_in_child("OpenclTwoPlatformsChild.EveryCollectiveThroughHostMemory",
               {kRusticlEnable, "BACKPLANE_OPENCL_TEST_TWO_PLATFORMS_CHILD=1"});
}

// ---- conformance -----------------------------------------------------------------------

TEST(OpenclConformance, EveryDeclaredCaseRunsOrIsRefusedExactly) {
  Host host = make_builtin_host();
  REQUIRE_OPENCL_DEVICES(host, 2, devices);
  const conformance::ConformanceReport report = conformance::run_conformance(plugin_path("opencl").string());
  ASSERT_TRUE(report.refused_code.empty()) << report.refused_code << ": " << report.refused_message;
  std::string failures;
  for (const conformance::ConformanceRow &row : report.rows)
    for (const std::string &failure : row.failures)
      failures += row.collective + " " + row.dtype + " " + row.op + " " + row.mode + ": " + failure + "\n";
  EXPECT_EQ(report.failed, 0u) << failures;
  EXPECT_GT(report.passed, 0u);
  // What PoCL's devices lack (f16) is skipped, as UNSUPPORTED_DTYPE.
  for (const conformance::ConformanceRow &row : report.rows) {
    if (row.skipped == 0) continue;
    EXPECT_TRUE(row.skip_reason.rfind("UNSUPPORTED_", 0) == 0) << row.skip_reason;
  }
}

// ---- asynchrony (plugin ABI 1.2) ---------------------------------------------------------

using Clock = std::chrono::steady_clock;

// A kernel takes this many buffers on each side; larger groups reduce
// through the comm's scratch (plugins/opencl/src/collectives.cpp).
constexpr size_t kBuffersPerKernel = 8;


// An _async all_reduce of a large buffer returns while the device works:
// right after the start the event is not complete, and the start took a
// small part of the time the collective took. A synchronous plugin (one
// that finishes in collective_start) fails both for every size. Should
// PoCL finish even so before the first test, or should a loaded machine
// stall the starting thread (the sanitizer builds share two cores with
// another test), a larger buffer is tried.
TEST(OpenclAsync, AllReduceReturnsBeforeTheWorkIsDone) {
  Host host = make_builtin_host();
  REQUIRE_OPENCL_DEVICES(host, 2, devices);
  const std::vector<Device> ranks(devices.begin(), devices.begin() + 2);
  Group group = host.create_group(ranks).value();
  bool seen_in_flight = false;
  std::string last_start;
  for (size_t mebibytes : {64, 256}) {
    SCOPED_TRACE(std::to_string(mebibytes) + " MiB per buffer");
    const size_t count = mebibytes << 18;  // f32 elements
    std::vector<Buffer> send = filled_buffers<float>(ranks, count, [](size_t r) { return float(r + 1); });
    std::vector<Buffer> recv = filled_buffers<float>(ranks, count, [](size_t) { return 0.0f; });
    // A blocking call first: PoCL compiles a kernel for its launch size at
    // its first launch, which is not the collective's own time.
    ASSERT_TRUE(group.all_reduce(raw_handles(send), raw_handles(recv), count, BP_F32, BP_MAX));

    const Clock::time_point before = Clock::now();
    Result<Event> event = all_reduce_async(group, raw_handles(send), raw_handles(recv), count, BP_F32, BP_SUM);
    const Clock::time_point started = Clock::now();
    ASSERT_TRUE(event) << event.error().json();
    const bool complete_at_start = event->test();
    const Status waited = event->wait();
    const Clock::time_point finished = Clock::now();
    ASSERT_TRUE(waited) << waited.error().json();
    for (size_t r = 0; r < ranks.size(); ++r) EXPECT_EQ(mismatches(recv[r], 0, count, 3.0f), "") << "rank " << r;
    last_start = std::to_string(mebibytes) + " MiB: the start took " + std::to_string(milliseconds(started - before)) +
                 " ms of the collective's " + std::to_string(milliseconds(finished - before)) + " ms" +
                 (complete_at_start ? ", and the event was complete right after it" : "");
    if (complete_at_start || started - before >= (finished - before) / 4) continue;
    seen_in_flight = true;
    break;
  }
  EXPECT_TRUE(seen_in_flight) << "no all_reduce was still in flight right after a short start, so the plugin "
                                 "runs them synchronously; last: "
                              << last_start;
}

// A wait with a small limit while the collective runs is TIMEOUT and
// leaves the event in flight; a later wait succeeds, with the right
// numbers. `calls` all_reduces in place are queued so that the last has
// milliseconds to go; should even so every one finish within the limit,
// more are queued.
TEST(OpenclAsync, WaitWithASmallTimeoutIsTimeoutThenALaterWaitSucceeds) {
  Host host = make_builtin_host();
  REQUIRE_OPENCL_DEVICES(host, 2, devices);
  const std::vector<Device> ranks(devices.begin(), devices.begin() + 2);
  Group group = host.create_group(ranks).value();
  const size_t count = size_t{16} << 20;  // 64 MiB of f32
  bool timed_out = false;
  for (size_t calls : {2, 4, 8}) {
    SCOPED_TRACE(std::to_string(calls) + " calls in flight");
    std::vector<Buffer> buffers = filled_buffers<float>(ranks, count, [](size_t r) { return float(r + 1); });
    const std::vector<bp_buffer *> raw = raw_handles(buffers);
    std::vector<Event> events;
    for (size_t k = 0; k < calls; ++k) {
      Result<Event> event = all_reduce_async(group, raw, raw, count, BP_F32, BP_SUM);
      ASSERT_TRUE(event) << event.error().json();
      events.push_back(std::move(event).value());
    }
    const Status small = events.back().wait(1000);  // 1 us
    const float expected = 3.0f * static_cast<float>(1u << (calls - 1));  // each call doubles the sum of 1 and 2
    if (!small) {
      ASSERT_EQ(small.error().code(), BP_TIMEOUT) << small.error().json();
      EXPECT_NE(small.error().message().find("all_reduce"), std::string::npos) << small.error().message();
      timed_out = true;
      // Still in flight, and still valid: a wait without a generous limit, then without any.
      const Status zero = events.back().wait(0);
      EXPECT_TRUE(zero || zero.error().code() == BP_TIMEOUT) << zero.error().json();
      const Status later = events.back().wait(int64_t{60} * 1000 * 1000 * 1000);
      ASSERT_TRUE(later) << later.error().json();
      for (Event &event : events) ASSERT_TRUE(event.test()) << "an earlier call is not complete after the last";
      for (size_t r = 0; r < ranks.size(); ++r) EXPECT_EQ(mismatches(buffers[r], 0, count, expected), "");
      // Waiting on a completed event gives its outcome again.
      EXPECT_TRUE(events.back().wait(0));
      break;
    }
    for (Event &event : events) ASSERT_TRUE(event.wait());
    for (size_t r = 0; r < ranks.size(); ++r) EXPECT_EQ(mismatches(buffers[r], 0, count, expected), "");
  }
  EXPECT_TRUE(timed_out) << "every wait of 1 us found the collectives complete: they do not run asynchronously";
}

// Calls in flight on one group run in start order, each reading what the
// one before wrote: in place on {1, 2}, sum, prod, sum give 3, 9, 18 (any
// other order gives another number); an empty call and a barrier queue
// behind them. No event is ever complete while an earlier one is not.
TEST(OpenclAsync, SeveralCallsInFlightCompleteInStartOrder) {
  Host host = make_builtin_host();
  REQUIRE_OPENCL_DEVICES(host, 2, devices);
  const std::vector<Device> ranks(devices.begin(), devices.begin() + 2);
  Group group = host.create_group(ranks).value();
  const size_t count = size_t{4} << 20;  // 16 MiB of f32
  std::vector<Buffer> buffers = filled_buffers<float>(ranks, count, [](size_t r) { return float(r + 1); });
  const std::vector<bp_buffer *> raw = raw_handles(buffers);
  std::vector<Event> events;
  for (bp_reduce_op op : {BP_SUM, BP_PROD, BP_SUM}) {
    Result<Event> event = all_reduce_async(group, raw, raw, count, BP_F32, op);
    ASSERT_TRUE(event) << event.error().json();
    events.push_back(std::move(event).value());
  }
  Result<Event> empty = all_reduce_async(group, raw, raw, 0, BP_F32, BP_SUM);
  ASSERT_TRUE(empty) << empty.error().json();
  events.push_back(std::move(empty).value());
  bp_event *barrier = nullptr;
  bp_error *barrier_error = bp_barrier_async(group.get(), &barrier);
  ASSERT_EQ(barrier_error, nullptr) << bp_error_message(barrier_error);
  events.emplace_back(barrier);

  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
  while (!events.back().test()) {
    // Later first: once event k is complete, every earlier one must be.
    for (size_t k = events.size() - 1; k > 0; --k) {
      if (events[k].test()) {
        for (size_t j = 0; j < k; ++j) ASSERT_TRUE(events[j].test()) << "event " << k << " before event " << j;
      }
    }
    ASSERT_LT(Clock::now(), deadline) << "the calls did not complete in a minute";
    std::this_thread::yield();
  }
  for (Event &event : events) {
    EXPECT_TRUE(event.test());
    EXPECT_TRUE(event.wait(0));
  }
  for (size_t r = 0; r < ranks.size(); ++r) EXPECT_EQ(mismatches(buffers[r], 0, count, 18.0f), "") << "rank " << r;
}

// Past 8 ranks a reduction goes through the comm's scratch, which grows
// to the largest call so far. Three calls in flight, each larger than the
// last, grow it twice while the earlier ones may still read it; in place
// on the same buffers, the regions each call covered show how many sums
// they went through (55 = 1 + ... + 10 on 10 ranks).
TEST(OpenclAsync, ScratchGrowsBehindCallsInFlight) {
  Host host = make_builtin_host();
  REQUIRE_OPENCL_DEVICES(host, kBuffersPerKernel + 1, devices);
  Group group = host.create_group(devices).value();
  const int32_t n = static_cast<int32_t>(devices.size());
  const size_t counts[] = {size_t{1} << 16, size_t{1} << 20, size_t{1} << 22};
  std::vector<Buffer> buffers = filled_buffers<int32_t>(devices, counts[2], [](size_t r) { return int32_t(r + 1); });
  const std::vector<bp_buffer *> raw = raw_handles(buffers);
  std::vector<Event> events;
  for (size_t count : counts) {
    Result<Event> event = all_reduce_async(group, raw, raw, count, BP_I32, BP_SUM);
    ASSERT_TRUE(event) << event.error().json();
    events.push_back(std::move(event).value());
  }
  ASSERT_TRUE(events.back().wait());
  EXPECT_TRUE(events[0].test());
  EXPECT_TRUE(events[1].test());
  const int32_t sum = n * (n + 1) / 2;
  for (size_t r = 0; r < devices.size(); r += devices.size() - 1) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(mismatches(buffers[r], 0, counts[0], sum * n * n), "");
    EXPECT_EQ(mismatches(buffers[r], counts[0], counts[1] - counts[0], sum * n), "");
    EXPECT_EQ(mismatches(buffers[r], counts[1], counts[2] - counts[1], sum), "");
  }
}

// A blocking call behind one in flight waits for both: when it returns,
// the earlier event is complete and the result went through both.
TEST(OpenclAsync, BlockingCallQueuesBehindACallInFlight) {
  Host host = make_builtin_host();
  REQUIRE_OPENCL_DEVICES(host, 3, devices);
  const std::vector<Device> ranks(devices.begin(), devices.begin() + 3);
  Group group = host.create_group(ranks).value();
  const size_t count = size_t{4} << 20;
  std::vector<Buffer> buffers = filled_buffers<int32_t>(ranks, count, [](size_t r) { return int32_t(r + 1); });
  const std::vector<bp_buffer *> raw = raw_handles(buffers);
  Result<Event> event = all_reduce_async(group, raw, raw, count, BP_I32, BP_SUM);
  ASSERT_TRUE(event) << event.error().json();
  const Status blocking = group.all_reduce(raw, raw, count, BP_I32, BP_SUM);
  ASSERT_TRUE(blocking) << blocking.error().json();
  EXPECT_TRUE(event->test()) << "the blocking call returned before the call in flight ahead of it completed";
  for (size_t r = 0; r < ranks.size(); ++r) EXPECT_EQ(mismatches(buffers[r], 0, count, int32_t{18}), "");
  EXPECT_TRUE(event->wait());
  // And alone, blocking calls and barriers work as ever.
  ASSERT_TRUE(group.all_reduce(raw, raw, 1, BP_I32, BP_MAX));
  EXPECT_TRUE(group.barrier());
  EXPECT_EQ(mismatches(buffers[0], 0, 1, int32_t{18}), "");
}

// Destroying an event in flight waits for its collective, so that the
// buffers may be read (or freed) right after.
TEST(OpenclAsync, DestroyingAnEventInFlightWaitsForIt) {
  Host host = make_builtin_host();
  REQUIRE_OPENCL_DEVICES(host, 2, devices);
  const std::vector<Device> ranks(devices.begin(), devices.begin() + 2);
  Group group = host.create_group(ranks).value();
  const size_t count = size_t{16} << 20;
  std::vector<Buffer> buffers = filled_buffers<float>(ranks, count, [](size_t r) { return float(r + 1); });
  const std::vector<bp_buffer *> raw = raw_handles(buffers);
  bp_event *event = nullptr;
  bp_error *error = bp_all_reduce_async(group.get(), raw.data(), raw.data(), count, BP_F32, BP_SUM, &event);
  ASSERT_EQ(error, nullptr) << bp_error_message(error);
  bp_event_destroy(event);
  for (size_t r = 0; r < ranks.size(); ++r) EXPECT_EQ(mismatches(buffers[r], 0, count, 3.0f), "") << "rank " << r;
}

// Run in a child process with rusticl's device beside PoCL's: a group
// across platforms goes through host memory, synchronously, so an _async
// call there is complete as soon as it returns, with the right numbers;
// so is an _async barrier.
TEST(OpenclTwoPlatformsAsyncChild, CallsThroughHostMemoryCompleteInTheStart) {
  if (std::getenv("BACKPLANE_OPENCL_TEST_TWO_PLATFORMS_CHILD") == nullptr) {
    GTEST_SKIP() << "runs as a child of OpenclTwoPlatformsAsync.CallsThroughHostMemoryCompleteInTheStart";
  }
  Host host = make_builtin_host();
  const std::vector<Device> devices = opencl_devices(host);
  ASSERT_FALSE(devices.empty()) << kind_status(host);
  const std::string first = property(devices.front().info().value(), "platform");
  const auto other = std::find_if(devices.begin(), devices.end(), [&](const Device &device) {
    return property(device.info().value(), "platform") != first;
  });
  ASSERT_NE(other, devices.end()) << "only one platform has devices: " << kind_status(host);
  const std::vector<Device> ranks = {devices.front(), *other};
  Group group = host.create_group(ranks).value();
  ASSERT_EQ(group.route().rfind("through host memory", 0), 0u) << group.route();
  const size_t count = 4099;
  std::vector<Buffer> buffers = filled_buffers<float>(ranks, count, [](size_t r) { return float(r + 1); });
  const std::vector<bp_buffer *> raw = raw_handles(buffers);
  for (int call = 0; call < 2; ++call) {
    Result<Event> event = all_reduce_async(group, raw, raw, count, BP_F32, BP_SUM);
    ASSERT_TRUE(event) << event.error().json();
    EXPECT_TRUE(event->test()) << "call " << call;
    EXPECT_TRUE(event->wait(0)) << "call " << call;
  }
  for (size_t r = 0; r < ranks.size(); ++r) EXPECT_EQ(mismatches(buffers[r], 0, count, 6.0f), "") << "rank " << r;
  bp_event *barrier = nullptr;
  bp_error *error = bp_barrier_async(group.get(), &barrier);
  ASSERT_EQ(error, nullptr) << bp_error_message(error);
  Event owned(barrier);
  EXPECT_TRUE(owned.test());
  EXPECT_TRUE(owned.wait(0));
}

TEST(OpenclTwoPlatformsAsync, CallsThroughHostMemoryCompleteInTheStart) {
  if (!std::filesystem::exists(kRusticlIcd)) {
    const std::string why = std::string("needs a second OpenCL platform: ") + kRusticlIcd +
                            " is missing (install mesa-opencl-icd)";
    if (opencl_required()) FAIL() << why << "; BACKPLANE_REQUIRE_OPENCL=1";
    GTEST_SKIP() << why;
  }
  run_in_child("OpenclTwoPlatformsAsyncChild.CallsThroughHostMemoryCompleteInTheStart",
               {kRusticlEnable, "BACKPLANE_OPENCL_TEST_TWO_PLATFORMS_CHILD=1"});
}

// ---- the plugin ABI directly ---------------------------------------------------------------

// The opencl plugin loaded and entered as a host of ABI 1.`minor` would,
// without this repository's host: what the plugin itself declares and
// does, whatever the host in this tree checks or waits for.
class DirectPlugin {
 public:
  struct Sink {
    int32_t code = BP_OK;
    std::string message;
    bp_error_sink *get() { return reinterpret_cast<bp_error_sink *>(this); }
  };

  explicit DirectPlugin(uint32_t minor) {
    handle_ = dlopen(plugin_path("opencl").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      ADD_FAILURE() << "dlopen: " << dlerror();
      return;
    }
    const auto entry = reinterpret_cast<bp_plugin_entry_fn>(dlsym(handle_, BP_PLUGIN_ENTRY_SYMBOL));
    if (entry == nullptr) {
      ADD_FAILURE() << "no " << BP_PLUGIN_ENTRY_SYMBOL;
      return;
    }
    Sink refusal;
    args_.struct_size = sizeof args_;
    args_.host_abi_major = BP_PLUGIN_ABI_MAJOR;
    args_.host_abi_minor = minor;
    args_.services = &kServices;
    args_.sink = refusal.get();
    args_.options_json = "{}";
    if (entry(&args_) != BP_OK) ADD_FAILURE() << "refused to load: " << refusal.message;
  }
  ~DirectPlugin() {
    if (args_.state != nullptr) functions().destroy(args_.state);
    if (handle_ != nullptr) dlclose(handle_);
  }
  DirectPlugin(const DirectPlugin &) = delete;
  DirectPlugin &operator=(const DirectPlugin &) = delete;

  bool loaded() const { return args_.state != nullptr; }
  bp_plugin_state *state() const { return args_.state; }
  const bp_plugin_descriptor &descriptor() const { return *args_.descriptor; }
  const bp_plugin_functions &functions() const { return *args_.descriptor->functions; }
  uint32_t device_count() {
    uint32_t count = 0;
    Sink sink;
    EXPECT_EQ(functions().device_count(state(), 0, &count, sink.get()), BP_OK) << sink.message;
    return count;
  }
  // Rank r's buffer on device r, `count` f32 of value r + 1.
  std::vector<bp_plugin_buffer *> buffers(size_t ranks, size_t count) {
    std::vector<bp_plugin_buffer *> made;
    for (uint32_t r = 0; r < ranks; ++r) {
      Sink sink;
      bp_plugin_buffer *buffer = nullptr;
      EXPECT_EQ(functions().buffer_create(state(), 0, r, count * sizeof(float), &buffer, sink.get()), BP_OK)
          << sink.message;
      const std::vector<float> values(count, float(r + 1));
      EXPECT_EQ(functions().buffer_write(state(), buffer, 0, values.data(), count * sizeof(float), sink.get()),
                BP_OK)
          << sink.message;
      made.push_back(buffer);
    }
    return made;
  }
  // The first element of `buffer` that is not `expected`, as text; "" when none.
  std::string mismatch(const bp_plugin_buffer *buffer, size_t count, float expected) {
    std::vector<float> values(count);
    Sink sink;
    if (functions().buffer_read(state(), buffer, 0, values.data(), count * sizeof(float), sink.get()) != BP_OK) {
      return sink.message;
    }
    for (size_t i = 0; i < count; ++i) {
      if (values[i] != expected) return "element " + std::to_string(i) + " is " + std::to_string(values[i]);
    }
    return "";
  }

 private:
  static void report_error(bp_error_sink *sink, int32_t code, const char *message) {
    auto *reported = reinterpret_cast<Sink *>(sink);
    reported->code = code;
    reported->message = message;
  }
  static void ignore_log(void *, int32_t, const char *, const char *) {}
  static constexpr bp_host_services kServices = {sizeof(bp_host_services), nullptr, report_error, ignore_log,
                                                 nullptr,      nullptr, nullptr,      nullptr};
  void *handle_ = nullptr;
  bp_plugin_entry_args args_{};
};

// Every device declares its own rows, each carrying the device's largest
// allocation as max_bytes; the kind's rows have no limit. A 1.1 host gets
// the same rows (every value they name exists since 1.0).
TEST(OpenclPluginAbi, DeviceRowsCarryTheLargestAllocationAsMaxBytes) {
  Host host = make_builtin_host();
  REQUIRE_OPENCL_DEVICES(host, 1, devices);
  const uint64_t limit = std::stoull(property(devices[0].info().value(), "max_allocation_bytes"));
  for (uint32_t minor : {1u, 2u}) {
    SCOPED_TRACE("host ABI 1." + std::to_string(minor));
    DirectPlugin plugin(minor);
    ASSERT_TRUE(plugin.loaded());
    ASSERT_EQ(plugin.descriptor().capability_count, 12u);
    for (size_t i = 0; i < plugin.descriptor().capability_count; ++i) {
      EXPECT_EQ(plugin.descriptor().capabilities[i].max_bytes, 0u) << "kind row " << i;
    }
    bp_plugin_device_info info{};
    info.struct_size = sizeof info;
    DirectPlugin::Sink sink;
    ASSERT_EQ(plugin.functions().device_info(plugin.state(), 0, 0, &info, sink.get()), BP_OK) << sink.message;
    ASSERT_NE(info.capabilities, nullptr);
    ASSERT_GT(info.capability_count, 0u);
    uint32_t collectives = 0;
    for (size_t i = 0; i < info.capability_count; ++i) {
      EXPECT_EQ(info.capabilities[i].max_bytes, limit) << "device row " << i;
      collectives |= 1u << info.capabilities[i].collective;
    }
    EXPECT_EQ(collectives, (1u << BP_COLLECTIVE_COUNT) - 1);
  }
}

// What collective_start hands back: nothing for a caller that waits (a
// blocking call, or a 1.0/1.1 host, whose args end before `flags`), a
// request in flight without the flag. Releasing a request in flight (as
// an older host may) waits for it, so the results are there once it returns.
TEST(OpenclPluginAbi, RequestsOnlyWhereTheCallerDoesNotWait) {
  Host host = make_builtin_host();
  REQUIRE_OPENCL_DEVICES(host, 2, devices);
  DirectPlugin plugin(BP_PLUGIN_ABI_MINOR);
  ASSERT_TRUE(plugin.loaded());
  ASSERT_GE(plugin.device_count(), 2u);
  const bp_plugin_functions &fn = plugin.functions();
  const uint32_t ranks[] = {0, 1};
  DirectPlugin::Sink sink;
  bp_plugin_comm *comm = nullptr;
  ASSERT_EQ(fn.comm_create(plugin.state(), 0, ranks, 2, &comm, sink.get()), BP_OK) << sink.message;
  const size_t count = size_t{16} << 20;
  const std::vector<bp_plugin_buffer *> buffers = plugin.buffers(2, count);
  bp_collective_args args{};
  args.struct_size = sizeof args;
  args.collective = BP_ALL_REDUCE;
  args.dtype = BP_F32;
  args.reduce_op = BP_SUM;
  args.count = count;
  args.rank_count = 2;
  args.send = buffers.data();
  args.recv = buffers.data();
  float expected = 3.0f;

  args.flags = BP_COLLECTIVE_CALLER_WAITS;
  bp_plugin_request *request = reinterpret_cast<bp_plugin_request *>(&args);  // overwritten
  ASSERT_EQ(fn.collective_start(plugin.state(), comm, &args, &request, sink.get()), BP_OK) << sink.message;
  EXPECT_EQ(request, nullptr) << "a blocking call completes in collective_start";
  EXPECT_EQ(plugin.mismatch(buffers[0], count, expected), "");

  args.flags = 0;
  args.struct_size = BP_COLLECTIVE_ARGS_SIZE_V1_0;  // a 1.1 host: no flags, and it waits
  ASSERT_EQ(fn.collective_start(plugin.state(), comm, &args, &request, sink.get()), BP_OK) << sink.message;
  EXPECT_EQ(request, nullptr) << "a 1.0/1.1 host's call completes in collective_start";
  expected *= 2;
  EXPECT_EQ(plugin.mismatch(buffers[1], count, expected), "");

  args.struct_size = sizeof args;
  ASSERT_EQ(fn.collective_start(plugin.state(), comm, &args, &request, sink.get()), BP_OK) << sink.message;
  ASSERT_NE(request, nullptr) << "an _async call returns a request";
  expected *= 2;
  bool done = false;
  ASSERT_EQ(fn.request_test(plugin.state(), request, &done, sink.get()), BP_OK) << sink.message;
  if (!done) {
    // In flight a moment ago; 0 only tests, so it may have completed since.
    const int32_t zero = fn.request_wait(plugin.state(), request, 0, sink.get());
    EXPECT_TRUE(zero == BP_TIMEOUT || zero == BP_OK) << zero << ": " << sink.message;
    if (zero == BP_TIMEOUT) {
      EXPECT_NE(sink.message.find("all_reduce"), std::string::npos) << sink.message;
    }
  }
  ASSERT_EQ(fn.request_wait(plugin.state(), request, -1, sink.get()), BP_OK) << sink.message;
  ASSERT_EQ(fn.request_test(plugin.state(), request, &done, sink.get()), BP_OK) << sink.message;
  EXPECT_TRUE(done);
  fn.request_release(plugin.state(), request);
  EXPECT_EQ(plugin.mismatch(buffers[0], count, expected), "");

  // Released while in flight: waited for.
  ASSERT_EQ(fn.collective_start(plugin.state(), comm, &args, &request, sink.get()), BP_OK) << sink.message;
  ASSERT_NE(request, nullptr);
  fn.request_release(plugin.state(), request);
  expected *= 2;
  for (bp_plugin_buffer *buffer : buffers) EXPECT_EQ(plugin.mismatch(buffer, count, expected), "");

  fn.comm_destroy(plugin.state(), comm);
  for (bp_plugin_buffer *buffer : buffers) fn.buffer_destroy(plugin.state(), buffer);
}

}  // namespace
}  // namespace backplane::testing
