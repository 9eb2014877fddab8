// The vulkan plugin on the machine's Vulkan devices (Mesa's lavapipe here,
// with the Khronos validation layer): discovery and properties, logical
// devices (ranks_per_device), capabilities from features (disable_features),
// buffers on both transfer paths, wrapped host memory and the allocation limit, the conformance
// suite under the validation layer, a collective larger than
// maxStorageBufferRange, the pipeline cache, and no driver at all
// (collectives in flight: vulkan_async_test.cpp).
// Without a Vulkan device the tests skip, unless BACKPLANE_REQUIRE_VULKAN=1
// (CI) makes that a failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <sys/mman.h>

#include "backplane/plugin.h"
#include "conformance.hpp"
#include "test_support.hpp"
#include "vulkan_support.hpp"

namespace backplane::testing {
namespace {

// ---- discovery and properties ---------------------------------------------

TEST(VulkanDiscovery, EveryDeviceHasItsProperties) {
  Host host = make_builtin_host();
  REQUIRE_VULKAN_DEVICES(host, 1, devices);
  for (const Device &device : devices) {
    Result<DeviceInfo> info = device.info();
    ASSERT_TRUE(info);
    SCOPED_TRACE(info->name);
    for (const char *key :
         {"device", "vendor_id", "device_id", "device_type", "driver_name", "driver_info", "api_version",
          "driver_version", "uuid", "device_local_heap_bytes", "host_visible_heap_bytes", "subgroup_size",
          "max_storage_buffer_range", "max_compute_work_group_count", "max_memory_allocation_size", "transfers",
          "features"}) {
      EXPECT_NE(property(*info, key), "<missing>") << key;
    }
    EXPECT_EQ(property(*info, "uuid").size(), 36u) << property(*info, "uuid");
    EXPECT_GT(std::stoull(property(*info, "max_memory_allocation_size")), 0u);
    EXPECT_GT(info->memory_bytes, 0u);
  }
  // The CLI shows them.
  const CommandResult listed = run_cli({"devices", "--json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.out;
  const nlohmann::json json = parse_output(listed);
  bool found = false;
  for (const nlohmann::json &device : json) {
    if (device.value("name", "") != "vulkan:0") continue;
    found = true;
    EXPECT_TRUE(device["properties"].contains("max_storage_buffer_range")) << device.dump();
  }
  EXPECT_TRUE(found) << listed.out;
}

TEST(VulkanDiscovery, RanksPerDeviceMakesLogicalDevices) {
  Host one = make_builtin_host();
  REQUIRE_VULKAN_DEVICES(one, 1, physical);
  Host host = make_builtin_host(R"({"vulkan": {"ranks_per_device": 4}})");
  const std::vector<Device> devices = vulkan_devices(host);
  ASSERT_EQ(devices.size(), 4 * physical.size());
  for (size_t r = 0; r < 4; ++r) {
    Result<DeviceInfo> info = devices[r].info();
    ASSERT_TRUE(info);
    EXPECT_EQ(info->name, "vulkan:" + std::to_string(r));
    EXPECT_EQ(property(*info, "rank_on_device"), std::to_string(r));
    EXPECT_EQ(property(*info, "physical_device"), "0");
  }
  // Each logical device has memory of its own.
  Buffer first = Buffer::create(devices[0], 16).value();
  Buffer second = Buffer::create(devices[1], 16).value();
  const int32_t values[4] = {1, 2, 3, 4};
  ASSERT_TRUE(first.write(0, values, sizeof values));
  int32_t other[4] = {9, 9, 9, 9};
  ASSERT_TRUE(second.read(0, other, sizeof other));
  EXPECT_EQ(other[0], 0);
  Result<Group> group = host.create_group(std::span<const Device>(devices.data(), 4));
  ASSERT_TRUE(group) << group.error().json();
  EXPECT_NE(group->route().find("one VkDevice"), std::string::npos) << group->route();
}

TEST(VulkanOptions, BadValuesAreAConfigErrorNamingWhatIsKnown) {
  for (const char *options : {R"({"vulkan": {"ranks_per_device": 0}})", R"({"vulkan": {"ranks_per_device": 65}})",
                              R"({"vulkan": {"ranks_per_device": "2"}})", R"({"vulkan": {"disable_features": ["nope"]}})",
                              R"({"vulkan": {"disable_features": "shaderFloat64"}})",
                              R"({"vulkan": {"transfers": "fast"}})", R"({"vulkan": {"validation": 1}})",
                              R"({"vulkan": {"reduce_inputs": "texels"}})", R"({"vulkan": {"reduce_inputs": true}})",
                              R"({"vulkan": {"rank_per_device": 2}})"}) {
    SCOPED_TRACE(options);
    // The host comes up without the vulkan plugin and lists it as refused
    // with the plugin's CONFIG error.
    Host host = make_builtin_host(options);
    EXPECT_EQ(find_plugin(host.plugins(), "vulkan"), nullptr);
    bool refused = false;
    for (const bp_error *refusal : host.refused()) {
      if (std::string(bp_error_message(refusal)).find("vulkan options") == std::string::npos) continue;
      refused = true;
      EXPECT_EQ(bp_error_code(refusal), BP_CONFIG) << bp_error_message(refusal);
    }
    EXPECT_TRUE(refused) << "no refusal mentions the vulkan options";
  }
}

// ---- capabilities from features ----------------------------------------------

struct MaskedFeature {
  const char *feature;
  std::vector<bp_dtype> lost;
};

// lavapipe has every feature; each one masked takes exactly its element
// types away: refused with UNSUPPORTED_DTYPE before anything runs, the cpu
// kind among the alternatives, the device naming the missing feature, the
// buffers untouched, every other element type still running.
TEST(VulkanCapabilities, EachDisabledFeatureIsRefusedExactly) {
  Host plain = make_builtin_host();
  REQUIRE_VULKAN_DEVICES(plain, 1, physical);
  const std::vector<MaskedFeature> masked = {
      {"shaderFloat64", {BP_F64}},
      {"shaderInt64", {BP_I64, BP_U64}},
      {"shaderFloat16", {BP_F16}},
      {"storageBuffer16BitAccess", {BP_F16, BP_BF16}},
      {"shaderInt8", {BP_I8, BP_U8}},
      {"storageBuffer8BitAccess", {BP_I8, BP_U8}},
  };
  for (const MaskedFeature &mask : masked) {
    SCOPED_TRACE(mask.feature);
    Host host = make_builtin_host(std::string(R"({"vulkan": {"ranks_per_device": 2, "disable_features": [")") +
                                  mask.feature + "\"]}}");
    const std::vector<Device> devices = vulkan_devices(host);
    ASSERT_GE(devices.size(), 2u) << kind_status(host);
    Result<DeviceInfo> info = devices[0].info();
    ASSERT_TRUE(info);
    EXPECT_NE(property(*info, "dtypes_missing").find(mask.feature), std::string::npos)
        << property(*info, "dtypes_missing");
    EXPECT_EQ(property(*info, "features").find(mask.feature), std::string::npos) << property(*info, "features");
    Group group = host.create_group(std::span<const Device>(devices.data(), 2)).value();
    std::vector<Buffer> buffers;
    std::vector<bp_buffer *> raw;
    const std::vector<uint8_t> pattern(64, 0x5A);
    for (size_t r = 0; r < 2; ++r) {
      buffers.push_back(Buffer::create(devices[r], pattern.size()).value());
      ASSERT_TRUE(buffers.back().write(0, pattern.data(), pattern.size()));
      raw.push_back(buffers.back().get());
    }
    for (bp_dtype dtype : mask.lost) {
      SCOPED_TRACE(bp_dtype_name(dtype));
      const Status check = group.check(BP_ALL_REDUCE, dtype, BP_SUM);
      ASSERT_FALSE(check);
      EXPECT_EQ(check.error().code(), BP_UNSUPPORTED_DTYPE) << check.error().json();
      EXPECT_NE(check.error().field("alternatives").find("\"cpu\""), std::string::npos) << check.error().json();
      // The refusal names the missing feature (what `backplane explain` prints).
      EXPECT_NE(std::string(check.error().message()).find("(" + std::string(bp_dtype_name(dtype)) + " needs "),
                std::string::npos)
          << check.error().message();
      EXPECT_NE(std::string(check.error().message()).find(mask.feature), std::string::npos) << check.error().message();
      const Status call = group.all_reduce(raw, raw, 8, dtype, BP_SUM);
      ASSERT_FALSE(call);
      EXPECT_EQ(call.error().code(), BP_UNSUPPORTED_DTYPE) << call.error().json();
      const Status moved = group.broadcast(raw, raw, 8, dtype, 0);
      ASSERT_FALSE(moved);
      EXPECT_EQ(moved.error().code(), BP_UNSUPPORTED_DTYPE) << moved.error().json();
      for (const Buffer &buffer : buffers) {
        std::vector<uint8_t> back(pattern.size());
        ASSERT_TRUE(buffer.read(0, back.data(), back.size()));
        EXPECT_EQ(back, pattern) << "a refused call changed a buffer";
      }
    }
    for (bp_dtype dtype : {BP_F32, BP_I32, BP_U32}) {
      EXPECT_TRUE(group.check(BP_ALL_REDUCE, dtype, BP_SUM)) << bp_dtype_name(dtype);
    }
    EXPECT_TRUE(group.all_reduce(raw, raw, 16, BP_F32, BP_SUM));
  }
}

// What the plugin cannot run without leaves the device out, and kind_info says why.
TEST(VulkanCapabilities, ARequiredFeatureMaskedLeavesTheDeviceOut) {
  Host plain = make_builtin_host();
  REQUIRE_VULKAN_DEVICES(plain, 1, physical);
  Host host = make_builtin_host(R"({"vulkan": {"disable_features": ["timelineSemaphore"]}})");
  EXPECT_TRUE(vulkan_devices(host).empty());
  EXPECT_NE(kind_status(host).find("disable_features masks timelineSemaphore"), std::string::npos)
      << kind_status(host);
  EXPECT_TRUE(host.find_device("cpu:0"));
}

// ---- buffers ------------------------------------------------------------------

void expect_round_trip(const Device &device) {
  std::vector<uint8_t> data(size_t{20} << 20 | 3);  // past one staging buffer, not whole words
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + 3);
  Buffer buffer = Buffer::create(device, data.size()).value();
  std::vector<uint8_t> back(data.size(), 0xff);
  ASSERT_TRUE(buffer.read(0, back.data(), back.size()));
  EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](uint8_t b) { return b == 0; })) << "starts as zeros";
  ASSERT_TRUE(buffer.write(0, data.data(), data.size()));
  ASSERT_TRUE(buffer.read(0, back.data(), back.size()));
  EXPECT_TRUE(back == data);
  const uint8_t patch[3] = {1, 2, 3};
  ASSERT_TRUE(buffer.write(77, patch, 3));
  uint8_t got[5] = {};
  ASSERT_TRUE(buffer.read(76, got, 5));
  EXPECT_EQ(got[0], data[76]);
  EXPECT_EQ(got[1], 1);
  EXPECT_EQ(got[3], 3);
  EXPECT_EQ(got[4], data[80]);
  Buffer empty = Buffer::create(device, 0).value();
  EXPECT_TRUE(empty.write(0, nullptr, 0));
  EXPECT_TRUE(empty.read(0, nullptr, 0));
}

