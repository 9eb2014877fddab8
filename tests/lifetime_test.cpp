// The in-flight contract and lifetimes of API 1.2 (backplane.h, plugin.h):
// several collectives in flight on one group complete in start order; a
// plugin of minor 1 never sees two at once; events, groups, buffers and the
// host may be destroyed in any order without touching freed memory. Run on
// the `async` fixtures, whose requests complete on the plugin's own thread
// after a delay and which log every breach of the contract they can see
// ("contract violation") — and under AddressSanitizer in CI. Also the
// other 1.2 rules at the C API: row limits (max_bytes), modes per element
// type, zeroed out-struct tails, extension chains and bp_api_version.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <thread>
#include <chrono>
#include <cstring>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "backplane/backplane.h"
#include "fixtures/fixture_checks.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace backplane;
using namespace backplane::testing;
using namespace backplane::fixtures;

// Counts the fixture's "contract violation" lines while it lives.
class ViolationLog {
 public:
  ViolationLog() { bp_log_set_sink(&ViolationLog::sink, this); }
  ~ViolationLog() { bp_log_set_sink(nullptr, nullptr); }
  ViolationLog(const ViolationLog &) = delete;
  ViolationLog &operator=(const ViolationLog &) = delete;
  std::string violations() const {
    std::lock_guard lock(mutex_);
    return violations_;
  }

 private:
  static void sink(void *context, int32_t, const char *, const char *message) {
    auto *self = static_cast<ViolationLog *>(context);
    if (std::strstr(message, "contract violation")) {
      std::lock_guard lock(self->mutex_);
      self->violations_ += std::string("\n  ") + message;
    }
  }
  mutable std::mutex mutex_;
  std::string violations_;
};

std::string code_and_json(bp_error *error) {
  std::string text = error ? std::string(bp_code_name(bp_error_code(error))) + " " + bp_error_json(error) : "OK";
  bp_error_destroy(error);
  return text;
}

bp_code take_code(bp_error *error) {
  bp_code code = error ? bp_error_code(error) : BP_OK;
  bp_error_destroy(error);
  return code;
}

// A host over one fixture, as raw C handles, and `ranks` buffers of
// `count` floats each set to 1 on kind:0 .. kind:ranks-1.
struct AsyncGroup {
  TempDir dir;
  bp_host *host = nullptr;
  bp_group *group = nullptr;
  std::vector<bp_buffer *> buffers;
  size_t count = 0;

  AsyncGroup(const std::string &fixture, size_t ranks, size_t elements) : count(elements) {
    dir.copy_in(fixture_path(fixture));
    const std::string directory = dir.path().string();
    const char *dirs[] = {directory.c_str()};
    bp_host_options options{};
    options.struct_size = sizeof options;
    options.plugin_dirs = dirs;
    options.plugin_dir_count = 1;
    options.flags = BP_HOST_IGNORE_ENV_PATH | BP_HOST_IGNORE_INSTALL_PATH;
    EXPECT_EQ(code_and_json(bp_host_create(&options, &host)), "OK");
    std::vector<bp_device *> devices;
    for (size_t r = 0; r < ranks; ++r) {
      bp_device *device = nullptr;
      EXPECT_EQ(code_and_json(bp_host_find_device(host, (fixture + ":" + std::to_string(r)).c_str(), &device)),
                "OK");
      devices.push_back(device);
      bp_buffer *buffer = nullptr;
      EXPECT_EQ(code_and_json(bp_buffer_create(device, count * sizeof(float), &buffer)), "OK");
      std::vector<float> ones(count, 1.0f);
      EXPECT_EQ(code_and_json(bp_buffer_write(buffer, 0, ones.data(), ones.size() * sizeof(float))), "OK");
      buffers.push_back(buffer);
    }
    EXPECT_EQ(code_and_json(bp_group_create(host, devices.data(), devices.size(), nullptr, &group)), "OK");
  }
  // In place: each call multiplies every element by the group's size.
  bp_event *start() {
    bp_event *event = nullptr;
    EXPECT_EQ(code_and_json(bp_all_reduce_async(group, buffers.data(), buffers.data(), count, BP_F32, BP_SUM,
                                                &event)),
              "OK");
    return event;
  }
  ::testing::AssertionResult every_element_is(float expected) const {
    for (size_t r = 0; r < buffers.size(); ++r) {
      std::vector<float> got(count, -1.0f);
      bp_error *error = bp_buffer_read(buffers[r], 0, got.data(), got.size() * sizeof(float));
      if (error) return ::testing::AssertionFailure() << "read: " << code_and_json(error);
      for (size_t i = 0; i < count; ++i)
        if (got[i] != expected)
          return ::testing::AssertionFailure() << "rank " << r << " element " << i << " is " << got[i]
                                               << ", expected " << expected;
    }
    return ::testing::AssertionSuccess();
  }
  void destroy_buffers() {
    for (bp_buffer *buffer : buffers) bp_buffer_destroy(buffer);
    buffers.clear();
  }
  // Buffers, then the group, then the host: the order an application would
  // pick; the LifetimeTests try the others.
  void destroy_all() {
    destroy_buffers();
    bp_group_destroy(group);
    bp_host_destroy(host);
  }
};

