// Collectives from many threads at once on the cpu plugin: groups on disjoint and on
// shared devices, several hosts, async events in flight, and racing starts on one group.
// The tsan preset runs exactly this file's label (concurrency); every result is checked.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <latch>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backplane_reference/collective_reference.hpp"
#include "test_support.hpp"

namespace {

using backplane::Buffer;
using backplane::Device;
using backplane::Event;
using backplane::Group;
using backplane::Host;
using backplane::Result;
using backplane::Status;
using backplane::testing::make_cpu_host;

// One group's buffers and the collectives run on them. Step k picks the
// collective (all_reduce in place, all_gather, broadcast with a moving
// root, reduce_scatter), writes fresh inputs that depend on (seed, k, rank,
// element), and verify(k) checks every output element against a reference.
class Workload {
 public:
  Workload(const std::vector<Device> &devices, std::size_t count, std::uint64_t seed)
      : n_(devices.size()), count_(count), seed_(seed) {
    for (const Device &device : devices) {
      send_.push_back(Buffer::create(device, bytes()).value());
      recv_.push_back(Buffer::create(device, bytes()).value());
      raw_send_.push_back(send_.back().get());
      raw_recv_.push_back(recv_.back().get());
    }
  }

  // Inputs for step k; recv gets a sentinel.
  void prepare(std::size_t k) {
    std::vector<std::uint64_t> values(count_ * n_);
    const std::vector<std::uint64_t> sentinel(count_ * n_, kSentinel);
    for (std::size_t r = 0; r < n_; ++r) {
      for (std::size_t e = 0; e < values.size(); ++e) values[e] = input(k, r, e);
      Status written = send_[r].write(0, values.data(), bytes());
      if (!written) throw backplane::Exception(written.error());
      written = recv_[r].write(0, sentinel.data(), bytes());
      if (!written) throw backplane::Exception(written.error());
    }
  }

  bp_collective_request request(std::size_t k) const {
    bp_collective_request request{};
    request.struct_size = sizeof request;
    request.dtype = BP_U64;
    request.reduce_op = BP_SUM;
    request.count = count_;
    request.send = raw_send_.data();
    request.recv = raw_recv_.data();
    switch (k % 4) {
      case 0:
        request.collective = BP_ALL_REDUCE;
        request.recv = raw_send_.data();  // in place
        break;
      case 1: request.collective = BP_ALL_GATHER; break;
      case 2:
        request.collective = BP_BROADCAST;
        request.root = static_cast<std::uint32_t>(k % n_);
        break;
      default: request.collective = BP_REDUCE_SCATTER; break;
    }
    return request;
  }

  // Runs step k through the collective's own blocking call.
  Status run(Group &group, std::size_t k) {
    const bp_collective_request r = request(k);
    switch (r.collective) {
      case BP_ALL_REDUCE: return group.all_reduce(raw_send_, raw_send_, count_, BP_U64, BP_SUM);
      case BP_ALL_GATHER: return group.all_gather(raw_send_, raw_recv_, count_, BP_U64);
      case BP_BROADCAST: return group.broadcast(raw_send_, raw_recv_, count_, BP_U64, r.root);
      default: return group.reduce_scatter(raw_send_, raw_recv_, count_, BP_U64, BP_SUM);
    }
  }

  // "" when every output of step k is right, else what is wrong.
  std::string verify(std::size_t k) const {
    const bp_collective_request r = request(k);
    std::vector<std::uint64_t> got(count_ * n_);
    for (std::size_t rank = 0; rank < n_; ++rank) {
      const Buffer &out = r.collective == BP_ALL_REDUCE ? send_[rank] : recv_[rank];
      Status read = out.read(0, got.data(), bytes());
      if (!read) return std::string(read.error().message());
      for (std::size_t e = 0; e < got.size(); ++e) {
        const std::uint64_t want = expected(k, r, rank, e);
        if (got[e] != want) {
          return std::string(bp_collective_name(static_cast<bp_collective>(r.collective))) + " step " +
                 std::to_string(k) + " rank " + std::to_string(rank) + " element " + std::to_string(e) +
                 ": expected " + std::to_string(want) + ", got " + std::to_string(got[e]);
        }
      }
    }
    return "";
  }