TEST(VulkanBuffers, RoundTripMappedAndStaged) {
  Host plain = make_builtin_host();
  REQUIRE_VULKAN_DEVICES(plain, 1, physical);
  for (const char *transfers : {"auto", "staged"}) {
    SCOPED_TRACE(transfers);
    CapturedLog log;
    Host host = make_builtin_host(std::string(R"({"vulkan": {"validation": true, "transfers": ")") + transfers +
                                  "\"}}");
    const std::vector<Device> devices = vulkan_devices(host);
    ASSERT_FALSE(devices.empty());
    const DeviceInfo info = devices[0].info().value();
    if (std::string(transfers) == "staged") {
      EXPECT_EQ(property(info, "transfers"), "staged");
    }
    EXPECT_EQ(property(info, "validation"), "VK_LAYER_KHRONOS_validation");
    expect_round_trip(devices[0]);
    expect_no_validation_messages(log);
  }
}

TEST(VulkanBuffers, AboveTheAllocationLimitIsOutOfMemoryAndTheHostGoesOn) {
  Host host = make_builtin_host(kTwoRanks);
  REQUIRE_VULKAN_DEVICES(host, 2, devices);
  const std::string limit = property(devices[0].info().value(), "max_memory_allocation_size");
  Result<Buffer> huge = Buffer::create(devices[0], std::stoull(limit) + 1);
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.error().code(), BP_OUT_OF_MEMORY) << huge.error().json();
  EXPECT_NE(huge.error().message().find("maxMemoryAllocationSize = " + limit), std::string::npos)
      << huge.error().message();
  Group group = host.create_group(std::span<const Device>(devices.data(), 2)).value();
  std::vector<Buffer> buffers = filled_buffers<int32_t>(devices, 3, [](size_t r) { return int32_t(r) + 1; });
  ASSERT_TRUE(group.all_reduce(raw_handles(buffers), raw_handles(buffers), 3, BP_I32, BP_SUM));
  EXPECT_EQ(mismatches(buffers[1], 0, 3, int32_t{3}), "");
}