TEST(InFlightTest, SeveralCollectivesInFlightOnOneGroupCompleteInStartOrder) {
  ViolationLog log;
  AsyncGroup fixture("async", 2, 1000);
  const auto started = std::chrono::steady_clock::now();
  std::array<bp_event *, 3> events{};
  for (bp_event *&event : events) event = fixture.start();
  // Each takes the fixture's 20 ms on its thread: the starts returned at once.
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(15));
  EXPECT_FALSE(bp_event_test(events[0]));
  EXPECT_EQ(code_and_json(bp_event_wait(events[2], -1)), "OK");
  // The last one complete means the earlier ones are too.
  EXPECT_TRUE(bp_event_test(events[0]));
  EXPECT_TRUE(bp_event_test(events[1]));
  EXPECT_EQ(code_and_json(bp_event_wait(events[0], 0)), "OK");
  EXPECT_TRUE(fixture.every_element_is(8.0f));  // 1 -> 2 -> 4 -> 8: each read the one before
  for (bp_event *event : events) bp_event_destroy(event);
  fixture.destroy_all();
  EXPECT_EQ(log.violations(), "");
}

TEST(InFlightTest, WaitThatRunsOutIsTimeoutAndTheEventStaysInFlight) {
  ViolationLog log;
  AsyncGroup fixture("async", 2, 16);
  bp_event *event = fixture.start();
  EXPECT_EQ(take_code(bp_event_wait(event, 1'000'000)), BP_TIMEOUT);  // 1 ms of its 20
  EXPECT_EQ(code_and_json(bp_event_wait(event, -1)), "OK");
  EXPECT_EQ(code_and_json(bp_event_wait(event, -1)), "OK");  // the outcome, again
  EXPECT_TRUE(fixture.every_element_is(2.0f));
  bp_event_destroy(event);
  fixture.destroy_all();
  EXPECT_EQ(log.violations(), "");
}

TEST(InFlightTest, BlockingCallQueuesBehindTheGroupsCollectivesInFlight) {
  ViolationLog log;
  AsyncGroup fixture("async", 3, 64);
  bp_event *first = fixture.start();
  bp_event *second = fixture.start();
  EXPECT_EQ(code_and_json(bp_all_reduce(fixture.group, fixture.buffers.data(), fixture.buffers.data(), fixture.count,
                                        BP_F32, BP_SUM)),
            "OK");
  EXPECT_TRUE(bp_event_test(first));
  EXPECT_TRUE(bp_event_test(second));
  EXPECT_TRUE(fixture.every_element_is(27.0f));
  bp_event_destroy(second);
  bp_event_destroy(first);
  fixture.destroy_all();
  EXPECT_EQ(log.violations(), "");
}

// plugin.h: a plugin of minor 0 or 1 is never given a second request on a
// comm while one is in flight; the host waits for the first itself.
TEST(InFlightTest, PluginOfMinorOneSeesOneRequestAtATime) {
  ViolationLog log;
  AsyncGroup fixture("async_v1_1", 2, 100);
  std::array<bp_event *, 3> events{};
  for (bp_event *&event : events) event = fixture.start();
  EXPECT_EQ(code_and_json(bp_event_wait(events[2], -1)), "OK");
  EXPECT_TRUE(fixture.every_element_is(8.0f));
  for (bp_event *event : events) bp_event_destroy(event);
  fixture.destroy_all();
  EXPECT_EQ(log.violations(), "");
}

