// The cpu plugin's _async collectives, through the public API: a large one
// returns while its work still runs (on the plugin's own thread), several on
// one group complete in start order and each sees the one before, a
// blocking call queues behind them, short waits time out and leave the
// event usable, groups on different threads stay right while one thread's
// requests and another's blocking calls share the thread pool, small ones
// complete inside the call, and every collective gives through the queue
// what it gives blocking.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <latch>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backplane/backplane.h"
#include "backplane/backplane.hpp"
#include "test_support.hpp"

namespace {

using backplane::Buffer;
using backplane::Device;
using backplane::Event;
using backplane::Group;
using backplane::Host;
using backplane::Status;
using backplane::testing::make_cpu_host;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kMiB = std::size_t{1} << 20;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::string describe(bp_error *error) {
  if (error == nullptr) return "OK";
  std::string text = std::string(bp_code_name(bp_error_code(error))) + ": " + bp_error_message(error);
  return text;
}

// Rank r's input at element i: small integers, so every sum below is exact
// in f32.
float input(std::size_t r, std::size_t i, float base = 0) { return base + static_cast<float>(i % 5 + r); }

// Devices first..first+n-1 of `host` as one group, with a send and a recv
// buffer of `count` f32 per rank; send holds input(r, i, base).
struct Rig {
  Rig(Host &host, std::size_t first, std::size_t n, std::size_t count, float base = 0)
      : n(n), count(count), base(base) {
    for (std::size_t r = 0; r < n; ++r) {
      devices.push_back(host.find_device("cpu:" + std::to_string(first + r)).value());
    }
    group = host.create_group(devices).value();
    std::vector<float> values(count);
    for (std::size_t r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < count; ++i) values[i] = input(r, i, base);
      send.push_back(Buffer::create(devices[r], bytes()).value());
      recv.push_back(Buffer::create(devices[r], bytes()).value());
      send.back().write(0, values.data(), bytes()).value();
      raw_send.push_back(send.back().get());
      raw_recv.push_back(recv.back().get());
    }
  }
  std::size_t bytes() const { return count * sizeof(float); }
  // The sum over ranks of the inputs at element i.
  float sum(std::size_t i) const {
    float s = 0;
    for (std::size_t r = 0; r < n; ++r) s += input(r, i, base);
    return s;
  }
  bp_event *all_reduce_async(bool in_place) {
    bp_event *event = nullptr;
    bp_error *error = bp_all_reduce_async(group.get(), raw_send.data(), in_place ? raw_send.data() : raw_recv.data(),
                                          count, BP_F32, BP_SUM, &event);
    EXPECT_EQ(error, nullptr) << describe(error);
    return event;
  }
  // Empty when every rank's `buffers` hold want(i) at every element i.
  template <class Want>
  std::string check(std::vector<Buffer> &buffers, Want &&want) const {
    std::vector<float> values(count);
    for (std::size_t r = 0; r < n; ++r) {
      Status read = buffers[r].read(0, values.data(), bytes());
      if (!read) return std::string(read.error().message());
      for (std::size_t i = 0; i < count; ++i) {
        if (values[i] != want(i)) {
          std::ostringstream out;
          out << "rank " << r << ", element " << i << ": " << values[i] << ", want " << want(i);
          return out.str();
        }
      }
    }
    return {};
  }
  void poison(std::vector<Buffer> &buffers) {
    const std::vector<float> values(count, -1.0f);
    for (Buffer &b : buffers) b.write(0, values.data(), bytes()).value();
  }

  std::size_t n, count;
  float base;
  std::vector<Device> devices;
  Group group;
  std::vector<Buffer> send, recv;
  std::vector<bp_buffer *> raw_send, raw_recv;
};

class CpuAsyncRanks : public ::testing::TestWithParam<std::size_t> {};