// Pages of the caller's own, freed at scope exit.
struct HostPages {
  explicit HostPages(size_t bytes) : bytes(bytes) {
    memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory == MAP_FAILED) memory = nullptr;
  }
  ~HostPages() {
    if (memory != nullptr) munmap(memory, bytes);
  }
  HostPages(const HostPages &) = delete;
  HostPages &operator=(const HostPages &) = delete;
  float *floats(size_t byte_offset) const { return reinterpret_cast<float *>(static_cast<char *>(memory) + byte_offset); }
  void *memory = nullptr;
  size_t bytes = 0;
};

// The caller's memory, imported (VK_EXT_external_memory_host): the
// collective reads and writes it where it is, mapped or staged, in place
// and not, starting inside a page; what the device cannot bind is refused
// exactly and changes nothing.
TEST(VulkanBuffers, WrappedHostMemoryIsWhereCollectivesWork) {
  Host plain = make_builtin_host();
  REQUIRE_VULKAN_DEVICES(plain, 1, physical);
  const DeviceInfo plain_info = physical[0].info().value();
  if (property(plain_info, "wrap_host").rfind("VK_EXT_external_memory_host", 0) != 0) {
    EXPECT_EQ(plain_info.flags & BP_DEVICE_HOST_ADDRESSABLE, 0u);
    GTEST_SKIP() << "the device does not import host memory: " << property(plain_info, "wrap_host");
  }
  for (const char *transfers : {"auto", "staged"}) {
    SCOPED_TRACE(transfers);
    CapturedLog log;
    Host host = make_builtin_host(std::string(R"({"vulkan": {"ranks_per_device": 2, "validation": true, "transfers": ")") +
                                  transfers + "\"}}");
    REQUIRE_VULKAN_DEVICES(host, 2, devices);
    EXPECT_NE(devices[0].info().value().flags & BP_DEVICE_HOST_ADDRESSABLE, 0u);
    const size_t count = 3001;  // across pages, a tail of 1 after the texels
    const size_t bytes = count * sizeof(float);
    HostPages pages(size_t{4} << 20);
    ASSERT_NE(pages.memory, nullptr);
    // Rank 0 in place, 64 bytes into a page; rank 1 from its own page into
    // a device buffer.
    float *rank0 = pages.floats(64);
    float *rank1 = pages.floats(size_t{1} << 20);
    for (size_t i = 0; i < count; ++i) {
      rank0[i] = float(i % 89);
      rank1[i] = float(i % 89) * 10.0f;
    }
    Buffer wrapped0 = Buffer::wrap_host(devices[0], rank0, bytes).value();
    Buffer wrapped1 = Buffer::wrap_host(devices[1], rank1, bytes).value();
    Buffer recv1 = Buffer::create(devices[1], bytes).value();
    Group group = host.create_group(std::span<const Device>(devices.data(), 2)).value();
    bp_buffer *const send[] = {wrapped0.get(), wrapped1.get()};
    bp_buffer *const recv[] = {wrapped0.get(), recv1.get()};
    const Status ran = group.all_reduce(send, recv, count, BP_F32, BP_SUM);
    ASSERT_TRUE(ran) << ran.error().json();
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += rank0[i] != float(i % 89) * 11.0f || rank1[i] != float(i % 89) * 10.0f;
    EXPECT_EQ(wrong, 0u) << "elements of the caller's memory that are not the sum (rank 0) or the send (rank 1)";
    std::vector<float> read(count);
    ASSERT_TRUE(recv1.read(0, read.data(), bytes));
    EXPECT_EQ(std::memcmp(read.data(), rank0, bytes), 0) << "rank 1's recv is the sum rank 0 holds";
    std::fill(read.begin(), read.end(), -1.0f);
    ASSERT_TRUE(wrapped0.read(0, read.data(), bytes));
    EXPECT_EQ(std::memcmp(read.data(), rank0, bytes), 0) << "bp_buffer_read of a wrapped buffer is the caller's memory";
    const float seven = 7.0f;
    ASSERT_TRUE(wrapped1.write(4 * sizeof(float), &seven, sizeof seven));
    EXPECT_EQ(rank1[4], 7.0f);

    // Not where the device binds buffers: refused before anything is made.
    std::vector<unsigned char> before(static_cast<unsigned char *>(pages.memory) + 4096,
                                      static_cast<unsigned char *>(pages.memory) + 8192);
    Result<Buffer> odd = Buffer::wrap_host(devices[0], static_cast<char *>(pages.memory) + 4097, 64);
    ASSERT_FALSE(odd);
    EXPECT_EQ(odd.error().code(), BP_INVALID_ARGUMENT) << odd.error().json();
    EXPECT_NE(odd.error().message().find("must be a multiple of"), std::string::npos) << odd.error().message();
    EXPECT_EQ(std::memcmp(before.data(), static_cast<unsigned char *>(pages.memory) + 4096, before.size()), 0);
    Buffer empty = Buffer::wrap_host(devices[0], nullptr, 0).value();
    EXPECT_TRUE(empty.read(0, nullptr, 0));
    expect_no_validation_messages(log);
  }
}

