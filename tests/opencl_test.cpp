// The opencl plugin on the machine's OpenCL platforms (PoCL here, shown as
// kOpenclDevices devices): discovery and device properties, per-device
// capabilities, buffers, every collective against the reference, routes,
// the program cache, options, the no-platform status, and the conformance
// suite. Without an OpenCL device the tests skip, unless
// BACKPLANE_REQUIRE_OPENCL=1 (CI) makes that a failure.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <latch>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "conformance.hpp"
#include "reference.hpp"
#include "test_support.hpp"

extern char **environ;

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

std::vector<Device> opencl_devices(const Host &host) {
  std::vector<Device> devices;
  for (const Device &device : host.devices()) {
    Result<DeviceInfo> info = device.info();
    if (info && info->kind == "opencl") devices.push_back(device);
  }
  return devices;
}

const PluginInfo *find_plugin(const std::vector<PluginInfo> &plugins, const std::string &name) {
  for (const PluginInfo &plugin : plugins)
    if (plugin.name == name) return &plugin;
  return nullptr;
}

std::string kind_status(const Host &host) {
  const std::vector<PluginInfo> plugins = host.plugins();
  const PluginInfo *plugin = find_plugin(plugins, "opencl");
  if (plugin == nullptr) return "the opencl plugin is not loaded";
  return plugin->kind_status.empty() ? "" : plugin->kind_status[0];
}

std::string property(const DeviceInfo &info, const std::string &key) {
  for (const auto &[name, value] : info.properties)
    if (name == key) return value;
  return "<missing>";
}

// Log lines, captured while the object lives.
class CapturedLog {
 public:
  explicit CapturedLog(const char *spec) {
    bp_log_set_sink(&CapturedLog::sink, this);
    EXPECT_TRUE(bp_log_configure(spec));
  }
  ~CapturedLog() {
    bp_log_set_sink(nullptr, nullptr);
    bp_log_configure("warn");
  }
  CapturedLog(const CapturedLog &) = delete;
  CapturedLog &operator=(const CapturedLog &) = delete;
  size_t count(const std::string &part) const {
    std::lock_guard lock(mutex_);
    return static_cast<size_t>(std::count_if(lines_.begin(), lines_.end(), [&](const std::string &line) {
      return line.find(part) != std::string::npos;
    }));
  }
  std::string dump() const {
    std::lock_guard lock(mutex_);
    std::string text;
    for (const std::string &line : lines_) text += "\n  " + line;
    return text;
  }

