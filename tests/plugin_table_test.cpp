// The in-tree plugins' function tables (plugin_support::function_table)
// called through the plugin ABI itself, with what a host never passes: a
// NULL state, handle or out-pointer, a kind or device that does not exist,
// a transfer outside its buffer, args too small. Each is refused with
// BP_INVALID_ARGUMENT and its exact message, and nothing is left counted
// against the configuration; a buffer or comm alive holds it, as plugin.h
// asks.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "backplane/plugin.h"
#include "test_support.hpp"

namespace backplane::testing {
namespace {

// What the plugin reported through the host's error service.
struct Reported {
  int32_t code = BP_OK;
  std::string message;
  bp_error_sink *sink() { return reinterpret_cast<bp_error_sink *>(this); }
};

void report_error(bp_error_sink *sink, int32_t code, const char *message) {
  auto *reported = reinterpret_cast<Reported *>(sink);
  reported->code = code;
  reported->message = message;
}

void ignore_log(void *, int32_t, const char *, const char *) {}

const bp_host_services kServices = {sizeof(bp_host_services), nullptr, report_error, ignore_log, nullptr, nullptr, nullptr, nullptr};

// An ABI struct of ours: zeros, its struct_size set.
template <class Struct>
Struct sized() {
  Struct value{};
  value.struct_size = sizeof value;
  return value;
}

// A function's return and report are both `code`, with exactly `message`.
void expect_refused(int32_t returned, const Reported &reported, int32_t code, const std::string &message) {
  EXPECT_EQ(returned, code) << reported.message;
  EXPECT_EQ(reported.code, code);
  EXPECT_EQ(reported.message, message);
}

// Each configuration the plugin is tested under, and another one that only
// applies while no buffer or comm exists. The cpu plugin queues every
// _async call, so that a request exists to be tested.
struct PluginCase {
  const char *name;
  const char *options;
  const char *other_options;
};

const PluginCase kPlugins[] = {
    {"cpu", R"({"async_threshold_bytes": 0})", R"({"devices": 3, "async_threshold_bytes": 0})"},
    {"opencl", R"({})", R"({"build_options": "-cl-mad-enable"})"},
    {"vulkan", R"({"ranks_per_device": 2})", R"({"ranks_per_device": 3})"},
};

class PluginTable : public ::testing::TestWithParam<PluginCase> {
 protected:
  void SetUp() override {
    const std::filesystem::path file = plugin_path(plugin());
    if (!std::filesystem::exists(file)) GTEST_SKIP() << "the " << plugin() << " plugin is not built here";
    handle_ = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle_, nullptr) << dlerror();
    const auto entry = reinterpret_cast<bp_plugin_entry_fn>(dlsym(handle_, BP_PLUGIN_ENTRY_SYMBOL));
    ASSERT_NE(entry, nullptr);
    Reported refusal;
    args_.struct_size = sizeof args_;
    args_.host_abi_major = BP_PLUGIN_ABI_MAJOR;
    args_.host_abi_minor = BP_PLUGIN_ABI_MINOR;
    args_.services = &kServices;
    args_.sink = refusal.sink();
    args_.options_json = "{}";
    ASSERT_EQ(entry(&args_), BP_OK) << refusal.message;
    ASSERT_EQ(configure(GetParam().options), BP_OK);
  }
  void TearDown() override {
    if (args_.state != nullptr) table().destroy(args_.state);
    if (handle_ != nullptr) dlclose(handle_);
  }

  std::string plugin() const { return GetParam().name; }
  bp_plugin_state *state() const { return args_.state; }
  const bp_plugin_functions &table() const { return *args_.descriptor->functions; }
  // "<plugin> <function>: <what>", as every message of the table begins.
  std::string says(const std::string &function, const std::string &what) const {
    return plugin() + " " + function + ": " + what;
  }