  // "" when step k's buffers still hold what prepare(k) wrote.
  std::string verify_untouched(std::size_t k) const {
    std::vector<std::uint64_t> got(count_ * n_);
    for (std::size_t rank = 0; rank < n_; ++rank) {
      Status read = send_[rank].read(0, got.data(), bytes());
      if (!read) return std::string(read.error().message());
      for (std::size_t e = 0; e < got.size(); ++e)
        if (got[e] != input(k, rank, e)) return "a refused call wrote send of rank " + std::to_string(rank);
      read = recv_[rank].read(0, got.data(), bytes());
      if (!read) return std::string(read.error().message());
      for (std::size_t e = 0; e < got.size(); ++e)
        if (got[e] != kSentinel) return "a refused call wrote recv of rank " + std::to_string(rank);
    }
    return "";
  }

 private:
  static constexpr std::uint64_t kSentinel = 0xDEADBEEFCAFEF00Dull;

  std::size_t bytes() const { return count_ * n_ * sizeof(std::uint64_t); }

  std::uint64_t input(std::size_t k, std::size_t rank, std::size_t element) const {
    return backplane::reference::input_hash(seed_ * 1'000'003 + k, rank, element);
  }

  std::uint64_t expected(std::size_t k, const bp_collective_request &r, std::size_t rank, std::size_t e) const {
    switch (r.collective) {
      case BP_ALL_REDUCE: {
        if (e >= count_) return input(k, rank, e);  // past count: untouched input
        std::uint64_t sum = 0;
        for (std::size_t j = 0; j < n_; ++j) sum += input(k, j, e);
        return sum;
      }
      case BP_ALL_GATHER: return input(k, e / count_, e % count_);
      case BP_BROADCAST: return e < count_ ? input(k, r.root, e) : kSentinel;
      default: {
        if (e >= count_) return kSentinel;
        std::uint64_t sum = 0;
        for (std::size_t j = 0; j < n_; ++j) sum += input(k, j, rank * count_ + e);
        return sum;
      }
    }
  }

  std::size_t n_, count_;
  std::uint64_t seed_;
  std::vector<Buffer> send_, recv_;
  std::vector<bp_buffer *> raw_send_, raw_recv_;
};

std::vector<Device> find_devices(Host &host, const std::vector<int> &indices) {
  std::vector<Device> devices;
  for (int index : indices) devices.push_back(host.find_device("cpu:" + std::to_string(index)).value());
  return devices;
}

// Collects failures from worker threads; reported on the test's thread.
class Failures {
 public:
  void add(const std::string &what) {
    std::lock_guard lock(mutex_);
    list_.push_back(what);
  }
  void report() const {
    std::lock_guard lock(mutex_);
    for (const std::string &what : list_) ADD_FAILURE() << what;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> list_;
};

// Runs `iterations` steps of a fresh Workload on `group`, recording failures.
void run_steps(Group &group, const std::vector<Device> &devices, std::size_t count, std::uint64_t seed,
               std::size_t iterations, Failures &failures) {
  try {
    Workload work(devices, count, seed);
    for (std::size_t k = 0; k < iterations; ++k) {
      work.prepare(k);
      Status status = work.run(group, k);
      if (!status) {
        failures.add("seed " + std::to_string(seed) + " step " + std::to_string(k) + ": " +
                     std::string(status.error().json()));
        return;
      }
      if (std::string wrong = work.verify(k); !wrong.empty()) {
        failures.add("seed " + std::to_string(seed) + ": " + wrong);
        return;
      }
    }
  } catch (const std::exception &e) {
    failures.add("seed " + std::to_string(seed) + ": " + e.what());
  }
}

constexpr std::size_t kThreads = 8;
constexpr std::size_t kIterations = 64;
constexpr std::size_t kCount = 257;

// Eight threads, each with its own group on two devices of its own (16
// devices in all), created concurrently and run concurrently.
TEST(Concurrency, EightThreadsOnDisjointDevices) {
  Host host = make_cpu_host(R"({"cpu": {"devices": 16}})");
  ASSERT_EQ(host.devices().size(), 16u);
  Failures failures;
  std::latch go(kThreads);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        const std::vector<Device> devices =
            find_devices(host, {static_cast<int>(2 * t), static_cast<int>(2 * t + 1)});
        go.arrive_and_wait();
        Group group = host.create_group(devices).value();
        run_steps(group, devices, kCount, t, kIterations, failures);
      } catch (const std::exception &e) {
        failures.add("thread " + std::to_string(t) + ": " + e.what());
      }
    });
  }
  for (std::thread &thread : threads) thread.join();
  failures.report();
}