// Four threads each start three collectives on a group of their own (the
// groups share devices), leave them in flight, and the main thread waits
// for all twelve in reverse order; a test on another thread polls them
// meanwhile. For ThreadSanitizer: the host's in-flight bookkeeping across
// threads, on a plugin that completes requests on a thread of its own.
TEST(InFlightTest, CollectivesStartedOnManyThreadsAreWaitedOnAnother) {
  ViolationLog log;
  TempDir dir;
  dir.copy_in(fixture_path("async"));
  Host host = make_host({dir.path().string()});
  std::vector<Device> devices;
  ASSERT_TRUE(find_devices(host, "async", 4, devices));
  constexpr size_t kThreads = 4, kPerThread = 3, kCount = 256;
  struct PerThread {
    std::optional<Group> group;
    std::vector<Buffer> buffers;
    std::vector<bp_event *> events;
  };
  std::vector<PerThread> work(kThreads);
  for (size_t t = 0; t < kThreads; ++t) {
    const std::vector<Device> pair = {devices[t], devices[(t + 1) % 4]};
    Result<Group> group = host.create_group(pair);
    ASSERT_TRUE(group) << group.error().json();
    work[t].group = std::move(group).value();
    for (size_t r = 0; r < 2; ++r) {
      work[t].buffers.push_back(Buffer::create(work[t].group->device(r), kCount * sizeof(float)).value());
      std::vector<float> ones(kCount, 1.0f);
      ASSERT_TRUE(work[t].buffers.back().write(std::span<const float>(ones)));
    }
  }
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      bp_buffer *ranks[2] = {work[t].buffers[0].get(), work[t].buffers[1].get()};
      for (size_t k = 0; k < kPerThread; ++k) {
        bp_event *event = nullptr;
        bp_error *error = bp_all_reduce_async(work[t].group->get(), ranks, ranks, kCount, BP_F32, BP_SUM, &event);
        if (error) {
          ADD_FAILURE() << code_and_json(error);
          return;
        }
        work[t].events.push_back(event);
      }
    });
  }
  for (std::thread &thread : threads) thread.join();
  std::atomic<bool> stop{false};
  std::thread poller([&] {
    while (!stop.load())
      for (PerThread &each : work)
        for (bp_event *event : each.events) (void)bp_event_test(event);
  });
  for (size_t t = kThreads; t-- > 0;)
    for (size_t k = kPerThread; k-- > 0;) EXPECT_EQ(code_and_json(bp_event_wait(work[t].events[k], -1)), "OK");
  stop.store(true);
  poller.join();
  for (PerThread &each : work) {
    for (bp_event *event : each.events) bp_event_destroy(event);
    for (const Buffer &buffer : each.buffers) {
      std::vector<float> got(kCount);
      ASSERT_TRUE(buffer.read(std::span<float>(got)));
      EXPECT_EQ(got[0], 8.0f);
      EXPECT_EQ(got[kCount - 1], 8.0f);
    }
  }
  EXPECT_EQ(log.violations(), "");
}

// ---- destruction in every order -------------------------------------------

TEST(LifetimeTest, EventDestroyedInFlightWaitsForItsCollective) {
  ViolationLog log;
  AsyncGroup fixture("async", 2, 4096);
  bp_event *event = fixture.start();
  bp_event_destroy(event);  // in flight: waits, so the buffers are final and free to go
  EXPECT_TRUE(fixture.every_element_is(2.0f));
  fixture.destroy_all();
  EXPECT_EQ(log.violations(), "");
}

TEST(LifetimeTest, GroupDestroyedWithEventsInFlightWaitsAndTheEventsKeepTheirOutcome) {
  ViolationLog log;
  AsyncGroup fixture("async", 2, 256);
  bp_event *first = fixture.start();
  bp_event *second = fixture.start();
  bp_group_destroy(fixture.group);
  EXPECT_TRUE(bp_event_test(first));
  EXPECT_TRUE(bp_event_test(second));
  EXPECT_EQ(code_and_json(bp_event_wait(second, -1)), "OK");
  EXPECT_TRUE(fixture.every_element_is(4.0f));
  bp_event_destroy(first);
  bp_event_destroy(second);
  fixture.destroy_buffers();
  bp_host_destroy(fixture.host);
  EXPECT_EQ(log.violations(), "");
}

