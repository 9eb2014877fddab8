// Dispatch against real fixture plugins: argument checks (INVALID_ARGUMENT),
// capability refusals (UNSUPPORTED_*) with their structured context and
// alternatives, mixed kinds, and timeouts. After every refusal the caller's
// buffers are unchanged and a good call on the same host still succeeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backplane/backplane.hpp"
#include "fixtures/fixture_checks.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace backplane;
using namespace backplane::testing;
using namespace backplane::fixtures;

constexpr size_t kCpuDevices = 4;
constexpr size_t kCount = 4;  // elements per rank in most calls
constexpr size_t kF32Bytes = kCount * sizeof(float);

// One plugin-created buffer per rank, filled with a pattern of its own, so
// that a refused call that wrote anything shows up.
class RankBuffers {
 public:
  RankBuffers(const std::vector<Device> &devices, const std::vector<size_t> &bytes, unsigned seed) {
    for (size_t r = 0; r < devices.size(); ++r) {
      Result<Buffer> buffer = Buffer::create(devices[r], bytes[r]);
      if (!buffer) {
        ADD_FAILURE() << "buffer_create: " << buffer.error().json();
        raw_.push_back(nullptr);
        buffers_.emplace_back();
        continue;
      }
      std::vector<unsigned char> pattern(bytes[r]);
      for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<unsigned char>(seed + 37 * r + i);
      if (Status written = buffer->write(0, pattern.data(), pattern.size()); !written)
        ADD_FAILURE() << "buffer_write: " << written.error().json();
      raw_.push_back(buffer->get());
      buffers_.push_back(std::move(buffer).value());
    }
  }
  RankBuffers(const std::vector<Device> &devices, size_t bytes, unsigned seed)
      : RankBuffers(devices, std::vector<size_t>(devices.size(), bytes), seed) {}

  bp_buffer *const *data() const { return raw_.data(); }
  std::vector<bp_buffer *> raw() const { return raw_; }
  Ranks ranks() const { return raw_; }

  std::vector<std::vector<unsigned char>> contents() const {
    std::vector<std::vector<unsigned char>> all;
    for (const Buffer &buffer : buffers_) {
      std::vector<unsigned char> bytes(buffer.get() ? buffer.size() : 0);
      if (buffer.get()) {
        if (Status read = buffer.read(0, bytes.data(), bytes.size()); !read)
          ADD_FAILURE() << "buffer_read: " << read.error().json();
      }
      all.push_back(std::move(bytes));
    }
    return all;
  }

 private:
  std::vector<Buffer> buffers_;
  std::vector<bp_buffer *> raw_;
};

// A group of every loaded kind that matters here, over one directory:
// the mock fixture, narrow, stalled and the real cpu plugin.
class DispatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.copy_in(fixture_path("good"));
    dir_.copy_in(fixture_path("narrow"));
    dir_.copy_in(fixture_path("stalled"));
    dir_.copy_in(fixture_path("partial"));
    dir_.copy_in(plugin_path("cpu"));
    host_ = make_host({dir_.path().string()}, R"({"cpu": {"devices": 4}})");
    ASSERT_EQ(host_.refused().size(), 0u) << describe_refused(host_);
    ASSERT_EQ(plugin_names(host_), (std::set<std::string>{"cpu", "mock", "narrow", "partial", "stalled"}));
  }

  std::vector<Device> devices(const std::vector<std::string> &names) {
    std::vector<Device> found;
    for (const std::string &name : names) {
      Result<Device> device = host_.find_device(name);
      EXPECT_TRUE(device) << name << ": " << device.error().json();
      found.push_back(device ? *device : Device());
    }
    return found;
  }

  std::vector<Device> kind_devices(const std::string &kind, size_t n) {
    std::vector<std::string> names;
    for (size_t r = 0; r < n; ++r) names.push_back(kind + ":" + std::to_string(r));
    return devices(names);
  }

  Group group(const std::vector<Device> &ranks, bp_group_policy policy = BP_POLICY_STAGE) {
    Result<Group> created = host_.create_group(ranks, nullptr, policy);
    if (!created) {
      ADD_FAILURE() << "group_create: " << created.error().json();
      return Group();
    }
    return std::move(created).value();
  }

  // The same host still runs good calls, on the mock fixture and on narrow.
  void expect_host_still_works() {
    EXPECT_TRUE(all_reduce_works(host_, "mock", kMockDevices));
    EXPECT_TRUE(all_reduce_works(host_, "narrow", 3));
    EXPECT_TRUE(all_reduce_works(host_, "cpu", kCpuDevices));
  }

  TempDir dir_;
  Host host_;
};

// `error` is `code`, and its JSON has the code's name and the message.
void expect_code(const bp_error *error, bp_code code) {
  ASSERT_NE(error, nullptr) << "expected " << bp_code_name(code) << ", the call succeeded";
  EXPECT_EQ(bp_error_code(error), code) << json_of(error);
  nlohmann::json json = nlohmann::json::parse(bp_error_json(error), nullptr, false);
  ASSERT_TRUE(json.is_object()) << bp_error_json(error);
  EXPECT_EQ(json.value("code", ""), bp_code_name(code)) << json.dump();
  EXPECT_EQ(json.value("message", ""), bp_error_message(error)) << json.dump();
  EXPECT_FALSE(std::string(bp_error_message(error)).empty());
}

// Owns a bp_error returned by a raw C call.
struct OwnedError {
  explicit OwnedError(bp_error *error) : error(error) {}
  ~OwnedError() {
    if (error) bp_error_destroy(error);
  }
  OwnedError(const OwnedError &) = delete;
  OwnedError &operator=(const OwnedError &) = delete;
  bp_error *error;
};

void expect_invalid(bp_error *raw) {
  OwnedError error(raw);
  expect_code(error.error, BP_INVALID_ARGUMENT);
}