// 64 MiB per rank (2-4 ms of memory traffic here at best): the call must
// come back with the event still in flight, in far less time than the wait
// then takes. A plugin that completed the call inside collective_start
// would show the event complete at once on every try. Up to five tries, for
// a loaded machine that deschedules this thread right after the start.
TEST_P(CpuAsyncRanks, LargeAllReduceReturnsWhileItsWorkStillRuns) {
  const std::size_t n = GetParam(), count = 64 * kMiB / sizeof(float);
  Host host = make_cpu_host(R"({"cpu": {"devices": 4}})");
  Rig rig(host, 0, n, count);
  rig.poison(rig.recv);
  bool proven = false;
  std::ostringstream tries;
  for (int attempt = 0; attempt < 5 && !proven; ++attempt) {
    const Clock::time_point t0 = Clock::now();
    bp_event *raw = rig.all_reduce_async(false);
    ASSERT_NE(raw, nullptr);
    const double start_ms = ms_since(t0);
    const bool done_at_once = bp_event_test(raw);
    Event event(raw);
    const Clock::time_point t1 = Clock::now();
    Status waited = event.wait();
    const double wait_ms = ms_since(t1);
    ASSERT_TRUE(waited) << waited.error().json();
    EXPECT_TRUE(event.test());
    tries << "\n  try " << attempt << ": start " << start_ms << " ms, complete at once: " << done_at_once
          << ", wait " << wait_ms << " ms";
    proven = !done_at_once && start_ms * 4 < wait_ms;
  }
  EXPECT_TRUE(proven) << "the call never returned well before its work was done:" << tries.str();
  const std::string wrong = rig.check(rig.recv, [&](std::size_t i) { return rig.sum(i); });
  EXPECT_EQ(wrong, "");
}

// Six in-place all_reduces of 8 MiB per rank started back to back, each
// reading what the one before wrote: after k of them every element is
// n^(k-1) times the first sum. Events never complete out of order: polled
// from the last to the first, an event seen complete means every earlier
// one tests complete after it.
TEST_P(CpuAsyncRanks, InPlaceChainCompletesInStartOrder) {
  const std::size_t n = GetParam(), count = 8 * kMiB / sizeof(float), calls = 6;
  Host host = make_cpu_host(R"({"cpu": {"devices": 4}})");
  Rig rig(host, 0, n, count);
  std::vector<Event> events;
  for (std::size_t k = 0; k < calls; ++k) events.emplace_back(rig.all_reduce_async(true));
  const Clock::time_point start = Clock::now();
  for (bool all_done = false; !all_done;) {
    ASSERT_LT(ms_since(start), 60000.0) << "events still in flight after 60 s";
    bool later_done = false;
    all_done = true;
    for (std::size_t k = calls; k-- > 0;) {
      const bool done = events[k].test();
      if (later_done) {
        ASSERT_TRUE(done) << "an event after event " << k << " completed before it";
      }
      later_done = later_done || done;
      all_done = all_done && done;
    }
    std::this_thread::yield();
  }
  for (Event &event : events) ASSERT_TRUE(event.wait(0));
  float factor = 1;
  for (std::size_t k = 1; k < calls; ++k) factor *= static_cast<float>(n);
  const std::string wrong = rig.check(rig.send, [&](std::size_t i) { return factor * rig.sum(i); });
  EXPECT_EQ(wrong, "");
}

// A blocking call on a group with three _async calls still queued runs after
// them, sees their results, and returns with their events complete.
TEST_P(CpuAsyncRanks, BlockingCallRunsAfterTheGroupsAsyncCalls) {
  const std::size_t n = GetParam(), count = 8 * kMiB / sizeof(float);
  Host host = make_cpu_host(R"({"cpu": {"devices": 4}})");
  Rig rig(host, 0, n, count);
  std::vector<Event> events;
  for (int k = 0; k < 3; ++k) events.emplace_back(rig.all_reduce_async(true));
  Status blocking = rig.group.all_reduce(rig.raw_send, rig.raw_send, count, BP_F32, BP_SUM);
  ASSERT_TRUE(blocking) << blocking.error().json();
  for (std::size_t k = 0; k < events.size(); ++k) EXPECT_TRUE(events[k].test()) << "event " << k;
  const float factor = static_cast<float>(n * n * n);
  const std::string wrong = rig.check(rig.send, [&](std::size_t i) { return factor * rig.sum(i); });
  EXPECT_EQ(wrong, "");
  for (Event &event : events) EXPECT_TRUE(event.wait(0));
}

INSTANTIATE_TEST_SUITE_P(Ranks, CpuAsyncRanks, ::testing::Values(std::size_t{2}, std::size_t{4}),
                         [](const ::testing::TestParamInfo<std::size_t> &info) {
                           return std::to_string(info.param) + "ranks";
                         });