// What the import would allocate is held to maxMemoryAllocationSize before
// the driver is asked (pages reserved, never touched).
TEST(VulkanBuffers, WrappingMoreThanTheAllocationLimitIsOutOfMemory) {
  Host host = make_builtin_host();
  REQUIRE_VULKAN_DEVICES(host, 1, devices);
  const DeviceInfo info = devices[0].info().value();
  if (!(info.flags & BP_DEVICE_HOST_ADDRESSABLE)) GTEST_SKIP() << property(info, "wrap_host");
  const std::string limit = property(info, "max_memory_allocation_size");
  HostPages pages(std::stoull(limit) + 8192);
  ASSERT_NE(pages.memory, nullptr);
  Result<Buffer> huge = Buffer::wrap_host(devices[0], pages.memory, std::stoull(limit) + 1);
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.error().code(), BP_OUT_OF_MEMORY) << huge.error().json();
  EXPECT_NE(huge.error().message().find("maxMemoryAllocationSize = " + limit), std::string::npos)
      << huge.error().message();
  EXPECT_TRUE(Buffer::wrap_host(devices[0], pages.memory, 4096));
}

// ---- collectives ----------------------------------------------------------------

// The conformance suite on the vulkan plugin under `options`: nothing
// refused, no case failed (each failure named), more than `passed` cases run.
conformance::ConformanceReport expect_vulkan_conforms(const char *options, bool quick, size_t passed) {
  conformance::ConformanceOptions conformance_options;
  conformance_options.plugin_options_json = options;
  conformance_options.quick = quick;
  conformance::ConformanceReport report =
      conformance::run_conformance(plugin_path("vulkan").string(), conformance_options);
  EXPECT_TRUE(report.refused_code.empty()) << report.refused_code << ": " << report.refused_message;
  std::string failures;
  for (const conformance::ConformanceRow &row : report.rows)
    for (const std::string &failure : row.failures)
      failures += row.collective + " " + row.dtype + " " + row.op + " " + row.mode + ": " + failure + "\n";
  EXPECT_EQ(report.failed, 0u) << failures;
  EXPECT_GT(report.passed, passed);
  return report;
}

// Every declared case on groups of 1 to 4 ranks of one device, against the
// reference, with the validation layer on: not one message.
TEST(VulkanConformance, EveryDeclaredCaseRunsUnderTheValidationLayer) {
  Host host = make_builtin_host();
  REQUIRE_VULKAN_DEVICES(host, 1, devices);
  // lavapipe reads reduction inputs as texel buffers unless told otherwise:
  // the address path runs too.
  for (const char *options : {R"({"vulkan": {"ranks_per_device": 4, "validation": true}})",
                              R"({"vulkan": {"ranks_per_device": 3, "validation": true, "transfers": "staged"}})",
                              R"({"vulkan": {"ranks_per_device": 4, "validation": true, "reduce_inputs": "addresses"}})"}) {
    SCOPED_TRACE(options);
    CapturedLog log;
    const bool quick = std::string(options).find("staged") != std::string::npos ||
                       std::string(options).find("addresses") != std::string::npos;
    const conformance::ConformanceReport report = expect_vulkan_conforms(options, quick, 1000);
    ASSERT_EQ(report.kinds.size(), 1u);
    EXPECT_GE(report.kinds[0].groups.back().size(), 3u) << "no multi-rank group ran";
    // Only integer avg is not declared.
    for (const conformance::ConformanceRow &row : report.rows) {
      if (row.skipped == 0) continue;
      EXPECT_EQ(row.op, "avg") << row.collective << " " << row.dtype << ": " << row.skip_reason;
    }
    expect_no_validation_messages(log);
  }
}