// What an UNSUPPORTED_* error must say about itself.
struct Unsupported {
  std::string operation, dtype;
  std::optional<std::string> reduce_op;
  std::vector<std::string> devices;  // exactly these, in rank order; empty: see must_name
  std::string must_name;             // a device the list must contain
  std::string kind, plugin;
  std::set<std::string> alternatives_include, alternatives_exclude;
};

void expect_unsupported_context(const bp_error *error, const Unsupported &want) {
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(text_field(error, "operation"), want.operation) << json_of(error);
  EXPECT_EQ(text_field(error, "dtype"), want.dtype) << json_of(error);
  if (want.reduce_op) {
    EXPECT_EQ(text_field(error, "reduce_op"), *want.reduce_op) << json_of(error);
  }

  nlohmann::json devices = json_field(error, "devices");
  ASSERT_TRUE(devices.is_array()) << "devices: " << json_of(error);
  std::vector<std::string> names;
  for (const nlohmann::json &device : devices) {
    ASSERT_TRUE(device.is_object()) << device.dump();
    names.push_back(device.value("name", ""));
    EXPECT_EQ(device.value("kind", ""), want.kind) << device.dump();
    ASSERT_TRUE(device.contains("layers") && device["layers"].is_array()) << device.dump();
    EXPECT_TRUE(device["layers"].empty()) << device.dump();
  }
  if (!want.devices.empty()) {
    EXPECT_EQ(names, want.devices) << json_of(error);
  }
  if (!want.must_name.empty()) {
    EXPECT_NE(std::find(names.begin(), names.end(), want.must_name), names.end())
        << want.must_name << " not among the devices: " << json_of(error);
  }

  nlohmann::json plugin = json_field(error, "plugin");
  ASSERT_TRUE(plugin.is_object()) << "plugin: " << json_of(error);
  EXPECT_EQ(plugin.value("name", ""), want.plugin) << plugin.dump();
  EXPECT_EQ(plugin.value("version", ""), kFixtureVersion) << plugin.dump();

  nlohmann::json alternatives = json_field(error, "alternatives");
  ASSERT_TRUE(alternatives.is_array()) << "alternatives: " << json_of(error);
  std::set<std::string> kinds;
  for (const nlohmann::json &alternative : alternatives) {
    ASSERT_TRUE(alternative.is_object()) << alternative.dump();
    if (!alternative.contains("device_kind")) continue;  // e.g. a plugin that failed to load
    std::string kind = alternative.value("device_kind", "");
    kinds.insert(kind);
    if (kind == "cpu") {
      EXPECT_EQ(alternative.value("plugin", ""), "cpu") << alternative.dump();
    }
  }
  for (const std::string &kind : want.alternatives_include)
    EXPECT_EQ(kinds.count(kind), 1u) << kind << " missing from alternatives: " << json_of(error);
  for (const std::string &kind : want.alternatives_exclude)
    EXPECT_EQ(kinds.count(kind), 0u) << kind << " cannot run this, yet is an alternative: " << json_of(error);

  EXPECT_FALSE(text_field(error, "hint").empty()) << "no hint: " << json_of(error);
}

// bp_group_check says exactly what the call said.
void expect_check_matches(const Group &group, bp_collective collective, bp_dtype dtype, bp_reduce_op op,
                          const bp_error *call_error) {
  OwnedError check(bp_group_check(group.get(), collective, dtype, op));
  ASSERT_NE(check.error, nullptr) << "bp_group_check accepts what the call refused: " << json_of(call_error);
  EXPECT_EQ(bp_error_code(check.error), bp_error_code(call_error));
  EXPECT_STREQ(bp_error_message(check.error), bp_error_message(call_error));
  EXPECT_STREQ(bp_error_json(check.error), bp_error_json(call_error));
}

// ---- good calls ----------------------------------------------------------------

TEST_F(DispatchTest, MockComputesAllReduceBroadcastAndBarrier) {
  std::vector<Device> ranks = kind_devices("mock", kMockDevices);
  Group mock = group(ranks);

  // i32 max, in place, on the caller's own memory (zero-copy).
  std::vector<std::vector<int32_t>> memory(kMockDevices, std::vector<int32_t>(kCount));
  std::vector<Buffer> wrapped;
  std::vector<bp_buffer *> raw;
  for (size_t r = 0; r < kMockDevices; ++r) {
    for (size_t i = 0; i < kCount; ++i) memory[r][i] = static_cast<int32_t>((r * 7 + i * 3) % 11) - 5;
    Result<Buffer> buffer = Buffer::wrap_host(ranks[r], memory[r].data(), kCount * sizeof(int32_t));
    ASSERT_TRUE(buffer) << buffer.error().json();
    raw.push_back(buffer->get());
    wrapped.push_back(std::move(buffer).value());
  }
  std::vector<int32_t> expected(kCount, std::numeric_limits<int32_t>::min());
  for (size_t r = 0; r < kMockDevices; ++r)
    for (size_t i = 0; i < kCount; ++i) expected[i] = std::max(expected[i], memory[r][i]);
  Status all_reduce = mock.all_reduce(raw, raw, kCount, BP_I32, BP_MAX);
  ASSERT_TRUE(all_reduce.ok()) << all_reduce.error().json();
  for (size_t r = 0; r < kMockDevices; ++r) EXPECT_EQ(memory[r], expected) << "rank " << r;

  // f32 broadcast from rank 2; off the root, send entries may be NULL.
  RankBuffers recv(ranks, kF32Bytes, 1);
  std::vector<float> root_values = {1.5f, -2.0f, 3.25f, 8.0f};
  Result<Buffer> root = Buffer::create(ranks[2], kF32Bytes);
  ASSERT_TRUE(root) << root.error().json();
  ASSERT_TRUE(root->write(std::span<const float>(root_values)).ok());
  std::vector<bp_buffer *> send = {nullptr, nullptr, root->get(), nullptr};
  Status broadcast = mock.broadcast(send, recv.ranks(), kCount, BP_F32, 2);
  ASSERT_TRUE(broadcast.ok()) << broadcast.error().json();
  for (const std::vector<unsigned char> &bytes : recv.contents()) {
    std::vector<float> got(kCount);
    std::memcpy(got.data(), bytes.data(), kF32Bytes);
    EXPECT_EQ(got, root_values);
  }

  Status barrier = mock.barrier();
  EXPECT_TRUE(barrier.ok()) << barrier.error().json();
}