  int32_t configure(const char *options) {
    Reported reported;
    const int32_t code = table().configure(state(), 0, options, reported.sink());
    EXPECT_EQ(code, reported.code) << reported.message;
    return code;
  }
  uint32_t device_count() {
    uint32_t count = 0;
    Reported reported;
    EXPECT_EQ(table().device_count(state(), 0, &count, reported.sink()), BP_OK) << reported.message;
    return count;
  }
  // Whether a buffer or comm is counted against the configuration: the
  // other options are refused then (and applied, then undone, otherwise).
  bool configuration_held() {
    Reported reported;
    const int32_t code = table().configure(state(), 0, GetParam().other_options, reported.sink());
    if (code == BP_OK) {
      EXPECT_EQ(configure(GetParam().options), BP_OK);
      return false;
    }
    EXPECT_EQ(code, BP_CONFIG) << reported.message;
    EXPECT_EQ(reported.message.rfind(plugin() + " options: cannot change ", 0), 0u) << reported.message;
    return true;
  }
  bp_plugin_buffer *create_buffer(size_t bytes) {
    bp_plugin_buffer *buffer = nullptr;
    Reported reported;
    EXPECT_EQ(table().buffer_create(state(), 0, 0, bytes, &buffer, reported.sink()), BP_OK) << reported.message;
    return buffer;
  }