// Waits of 0, 1 us and 1 ms on a 4 x 64 MiB all_reduce just started give
// exactly BP_TIMEOUT (a timed one no sooner than its limit) and leave the
// event in flight and valid: a wait without limit then succeeds with the
// right result. Up to five tries, as above.
TEST(CpuAsync, ShortWaitsTimeOutAndALaterWaitSucceeds) {
  const std::size_t n = 4, count = 64 * kMiB / sizeof(float);
  Host host = make_cpu_host(R"({"cpu": {"devices": 4}})");
  Rig rig(host, 0, n, count);
  rig.poison(rig.recv);
  bool zero_timed_out = false, tiny_timed_out = false, ms_timed_out = false;
  for (int attempt = 0; attempt < 5 && !(zero_timed_out && tiny_timed_out && ms_timed_out); ++attempt) {
    Event event(rig.all_reduce_async(false));
    ASSERT_NE(event.get(), nullptr);
    for (const std::int64_t timeout_ns : {std::int64_t{0}, std::int64_t{1000}, std::int64_t{1000000}}) {
      const Clock::time_point start = Clock::now();
      bp_error *error = bp_event_wait(event.get(), timeout_ns);
      const double waited_ms = ms_since(start);
      if (error == nullptr) break;  // done already (a descheduled thread): try again
      const bp_code code = bp_error_code(error);
      const std::string text = describe(error);
      bp_error_destroy(error);
      ASSERT_EQ(code, BP_TIMEOUT) << text;
      if (timeout_ns == 0) zero_timed_out = true;
      if (timeout_ns == 1000) tiny_timed_out = true;
      if (timeout_ns == 1000000) {
        ms_timed_out = true;
        EXPECT_GE(waited_ms, 1.0) << "a wait of 1 ms timed out after " << waited_ms << " ms";
      }
    }
    Status waited = event.wait();
    ASSERT_TRUE(waited) << waited.error().json();
    EXPECT_TRUE(event.test());
    EXPECT_TRUE(event.wait(0)) << "a completed event's outcome changed";
  }
  EXPECT_TRUE(zero_timed_out) << "bp_event_wait(e, 0) never reported BP_TIMEOUT on a request in flight";
  EXPECT_TRUE(tiny_timed_out) << "bp_event_wait(e, 1 us) never reported BP_TIMEOUT on a request in flight";
  EXPECT_TRUE(ms_timed_out) << "bp_event_wait(e, 1 ms) never reported BP_TIMEOUT on a request in flight";
  const std::string wrong = rig.check(rig.recv, [&](std::size_t i) { return rig.sum(i); });
  EXPECT_EQ(wrong, "");
}

// Two groups (cpu:0-1 and cpu:2-3) on two threads at once: each thread
// chains four _async all_reduces in place; then one thread's _async calls
// run while the other makes blocking calls, so the queue's thread and a
// blocking caller of another group use the thread pool at the same time
// (the one that finds it busy runs on its own thread).
TEST(CpuAsync, TwoGroupsOnTwoThreadsStayRight) {
  const std::size_t count = 8 * kMiB / sizeof(float);
  Host host = make_cpu_host(R"({"cpu": {"devices": 4}})");
  Rig a(host, 0, 2, count, 0), b(host, 2, 2, count, 100);
  std::string wrong_a, wrong_b;
  {
    std::latch go(2);
    auto chain = [&go](Rig &rig, std::string &wrong) {
      go.arrive_and_wait();
      std::vector<Event> events;
      for (int k = 0; k < 4; ++k) events.emplace_back(rig.all_reduce_async(true));
      for (Event &event : events) {
        if (Status waited = event.wait(); !waited) wrong = std::string(waited.error().message());
      }
      if (wrong.empty()) wrong = rig.check(rig.send, [&](std::size_t i) { return 8 * rig.sum(i); });
    };
    std::thread ta(chain, std::ref(a), std::ref(wrong_a));
    std::thread tb(chain, std::ref(b), std::ref(wrong_b));
    ta.join();
    tb.join();
  }
  EXPECT_EQ(wrong_a, "") << "group cpu:0-1";
  EXPECT_EQ(wrong_b, "") << "group cpu:2-3";

  // a.send holds 8 x its first sum now; four more calls in place make it 128 x.
  Rig c(host, 2, 2, count, 50);
  wrong_a.clear();
  wrong_b.clear();
  {
    std::latch go(2);
    std::thread ta([&] {
      go.arrive_and_wait();
      std::vector<Event> events;
      for (int k = 0; k < 4; ++k) events.emplace_back(a.all_reduce_async(true));
      for (Event &event : events) {
        if (Status waited = event.wait(); !waited) wrong_a = std::string(waited.error().message());
      }
      if (wrong_a.empty()) wrong_a = a.check(a.send, [&](std::size_t i) { return 128 * a.sum(i); });
    });
    std::thread tc([&] {
      go.arrive_and_wait();
      for (int k = 0; k < 10 && wrong_b.empty(); ++k) {
        c.poison(c.recv);
        Status status = c.group.all_reduce(c.raw_send, c.raw_recv, count, BP_F32, BP_SUM);
        wrong_b = status ? c.check(c.recv, [&](std::size_t i) { return c.sum(i); })
                         : std::string(status.error().message());
      }
    });
    ta.join();
    tc.join();
  }
  EXPECT_EQ(wrong_a, "") << "_async group cpu:0-1";
  EXPECT_EQ(wrong_b, "") << "blocking group cpu:2-3";
}