TEST_F(DispatchTest, AsyncAllReduceCompletesThroughItsEvent) {
  std::vector<Device> ranks = kind_devices("narrow", 3);
  Group narrow = group(ranks);
  RankBuffers send(ranks, kF32Bytes, 3), recv(ranks, kF32Bytes, 4);
  std::vector<std::vector<float>> values(3, std::vector<float>(kCount));
  std::vector<float> expected(kCount, 0.0f);
  for (size_t r = 0; r < 3; ++r) {
    for (size_t i = 0; i < kCount; ++i) {
      values[r][i] = static_cast<float>(r + 1) * 0.25f + static_cast<float>(i);
      expected[i] += values[r][i];
    }
    OwnedError written(bp_buffer_write(send.data()[r], 0, values[r].data(), kF32Bytes));
    ASSERT_EQ(written.error, nullptr) << json_of(written.error);
  }
  bp_event *event = nullptr;
  OwnedError started(bp_all_reduce_async(narrow.get(), send.data(), recv.data(), kCount, BP_F32, BP_SUM, &event));
  ASSERT_EQ(started.error, nullptr) << json_of(started.error);
  ASSERT_NE(event, nullptr);
  OwnedError waited(bp_event_wait(event, 5'000'000'000));
  EXPECT_EQ(waited.error, nullptr) << json_of(waited.error);
  EXPECT_TRUE(bp_event_test(event));
  bp_event_destroy(event);
  for (const std::vector<unsigned char> &bytes : recv.contents()) {
    std::vector<float> got(kCount);
    std::memcpy(got.data(), bytes.data(), kF32Bytes);
    EXPECT_EQ(got, expected);
  }
}

TEST_F(DispatchTest, NarrowRunsWhatItDeclares) {
  Group narrow = group(kind_devices("narrow", 3));
  Status check = narrow.check(BP_ALL_REDUCE, BP_F32, BP_SUM);
  EXPECT_TRUE(check.ok()) << check.error().json();
  expect_host_still_works();
}

// ---- UNSUPPORTED_* through the narrow fixture -----------------------------------

TEST_F(DispatchTest, CollectiveTheKindLacksIsUnsupportedCollective) {
  std::vector<Device> ranks = kind_devices("narrow", 3);
  Group narrow = group(ranks);
  RankBuffers send(ranks, kF32Bytes, 10), recv(ranks, kF32Bytes, 20);
  auto send_before = send.contents(), recv_before = recv.contents();

  OwnedError error(bp_reduce(narrow.get(), send.data(), recv.data(), kCount, BP_F32, BP_SUM, 0));
  expect_code(error.error, BP_UNSUPPORTED_COLLECTIVE);
  expect_unsupported_context(error.error, {.operation = "reduce",
                                           .dtype = "f32",
                                           .reduce_op = "sum",
                                           .devices = {"narrow:0", "narrow:1", "narrow:2"},
                                           .must_name = "",
                                           .kind = "narrow",
                                           .plugin = "narrow",
                                           .alternatives_include = {"cpu"},
                                           .alternatives_exclude = {"narrow", "mock", "stalled"}});
  expect_check_matches(narrow, BP_REDUCE, BP_F32, BP_SUM, error.error);

  // A collective that does not reduce, for good measure.
  RankBuffers gathered(ranks, kF32Bytes * ranks.size(), 30);
  OwnedError all_gather(bp_all_gather(narrow.get(), send.data(), gathered.data(), kCount, BP_F32));
  expect_code(all_gather.error, BP_UNSUPPORTED_COLLECTIVE);
  EXPECT_EQ(text_field(all_gather.error, "operation"), "all_gather") << json_of(all_gather.error);

  EXPECT_EQ(send.contents(), send_before);
  EXPECT_EQ(recv.contents(), recv_before);
  expect_host_still_works();
}

TEST_F(DispatchTest, ElementTypeTheKindLacksIsUnsupportedDtype) {
  std::vector<Device> ranks = kind_devices("narrow", 3);
  Group narrow = group(ranks);
  RankBuffers send(ranks, kCount * sizeof(double), 11), recv(ranks, kCount * sizeof(double), 21);
  auto send_before = send.contents(), recv_before = recv.contents();

  OwnedError error(bp_all_reduce(narrow.get(), send.data(), recv.data(), kCount, BP_F64, BP_SUM));
  expect_code(error.error, BP_UNSUPPORTED_DTYPE);
  expect_unsupported_context(error.error, {.operation = "all_reduce",
                                           .dtype = "f64",
                                           .reduce_op = "sum",
                                           .devices = {"narrow:0", "narrow:1", "narrow:2"},
                                           .must_name = "",
                                           .kind = "narrow",
                                           .plugin = "narrow",
                                           .alternatives_include = {"cpu"},
                                           .alternatives_exclude = {"narrow", "mock", "stalled"}});
  expect_check_matches(narrow, BP_ALL_REDUCE, BP_F64, BP_SUM, error.error);

  EXPECT_EQ(send.contents(), send_before);
  EXPECT_EQ(recv.contents(), recv_before);
  expect_host_still_works();
}

TEST_F(DispatchTest, ReduceOpTheKindLacksIsUnsupportedReduceOp) {
  std::vector<Device> ranks = kind_devices("narrow", 3);
  Group narrow = group(ranks);
  RankBuffers send(ranks, kF32Bytes, 12), recv(ranks, kF32Bytes, 22);
  auto send_before = send.contents(), recv_before = recv.contents();

  OwnedError error(bp_all_reduce(narrow.get(), send.data(), recv.data(), kCount, BP_F32, BP_MAX));
  expect_code(error.error, BP_UNSUPPORTED_REDUCE_OP);
  // The mock fixture runs all_reduce f32 max too; stalled runs only sum.
  expect_unsupported_context(error.error, {.operation = "all_reduce",
                                           .dtype = "f32",
                                           .reduce_op = "max",
                                           .devices = {"narrow:0", "narrow:1", "narrow:2"},
                                           .must_name = "",
                                           .kind = "narrow",
                                           .plugin = "narrow",
                                           .alternatives_include = {"cpu", "mock"},
                                           .alternatives_exclude = {"narrow", "stalled"}});
  expect_check_matches(narrow, BP_ALL_REDUCE, BP_F32, BP_MAX, error.error);

  EXPECT_EQ(send.contents(), send_before);
  EXPECT_EQ(recv.contents(), recv_before);
  expect_host_still_works();
}

// narrow:3 declares capability rows of its own, none: it runs nothing,
// though its kind runs all_reduce f32 sum.
TEST_F(DispatchTest, DeviceWhoseOwnRowsLackTheRequestIsUnsupportedDevice) {
  std::vector<Device> ranks = kind_devices("narrow", 4);
  Group narrow = group(ranks);
  RankBuffers send(ranks, kF32Bytes, 13), recv(ranks, kF32Bytes, 23);
  auto send_before = send.contents(), recv_before = recv.contents();

  OwnedError error(bp_all_reduce(narrow.get(), send.data(), recv.data(), kCount, BP_F32, BP_SUM));
  expect_code(error.error, BP_UNSUPPORTED_DEVICE);
  expect_unsupported_context(error.error, {.operation = "all_reduce",
                                           .dtype = "f32",
                                           .reduce_op = "sum",
                                           .devices = {},
                                           .must_name = "narrow:3",
                                           .kind = "narrow",
                                           .plugin = "narrow",
                                           .alternatives_include = {"cpu"},
                                           .alternatives_exclude = {}});
  expect_check_matches(narrow, BP_ALL_REDUCE, BP_F32, BP_SUM, error.error);

  EXPECT_EQ(send.contents(), send_before);
  EXPECT_EQ(recv.contents(), recv_before);
  expect_host_still_works();
}

// partial's kind runs all_reduce f32 and i32 with sum and max; partial:1
// runs no i32 all_reduce, partial:2 only sum, partial:3 no op at all. The
// code names what the first device that falls short lacks, whatever the
// mode asked for, and a device that runs none of the collective is itself
// the problem. Check and call agree, and nothing is touched.
TEST_F(DispatchTest, DeviceNarrowerThanItsKindGetsTheCodeOfWhatItLacks) {
  struct Case {
    std::string narrow_device;
    bp_dtype dtype;
    bp_reduce_op op;
    bp_code code;
    std::string says;
  };
  const Case cases[] = {
      {"partial:1", BP_I32, BP_SUM, BP_UNSUPPORTED_DTYPE,
       "all_reduce(i32, sum) is not supported on device 'partial:1' (partial): the device declares less than its "
       "kind: it supports f32 for all_reduce; plugin partial "},
      {"partial:2", BP_F32, BP_MAX, BP_UNSUPPORTED_REDUCE_OP,
       "all_reduce(f32, max) is not supported on device 'partial:2' (partial): the device declares less than its "
       "kind: it supports sum for all_reduce of f32; plugin partial "},
      {"partial:3", BP_F32, BP_SUM, BP_UNSUPPORTED_DEVICE,
       "all_reduce(f32, sum) is not supported on device 'partial:3' (partial): the device declares less than its "
       "kind; plugin partial "},
  };
  for (const Case &c : cases) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(c.narrow_device + (in_place ? " in place" : " out of place"));
      std::vector<Device> ranks = devices({"partial:0", c.narrow_device});
      Group partial = group(ranks);
      RankBuffers send(ranks, kF32Bytes, 41), recv(ranks, kF32Bytes, 43);
      auto send_before = send.contents(), recv_before = recv.contents();
      OwnedError error(bp_all_reduce(partial.get(), send.data(), in_place ? send.data() : recv.data(), kCount,
                                     c.dtype, c.op));
      expect_code(error.error, c.code);
      EXPECT_NE(std::string(bp_error_message(error.error)).find(c.says), std::string::npos) << json_of(error.error);
      // bp_group_check asks without a mode, so its alternatives are those of an out-of-place call.
      if (!in_place) expect_check_matches(partial, BP_ALL_REDUCE, c.dtype, c.op, error.error);
      EXPECT_EQ(send.contents(), send_before);
      EXPECT_EQ(recv.contents(), recv_before);
    }
  }
  // What every device runs still runs.
  Group all = group(kind_devices("partial", 3));
  RankBuffers send(kind_devices("partial", 3), kF32Bytes, 47), recv(kind_devices("partial", 3), kF32Bytes, 53);
  OwnedError ran(bp_all_reduce(all.get(), send.data(), recv.data(), kCount, BP_F32, BP_SUM));
  EXPECT_EQ(ran.error, nullptr) << json_of(ran.error);
  expect_host_still_works();
}