 private:
  void *handle_ = nullptr;
  bp_plugin_entry_args args_{};
};

TEST_P(PluginTable, HasEveryRequiredEntryAndTheOptionalOnesOfItsDevices) {
  const bp_plugin_functions &t = table();
  EXPECT_EQ(t.struct_size, sizeof(bp_plugin_functions));
  for (const void *entry : {reinterpret_cast<const void *>(t.destroy), reinterpret_cast<const void *>(t.configure),
                            reinterpret_cast<const void *>(t.device_count),
                            reinterpret_cast<const void *>(t.device_info),
                            reinterpret_cast<const void *>(t.buffer_create),
                            reinterpret_cast<const void *>(t.buffer_destroy),
                            reinterpret_cast<const void *>(t.buffer_write),
                            reinterpret_cast<const void *>(t.buffer_read),
                            reinterpret_cast<const void *>(t.comm_create),
                            reinterpret_cast<const void *>(t.comm_destroy),
                            reinterpret_cast<const void *>(t.collective_start),
                            reinterpret_cast<const void *>(t.request_test),
                            reinterpret_cast<const void *>(t.request_wait),
                            reinterpret_cast<const void *>(t.request_release)}) {
    EXPECT_NE(entry, nullptr);
  }
  // Host memory is what cpu devices have, Vulkan devices import where the
  // driver can (the device says), and OpenCL devices in general do not
  // address; the cpu kind always has its devices, one memory for all.
  const bool cpu = plugin() == "cpu";
  EXPECT_EQ(t.buffer_wrap_host != nullptr, cpu || plugin() == "vulkan");
  EXPECT_EQ(t.kind_info != nullptr, !cpu);
  EXPECT_EQ(t.comm_info != nullptr, !cpu);
}

TEST_P(PluginTable, NullStateIsInvalidArgumentWithNothingToReportThrough) {
  const bp_plugin_functions &t = table();
  Reported reported;
  uint32_t count = 7;
  bp_plugin_buffer *buffer = nullptr;
  bool done = false;
  EXPECT_EQ(t.configure(nullptr, 0, "{}", reported.sink()), BP_INVALID_ARGUMENT);
  EXPECT_EQ(t.device_count(nullptr, 0, &count, reported.sink()), BP_INVALID_ARGUMENT);
  EXPECT_EQ(t.buffer_create(nullptr, 0, 0, 16, &buffer, reported.sink()), BP_INVALID_ARGUMENT);
  EXPECT_EQ(t.request_test(nullptr, nullptr, &done, reported.sink()), BP_INVALID_ARGUMENT);
  EXPECT_EQ(reported.code, BP_OK) << "without a state there are no services: " << reported.message;
  EXPECT_EQ(count, 7u);
  EXPECT_EQ(buffer, nullptr);
  // The functions that return nothing return at once.
  t.buffer_destroy(nullptr, nullptr);
  t.comm_destroy(nullptr, nullptr);
  t.request_release(nullptr, nullptr);
  t.destroy(nullptr);
}

TEST_P(PluginTable, AKindOtherThanTheOneIsRefusedByEveryFunctionTakingOne) {
  const bp_plugin_functions &t = table();
  const std::string no_such_kind =
      plugin() + " plugin: device kind index 1 does not exist (the plugin has one kind, 0 = " + plugin() + ")";
  uint32_t count = 0;
  auto info = sized<bp_plugin_device_info>();
  bp_plugin_buffer *buffer = nullptr;
  bp_plugin_comm *comm = nullptr;
  const uint32_t devices[] = {0};
  {
    Reported r;
    expect_refused(t.configure(state(), 1, "{}", r.sink()), r, BP_INVALID_ARGUMENT, no_such_kind);
  }
  {
    Reported r;
    expect_refused(t.device_count(state(), 1, &count, r.sink()), r, BP_INVALID_ARGUMENT, no_such_kind);
  }
  {
    Reported r;
    expect_refused(t.device_info(state(), 1, 0, &info, r.sink()), r, BP_INVALID_ARGUMENT, no_such_kind);
  }
  {
    Reported r;
    expect_refused(t.buffer_create(state(), 1, 0, 16, &buffer, r.sink()), r, BP_INVALID_ARGUMENT, no_such_kind);
  }
  {
    Reported r;
    expect_refused(t.comm_create(state(), 1, devices, 1, &comm, r.sink()), r, BP_INVALID_ARGUMENT, no_such_kind);
  }
  if (t.buffer_wrap_host != nullptr) {
    Reported r;
    alignas(64) char memory[16];
    expect_refused(t.buffer_wrap_host(state(), 1, 0, memory, sizeof memory, &buffer, r.sink()), r,
                   BP_INVALID_ARGUMENT, no_such_kind);
  }
  if (t.kind_info != nullptr) {
    Reported r;
    auto kind = sized<bp_plugin_kind_info>();
    expect_refused(t.kind_info(state(), 1, &kind, r.sink()), r, BP_INVALID_ARGUMENT, no_such_kind);
  }
  EXPECT_EQ(buffer, nullptr);
  EXPECT_EQ(comm, nullptr);
  EXPECT_FALSE(configuration_held());
}

TEST_P(PluginTable, NullHandlesAndOutPointersAreRefused) {
  const bp_plugin_functions &t = table();
  const uint32_t devices[] = {0};
  {
    Reported r;
    expect_refused(t.device_count(state(), 0, nullptr, r.sink()), r, BP_INVALID_ARGUMENT,
                   says("device_count", "count is NULL"));
  }
  {
    Reported r;
    expect_refused(t.device_info(state(), 0, 0, nullptr, r.sink()), r, BP_INVALID_ARGUMENT,
                   says("device_info", "info is NULL"));
  }
  {
    Reported r;
    expect_refused(t.buffer_create(state(), 0, 0, 16, nullptr, r.sink()), r, BP_INVALID_ARGUMENT,
                   says("buffer_create", "out is NULL"));
  }
  {
    Reported r;
    expect_refused(t.comm_create(state(), 0, devices, 1, nullptr, r.sink()), r, BP_INVALID_ARGUMENT,
                   says("comm_create", "out is NULL"));
  }
  {
    Reported r;
    bool done = false;
    expect_refused(t.request_test(state(), nullptr, &done, r.sink()), r, BP_INVALID_ARGUMENT,
                   says("request_test", "request is NULL"));
  }
  {
    Reported r;
    expect_refused(t.request_wait(state(), nullptr, -1, r.sink()), r, BP_INVALID_ARGUMENT,
                   says("request_wait", "request is NULL"));
  }
  {
    Reported r;
    // A NULL comm still leaves *out NULL, so no caller mistakes it for a request.
    auto *out = reinterpret_cast<bp_plugin_request *>(std::uintptr_t{0x1});
    const auto args = sized<bp_collective_args>();
    expect_refused(t.collective_start(state(), nullptr, &args, &out, r.sink()), r, BP_INVALID_ARGUMENT,
                   says("collective_start", "comm is NULL"));
    EXPECT_EQ(out, nullptr);
  }
  if (t.buffer_wrap_host != nullptr) {
    Reported r;
    alignas(64) char memory[16];
    expect_refused(t.buffer_wrap_host(state(), 0, 0, memory, sizeof memory, nullptr, r.sink()), r,
                   BP_INVALID_ARGUMENT, says("buffer_wrap_host", "out is NULL"));
  }
  if (t.kind_info != nullptr) {
    Reported r;
    expect_refused(t.kind_info(state(), 0, nullptr, r.sink()), r, BP_INVALID_ARGUMENT,
                   says("kind_info", "info is NULL"));
  }
  if (t.comm_info != nullptr) {
    Reported r;
    auto info = sized<bp_plugin_comm_info>();
    expect_refused(t.comm_info(state(), nullptr, &info, r.sink()), r, BP_INVALID_ARGUMENT,
                   says("comm_info", "comm is NULL"));
  }
  EXPECT_FALSE(configuration_held());
}

TEST_P(PluginTable, DevicesThatDoNotExistAreRefusedAndLeaveNothingCounted) {
  const bp_plugin_functions &t = table();
  const uint32_t count = device_count();
  const std::string devices_now = "(" + std::to_string(count) + " " + plugin() + " devices)";
  const std::string missing = std::to_string(count);
  {
    Reported r;
    auto info = sized<bp_plugin_device_info>();
    expect_refused(t.device_info(state(), 0, count, &info, r.sink()), r, BP_INVALID_ARGUMENT,
                   says("device_info", "device " + missing + " does not exist " + devices_now));
  }
  {
    Reported r;
    bp_plugin_buffer *buffer = nullptr;
    expect_refused(t.buffer_create(state(), 0, count, 16, &buffer, r.sink()), r, BP_INVALID_ARGUMENT,
                   says("buffer_create", "device " + missing + " does not exist " + devices_now));
    EXPECT_EQ(buffer, nullptr);
  }
  {
    Reported r;
    bp_plugin_comm *comm = nullptr;
    const uint32_t devices[] = {0, count};
    expect_refused(t.comm_create(state(), 0, devices, 2, &comm, r.sink()), r, BP_INVALID_ARGUMENT,
                   says("comm_create", count == 0 ? "rank 0 names device 0, which does not exist " + devices_now
                                                  : "rank 1 names device " + missing +
                                                        ", which does not exist " + devices_now));
    EXPECT_EQ(comm, nullptr);
  }
  for (const uint32_t *devices : {static_cast<const uint32_t *>(nullptr), &count}) {
    Reported r;
    bp_plugin_comm *comm = nullptr;
    const size_t ranks = devices == nullptr ? 1 : 0;
    expect_refused(t.comm_create(state(), 0, devices, ranks, &comm, r.sink()), r, BP_INVALID_ARGUMENT,
                   says("comm_create", "a comm needs at least one device"));
  }
  if (t.buffer_wrap_host != nullptr) {
    alignas(64) char memory[16];
    bp_plugin_buffer *buffer = nullptr;
    {
      Reported r;
      expect_refused(t.buffer_wrap_host(state(), 0, count, memory, sizeof memory, &buffer, r.sink()), r,
                     BP_INVALID_ARGUMENT, says("buffer_wrap_host", "device " + missing + " does not exist " + devices_now));
    }
    {
      Reported r;
      expect_refused(t.buffer_wrap_host(state(), 0, 0, nullptr, 8, &buffer, r.sink()), r, BP_INVALID_ARGUMENT,
                     says("buffer_wrap_host", "memory is NULL for 8 bytes"));
    }
    EXPECT_EQ(buffer, nullptr);
  }
  EXPECT_FALSE(configuration_held()) << "a refused create left an object counted";
}

TEST_P(PluginTable, TransfersOutsideTheBufferOrWithoutHostMemoryAreRefused) {
  if (device_count() == 0) GTEST_SKIP() << "no " << plugin() << " device on this machine";
  const bp_plugin_functions &t = table();
  bp_plugin_buffer *buffer = create_buffer(16);
  ASSERT_NE(buffer, nullptr);
  EXPECT_TRUE(configuration_held());
  char host[32] = {};
  struct Transfer {
    const bp_plugin_buffer *buffer;
    size_t offset;
    bool host_memory;
    size_t bytes;
    const char *says;
  };
  const size_t far = std::numeric_limits<size_t>::max();
  const Transfer refused[] = {
      {nullptr, 0, true, 4, "buffer is NULL"},
      {buffer, 0, false, 4, "host pointer is NULL for 4 bytes"},
      {buffer, 12, true, 8, "8 bytes at offset 12 do not fit in a buffer of 16 bytes"},
      {buffer, 0, true, 17, "17 bytes at offset 0 do not fit in a buffer of 16 bytes"},
      {buffer, 17, true, 0, "0 bytes at offset 17 do not fit in a buffer of 16 bytes"},
      // offset + bytes wraps around to 1: checked without the sum.
      {buffer, far, true, 2, "2 bytes at offset 18446744073709551615 do not fit in a buffer of 16 bytes"},
  };
  for (const Transfer &transfer : refused) {
    SCOPED_TRACE(transfer.says);
    void *memory = transfer.host_memory ? host : nullptr;
    {
      Reported r;
      expect_refused(t.buffer_write(state(), const_cast<bp_plugin_buffer *>(transfer.buffer), transfer.offset, memory,
                                    transfer.bytes, r.sink()),
                     r, BP_INVALID_ARGUMENT, says("buffer_write", transfer.says));
    }
    {
      Reported r;
      expect_refused(t.buffer_read(state(), transfer.buffer, transfer.offset, memory, transfer.bytes, r.sink()), r,
                     BP_INVALID_ARGUMENT, says("buffer_read", transfer.says));
    }
  }
  // Nothing to move needs no host memory, even at the end of the buffer.
  Reported r;
  EXPECT_EQ(t.buffer_write(state(), buffer, 16, nullptr, 0, r.sink()), BP_OK) << r.message;
  EXPECT_EQ(t.buffer_read(state(), buffer, 16, nullptr, 0, r.sink()), BP_OK) << r.message;
  // What fits goes through, to the byte.
  const char written[] = "abcdefgh";
  EXPECT_EQ(t.buffer_write(state(), buffer, 8, written, 8, r.sink()), BP_OK) << r.message;
  EXPECT_EQ(t.buffer_read(state(), buffer, 4, host, 12, r.sink()), BP_OK) << r.message;
  EXPECT_EQ(std::string(host, 12), std::string(4, '\0') + "abcdefgh");
  t.buffer_destroy(state(), buffer);
  EXPECT_FALSE(configuration_held());
}

TEST_P(PluginTable, AWrappedBufferIsTheCallersMemoryAndHoldsTheConfiguration) {
  const bp_plugin_functions &t = table();
  if (t.buffer_wrap_host == nullptr) GTEST_SKIP() << plugin() << " devices do not address host memory";
  if (device_count() == 0) GTEST_SKIP() << "no " << plugin() << " device on this machine";
  alignas(64) char memory[16] = {};
  bp_plugin_buffer *buffer = nullptr;
  Reported r;
  ASSERT_EQ(t.buffer_wrap_host(state(), 0, 0, memory, sizeof memory, &buffer, r.sink()), BP_OK) << r.message;
  EXPECT_TRUE(configuration_held());
  EXPECT_EQ(t.buffer_write(state(), buffer, 2, "xyz", 3, r.sink()), BP_OK) << r.message;
  EXPECT_EQ(std::string(memory + 2, 3), "xyz");
  t.buffer_destroy(state(), buffer);
  EXPECT_FALSE(configuration_held());
}

// Plugin ABI 1.4: the cpu plugin says where its buffers' bytes are, for
// staging to wrap ranges of them in place; kinds whose buffers are not host
// memory leave the entry NULL.
TEST_P(PluginTable, HostMemoryOfABufferIsWhereItsBytesAre) {
  const bp_plugin_functions &t = table();
  if (plugin() != "cpu") {
    EXPECT_EQ(t.buffer_host_memory, nullptr) << plugin() << " buffers are not host memory";
    return;
  }
  ASSERT_NE(t.buffer_host_memory, nullptr);
  bp_plugin_buffer *buffer = create_buffer(4096);
  ASSERT_NE(buffer, nullptr);
  Reported r;
  ASSERT_EQ(t.buffer_write(state(), buffer, 100, "abc", 3, r.sink()), BP_OK) << r.message;
  void *memory = nullptr;
  ASSERT_EQ(t.buffer_host_memory(state(), buffer, &memory, r.sink()), BP_OK) << r.message;
  ASSERT_NE(memory, nullptr);
  EXPECT_EQ(std::string(static_cast<const char *>(memory) + 100, 3), "abc");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(memory) % 64, 0u);
  // A wrapped buffer's is the caller's memory.
  alignas(64) char own[32] = {};
  bp_plugin_buffer *wrapped = nullptr;
  ASSERT_EQ(t.buffer_wrap_host(state(), 0, 0, own, sizeof own, &wrapped, r.sink()), BP_OK) << r.message;
  ASSERT_EQ(t.buffer_host_memory(state(), wrapped, &memory, r.sink()), BP_OK) << r.message;
  EXPECT_EQ(memory, own);