// The device says how its reductions read their inputs, and the option
// chooses: texel buffers by default on a CPU device (lavapipe) up to the
// push-descriptor limit, addresses when asked and past that limit (a group
// of 40 ranks still reduces right).
TEST(VulkanCollectives, ReduceInputsFollowTheOptionAndTheRankLimit) {
  for (const char *choice : {"auto", "texel_buffers", "addresses"}) {
    SCOPED_TRACE(choice);
    CapturedLog log;
    Host host = make_builtin_host(std::string(R"({"vulkan": {"ranks_per_device": 40, "validation": true, "reduce_inputs": ")") +
                                  choice + "\"}}");
    REQUIRE_VULKAN_DEVICES(host, 40, devices);
    Result<DeviceInfo> info = devices[0].info();
    ASSERT_TRUE(info);
    const std::string said = property(*info, "reduce_inputs");
    if (std::string(choice) == "addresses") {
      EXPECT_EQ(said.rfind("addresses", 0), 0u) << said;
    } else if (property(*info, "device_type") == "cpu") {
      EXPECT_EQ(said.rfind("texel_buffers", 0), 0u) << said;
      EXPECT_NE(said.find("f32"), std::string::npos) << said;
    }
    for (size_t ranks : {size_t{2}, size_t{40}}) {
      const size_t count = 1001;
      const std::vector<Device> members(devices.begin(), devices.begin() + static_cast<std::ptrdiff_t>(ranks));
      std::vector<Buffer> buffers = filled_buffers<float>(members, count, [](size_t r) { return float(r + 1); });
      Group group = host.create_group(members).value();
      ASSERT_TRUE(group.all_reduce(raw_handles(buffers), raw_handles(buffers), count, BP_F32, BP_SUM));
      const float expected = float(ranks * (ranks + 1) / 2);
      for (size_t r = 0; r < ranks; ++r) EXPECT_EQ(mismatches(buffers[r], 0, count, expected), "") << "rank " << r;
    }
    expect_no_validation_messages(log);
  }
}

// Texel-buffer reductions view four elements to a texel and take the
// count % 4 after the last texel by address; a dispatch holds at most
// maxTexelBufferElements elements, and a last piece of fewer than 4 has no
// texel at all. Each element differs (rank r's element i is (7i + r) mod
// 251), so an element put in another's place shows; in place and out of
// place, under the validation layer.
TEST(VulkanCollectives, TexelBuffersCoverEveryTailAndPiece) {
  CapturedLog log;
  Host host = make_builtin_host(kTwoRanks);
  REQUIRE_VULKAN_DEVICES(host, 2, devices);
  if (property(devices[0].info().value(), "reduce_inputs").rfind("texel_buffers", 0) != 0) {
    GTEST_SKIP() << "the device reads by address: " << property(devices[0].info().value(), "reduce_inputs");
  }
  const std::vector<Device> ranks(devices.begin(), devices.begin() + 2);
  Group group = host.create_group(ranks).value();
  const auto value = [](size_t r, size_t i) { return uint8_t((7 * i + r) % 251); };
  // One dispatch's elements on lavapipe: its maxTexelBufferElements (2^27,
  // below the plugin's 2^30); elsewhere the count is as good a test.
  const size_t piece = size_t{1} << 27;
  for (const size_t count : {size_t{4}, size_t{5}, size_t{4099}, piece + 3}) {
    for (const bool in_place : {true, false}) {
      SCOPED_TRACE(std::to_string(count) + (in_place ? " in place" : " out of place"));
      std::vector<Buffer> send, recv;
      for (size_t r = 0; r < 2; ++r) {
        std::vector<uint8_t> values(count);
        for (size_t i = 0; i < count; ++i) values[i] = value(r, i);
        send.push_back(Buffer::create(ranks[r], count).value());
        ASSERT_TRUE(send.back().write(std::span<const uint8_t>(values)));
        if (!in_place) recv.push_back(Buffer::create(ranks[r], count).value());
      }
      const std::vector<bp_buffer *> out = raw_handles(in_place ? send : recv);
      ASSERT_TRUE(group.all_reduce(raw_handles(send), out, count, BP_U8, BP_SUM));
      for (size_t r = 0; r < 2; ++r) {
        std::vector<uint8_t> got(count);
        ASSERT_TRUE((in_place ? send : recv)[r].read(0, got.data(), count));
        size_t wrong = 0, first_wrong = 0;
        for (size_t i = 0; i < count; ++i) {
          if (got[i] == uint8_t(value(0, i) + value(1, i))) continue;
          if (wrong++ == 0) first_wrong = i;
        }
        EXPECT_EQ(wrong, 0u) << "rank " << r << ": first wrong at " << first_wrong << " of " << count;
      }
    }
  }
  expect_no_validation_messages(log);
}

// On a CPU device an all_reduce or reduce reduces into rank 0's (the
// root's) recv in place, after copying its send there, and copies the
// result on: with some ranks in place and some not, every recv gets the
// result, no send that is not also a recv changes, and a reduce leaves the
// other ranks' recvs alone.
TEST(VulkanCollectives, ReductionsWithSomeRanksInPlace) {
  CapturedLog log;
  Host host = make_builtin_host(R"({"vulkan": {"ranks_per_device": 3, "validation": true}})");
  REQUIRE_VULKAN_DEVICES(host, 3, devices);
  Group group = host.create_group(devices).value();
  const size_t count = 1001;  // 250 texels and a tail of 1
  const auto value = [](size_t r, size_t i) { return float(i % 97) + float(r) * 1000.0f; };
  const auto expect_values = [&](const Buffer &buffer, const std::function<float(size_t)> &expected,
                                 const std::string &what) {
    std::vector<float> got(count);
    ASSERT_TRUE(buffer.read(0, got.data(), count * sizeof(float)));
    for (size_t i = 0; i < count; ++i) {
      if (got[i] != expected(i)) {
        ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", not " << expected(i);
        return;
      }
    }
  };
  const auto sum = [&](size_t i) { return value(0, i) + value(1, i) + value(2, i); };
  for (const size_t in_place_rank : {size_t{0}, size_t{1}}) {
    for (const bool all : {true, false}) {
      SCOPED_TRACE(std::string(all ? "all_reduce" : "reduce to rank 0") + ", rank " + std::to_string(in_place_rank) +
                   " in place");
      std::vector<Buffer> send, recv;
      for (size_t r = 0; r < 3; ++r) {
        std::vector<float> values(count);
        for (size_t i = 0; i < count; ++i) values[i] = value(r, i);
        send.push_back(Buffer::create(devices[r], count * sizeof(float)).value());
        ASSERT_TRUE(send.back().write(std::span<const float>(values)));
        const std::vector<float> marks(count, -1.0f);
        recv.push_back(Buffer::create(devices[r], count * sizeof(float)).value());
        ASSERT_TRUE(recv.back().write(std::span<const float>(marks)));
      }
      std::vector<bp_buffer *> out = raw_handles(recv);
      out[in_place_rank] = send[in_place_rank].get();
      const Status ran = all ? group.all_reduce(raw_handles(send), out, count, BP_F32, BP_SUM)
                             : group.reduce(raw_handles(send), out, count, BP_F32, BP_SUM, 0);
      ASSERT_TRUE(ran) << ran.error().json();
      for (size_t r = 0; r < 3; ++r) {
        const Buffer &result = r == in_place_rank ? send[r] : recv[r];
        if (all || r == 0) {
          expect_values(result, sum, "rank " + std::to_string(r) + "'s result");
        } else if (r == in_place_rank) {
          expect_values(send[r], [&](size_t i) { return value(r, i); }, "rank " + std::to_string(r) + "'s send");
        } else {
          expect_values(recv[r], [](size_t) { return -1.0f; }, "rank " + std::to_string(r) + "'s recv");
        }
        if (r != in_place_rank) {
          expect_values(send[r], [&](size_t i) { return value(r, i); }, "rank " + std::to_string(r) + "'s send");
        }
      }
    }
  }
  expect_no_validation_messages(log);
}