// Eight groups over the same four devices, in different rank orders, each
// run by its own thread with its own buffers: groups may share devices.
TEST(Concurrency, EightGroupsSharingDevices) {
  Host host = make_cpu_host(R"({"cpu": {"devices": 8}})");
  Failures failures;
  std::latch go(kThreads);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        std::vector<int> order;
        for (int r = 0; r < 4; ++r) order.push_back(static_cast<int>((r + t) % 4));
        const std::vector<Device> devices = find_devices(host, order);
        Group group = host.create_group(devices).value();
        go.arrive_and_wait();
        run_steps(group, devices, kCount, 100 + t, kIterations, failures);
      } catch (const std::exception &e) {
        failures.add("thread " + std::to_string(t) + ": " + e.what());
      }
    });
  }
  for (std::thread &thread : threads) thread.join();
  failures.report();
}

// Several hosts in one process, each with its own cpu plugin state and
// device count, created, used and destroyed concurrently, twice over.
TEST(Concurrency, SeveralHostsAtOnce) {
  constexpr std::size_t kHosts = 4;
  Failures failures;
  std::latch go(kHosts);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < kHosts; ++t) {
    threads.emplace_back([&, t] {
      go.arrive_and_wait();
      for (int round = 0; round < 2; ++round) {
        try {
          const std::size_t devices_wanted = 2 + t;
          Host host = make_cpu_host(R"({"cpu": {"devices": )" + std::to_string(devices_wanted) + "}}");
          const std::vector<Device> devices = host.devices();
          if (devices.size() != devices_wanted) {
            failures.add("host " + std::to_string(t) + " has " + std::to_string(devices.size()) +
                         " devices, configured " + std::to_string(devices_wanted));
            return;
          }
          Group group = host.create_group(devices).value();
          run_steps(group, devices, kCount, 200 + 10 * t + round, kIterations / 2, failures);
        } catch (const std::exception &e) {
          failures.add("host " + std::to_string(t) + ": " + e.what());
        }
      }
    });
  }
  for (std::thread &thread : threads) thread.join();
  failures.report();
}

// Async collectives started on eight groups (through bp_*_async and through
// bp_run_collective_async), all in flight together, then polled with
// bp_event_test until complete and waited.
TEST(Concurrency, AsyncCollectivesInFlightOnSeveralGroups) {
  Host host = make_cpu_host(R"({"cpu": {"devices": 16}})");
  std::vector<std::vector<Device>> devices;
  std::vector<Group> groups;
  std::vector<Workload> work;
  for (std::size_t g = 0; g < kThreads; ++g) {
    devices.push_back(find_devices(host, {static_cast<int>(2 * g), static_cast<int>(2 * g + 1)}));
    groups.push_back(host.create_group(devices.back()).value());
    work.emplace_back(devices.back(), kCount, 300 + g);
  }
  for (std::size_t k = 0; k < 8; ++k) {
    std::vector<Event> events;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      work[g].prepare(k + g);
      const bp_collective_request request = work[g].request(k + g);
      if (g % 2 == 0) {
        Result<Event> started = groups[g].start(request);
        ASSERT_TRUE(started) << started.error().json();
        events.push_back(std::move(started).value());
      } else {
        bp_event *raw = nullptr;
        bp_error *error = nullptr;
        switch (request.collective) {
          case BP_ALL_REDUCE:
            error = bp_all_reduce_async(groups[g].get(), request.send, request.recv, request.count, BP_U64, BP_SUM,
                                        &raw);
            break;
          case BP_ALL_GATHER:
            error = bp_all_gather_async(groups[g].get(), request.send, request.recv, request.count, BP_U64, &raw);
            break;
          case BP_BROADCAST:
            error = bp_broadcast_async(groups[g].get(), request.send, request.recv, request.count, BP_U64,
                                       request.root, &raw);
            break;
          default:
            error = bp_reduce_scatter_async(groups[g].get(), request.send, request.recv, request.count, BP_U64,
                                            BP_SUM, &raw);
            break;
        }
        ASSERT_EQ(error, nullptr) << bp_error_json(error);
        ASSERT_NE(raw, nullptr);
        events.emplace_back(raw);
      }
    }
    // Poll until every event reports completion (bounded: a hang fails).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::vector<bool> done(events.size(), false);
    std::size_t remaining = events.size();
    while (remaining > 0 && std::chrono::steady_clock::now() < deadline) {
      for (std::size_t g = 0; g < events.size(); ++g) {
        if (!done[g] && events[g].test()) {
          done[g] = true;
          --remaining;
        }
      }
      if (remaining > 0) std::this_thread::yield();
    }
    ASSERT_EQ(remaining, 0u) << "events still in flight after 30 s";
    for (std::size_t g = 0; g < events.size(); ++g) {
      EXPECT_TRUE(events[g].test()) << "test() went back to false";
      Status outcome = events[g].wait(0);
      ASSERT_TRUE(outcome) << outcome.error().json();
      Status again = events[g].wait(0);
      EXPECT_TRUE(again) << "a completed event's outcome changed";
      EXPECT_EQ(work[g].verify(k + g), "");
    }
  }
}