// narrow declares all_reduce out of place only.
TEST_F(DispatchTest, InPlaceWhereOnlyOutOfPlaceIsDeclaredIsUnsupportedDevice) {
  std::vector<Device> ranks = kind_devices("narrow", 3);
  Group narrow = group(ranks);
  RankBuffers both(ranks, kF32Bytes, 14);
  auto before = both.contents();

  OwnedError error(bp_all_reduce(narrow.get(), both.data(), both.data(), kCount, BP_F32, BP_SUM));
  expect_code(error.error, BP_UNSUPPORTED_DEVICE);
  expect_unsupported_context(error.error, {.operation = "all_reduce",
                                           .dtype = "f32",
                                           .reduce_op = "sum",
                                           .devices = {},
                                           .must_name = "narrow:0",
                                           .kind = "narrow",
                                           .plugin = "narrow",
                                           .alternatives_include = {"cpu"},
                                           .alternatives_exclude = {}});

  EXPECT_EQ(both.contents(), before);
  expect_host_still_works();
}

TEST_F(DispatchTest, WrappingHostMemoryOnANonAddressableDeviceIsUnsupportedDevice) {
  std::vector<Device> ranks = kind_devices("narrow", 1);
  Result<DeviceInfo> info = ranks[0].info();
  ASSERT_TRUE(info) << info.error().json();
  EXPECT_EQ(info->flags & BP_DEVICE_HOST_ADDRESSABLE, 0u);

  std::vector<float> memory = {1.0f, 2.0f, 3.0f, 4.0f};
  const std::vector<float> before = memory;
  bp_buffer *const sentinel = reinterpret_cast<bp_buffer *>(uintptr_t{0x10});
  bp_buffer *out = sentinel;
  OwnedError error(bp_buffer_wrap_host(ranks[0].get(), memory.data(), kF32Bytes, &out));
  expect_code(error.error, BP_UNSUPPORTED_DEVICE);
  EXPECT_EQ(out, sentinel) << "out-parameter written on failure";
  EXPECT_NE(std::string(bp_error_message(error.error)).find("narrow:0"), std::string::npos)
      << json_of(error.error);
  EXPECT_FALSE(text_field(error.error, "hint").empty()) << "no hint: " << json_of(error.error);
  EXPECT_EQ(memory, before);
  expect_host_still_works();
}