// A call of the shape of an earlier one resubmits its recording: new data
// in the same buffers is reduced anew, and other buffers (even made where
// freed ones were), another count, op or root, and two calls in flight at
// once each get what they name.
TEST(VulkanCollectives, RecordingsAreReusedOnlyForTheSameShape) {
  CapturedLog log;
  Host host = make_builtin_host(kTwoRanks);
  REQUIRE_VULKAN_DEVICES(host, 2, devices);
  const std::vector<Device> ranks(devices.begin(), devices.begin() + 2);
  Group group = host.create_group(ranks).value();
  const size_t count = 1001;
  for (int generation = 0; generation < 3; ++generation) {
    SCOPED_TRACE("buffers of generation " + std::to_string(generation));
    const float base = float(generation * 10);
    std::vector<Buffer> buffers = filled_buffers<float>(ranks, count, [&](size_t r) { return base + float(r + 1); });
    const std::vector<bp_buffer *> raw = raw_handles(buffers);
    const float sum = 2 * base + 3;
    ASSERT_TRUE(group.all_reduce(raw, raw, count, BP_F32, BP_SUM));
    EXPECT_EQ(mismatches(buffers[1], 0, count, sum), "");
    ASSERT_TRUE(group.all_reduce(raw, raw, count, BP_F32, BP_SUM));
    EXPECT_EQ(mismatches(buffers[0], 0, count, 2 * sum), "") << "the same call again reduces the new values";
    ASSERT_TRUE(group.all_reduce(raw, raw, count - 1, BP_F32, BP_SUM));
    EXPECT_EQ(mismatches(buffers[0], 0, count - 1, 4 * sum), "");
    EXPECT_EQ(mismatches(buffers[0], count - 1, 1, 2 * sum), "") << "a shorter call leaves the last element";
    ASSERT_TRUE(group.all_reduce(raw, raw, count - 1, BP_F32, BP_MAX));
    EXPECT_EQ(mismatches(buffers[1], 0, count - 1, 4 * sum), "");
    ASSERT_TRUE(group.broadcast(raw, raw, count, BP_F32, 1));
    EXPECT_EQ(mismatches(buffers[0], count - 1, 1, 2 * sum), "");
    // Two of one shape in flight: two recordings.
    std::vector<Buffer> more = filled_buffers<float>(ranks, count, [](size_t) { return 1.0f; });
    const std::vector<bp_buffer *> more_raw = raw_handles(more);
    Result<Event> first = all_reduce_async(group, more_raw, more_raw, count, BP_F32, BP_SUM);
    ASSERT_TRUE(first) << first.error().json();
    Result<Event> second = all_reduce_async(group, more_raw, more_raw, count, BP_F32, BP_SUM);
    ASSERT_TRUE(second) << second.error().json();
    ASSERT_TRUE(first->wait());
    ASSERT_TRUE(second->wait());
    EXPECT_EQ(mismatches(more[0], 0, count, 4.0f), "");
  }
  expect_no_validation_messages(log);
}

// 300 MiB per rank: past lavapipe's maxStorageBufferRange (128 MiB), every
// element checked.
TEST(VulkanCollectives, AllReduceLargerThanTheStorageBufferRange) {
  CapturedLog log;
  Host host = make_builtin_host(kTwoRanks);
  REQUIRE_VULKAN_DEVICES(host, 2, devices);
  const size_t count = (size_t{300} << 20) / sizeof(float);
  const std::vector<Device> ranks(devices.begin(), devices.begin() + 2);
  std::vector<Buffer> buffers = filled_buffers<float>(ranks, count, [](size_t r) { return float(r + 1); });
  Group group = host.create_group(ranks).value();
  ASSERT_TRUE(group.all_reduce(raw_handles(buffers), raw_handles(buffers), count, BP_F32, BP_SUM));
  for (size_t r = 0; r < 2; ++r) EXPECT_EQ(mismatches(buffers[r], 0, count, 3.0f), "") << "rank " << r;
  expect_no_validation_messages(log);
}