// bp_host_destroy first, then the rest in each of the six orders: what is
// still alive keeps working, and the plugin goes with the last object.
TEST(LifetimeTest, HostDestroyedFirstLeavesItsObjectsWorkingInEveryOrderOfTheRest) {
  std::array<int, 3> order = {0, 1, 2};  // 0: the event, 1: the group, 2: the buffers
  do {
    ViolationLog log;
    AsyncGroup fixture("async", 2, 512);
    bp_event *event = fixture.start();
    bp_host_destroy(fixture.host);
    std::string sequence;
    for (int step : order) {
      if (step == 0) {
        EXPECT_EQ(code_and_json(bp_event_wait(event, -1)), "OK");
        bp_event_destroy(event);
        event = nullptr;
        sequence += " event";
      } else if (step == 1) {
        bp_group_destroy(fixture.group);  // waits for the event if it is still in flight
        fixture.group = nullptr;
        sequence += " group";
      } else {
        if (event) {
          EXPECT_EQ(code_and_json(bp_event_wait(event, -1)), "OK");
        }
        EXPECT_TRUE(fixture.every_element_is(2.0f)) << "order:" << sequence;
        fixture.destroy_buffers();
        sequence += " buffers";
      }
    }
    EXPECT_EQ(log.violations(), "") << "order:" << sequence;
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST(LifetimeTest, HostDestroyedWithACollectiveInFlightOnAFleetGroup) {
  ViolationLog log;
  TempDir dir;
  dir.copy_in(fixture_path("async"));
  const std::string fleet = R"({"version": 1, "plugin_dirs": [")" + dir.path().string() +
                            R"("], "devices": [{"name": "a", "kind": "async", "count": 2}],
                               "groups": [{"name": "pair", "devices": ["a"]}]})";
  const fs::path file = dir.write_file("fleet.json", fleet);
  bp_host *host = nullptr;
  ASSERT_EQ(code_and_json(bp_host_create_from_fleet_file(file.c_str(), nullptr, &host)), "OK");
  bp_group *group = nullptr;
  ASSERT_EQ(code_and_json(bp_host_find_group(host, "pair", &group)), "OK");
  std::vector<bp_buffer *> buffers;
  for (size_t r = 0; r < 2; ++r) {
    bp_buffer *buffer = nullptr;
    ASSERT_EQ(code_and_json(bp_buffer_create(bp_group_device(group, r), 64, &buffer)), "OK");
    buffers.push_back(buffer);
  }
  bp_event *event = nullptr;
  ASSERT_EQ(code_and_json(bp_all_reduce_async(group, buffers.data(), buffers.data(), 16, BP_F32, BP_SUM, &event)),
            "OK");
  bp_host_destroy(host);  // the fleet's group lives on with the event and the buffers
  EXPECT_EQ(code_and_json(bp_event_wait(event, -1)), "OK");
  float got[16] = {};
  EXPECT_EQ(code_and_json(bp_buffer_read(buffers[1], 0, got, sizeof got)), "OK");
  EXPECT_EQ(got[15], 0.0f);  // buffers start zeroed: 0 + 0
  for (bp_buffer *buffer : buffers) bp_buffer_destroy(buffer);
  bp_event_destroy(event);  // the last object: the host, its fleet group and the plugin go now
  EXPECT_EQ(log.violations(), "");
}

// ---- other 1.2 rules ------------------------------------------------------

// A row's max_bytes is refused by the host's check, naming the limit; modes
// are kept per element type (f32 both, i32 out of place only).
TEST(RowsTest, RowLimitsAndModesPerElementTypeAreCheckedByTheHost) {
  TempDir dir;
  dir.copy_in(fixture_path("limits"));
  Host host = make_host({dir.path().string()});
  ASSERT_EQ(host.refused().size(), 0u) << describe_refused(host);
  for (const CapabilityInfo &row : host.capabilities()) {
    if (std::string(row.device_kind) != "limits" || row.collective != BP_ALL_REDUCE) continue;
    if (row.dtypes == (1u << BP_F32)) {
      EXPECT_EQ(row.flags, BP_CAPABILITY_IN_PLACE | BP_CAPABILITY_OUT_OF_PLACE);
      EXPECT_EQ(row.max_bytes, 4096u);
    } else {
      EXPECT_EQ(row.dtypes, 1u << BP_I32);
      EXPECT_EQ(row.flags, BP_CAPABILITY_OUT_OF_PLACE);
      EXPECT_EQ(row.max_bytes, 0u);
    }
  }
  std::vector<Device> devices;
  ASSERT_TRUE(find_devices(host, "limits", 2, devices));
  Result<Group> group = host.create_group(devices);
  ASSERT_TRUE(group) << group.error().json();
  std::vector<Buffer> send, recv;
  std::vector<bp_buffer *> send_raw, recv_raw;
  for (const Device &device : devices) {
    send.push_back(Buffer::create(device, 8192).value());
    recv.push_back(Buffer::create(device, 8192).value());
    send_raw.push_back(send.back().get());
    recv_raw.push_back(recv.back().get());
  }
  EXPECT_TRUE(group->all_reduce(send_raw, recv_raw, 1024, BP_F32, BP_SUM));  // 4096 bytes: at the limit
  Status over = group->all_reduce(send_raw, recv_raw, 1025, BP_F32, BP_SUM);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().code(), BP_UNSUPPORTED_DEVICE) << over.error().json();
  EXPECT_EQ(over.error().field("max_bytes"), "4096") << over.error().json();
  EXPECT_EQ(over.error().field("bytes"), "4100") << over.error().json();
  EXPECT_NE(over.error().message().find("4096"), std::string::npos) << over.error().message();
  EXPECT_TRUE(group->all_reduce(send_raw, recv_raw, 2048, BP_I32, BP_SUM));  // i32 has no limit
  Status in_place = group->all_reduce(send_raw, send_raw, 16, BP_I32, BP_SUM);
  ASSERT_FALSE(in_place);
  EXPECT_EQ(in_place.error().code(), BP_UNSUPPORTED_DEVICE) << in_place.error().json();
  EXPECT_TRUE(group->all_reduce(send_raw, send_raw, 16, BP_F32, BP_SUM));  // f32 runs in place
}