TEST_F(DispatchTest, ErrorFieldsAreTextForStringsAndJsonOtherwise) {
  std::vector<Device> ranks = kind_devices("narrow", 3);
  Group narrow = group(ranks);
  OwnedError error(bp_group_check(narrow.get(), BP_ALL_REDUCE, BP_F64, BP_SUM));
  expect_code(error.error, BP_UNSUPPORTED_DTYPE);
  EXPECT_STREQ(bp_error_field(error.error, "operation"), "all_reduce");  // text, not "\"all_reduce\""
  EXPECT_STREQ(bp_error_field(error.error, "dtype"), "f64");
  EXPECT_TRUE(json_field(error.error, "devices").is_array());
  EXPECT_TRUE(json_field(error.error, "plugin").is_object());
  EXPECT_TRUE(json_field(error.error, "alternatives").is_array());
  EXPECT_EQ(bp_error_field(error.error, "no_such_field"), nullptr);

  nlohmann::json whole = nlohmann::json::parse(bp_error_json(error.error), nullptr, false);
  ASSERT_TRUE(whole.is_object()) << bp_error_json(error.error);
  EXPECT_EQ(whole.value("code", ""), "UNSUPPORTED_DTYPE");
  EXPECT_EQ(whole.value("operation", ""), "all_reduce");
  EXPECT_EQ(whole["devices"], json_field(error.error, "devices"));
  EXPECT_EQ(whole.value("hint", ""), text_field(error.error, "hint"));
}

// ---- mixed kinds -------------------------------------------------------------------

void expect_mixed_kinds_refused(Group &mixed, const std::vector<Device> &ranks) {
  RankBuffers send(ranks, kF32Bytes, 15), recv(ranks, kF32Bytes, 25);
  auto send_before = send.contents(), recv_before = recv.contents();

  OwnedError error(bp_all_reduce(mixed.get(), send.data(), recv.data(), kCount, BP_F32, BP_SUM));
  expect_code(error.error, BP_MIXED_DEVICE_KINDS);
  std::string message = bp_error_message(error.error);
  EXPECT_NE(message.find("mock"), std::string::npos) << message;
  EXPECT_NE(message.find("cpu"), std::string::npos) << message;
  expect_check_matches(mixed, BP_ALL_REDUCE, BP_F32, BP_SUM, error.error);

  EXPECT_EQ(send.contents(), send_before);
  EXPECT_EQ(recv.contents(), recv_before);
}

TEST_F(DispatchTest, MixedKindsWithRejectPolicyAreRefused) {
  std::vector<Device> ranks = devices({"mock:0", "cpu:0"});
  Group mixed = group(ranks, BP_POLICY_REJECT);
  expect_mixed_kinds_refused(mixed, ranks);
  expect_host_still_works();
}

