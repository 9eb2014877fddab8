// The vulkan plugin's collectives in flight: an _async call returns while
// the device works, waits time out and leave the request valid, and calls
// complete in start order. Apart from vulkan_test so that the tsan preset
// runs them (label concurrency).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "vulkan_support.hpp"

namespace backplane::testing {
namespace {

// ---- asynchrony -------------------------------------------------------------------

using Clock = std::chrono::steady_clock;

// An _async all_reduce returns while the device works: right after the
// start the event is not complete, and the start took a small part of the
// collective's time. A larger buffer is tried should the first finish even so.
TEST(VulkanAsync, AllReduceReturnsBeforeTheWorkIsDone) {
  Host host = make_builtin_host(kTwoRanks);
  REQUIRE_VULKAN_DEVICES(host, 2, devices);
  const std::vector<Device> ranks(devices.begin(), devices.begin() + 2);
  Group group = host.create_group(ranks).value();
  bool seen_in_flight = false;
  std::string last_start;
  for (size_t mebibytes : {32, 128}) {
    SCOPED_TRACE(std::to_string(mebibytes) + " MiB per buffer");
    const size_t count = mebibytes << 18;
    std::vector<Buffer> send = filled_buffers<float>(ranks, count, [](size_t r) { return float(r + 1); });
    std::vector<Buffer> recv = filled_buffers<float>(ranks, count, [](size_t) { return 0.0f; });
    // The pipeline is created at its first use, which is not the collective's time.
    ASSERT_TRUE(group.all_reduce(raw_handles(send), raw_handles(recv), 1, BP_F32, BP_SUM));
    const Clock::time_point before = Clock::now();
    Result<Event> event = all_reduce_async(group, raw_handles(send), raw_handles(recv), count, BP_F32, BP_SUM);
    const Clock::time_point started = Clock::now();
    ASSERT_TRUE(event) << event.error().json();
    const bool complete_at_start = event->test();
    const Status waited = event->wait();
    const Clock::time_point finished = Clock::now();
    ASSERT_TRUE(waited) << waited.error().json();
    for (size_t r = 0; r < 2; ++r) EXPECT_EQ(mismatches(recv[r], 0, count, 3.0f), "") << "rank " << r;
    last_start = std::to_string(mebibytes) + " MiB: the start took " + std::to_string(milliseconds(started - before)) +
                 " ms of the collective's " + std::to_string(milliseconds(finished - before)) + " ms" +
                 (complete_at_start ? ", and the event was complete right after it" : "");
    if (complete_at_start || started - before >= (finished - before) / 4) continue;
    seen_in_flight = true;
    break;
  }
  EXPECT_TRUE(seen_in_flight) << "no all_reduce was in flight right after a short start; last: " << last_start;
}

// A wait with a zero and a small limit while the work runs is TIMEOUT and
// leaves the event valid; several calls in flight complete in start order,
// each reading what the one before wrote (sum, prod, sum on {1, 2}: 3, 9,
// 18), with an empty call and a barrier behind them.
TEST(VulkanAsync, TimeoutLeavesTheEventValidAndCallsCompleteInStartOrder) {
  CapturedLog log;
  Host host = make_builtin_host(kTwoRanks);
  REQUIRE_VULKAN_DEVICES(host, 2, devices);
  const std::vector<Device> ranks(devices.begin(), devices.begin() + 2);
  Group group = host.create_group(ranks).value();
  const size_t count = size_t{16} << 20;  // 64 MiB of f32
  std::vector<Buffer> buffers = filled_buffers<float>(ranks, count, [](size_t r) { return float(r + 1); });
  const std::vector<bp_buffer *> raw = raw_handles(buffers);
  ASSERT_TRUE(group.all_reduce(raw, raw, 0, BP_F32, BP_PROD));
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

  const Status zero = events.back().wait(0);
  ASSERT_FALSE(zero) << "three 64 MiB all_reduces finished before a zero wait";
  EXPECT_EQ(zero.error().code(), BP_TIMEOUT) << zero.error().json();
  EXPECT_NE(zero.error().message().find("VK_TIMEOUT"), std::string::npos) << zero.error().message();
  const Status small = events.back().wait(1000);
  if (!small) {
    EXPECT_EQ(small.error().code(), BP_TIMEOUT) << small.error().json();
  }

  // Never complete before an earlier one.
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < deadline) {
    // Tested last first: once a call is seen complete, every earlier one must be.
    std::vector<bool> done(events.size());
    for (size_t k = events.size(); k-- > 0;) done[k] = events[k].test();
    for (size_t k = 1; k < done.size(); ++k) {
      EXPECT_FALSE(done[k] && !done[k - 1]) << "call " << k << " complete before call " << k - 1;
    }
    if (done.back()) break;
  }
  for (Event &event : events) ASSERT_TRUE(event.wait());
  for (size_t r = 0; r < 2; ++r) EXPECT_EQ(mismatches(buffers[r], 0, count, 18.0f), "") << "rank " << r;
  expect_no_validation_messages(log);
}

}  // namespace
}  // namespace backplane::testing