// backplane.h: the library zeroes an out-struct past what it writes, up to
// the caller's struct_size, and keeps the caller's struct_size and next.
TEST(OutStructTest, TailBeyondTheLibrarysFieldsIsZeroedAndNextIsKept) {
  Host host = make_cpu_host(R"({"cpu": {"devices": 2}})");
  bp_device *device = bp_host_device(host.get(), 0);
  ASSERT_NE(device, nullptr);
  constexpr size_t kCallerSize = sizeof(bp_device_info) + 64;
  alignas(bp_device_info) unsigned char storage[kCallerSize];
  std::memset(storage, 0xAB, sizeof storage);
  auto *info = reinterpret_cast<bp_device_info *>(storage);
  info->struct_size = kCallerSize;
  bp_extension_header extension{};
  extension.struct_size = sizeof extension;
  extension.type = 0x7fff0001u;  // no library knows it
  info->next = &extension;
  ASSERT_EQ(code_and_json(bp_device_get_info(device, info)), "OK");
  EXPECT_EQ(info->struct_size, kCallerSize);
  EXPECT_EQ(info->next, &extension);
  EXPECT_STREQ(info->name, "cpu:0");
  for (size_t i = sizeof(bp_device_info); i < kCallerSize; ++i) ASSERT_EQ(storage[i], 0) << "byte " << i;

  bp_device_info huge{};
  huge.struct_size = BP_OUT_STRUCT_SIZE_MAX + 1;  // a size no struct of this API has: refused, nothing written
  EXPECT_EQ(take_code(bp_device_get_info(device, &huge)), BP_INVALID_ARGUMENT);
  EXPECT_EQ(huge.name, nullptr);
}

TEST(ExtensionTest, UnknownExtensionsInAChainAreSkipped) {
  TempDir dir;
  dir.copy_in(plugin_path("cpu"));
  bp_extension_header second{sizeof(bp_extension_header), nullptr, 0x7fff0002u};
  bp_extension_header first{sizeof(bp_extension_header), &second, 0x7fff0001u};
  const std::string directory = dir.path().string();
  const char *dirs[] = {directory.c_str()};
  bp_host_options options{};
  options.struct_size = sizeof options;
  options.next = &first;
  options.plugin_dirs = dirs;
  options.plugin_dir_count = 1;
  options.flags = BP_HOST_IGNORE_ENV_PATH | BP_HOST_IGNORE_INSTALL_PATH;
  bp_host *host = nullptr;
  ASSERT_EQ(code_and_json(bp_host_create(&options, &host)), "OK");
  EXPECT_EQ(bp_host_plugin_count(host), 1u);
  bp_host_destroy(host);
}

TEST(ApiVersionTest, LibraryReportsTheVersionItWasBuiltAs) {
  const uint32_t version = bp_api_version();
  EXPECT_EQ(BP_API_VERSION_MAJOR_OF(version), static_cast<uint32_t>(BP_API_VERSION_MAJOR));
  EXPECT_EQ(BP_API_VERSION_MINOR_OF(version), static_cast<uint32_t>(BP_API_VERSION_MINOR));
  EXPECT_GE(BP_API_VERSION_MINOR_OF(version), 2u);
}

}  // namespace