// Threads start async collectives on their own groups and leave them in
// flight; the events are waited by the main thread, in reverse order.
TEST(Concurrency, EventsStartedOnManyThreadsWaitedOnAnother) {
  Host host = make_cpu_host(R"({"cpu": {"devices": 16}})");
  Failures failures;
  std::vector<std::vector<Device>> devices(kThreads);
  std::vector<Group> groups(kThreads);
  std::vector<std::unique_ptr<Workload>> work(kThreads);
  std::vector<Event> events(kThreads);
  std::latch go(kThreads);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        devices[t] = find_devices(host, {static_cast<int>(15 - 2 * t), static_cast<int>(14 - 2 * t)});
        groups[t] = host.create_group(devices[t]).value();
        work[t] = std::make_unique<Workload>(devices[t], kCount, 400 + t);
        work[t]->prepare(t);
        go.arrive_and_wait();
        events[t] = groups[t].start(work[t]->request(t)).value();
      } catch (const std::exception &e) {
        failures.add("thread " + std::to_string(t) + ": " + e.what());
      }
    });
  }
  for (std::thread &thread : threads) thread.join();
  failures.report();
  ASSERT_FALSE(HasFailure());
  for (std::size_t t = kThreads; t-- > 0;) {
    Status outcome = events[t].wait(10'000'000'000);
    ASSERT_TRUE(outcome) << outcome.error().json();
    EXPECT_TRUE(events[t].test());
    EXPECT_EQ(work[t]->verify(t), "");
  }
}