 private:
  static void sink(void *context, int32_t, const char *category, const char *message) {
    auto *self = static_cast<CapturedLog *>(context);
    std::lock_guard lock(self->mutex_);
    self->lines_.push_back(std::string(category) + ": " + message);
  }
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

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
  if (cli::is_reducing(p.collective)) name += std::string("_") + bp_reduce_op_name(p.op);
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
  if (cli::is_rooted(p.collective) && n > 1) {
    roots.clear();
    for (uint32_t root = 0; root < n; root += (n > 3 ? static_cast<uint32_t>(n) - 1 : 1)) roots.push_back(root);
  }
  for (size_t count : counts) {
    for (uint32_t root : roots) {
      const cli::CollectiveCase c{p.collective, p.dtype, p.op, count, n, root, p.in_place};
      SCOPED_TRACE("ranks " + std::to_string(n) + ", count " + std::to_string(count) + ", root " +
                   std::to_string(root));
      Result<cli::StagedCase> staged = cli::stage_case(c, ranks, std::byte{0xA5}, count + n);
      ASSERT_TRUE(staged) << staged.error().json();
      ASSERT_TRUE(cli::write_images(*staged));
      const Status status = group.run(cli::make_request(*staged));
      ASSERT_TRUE(status) << status.error().json();
      Result<std::vector<cli::Comparison>> results = cli::check_results(*staged);
      ASSERT_TRUE(results) << results.error().json();
      for (size_t r = 0; r < results->size(); ++r) {
        const cli::Comparison &cmp = (*results)[r];
        EXPECT_EQ(cmp.wrong, 0u) << "rank " << r << ": " << cmp.wrong << " wrong, first at " << cmp.first_index
                                 << ": got " << cmp.got << ", expected " << cmp.expected;
      }
      Result<cli::Change> change = cli::find_change(*staged, true);
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

// Runs `body` with BACKPLANE_CACHE_DIR set to `directory`, then restores it.
template <typename Body>
void with_cache_dir(const std::string &directory, Body &&body) {
  const char *old = std::getenv("BACKPLANE_CACHE_DIR");
  const std::string saved = old ? old : "";
  setenv("BACKPLANE_CACHE_DIR", directory.c_str(), 1);
  body();
  if (old)
    setenv("BACKPLANE_CACHE_DIR", saved.c_str(), 1);
  else
    unsetenv("BACKPLANE_CACHE_DIR");
}

size_t files_in(const std::filesystem::path &directory) {
  size_t count = 0;
  for (const auto &entry : std::filesystem::directory_iterator(directory)) count += entry.is_regular_file() ? 1 : 0;
  return count;
}

// The first host builds the program (for groups of one rank) and writes its
// binary; the second loads it; a corrupt file is rebuilt from source and
// replaced.
TEST(OpenclProgramCache, FirstHostWritesSecondHostLoads) {
  TempDir cache;
  with_cache_dir(cache.path().string(), [&] {
    {
      CapturedLog log("opencl:debug");
      Host host = make_builtin_host();
      REQUIRE_OPENCL_DEVICES(host, 1, devices);
      ASSERT_TRUE(host.create_group(std::span<const Device>(devices.data(), 1)));
      EXPECT_EQ(log.count("built from source"), 1u) << log.dump();
      EXPECT_EQ(log.count("loaded from the cache"), 0u) << log.dump();
      // A second group on the same device reuses the state's program.
      ASSERT_TRUE(host.create_group(std::span<const Device>(devices.data(), 1)));
      EXPECT_EQ(log.count("built from source"), 1u) << log.dump();
    }
    ASSERT_EQ(files_in(cache.path()), 1u);
    const std::filesystem::path file = std::filesystem::directory_iterator(cache.path())->path();
    EXPECT_EQ(file.filename().string().rfind("opencl-", 0), 0u) << file;
    {
      CapturedLog log("opencl:debug");
      Host host = make_builtin_host();
      REQUIRE_OPENCL_DEVICES(host, 1, devices);
      ASSERT_TRUE(host.create_group(std::span<const Device>(devices.data(), 1)));
      EXPECT_EQ(log.count("loaded from the cache"), 1u) << log.dump();
      EXPECT_EQ(log.count("built from source"), 0u) << log.dump();
    }
    // Garbage in the file: rebuilt from source, and the file replaced.
    { std::ofstream(file, std::ios::binary | std::ios::trunc) << "not a program binary"; }
    {
      CapturedLog log("opencl:debug");
      Host host = make_builtin_host();
      REQUIRE_OPENCL_DEVICES(host, 1, devices);
      Group group = host.create_group(std::span<const Device>(devices.data(), 1)).value();
      EXPECT_EQ(log.count("built from source"), 1u) << log.dump();
      EXPECT_EQ(log.count("is not usable"), 1u) << log.dump();
      EXPECT_TRUE(group.barrier());
    }
    EXPECT_GT(std::filesystem::file_size(file), 100u);
    EXPECT_EQ(files_in(cache.path()), 1u);
  });
}

// A cache directory that cannot be created is logged, and kernels still run.
TEST(OpenclProgramCache, UnwritableDirectoryIsLoggedAndSkipped) {
  TempDir dir;
  const std::filesystem::path blocked = dir.write_file("a-file", "x") / "cache";  // under a regular file
  with_cache_dir(blocked.string(), [&] {
    CapturedLog log("opencl:debug");
    Host host = make_builtin_host();
    REQUIRE_OPENCL_DEVICES(host, 1, devices);
    Group group = host.create_group(std::span<const Device>(devices.data(), 1)).value();
    EXPECT_EQ(log.count("no program cache"), 1u) << log.dump();
    EXPECT_TRUE(group.barrier());
  });
}

// A program the driver cannot build (build options that turn the kernels'
// `kernel` keyword into `int`) fails the group's creation with
// DEVICE_FAILURE naming clBuildProgram, the options, the status by name
// and the compiler's own log; nothing is cached, and the host goes on:
// buffers on the device and the cpu plugin's groups still work.
TEST(OpenclProgramBuild, FailureIsDeviceFailureWithTheBuildLog) {
  TempDir cache;
  with_cache_dir(cache.path().string(), [&] {
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
    EXPECT_EQ(files_in(cache.path()), 0u);

    Buffer buffer = Buffer::create(devices[0], sizeof(float)).value();
    const float value = 1.5f;
    float back = 0;
    ASSERT_TRUE(buffer.write(0, &value, sizeof value));
    ASSERT_TRUE(buffer.read(0, &back, sizeof back));
    EXPECT_EQ(back, value);
    Group cpus = host.create_group(std::vector<Device>{host.find_device("cpu:0").value()}).value();
    EXPECT_TRUE(cpus.barrier());
  });
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

// ---- tests in a child process ------------------------------------------------------------

// Runs `test` of this binary in a child process with `extra` added to its
// environment: the ICD loader reads OCL_ICD_VENDORS, and drivers their own
// variables, once per process, at its first OpenCL call. Expects the child
// to exit 0; its failures are in its output.
void run_in_child(const std::string &test, const std::vector<std::string> &extra) {
  std::vector<std::string> environment;
  for (char **entry = environ; *entry != nullptr; ++entry) environment.emplace_back(*entry);
  environment.insert(environment.end(), extra.begin(), extra.end());
  std::vector<char *> envp;
  for (std::string &entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=" + test;
  char *argv[] = {self.data(), filter.data(), nullptr};
  pid_t child = 0;
  ASSERT_EQ(posix_spawn(&child, self.c_str(), nullptr, nullptr, argv, envp.data()), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << test << " failed in the child; its failures are in its output above";
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

}  // namespace
}  // namespace backplane::testing