// The default policy stages: the mock fixture's rank is copied to host
// memory and back through its own plugin, the cpu plugin adds (the full
// sweep over real kinds is staging_test.cpp).
TEST_F(DispatchTest, MixedKindsWithStagePolicyRunThroughHostMemory) {
  std::vector<Device> ranks = devices({"mock:0", "cpu:0"});
  Group mixed = group(ranks, BP_POLICY_STAGE);
  constexpr size_t kInts = kF32Bytes / sizeof(uint32_t);
  RankBuffers send(ranks, kF32Bytes, 15), recv(ranks, kF32Bytes, 25);
  const auto inputs = send.contents();
  bp_group_path path = BP_PATH_NATIVE;
  OwnedError plan(bp_group_plan(mixed.get(), BP_ALL_REDUCE, BP_I32, BP_SUM, &path));
  ASSERT_EQ(plan.error, nullptr) << bp_error_json(plan.error);
  EXPECT_EQ(path, BP_PATH_STAGED);

  OwnedError error(bp_all_reduce(mixed.get(), send.data(), recv.data(), kInts, BP_I32, BP_SUM));
  ASSERT_EQ(error.error, nullptr) << bp_error_json(error.error);
  std::vector<unsigned char> expected(kF32Bytes);
  for (size_t i = 0; i < kInts; ++i) {
    uint32_t a, b;
    std::memcpy(&a, inputs[0].data() + 4 * i, 4);
    std::memcpy(&b, inputs[1].data() + 4 * i, 4);
    const uint32_t sum = a + b;
    std::memcpy(expected.data() + 4 * i, &sum, 4);
  }
  for (const auto &result : recv.contents()) EXPECT_EQ(result, expected);
  EXPECT_EQ(send.contents(), inputs);

  bp_group_counters counters{};
  counters.struct_size = sizeof counters;
  OwnedError read(bp_group_get_counters(mixed.get(), &counters));
  ASSERT_EQ(read.error, nullptr);
  EXPECT_EQ(counters.staged_calls, 1u);
  EXPECT_EQ(counters.native_calls, 0u);
  // The mock rank's send out and its result back; the cpu rank is used in place.
  EXPECT_EQ(counters.staged_bytes, 2 * kF32Bytes);
  expect_host_still_works();
}

// ---- INVALID_ARGUMENT ---------------------------------------------------------------

class InvalidArgumentTest : public DispatchTest {
 protected:
  void SetUp() override {
    DispatchTest::SetUp();
    if (HasFatalFailure()) return;
    ranks_ = kind_devices("mock", kMockDevices);
    mock_ = group(ranks_);
    send_.emplace(ranks_, kF32Bytes, 40);
    recv_.emplace(ranks_, kF32Bytes, 50);
    send_before_ = send_->contents();
    recv_before_ = recv_->contents();
  }
  // The caller's buffers are as they were, and the host still works.
  void TearDown() override {
    if (send_) {
      EXPECT_EQ(send_->contents(), send_before_) << "a refused call wrote a send buffer";
    }
    if (recv_) {
      EXPECT_EQ(recv_->contents(), recv_before_) << "a refused call wrote a recv buffer";
    }
    expect_host_still_works();
  }

  std::vector<Device> ranks_;
  Group mock_;
  std::optional<RankBuffers> send_, recv_;
  std::vector<std::vector<unsigned char>> send_before_, recv_before_;
};

TEST_F(InvalidArgumentTest, NullGroup) {
  expect_invalid(bp_all_reduce(nullptr, send_->data(), recv_->data(), kCount, BP_F32, BP_SUM));
  expect_invalid(bp_barrier(nullptr));
  expect_invalid(bp_group_check(nullptr, BP_ALL_REDUCE, BP_F32, BP_SUM));
}

TEST_F(InvalidArgumentTest, NullBufferArrays) {
  expect_invalid(bp_all_reduce(mock_.get(), nullptr, recv_->data(), kCount, BP_F32, BP_SUM));
  expect_invalid(bp_all_reduce(mock_.get(), send_->data(), nullptr, kCount, BP_F32, BP_SUM));
  expect_invalid(bp_broadcast(mock_.get(), send_->data(), nullptr, kCount, BP_F32, 0));
}

TEST_F(InvalidArgumentTest, NullBufferEntriesWhereUsed) {
  std::vector<bp_buffer *> send = send_->raw(), recv = recv_->raw();
  send[2] = nullptr;
  expect_invalid(bp_all_reduce(mock_.get(), send.data(), recv_->data(), kCount, BP_F32, BP_SUM));
  recv[3] = nullptr;
  expect_invalid(bp_all_reduce(mock_.get(), send_->data(), recv.data(), kCount, BP_F32, BP_SUM));
  // broadcast uses the root's send buffer and every recv buffer.
  std::vector<bp_buffer *> no_root_send = {send_->data()[0], nullptr, send_->data()[2], send_->data()[3]};
  expect_invalid(bp_broadcast(mock_.get(), no_root_send.data(), recv_->data(), kCount, BP_F32, 1));
  expect_invalid(bp_broadcast(mock_.get(), send_->data(), recv.data(), kCount, BP_F32, 1));
}

TEST_F(InvalidArgumentTest, CountWhoseByteSizeOverflows) {
  const size_t max = std::numeric_limits<size_t>::max();
  expect_invalid(bp_all_reduce(mock_.get(), send_->data(), recv_->data(), max / 2 + 1, BP_F32, BP_SUM));
  expect_invalid(bp_all_reduce(mock_.get(), send_->data(), recv_->data(), max, BP_I32, BP_SUM));
  // count * 4 bytes fits, count * 4 bytes * 4 ranks does not.
  expect_invalid(bp_all_gather(mock_.get(), send_->data(), recv_->data(), max / 16 + 1, BP_F32));
  expect_invalid(bp_reduce_scatter(mock_.get(), send_->data(), recv_->data(), max / 16 + 1, BP_F32, BP_SUM));
}

TEST_F(InvalidArgumentTest, RootOutOfRange) {
  expect_invalid(bp_broadcast(mock_.get(), send_->data(), recv_->data(), kCount, BP_F32, kMockDevices));
  expect_invalid(bp_broadcast(mock_.get(), send_->data(), recv_->data(), kCount, BP_F32,
                              std::numeric_limits<uint32_t>::max()));
  // Arguments are checked before capabilities: the mock has no reduce at all.
  expect_invalid(bp_reduce(mock_.get(), send_->data(), recv_->data(), kCount, BP_F32, BP_SUM, kMockDevices));
  expect_invalid(bp_gather(mock_.get(), send_->data(), recv_->data(), kCount, BP_F32, kMockDevices));
  expect_invalid(bp_scatter(mock_.get(), send_->data(), recv_->data(), kCount, BP_F32, kMockDevices));
}