// The example fleet: every collective on a group of 4 ranks of one device,
// each row verified against the reference by `backplane run`.
TEST(VulkanFleet, TheExampleFleetRunsAndVerifiesEveryCase) {
  Host host = make_builtin_host();
  REQUIRE_VULKAN_DEVICES(host, 1, devices);
  const CommandResult ran = run_cli({"run", BACKPLANE_TEST_SOURCE_DIR "/configs/vulkan.json"});
  EXPECT_EQ(ran.exit_code, 0) << ran.out;
  EXPECT_NE(ran.out.find("0 errors: OK"), std::string::npos) << ran.out;
}

// ---- the pipeline cache ---------------------------------------------------------------

// Runs an all_reduce of f32 sums on two ranks of the first physical device
// (which creates the reduction pipeline) and checks the result.
void expect_all_reduce_runs(Host &host) {
  REQUIRE_VULKAN_DEVICES(host, 2, devices);
  const std::vector<Device> ranks(devices.begin(), devices.begin() + 2);
  const size_t count = 1001;
  std::vector<Buffer> buffers = filled_buffers<float>(ranks, count, [](size_t r) { return float(r + 1); });
  Group group = host.create_group(ranks).value();
  ASSERT_TRUE(group.all_reduce(raw_handles(buffers), raw_handles(buffers), count, BP_F32, BP_SUM));
  for (size_t r = 0; r < 2; ++r) EXPECT_EQ(mismatches(buffers[r], 0, count, 3.0f), "") << "rank " << r;
}