// Below async_threshold_bytes an _async call completes inside the call: its
// event tests complete at once. Behind a large request of its group it
// waits its turn instead, and never completes before it.
TEST(CpuAsync, SmallCallsCompleteAtOnceUnlessBehindALargeOne) {
  Host host = make_cpu_host(R"({"cpu": {"devices": 4}})");
  Rig small(host, 0, 2, 256);  // 1 KiB per rank, 4 KiB of traffic
  for (int k = 0; k < 3; ++k) {
    small.poison(small.recv);
    Event event(small.all_reduce_async(false));
    EXPECT_TRUE(event.test()) << "a 1 KiB _async all_reduce was still in flight when its call returned";
    ASSERT_TRUE(event.wait(0));
    EXPECT_EQ(small.check(small.recv, [&](std::size_t i) { return small.sum(i); }), "");
  }

  // Same devices, a second group: buffers of 32 MiB.
  Rig large(host, 0, 2, 32 * kMiB / sizeof(float));
  // Then the small call on the large one's group, so that it must queue.
  std::vector<Buffer> tiny_send, tiny_recv;
  std::vector<bp_buffer *> raw_tiny_send, raw_tiny_recv;
  for (std::size_t r = 0; r < 2; ++r) {
    std::vector<float> values(256, static_cast<float>(r + 1));
    tiny_send.push_back(Buffer::create(large.devices[r], 256 * sizeof(float)).value());
    tiny_recv.push_back(Buffer::create(large.devices[r], 256 * sizeof(float)).value());
    tiny_send.back().write(0, values.data(), 256 * sizeof(float)).value();
    raw_tiny_send.push_back(tiny_send.back().get());
    raw_tiny_recv.push_back(tiny_recv.back().get());
  }
  for (int k = 0; k < 3; ++k) {
    Event big(large.all_reduce_async(false));
    bp_event *raw = nullptr;
    bp_error *error =
        bp_all_reduce_async(large.group.get(), raw_tiny_send.data(), raw_tiny_recv.data(), 256, BP_F32, BP_SUM, &raw);
    ASSERT_EQ(error, nullptr) << describe(error);
    Event tiny(raw);
    if (tiny.test()) {
      EXPECT_TRUE(big.test()) << "the small call completed before the large one started before it";
    }
    ASSERT_TRUE(tiny.wait());
    EXPECT_TRUE(big.test()) << "the small call completed before the large one started before it";
    ASSERT_TRUE(big.wait());
    std::vector<float> values(256);
    for (std::size_t r = 0; r < 2; ++r) {
      ASSERT_TRUE(tiny_recv[r].read(0, values.data(), 256 * sizeof(float)));
      EXPECT_EQ(values[0], 3.0f);
      EXPECT_EQ(values[255], 3.0f);
    }
  }
  EXPECT_EQ(large.check(large.recv, [&](std::size_t i) { return large.sum(i); }), "");
}