TEST_F(InvalidArgumentTest, EnumValuesOutOfRange) {
  const bp_dtype bad_dtype = static_cast<bp_dtype>(99);
  const bp_reduce_op bad_op = static_cast<bp_reduce_op>(99);
  const bp_collective bad_collective = static_cast<bp_collective>(99);
  expect_invalid(bp_all_reduce(mock_.get(), send_->data(), recv_->data(), kCount, bad_dtype, BP_SUM));
  expect_invalid(bp_all_reduce(mock_.get(), send_->data(), recv_->data(), kCount,
                               static_cast<bp_dtype>(BP_DTYPE_COUNT), BP_SUM));
  expect_invalid(bp_all_reduce(mock_.get(), send_->data(), recv_->data(), kCount, BP_F32, bad_op));
  expect_invalid(bp_all_reduce(mock_.get(), send_->data(), recv_->data(), kCount, BP_F32,
                               static_cast<bp_reduce_op>(BP_REDUCE_OP_COUNT)));
  expect_invalid(bp_broadcast(mock_.get(), send_->data(), recv_->data(), kCount, bad_dtype, 0));

  bp_collective_request request{};
  request.struct_size = sizeof request;
  request.collective = bad_collective;
  request.dtype = BP_F32;
  request.reduce_op = BP_SUM;
  request.count = kCount;
  request.send = send_->data();
  request.recv = recv_->data();
  expect_invalid(bp_run_collective(mock_.get(), &request));

  expect_invalid(bp_group_check(mock_.get(), bad_collective, BP_F32, BP_SUM));
  expect_invalid(bp_group_check(mock_.get(), BP_ALL_REDUCE, bad_dtype, BP_SUM));
  expect_invalid(bp_group_check(mock_.get(), BP_ALL_REDUCE, BP_F32, bad_op));
}

TEST_F(InvalidArgumentTest, BufferOnAnotherDeviceThanItsRank) {
  std::vector<bp_buffer *> swapped = send_->raw();
  std::swap(swapped[0], swapped[1]);
  expect_invalid(bp_all_reduce(mock_.get(), swapped.data(), recv_->data(), kCount, BP_F32, BP_SUM));

  RankBuffers elsewhere(kind_devices("narrow", 1), kF32Bytes, 60);
  std::vector<bp_buffer *> foreign = recv_->raw();
  foreign[3] = elsewhere.data()[0];
  auto elsewhere_before = elsewhere.contents();
  expect_invalid(bp_all_reduce(mock_.get(), send_->data(), foreign.data(), kCount, BP_F32, BP_SUM));
  EXPECT_EQ(elsewhere.contents(), elsewhere_before);
}

TEST_F(InvalidArgumentTest, GroupWithADeviceTwice) {
  std::vector<bp_device *> twice = {ranks_[0].get(), ranks_[1].get(), ranks_[0].get()};
  bp_group *out = nullptr;
  expect_invalid(bp_group_create(host_.get(), twice.data(), twice.size(), nullptr, &out));
  EXPECT_EQ(out, nullptr);
}

TEST_F(InvalidArgumentTest, EmptyOrNullGroup) {
  std::vector<bp_device *> devices = {ranks_[0].get(), ranks_[1].get()};
  bp_group *out = nullptr;
  expect_invalid(bp_group_create(host_.get(), devices.data(), 0, nullptr, &out));
  expect_invalid(bp_group_create(host_.get(), nullptr, 2, nullptr, &out));
  std::vector<bp_device *> with_null = {ranks_[0].get(), nullptr};
  expect_invalid(bp_group_create(host_.get(), with_null.data(), with_null.size(), nullptr, &out));
  EXPECT_EQ(out, nullptr);
}