// Several collectives started back to back on one group, on different
// buffers, all in flight before the first is waited.
TEST(Concurrency, SeveralEventsInFlightOnOneGroup) {
  Host host = make_cpu_host(R"({"cpu": {"devices": 8}})");
  const std::vector<Device> devices = find_devices(host, {0, 1, 2});
  Group group = host.create_group(devices).value();
  std::vector<std::unique_ptr<Workload>> work;
  std::vector<Event> events;
  for (std::size_t k = 0; k < 4; ++k) {
    work.push_back(std::make_unique<Workload>(devices, kCount, 500 + k));
    work.back()->prepare(k);
    Result<Event> started = group.start(work.back()->request(k));
    ASSERT_TRUE(started) << started.error().json();
    events.push_back(std::move(started).value());
  }
  for (std::size_t k = events.size(); k-- > 0;) {
    Status outcome = events[k].wait(10'000'000'000);
    ASSERT_TRUE(outcome) << outcome.error().json();
    EXPECT_EQ(work[k]->verify(k), "");
  }
}

// Two threads start collectives on the same group at once, each on its own
// buffers. backplane.h: a second start while one is being started returns
// BP_INVALID_ARGUMENT. Which calls collide is up to the scheduler, so each
// call must either succeed with right results or be refused with exactly
// that code and write nothing; at least one call succeeds, since a refusal
// means another call holds the group; afterwards the group works.
TEST(Concurrency, RacingStartsOnOneGroupSucceedOrAreRefused) {
  Host host = make_cpu_host(R"({"cpu": {"devices": 8}})");
  const std::vector<Device> devices = find_devices(host, {0, 1, 2, 3});
  Group group = host.create_group(devices).value();
  constexpr std::size_t kRacers = 4;
  Failures failures;
  std::atomic<std::size_t> succeeded{0}, refused{0};
  std::latch go(kRacers);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < kRacers; ++t) {
    threads.emplace_back([&, t] {
      try {
        Workload work(devices, 4096, 600 + t);
        go.arrive_and_wait();
        for (std::size_t k = 0; k < 100; ++k) {
          work.prepare(k);
          // Even threads use the blocking call, odd ones start and wait.
          bool ok = true;
          bp_code code = BP_OK;
          std::string json;
          if (t % 2 == 0) {
            Status status = work.run(group, k);
            if (!status) ok = false, code = status.error().code(), json = status.error().json();
          } else {
            Result<Event> started = group.start(work.request(k));
            if (!started) {
              ok = false, code = started.error().code(), json = started.error().json();
            } else if (Status waited = started->wait(); !waited) {
              failures.add("thread " + std::to_string(t) + ": a started collective failed: " +
                           std::string(waited.error().json()));
              return;
            }
          }
          if (ok) {
            ++succeeded;
            if (std::string wrong = work.verify(k); !wrong.empty()) {
              failures.add("thread " + std::to_string(t) + ": " + wrong);
              return;
            }
          } else if (code == BP_INVALID_ARGUMENT) {
            ++refused;
            if (std::string wrong = work.verify_untouched(k); !wrong.empty()) {
              failures.add("thread " + std::to_string(t) + ": " + wrong);
              return;
            }
          } else {
            failures.add("thread " + std::to_string(t) + ": expected OK or INVALID_ARGUMENT, got " + json);
            return;
          }
        }
      } catch (const std::exception &e) {
        failures.add("thread " + std::to_string(t) + ": " + e.what());
      }
    });
  }
  for (std::thread &thread : threads) thread.join();
  failures.report();
  EXPECT_GE(succeeded.load(), 1u);
  Workload after(devices, 16, 700);
  after.prepare(0);
  Status status = after.run(group, 0);
  ASSERT_TRUE(status) << status.error().json();
  EXPECT_EQ(after.verify(0), "");
  std::printf("racing starts: %zu succeeded, %zu refused\n", succeeded.load(), refused.load());
}


// The host is thread-safe: while four threads run collectives, two others
// create and destroy groups and buffers and read the host's listings.
TEST(Concurrency, HostCallsWhileCollectivesRun) {
  Host host = make_cpu_host(R"({"cpu": {"devices": 8}})");
  Failures failures;
  std::atomic<bool> stop{false};
  std::vector<std::thread> runners, churners;
  for (std::size_t t = 0; t < 4; ++t) {
    runners.emplace_back([&, t] {
      try {
        const std::vector<Device> devices = find_devices(host, {static_cast<int>(2 * t), static_cast<int>(2 * t + 1)});
        Group group = host.create_group(devices).value();
        run_steps(group, devices, kCount, 800 + t, kIterations, failures);
      } catch (const std::exception &e) {
        failures.add("runner " + std::to_string(t) + ": " + e.what());
      }
    });
  }
  for (std::size_t t = 0; t < 2; ++t) {
    churners.emplace_back([&, t] {
      try {
        std::size_t rounds = 0;
        while (!stop.load() || rounds < 8) {
          ++rounds;
          const std::vector<Device> devices = host.devices();
          if (devices.size() != 8) failures.add("device count changed to " + std::to_string(devices.size()));
          if (host.capabilities().empty()) failures.add("capability table read empty");
          if (host.plugins().empty()) failures.add("plugin list read empty");
          std::vector<Device> ranks = {devices[(rounds + t) % 8], devices[(rounds + t + 3) % 8]};
          Group group = host.create_group(ranks).value();
          Status check = group.check(BP_ALL_REDUCE, BP_F32, BP_SUM);
          if (!check) failures.add("bp_group_check: " + std::string(check.error().json()));
          Buffer buffer = Buffer::create(ranks[0], 4096).value();
          std::vector<std::uint8_t> bytes(4096, static_cast<std::uint8_t>(rounds));
          Status written = buffer.write(0, bytes.data(), bytes.size());
          if (!written) failures.add("bp_buffer_write: " + std::string(written.error().json()));
        }
      } catch (const std::exception &e) {
        failures.add("churner " + std::to_string(t) + ": " + e.what());
      }
    });
  }
  for (std::thread &thread : runners) thread.join();
  stop = true;
  for (std::thread &thread : churners) thread.join();
  failures.report();
}

}  // namespace