// Destroying an event still in flight, or its group, leaves the results in
// the buffers once the call returns (the plugin finishes the request first).
TEST(CpuAsync, DestroyingAnEventOrGroupInFlightFinishesTheWork) {
  const std::size_t count = 32 * kMiB / sizeof(float);
  Host host = make_cpu_host(R"({"cpu": {"devices": 4}})");
  Rig rig(host, 0, 2, count);
  rig.poison(rig.recv);
  bp_event_destroy(rig.all_reduce_async(false));
  EXPECT_EQ(rig.check(rig.recv, [&](std::size_t i) { return rig.sum(i); }), "") << "after bp_event_destroy";

  rig.poison(rig.recv);
  bp_event *first = rig.all_reduce_async(false);
  bp_event *second = rig.all_reduce_async(true);
  rig.group = Group();  // destroyed while both may be in flight
  EXPECT_EQ(rig.check(rig.recv, [&](std::size_t i) { return rig.sum(i); }), "") << "after bp_group_destroy";
  // The second, in place, ran after the first had read send.
  EXPECT_EQ(rig.check(rig.send, [&](std::size_t i) { return rig.sum(i); }), "") << "after bp_group_destroy";
  bp_error *error = bp_event_wait(first, -1);
  EXPECT_EQ(error, nullptr) << describe(error);
  bp_error_destroy(error);
  error = bp_event_wait(second, -1);
  EXPECT_EQ(error, nullptr) << describe(error);
  bp_error_destroy(error);
  bp_event_destroy(first);
  bp_event_destroy(second);
}

// Every collective through the queue (async_threshold_bytes 0 sends every
// _async call there) writes exactly what the same blocking call writes:
// 3 ranks, i32 sums (exact), root 1, out of place, a count that is no
// multiple of a vector.
TEST(CpuAsync, EveryCollectiveThroughTheQueueMatchesTheBlockingCall) {
  const std::size_t n = 3, count = 1003;
  Host host = make_cpu_host(R"({"cpu": {"devices": 4, "async_threshold_bytes": 0}})");
  std::vector<Device> devices;
  for (std::size_t r = 0; r < n; ++r) devices.push_back(host.find_device("cpu:" + std::to_string(r)).value());
  Group group = host.create_group(devices).value();
  const std::size_t block = count * sizeof(std::int32_t), all = n * block;
  std::vector<Buffer> send, recv;
  std::vector<bp_buffer *> raw_send(n), raw_recv(n);
  for (std::size_t r = 0; r < n; ++r) {
    send.push_back(Buffer::create(devices[r], all).value());
    recv.push_back(Buffer::create(devices[r], all).value());
    std::vector<std::int32_t> values(n * count);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::int32_t>(i * 7 + r * 1000 + 1);
    send[r].write(0, values.data(), all).value();
  }
  const std::vector<std::int32_t> poison(n * count, -12345);
  auto read_all = [&] {
    std::vector<std::vector<std::int32_t>> out(n, std::vector<std::int32_t>(n * count));
    for (std::size_t r = 0; r < n; ++r) recv[r].read(0, out[r].data(), all).value();
    return out;
  };
  for (std::uint32_t c = 0; c < BP_BARRIER; ++c) {
    const auto collective = static_cast<bp_collective>(c);
    SCOPED_TRACE(bp_collective_name(collective));
    for (std::size_t r = 0; r < n; ++r) {
      const bp_rank_buffers use = bp_rank_buffers_of(collective, n, r == 1);
      raw_send[r] = use.uses_send ? send[r].get() : nullptr;
      raw_recv[r] = use.uses_recv ? recv[r].get() : nullptr;
    }
    bp_collective_request request{};
    request.struct_size = sizeof request;
    request.collective = collective;
    request.dtype = BP_I32;
    request.reduce_op = BP_SUM;
    request.root = 1;
    request.count = count;
    request.send = raw_send.data();
    request.recv = raw_recv.data();

    for (Buffer &b : recv) b.write(0, poison.data(), all).value();
    Status blocking = group.run(request);
    ASSERT_TRUE(blocking) << blocking.error().json();
    const auto want = read_all();

    for (Buffer &b : recv) b.write(0, poison.data(), all).value();
    auto started = group.start(request);
    ASSERT_TRUE(started) << started.error().json();
    Event event = std::move(started).value();
    Status waited = event.wait();
    ASSERT_TRUE(waited) << waited.error().json();
    EXPECT_TRUE(read_all() == want) << "the _async call wrote something else than the blocking one";
  }
  bp_event *barrier = nullptr;
  bp_error *error = bp_barrier_async(group.get(), &barrier);
  ASSERT_EQ(error, nullptr) << describe(error);
  Event event(barrier);
  EXPECT_TRUE(event.wait());
}

}  // namespace