// Sizes per collective (types.h): for n = 4 ranks and count = 4 f32, each
// case gives one buffer 4 bytes short of what it must hold.
TEST_F(InvalidArgumentTest, BufferTooSmallForCountPerCollective) {
  const size_t n = kMockDevices, count = kCount, one = kF32Bytes, all = kF32Bytes * kMockDevices;
  const size_t short_by = sizeof(float);
  struct Case {
    const char *what;
    bp_collective collective;
    std::vector<size_t> send, recv;  // bytes per rank; 0: NULL (unused there)
    bp_code when_sized_right;        // what the same call gives with big enough buffers
  };
  std::vector<Case> cases = {
      {"all_reduce send", BP_ALL_REDUCE, {one, one - short_by, one, one}, {one, one, one, one}, BP_OK},
      {"all_reduce recv", BP_ALL_REDUCE, {one, one, one, one}, {one, one, one, one - short_by}, BP_OK},
      {"reduce send", BP_REDUCE, {one, one, one - short_by, one}, {one, 0, 0, 0}, BP_UNSUPPORTED_COLLECTIVE},
      {"reduce root recv", BP_REDUCE, {one, one, one, one}, {one - short_by, 0, 0, 0}, BP_UNSUPPORTED_COLLECTIVE},
      {"broadcast root send", BP_BROADCAST, {one - short_by, 0, 0, 0}, {one, one, one, one}, BP_OK},
      {"broadcast recv", BP_BROADCAST, {one, 0, 0, 0}, {one, one, one - short_by, one}, BP_OK},
      {"all_gather send", BP_ALL_GATHER, {one, one - short_by, one, one}, {all, all, all, all},
       BP_UNSUPPORTED_COLLECTIVE},
      {"all_gather recv", BP_ALL_GATHER, {one, one, one, one}, {all, all, all - short_by, all},
       BP_UNSUPPORTED_COLLECTIVE},
      {"reduce_scatter send", BP_REDUCE_SCATTER, {all, all, all, all - short_by}, {one, one, one, one},
       BP_UNSUPPORTED_COLLECTIVE},
      {"reduce_scatter recv", BP_REDUCE_SCATTER, {all, all, all, all}, {one - short_by, one, one, one},
       BP_UNSUPPORTED_COLLECTIVE},
      {"gather root recv", BP_GATHER, {one, one, one, one}, {all - short_by, 0, 0, 0}, BP_UNSUPPORTED_COLLECTIVE},
      {"scatter root send", BP_SCATTER, {all - short_by, 0, 0, 0}, {one, one, one, one},
       BP_UNSUPPORTED_COLLECTIVE},
      {"scatter recv", BP_SCATTER, {all, 0, 0, 0}, {one, one - short_by, one, one}, BP_UNSUPPORTED_COLLECTIVE},
      {"all_to_all send", BP_ALL_TO_ALL, {all, all - short_by, all, all}, {all, all, all, all},
       BP_UNSUPPORTED_COLLECTIVE},
      {"all_to_all recv", BP_ALL_TO_ALL, {all, all, all, all}, {all, all, all, all - short_by},
       BP_UNSUPPORTED_COLLECTIVE},
  };
  auto make = [&](const std::vector<size_t> &bytes, unsigned seed, std::vector<Buffer> &owned) {
    std::vector<bp_buffer *> raw(n, nullptr);
    for (size_t r = 0; r < n; ++r) {
      if (bytes[r] == 0) continue;
      Result<Buffer> buffer = Buffer::create(ranks_[r], bytes[r]);
      EXPECT_TRUE(buffer) << buffer.error().json();
      if (!buffer) continue;
      std::vector<unsigned char> pattern(bytes[r], static_cast<unsigned char>(seed + r));
      EXPECT_TRUE(buffer->write(0, pattern.data(), pattern.size()).ok());
      raw[r] = buffer->get();
      owned.push_back(std::move(buffer).value());
    }
    return raw;
  };
  auto request_for = [&](const Case &c, bp_buffer *const *send, bp_buffer *const *recv) {
    bp_collective_request request{};
    request.struct_size = sizeof request;
    request.collective = c.collective;
    request.dtype = BP_F32;
    request.reduce_op = BP_SUM;
    request.root = 0;
    request.count = count;
    request.send = send;
    request.recv = recv;
    return request;
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.what);
    std::vector<Buffer> owned;
    std::vector<bp_buffer *> send = make(c.send, 70, owned), recv = make(c.recv, 80, owned);
    std::vector<std::vector<unsigned char>> before;
    for (const Buffer &buffer : owned) {
      std::vector<unsigned char> bytes(buffer.size());
      EXPECT_TRUE(buffer.read(0, bytes.data(), bytes.size()).ok());
      before.push_back(bytes);
    }
    bp_collective_request request = request_for(c, send.data(), recv.data());
    expect_invalid(bp_run_collective(mock_.get(), &request));
    for (size_t i = 0; i < owned.size(); ++i) {
      std::vector<unsigned char> bytes(owned[i].size());
      EXPECT_TRUE(owned[i].read(0, bytes.data(), bytes.size()).ok());
      EXPECT_EQ(bytes, before[i]) << "refused call wrote buffer " << i;
    }

    // The same call with every buffer big enough passes the argument check.
    // (one and all are multiples of `one`; the short sizes round up to them.)
    std::vector<size_t> send_bytes = c.send, recv_bytes = c.recv;
    for (size_t &bytes : send_bytes) bytes = (bytes + one - 1) / one * one;
    for (size_t &bytes : recv_bytes) bytes = (bytes + one - 1) / one * one;
    std::vector<Buffer> right_owned;
    std::vector<bp_buffer *> right_send = make(send_bytes, 90, right_owned),
                             right_recv = make(recv_bytes, 100, right_owned);
    bp_collective_request right = request_for(c, right_send.data(), right_recv.data());
    OwnedError result(bp_run_collective(mock_.get(), &right));
    if (c.when_sized_right == BP_OK) {
      EXPECT_EQ(result.error, nullptr) << json_of(result.error);
    } else {
      expect_code(result.error, c.when_sized_right);
    }
  }
}

// ---- TIMEOUT ---------------------------------------------------------------------

TEST_F(DispatchTest, WaitOnAStalledCollectiveTimesOutAndTheEventCanBeDestroyed) {
  std::vector<Device> ranks = kind_devices("stalled", kStalledDevices);
  Group stalled = group(ranks);
  std::vector<std::vector<float>> memory(kStalledDevices, std::vector<float>(kCount, 1.0f));
  std::vector<Buffer> buffers;
  std::vector<bp_buffer *> raw;
  for (size_t r = 0; r < kStalledDevices; ++r) {
    Result<Buffer> buffer = Buffer::wrap_host(ranks[r], memory[r].data(), kF32Bytes);
    ASSERT_TRUE(buffer) << buffer.error().json();
    raw.push_back(buffer->get());
    buffers.push_back(std::move(buffer).value());
  }

  bp_event *event = nullptr;
  OwnedError started(bp_all_reduce_async(stalled.get(), raw.data(), raw.data(), kCount, BP_F32, BP_SUM, &event));
  ASSERT_EQ(started.error, nullptr) << json_of(started.error);
  ASSERT_NE(event, nullptr);
  EXPECT_FALSE(bp_event_test(event));

  const auto begin = std::chrono::steady_clock::now();
  OwnedError timed_out(bp_event_wait(event, 20'000'000));  // 20 ms
  const auto waited = std::chrono::steady_clock::now() - begin;
  expect_code(timed_out.error, BP_TIMEOUT);
  EXPECT_GE(waited, std::chrono::milliseconds(15)) << "returned before the timeout ran out";
  EXPECT_LT(waited, std::chrono::seconds(2)) << "overstayed the timeout";

  OwnedError again(bp_event_wait(event, 0));
  expect_code(again.error, BP_TIMEOUT);
  EXPECT_FALSE(bp_event_test(event));
  bp_event_destroy(event);  // still in flight: released to the plugin

  expect_host_still_works();
}

}  // namespace