std::string file_bytes(const std::filesystem::path &file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// VkPipelineCacheHeaderVersionOne, as the spec lays it out: header size,
// version (1), vendor id, device id (4 bytes each), then the driver's
// 16-byte pipelineCacheUUID.
constexpr size_t kUuidOffset = 16;
constexpr size_t kUuidBytes = 16;
constexpr uint32_t kHeaderVersionOne = 1;

uint32_t header_version(const std::string &bytes) {
  uint32_t version = 0;
  if (bytes.size() >= 8) std::memcpy(&version, bytes.data() + 4, sizeof version);
  return version;
}

// The first host writes the device's pipeline cache when it goes; the
// second seeds its VkPipelineCache from it and, having compiled nothing
// new, leaves the file alone; garbage and a header from another driver are
// ignored, the collective still runs, and the file is written anew.
TEST(VulkanPipelineCache, FirstHostWritesSecondHostLoads) {
  constexpr const char *kOptions = R"({"vulkan": {"ranks_per_device": 2}})";
  TempDir cache;
  ScopedEnvironment cache_directory("BACKPLANE_CACHE_DIR", cache.path().string());
  {
    CapturedLog log("vulkan:debug");
    {
      Host host = make_builtin_host(kOptions);
      expect_all_reduce_runs(host);
      if (HasFatalFailure() || IsSkipped()) return;
    }
    EXPECT_EQ(log.mentioning("loaded from").size(), 0u) << log.all();
    EXPECT_EQ(log.mentioning("saved to").size(), 1u) << log.all();
  }
  const std::vector<std::filesystem::path> files = regular_files_in(cache.path());
  ASSERT_EQ(files.size(), 1u);
  const std::filesystem::path file = files[0];
  EXPECT_EQ(file.filename().string().rfind("vulkan-", 0), 0u) << file;
  const std::string written = file_bytes(file);
  // lavapipe (Mesa 22.3) keeps nothing beyond the header; a GPU's driver
  // keeps its compiled pipelines there.
  EXPECT_GE(written.size(), kUuidOffset + kUuidBytes);
  EXPECT_EQ(header_version(written), kHeaderVersionOne);
  {
    CapturedLog log("vulkan:debug");
    {
      Host host = make_builtin_host(kOptions);
      expect_all_reduce_runs(host);
    }
    EXPECT_EQ(log.mentioning("loaded from").size(), 1u) << log.all();
    EXPECT_EQ(log.mentioning("saved to").size(), 0u) << log.all();
  }
  EXPECT_EQ(file_bytes(file), written);

  std::string foreign_driver = written;
  foreign_driver[kUuidOffset] = static_cast<char>(foreign_driver[kUuidOffset] ^ 0x5a);
  const std::vector<std::pair<std::string, std::string>> unusable = {
      {"not a pipeline cache", "shorter than a header"},
      {foreign_driver, "pipelineCacheUUID differs"},
  };
  for (const auto &[bytes, why] : unusable) {
    SCOPED_TRACE(why);
    { std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes; }
    CapturedLog log("vulkan:debug");
    {
      Host host = make_builtin_host(kOptions);
      expect_all_reduce_runs(host);
    }
    EXPECT_EQ(log.mentioning("is not usable").size(), 1u) << log.all();
    EXPECT_EQ(log.mentioning(why).size(), 1u) << log.all();
    EXPECT_EQ(log.mentioning("saved to").size(), 1u) << log.all();
    EXPECT_EQ(header_version(file_bytes(file)), kHeaderVersionOne);
    EXPECT_EQ(file_bytes(file).substr(kUuidOffset, kUuidBytes), written.substr(kUuidOffset, kUuidBytes));
    EXPECT_EQ(regular_files_in(cache.path()).size(), 1u);
  }
}

// ---- groups across physical devices ---------------------------------------------------

// Run in a child whose VK_DRIVER_FILES names lavapipe twice: the loader then
// shows two physical devices, and a group across them goes through host
// memory. Every declared case against the reference, under the validation
// layer, on a group of 4 ranks whose last two are on the other device;
// a group whose rank 0 is on the second device; wrapped host memory on a
// rank away from rank 0's device.
TEST(VulkanTwoDevicesChild, EveryCollectiveThroughHostMemory) {
  if (std::getenv("BACKPLANE_VULKAN_TEST_TWO_DEVICES_CHILD") == nullptr) {
    GTEST_SKIP() << "runs as a child of VulkanTwoDevices.GroupsAcrossDevicesGoThroughHostMemory";
  }
  constexpr const char *kOptions = R"({"vulkan": {"ranks_per_device": 2, "validation": true}})";
  CapturedLog log;
  Host host = make_builtin_host(kOptions);
  REQUIRE_VULKAN_DEVICES(host, 4, devices);
  ASSERT_EQ(property(devices[2].info().value(), "physical_device"), "1") << kind_status(host);
  const std::vector<Device> across = {devices[2], devices[0], devices[3]};
  Group group = host.create_group(across).value();
  EXPECT_EQ(group.route().rfind("through host memory: 3 ranks on 2 VkDevices", 0), 0u) << group.route();
  EXPECT_EQ(host.create_group(std::vector<Device>{devices[0], devices[1]}).value().route().rfind("one VkDevice", 0), 0u);

  const size_t count = 1001;
  alignas(64) static float wrapped_memory[1001];
  for (size_t i = 0; i < count; ++i) wrapped_memory[i] = float(i % 13);
  std::vector<Buffer> buffers;
  buffers.push_back(Buffer::create(across[0], count * sizeof(float)).value());
  buffers.push_back(Buffer::wrap_host(across[1], wrapped_memory, sizeof wrapped_memory).value());
  buffers.push_back(Buffer::create(across[2], count * sizeof(float)).value());
  for (size_t r : {size_t{0}, size_t{2}}) {
    const std::vector<float> values(count, float(r) * 100.0f);
    ASSERT_TRUE(buffers[r].write(std::span<const float>(values)));
  }
  Result<Event> event = all_reduce_async(group, raw_handles(buffers), raw_handles(buffers), count, BP_F32, BP_SUM);
  ASSERT_TRUE(event) << event.error().json();
  ASSERT_TRUE(event->wait());
  for (size_t r = 0; r < 3; ++r) {
    std::vector<float> got(count);
    ASSERT_TRUE(buffers[r].read(0, got.data(), count * sizeof(float)));
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += got[i] != float(i % 13) + 200.0f;
    EXPECT_EQ(wrong, 0u) << "rank " << r;
  }
  EXPECT_EQ(wrapped_memory[12], 212.0f) << "the wrapped rank's result is in the caller's memory";

  // Quick: groups of 2 (one device) and 4 (both), counts 0, 7 and 1000.
  const conformance::ConformanceReport report = expect_vulkan_conforms(kOptions, true, 500);
  ASSERT_EQ(report.kinds.size(), 1u);
  EXPECT_EQ(report.kinds[0].groups.back().size(), 4u) << "the group across both devices did not run";
  expect_no_validation_messages(log);
}

TEST(VulkanTwoDevices, GroupsAcrossDevicesGoThroughHostMemory) {
  Host host = make_builtin_host();
  REQUIRE_VULKAN_DEVICES(host, 1, devices);
  const std::string driver = property(devices[0].info().value(), "driver_name");
  const std::filesystem::path icd = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json";
  if (driver.find("llvmpipe") == std::string::npos || !std::filesystem::exists(icd)) {
    GTEST_SKIP() << "needs lavapipe's " << icd << " to show it twice (driver here: " << driver << ")";
  }
  TempDir drivers;
  std::filesystem::copy_file(icd, drivers.path() / "first.json");
  std::filesystem::copy_file(icd, drivers.path() / "second.json");
  run_in_child("VulkanTwoDevicesChild.EveryCollectiveThroughHostMemory",
               {"VK_DRIVER_FILES=" + (drivers.path() / "first.json").string() + ":" +
                    (drivers.path() / "second.json").string(),
                "BACKPLANE_VULKAN_TEST_TWO_DEVICES_CHILD=1"});
}

// ---- no driver, no loader ------------------------------------------------------------

// Run in a child process: the Vulkan loader reads VK_DRIVER_FILES once.
TEST(VulkanNoDeviceChild, KindStatusSaysWhy) {
  const char *expected = std::getenv("BACKPLANE_VULKAN_TEST_NO_DEVICE_CHILD");
  if (expected == nullptr) GTEST_SKIP() << "runs as a child of VulkanNoDevice.PluginLoadsWithNoDevice";
  Host host = make_builtin_host();
  const std::vector<PluginInfo> plugins = host.plugins();
  ASSERT_NE(find_plugin(plugins, "vulkan"), nullptr) << "the vulkan plugin did not load";
  EXPECT_TRUE(vulkan_devices(host).empty());
  EXPECT_NE(kind_status(host).find(expected), std::string::npos) << kind_status(host);
  // Everything else runs as ever.
  std::vector<Device> cpus = {host.find_device("cpu:0").value(), host.find_device("cpu:1").value()};
  Group group = host.create_group(cpus).value();
  std::vector<Buffer> buffers = filled_buffers<float>(cpus, 1, [](size_t) { return 2.5f; });
  ASSERT_TRUE(group.all_reduce(raw_handles(buffers), raw_handles(buffers), 1, BP_F32, BP_SUM));
  EXPECT_EQ(mismatches(buffers[1], 0, 1, 5.0f), "");
}

TEST(VulkanNoDevice, PluginLoadsWithNoDevice) {
  TempDir empty;
  run_in_child("VulkanNoDeviceChild.KindStatusSaysWhy",
               {"VK_DRIVER_FILES=" + (empty.path() / "none.json").string(),
                "BACKPLANE_VULKAN_TEST_NO_DEVICE_CHILD=VK_ERROR_INCOMPATIBLE_DRIVER"});
  run_in_child("VulkanNoDeviceChild.KindStatusSaysWhy",
               {"BACKPLANE_VULKAN_LOADER=" + (empty.path() / "libvulkan.so.1").string(),
                "BACKPLANE_VULKAN_TEST_NO_DEVICE_CHILD=the Vulkan loader"});
}

}  // namespace
}  // namespace backplane::testing