  Reported null_buffer, null_out;
  EXPECT_EQ(t.buffer_host_memory(state(), nullptr, &memory, null_buffer.sink()), BP_INVALID_ARGUMENT);
  EXPECT_EQ(null_buffer.message, says("buffer_host_memory", "buffer is NULL"));
  EXPECT_EQ(t.buffer_host_memory(state(), buffer, nullptr, null_out.sink()), BP_INVALID_ARGUMENT);
  EXPECT_EQ(null_out.message, says("buffer_host_memory", "memory is NULL"));
  t.buffer_destroy(state(), wrapped);
  t.buffer_destroy(state(), buffer);
}

TEST_P(PluginTable, CollectiveStartAndRequestsCheckTheirArguments) {
  if (device_count() == 0) GTEST_SKIP() << "no " << plugin() << " device on this machine";
  const bp_plugin_functions &t = table();
  bp_plugin_comm *comm = nullptr;
  const uint32_t devices[] = {0};
  Reported created;
  ASSERT_EQ(t.comm_create(state(), 0, devices, 1, &comm, created.sink()), BP_OK) << created.message;
  ASSERT_NE(comm, nullptr);
  EXPECT_TRUE(configuration_held());

  bp_plugin_buffer *send = create_buffer(4 * sizeof(float));
  bp_plugin_buffer *recv = create_buffer(4 * sizeof(float));
  ASSERT_NE(send, nullptr);
  ASSERT_NE(recv, nullptr);
  const float values[4] = {1, 2, 3, 4};
  Reported wrote;
  ASSERT_EQ(t.buffer_write(state(), send, 0, values, sizeof values, wrote.sink()), BP_OK) << wrote.message;
  bp_plugin_buffer *const sends[] = {send};
  bp_plugin_buffer *const recvs[] = {recv};
  // Flags 0: an _async call, which hands out a request.
  const bp_collective_args args{sizeof args, nullptr, BP_ALL_REDUCE, BP_F32, BP_SUM, 0, 4, 1, sends, recvs, 0};
  bp_plugin_request *request = nullptr;
  {
    Reported r;
    expect_refused(t.collective_start(state(), comm, &args, nullptr, r.sink()), r, BP_INVALID_ARGUMENT,
                   says("collective_start", "out is NULL"));
  }
  {
    Reported r;
    expect_refused(t.collective_start(state(), comm, nullptr, &request, r.sink()), r, BP_INVALID_ARGUMENT,
                   says("collective_start", "args is NULL or smaller than ABI 1.0's"));
  }
  {
    Reported r;
    bp_collective_args truncated = args;
    truncated.struct_size = BP_COLLECTIVE_ARGS_SIZE_V1_0 - 1;
    expect_refused(t.collective_start(state(), comm, &truncated, &request, r.sink()), r, BP_INVALID_ARGUMENT,
                   says("collective_start", "args is NULL or smaller than ABI 1.0's"));
  }
  EXPECT_EQ(request, nullptr);
  if (t.comm_info != nullptr) {
    Reported r;
    expect_refused(t.comm_info(state(), comm, nullptr, r.sink()), r, BP_INVALID_ARGUMENT,
                   says("comm_info", "info is NULL"));
  }

  Reported started;
  ASSERT_EQ(t.collective_start(state(), comm, &args, &request, started.sink()), BP_OK) << started.message;
  ASSERT_NE(request, nullptr) << "an _async call of this size is queued";
  {
    Reported r;
    expect_refused(t.request_test(state(), request, nullptr, r.sink()), r, BP_INVALID_ARGUMENT,
                   says("request_test", "done is NULL"));
  }
  Reported waited;
  EXPECT_EQ(t.request_wait(state(), request, -1, waited.sink()), BP_OK) << waited.message;
  t.request_release(state(), request);
  float sums[4] = {};
  Reported read;
  EXPECT_EQ(t.buffer_read(state(), recv, 0, sums, sizeof sums, read.sink()), BP_OK) << read.message;
  EXPECT_EQ(std::memcmp(sums, values, sizeof sums), 0) << "one rank's sum is its own values";

  t.buffer_destroy(state(), send);
  t.buffer_destroy(state(), recv);
  EXPECT_TRUE(configuration_held()) << "the comm is still alive";
  t.comm_destroy(state(), comm);
  EXPECT_FALSE(configuration_held());
}

INSTANTIATE_TEST_SUITE_P(InTreePlugins, PluginTable, ::testing::ValuesIn(kPlugins),
                         [](const ::testing::TestParamInfo<PluginCase> &info) { return std::string(info.param.name); });

}  // namespace
}  // namespace backplane::testing
