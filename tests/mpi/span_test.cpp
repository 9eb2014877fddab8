// Groups across processes on the mpi transport. Run under mpirun (ctest
// label mpi: -np 2, -np 4 --oversubscribe) and alone (a singleton MPI
// process): every process runs every test, in the same order, since every
// call on a spanning group is a call all processes make.
#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "../collective_runner.hpp"
#include "../support/test_support.hpp"
#include "backplane/backplane.hpp"

namespace backplane::testing {
namespace {

using collectives::Case;
using collectives::Path;
using collectives::Placement;
using collectives::Runner;

// The long timeout every test but the timeout's own runs under.
constexpr int64_t kTimeoutNs = int64_t{60} * 1000 * 1000 * 1000;
constexpr int64_t kShortTimeoutNs = int64_t{1500} * 1000 * 1000;

// One host for the whole program: the transport keeps MPI initialised
// until the last host that opened it goes, and MPI cannot be initialised twice.
Host *shared_host = nullptr;

class SharedHost : public ::testing::Environment {
 public:
  void SetUp() override {
    // Two cpu devices, as configs/mpi.json has: the groups of cpu ranks, and
    // the one staging lends to an OpenCL or Vulkan rank beside cpu:1.
    host_ = std::make_unique<Host>(make_cpu_host(R"({"cpu": {"devices": 2}})"));
    for (const char *plugin : {"mpi", "opencl", "vulkan"}) {
      Status loaded = host_->load_plugin(plugin_path(plugin).string());
      ASSERT_TRUE(loaded) << loaded.error().json();
    }
    // BACKPLANE_TEST_MPI_OPTIONS: the transport's options for a run of its
    // own (ctest mpi_span_np2_fragments sends every all_reduce by halving).
    const char *options = std::getenv("BACKPLANE_TEST_MPI_OPTIONS");
    Status opened = host_->open_transport("mpi", options ? options : "", kTimeoutNs);
    ASSERT_TRUE(opened) << opened.error().json();
    shared_host = host_.get();
  }
  void TearDown() override {
    shared_host = nullptr;
    host_.reset();
  }

 private:
  std::unique_ptr<Host> host_;
};
const auto *const environment = ::testing::AddGlobalTestEnvironment(new SharedHost);

bp_transport_facts facts() {
  Result<bp_transport_facts> got = shared_host->transport();
  EXPECT_TRUE(got);
  return *got;
}

std::vector<std::string> local_devices(size_t count) {
  std::vector<std::string> names;
  for (size_t i = 0; i < count; ++i) names.push_back("cpu:" + std::to_string(i));
  return names;
}

bp_group_options span_options(bool guard = false) {
  bp_group_options options{};
  options.struct_size = sizeof options;
  options.span = BP_SPAN_WORLD;
  options.guard = guard ? 1 : 0;
  return options;
}

std::vector<Buffer> floats(const std::vector<Device> &devices, size_t count, float value) {
  return filled_buffers<float>(devices, count, [&](size_t) { return value; });
}

Group make_group(Host &host, size_t local, bool guard = false, const char *name = nullptr) {
  std::vector<Device> ranks;
  for (const std::string &device : local_devices(local)) ranks.push_back(*host.find_device(device));
  bp_group_options options = span_options(guard);
  options.name = name;
  Result<Group> group = host.create_group(ranks, options);
  if (!group) {
    ADD_FAILURE() << group.error().json();
    throw Exception(group.error());
  }
  return std::move(*group);
}

TEST(Transport, SaysWhatItRunsOn) {
  const bp_transport_facts transport = facts();
  EXPECT_STREQ(transport.plugin, "mpi");
  EXPECT_NE(std::string(transport.library).find("Open MPI"), std::string::npos) << transport.library;
  EXPECT_NE(std::string(transport.details).find("MPI_THREAD_MULTIPLE"), std::string::npos) << transport.details;
  EXPECT_LT(transport.process_index, transport.process_count);
  EXPECT_EQ(transport.timeout_ns, kTimeoutNs);
}

TEST(Transport, GroupsNumberRanksProcessMajor) {
  const bp_transport_facts transport = facts();
  for (size_t local : {1u, 2u}) {
    Group group = make_group(*shared_host, local);
    const bp_group_span_info span = *group.span();
    EXPECT_EQ(span.global_size, local * transport.process_count);
    EXPECT_EQ(span.first_rank, local * transport.process_index);
    EXPECT_EQ(span.local_size, local);
    EXPECT_EQ(group.size(), local);
    EXPECT_EQ(span.process_index, transport.process_index);
    EXPECT_EQ(span.process_count, transport.process_count);
    EXPECT_EQ(span.broken, 0u);
  }
}

// Every collective, element type and op, out of place, in place and mixed,
// every root, with 1 and 2 local ranks per process, against the reference.
TEST(SpanningCollectives, MatchTheReference) {
  const uint32_t processes = facts().process_count;
  const std::vector<bp_collective> collectives = {BP_ALL_REDUCE, BP_REDUCE,  BP_BROADCAST,  BP_ALL_GATHER, BP_REDUCE_SCATTER,
                                                  BP_GATHER,     BP_SCATTER, BP_ALL_TO_ALL, BP_BARRIER};
  const std::vector<bp_dtype> dtypes = {BP_F16, BP_BF16, BP_F32, BP_F64, BP_I8, BP_U8, BP_I32, BP_U32, BP_I64, BP_U64};
  size_t cases = 0;
  for (size_t local : {1u, 2u}) {
    const size_t global = local * processes;
    bp_group_options options = span_options();
    for (bp_collective collective : collectives) {
      for (bp_dtype dtype : dtypes) {
        if (collective == BP_BARRIER && dtype != BP_F32) continue;
        std::vector<bp_reduce_op> ops = {BP_SUM};
        if (collectives::ref::is_reducing(collective)) {
          ops = {BP_SUM, BP_PROD, BP_MIN, BP_MAX};
          if (collectives::ref::is_float_dtype(dtype)) ops.push_back(BP_AVG);
        }
        for (bp_reduce_op op : ops) {
          for (Placement placement : {Placement::out_of_place, Placement::in_place, Placement::mixed}) {
            const bool rooted = collectives::ref::is_rooted(collective);
            for (uint32_t root = 0; root < (rooted ? global : 1); ++root) {
              for (size_t count : {size_t{0}, size_t{1}, size_t{37}}) {
                const Case c{collective, dtype, op, placement};
                SCOPED_TRACE(collectives::case_name(c) + " local " + std::to_string(local) + " root " +
                             std::to_string(root) + " count " + std::to_string(count));
                Runner(*shared_host, c, local_devices(local), count, root, Path::named_blocking, &options).run();
                ++cases;
                if (::testing::Test::HasFatalFailure()) return;
              }
            }
          }
        }
      }
    }
  }
  RecordProperty("cases", std::to_string(cases));
}

// Large enough for the transport's own algorithms, through every entry point.
TEST(SpanningCollectives, LargeCallsThroughEveryPath) {
  bp_group_options options = span_options();
  for (Path path : {Path::named_blocking, Path::request_blocking, Path::named_async}) {
    for (bp_collective collective : {BP_ALL_REDUCE, BP_ALL_GATHER, BP_REDUCE_SCATTER, BP_ALL_TO_ALL}) {
      const Case c{collective, BP_F32, BP_SUM, Placement::mixed};
      SCOPED_TRACE(collectives::case_name(c) + " via " + collectives::path_name(path));
      Runner(*shared_host, c, local_devices(2), 65537, 0, path, &options).run();
    }
  }
}

// Process 0 with two ranks, the others with one: every process cuts a large
// call into the same fragments, whether it has a local phase or not.
TEST(SpanningCollectives, UnevenProcessesPipelineAlike) {
  const bp_transport_facts transport = facts();
  const size_t local = transport.process_index == 0 ? 2 : 1;
  const uint64_t global = 2 + (transport.process_count - 1);
  bp_group_options options = span_options();
  for (bp_collective collective : {BP_ALL_REDUCE, BP_REDUCE, BP_BROADCAST, BP_ALL_GATHER}) {
    for (Placement placement : {Placement::out_of_place, Placement::in_place}) {
      for (uint32_t root : {uint32_t{0}, static_cast<uint32_t>(global - 1)}) {
        if (root != 0 && !collectives::ref::is_rooted(collective)) continue;
        const Case c{collective, BP_F32, BP_SUM, placement};
        SCOPED_TRACE(collectives::case_name(c) + " root " + std::to_string(root));
        // 256 KiB + 4 bytes a rank: two fragments.
        Runner(*shared_host, c, local_devices(local), 65537, root, Path::named_blocking, &options).run();
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// An _async call returns while its exchange waits for a process that is
// late, and its event completes once that process arrives.
TEST(SpanningCollectives, AsyncReturnsWhileAnotherProcessIsLate) {
  const bp_transport_facts transport = facts();
  if (transport.process_count < 2) GTEST_SKIP() << "a singleton process has no other process to wait for";
  Group group = make_group(*shared_host, 1);
  std::vector<Buffer> buffers = floats({group.device(0)}, 256, 1.0f);
  std::vector<bp_buffer *> handles = raw_handles(buffers);
  bp_collective_request request{};
  request.struct_size = sizeof request;
  request.collective = BP_ALL_REDUCE;
  request.dtype = BP_F32;
  request.reduce_op = BP_SUM;
  request.count = 256;
  request.send = handles.data();
  request.recv = handles.data();
  constexpr auto kLate = std::chrono::milliseconds(400);
  if (transport.process_index != 0) {
    std::this_thread::sleep_for(kLate);
    Status ran = group.run(request);
    ASSERT_TRUE(ran) << ran.error().json();
  } else {
    const auto began = std::chrono::steady_clock::now();
    Result<Event> event = group.start(request);
    ASSERT_TRUE(event) << event.error().json();
    const auto returned = std::chrono::steady_clock::now() - began;
    EXPECT_LT(returned, kLate / 2) << "the _async call waited for the late process";
    EXPECT_FALSE(event->test()) << "complete before the late process called";
    Status waited = event->wait();
    ASSERT_TRUE(waited) << waited.error().json();
    EXPECT_GE(std::chrono::steady_clock::now() - began, kLate / 2);
  }
  std::vector<float> result(256);
  ASSERT_TRUE(buffers[0].read(std::span<float>(result)));
  for (float value : result) ASSERT_EQ(value, static_cast<float>(transport.process_count));
}

TEST(SpanningCollectives, CheckAndPlanSayTheyCrossProcesses) {
  Group group = make_group(*shared_host, 2);
  bp_group_path path{};
  Status planned(bp_group_plan(group.get(), BP_ALL_REDUCE, BP_F16, BP_SUM, &path));
  ASSERT_TRUE(planned) << planned.error().json();
  EXPECT_EQ(path, BP_PATH_ACROSS_PROCESSES);
  // The cpu plugin has no integer avg, across processes or not.
  Status refused = group.check(BP_ALL_REDUCE, BP_I32, BP_AVG);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), BP_UNSUPPORTED_REDUCE_OP);
  // A root is a rank of the whole group.
  const bp_group_span_info span = *group.span();
  std::vector<Buffer> buffers = floats({group.device(0), group.device(1)}, 4, 1.0f);
  std::vector<bp_buffer *> handles = raw_handles(buffers);
  Status outside = group.broadcast(handles, handles, 4, BP_F32, static_cast<uint32_t>(span.global_size));
  ASSERT_FALSE(outside);
  EXPECT_EQ(outside.error().code(), BP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(outside.error().message()).find("outside the group of " + std::to_string(span.global_size)),
            std::string::npos)
      << outside.error().message();
}

// ---- ranks with device memory, and of several kinds ---------------------------

// Every collective on ranks whose buffers are device memory (staged through
// host memory to the cpu plugin's kernels), alone and beside a cpu rank that
// takes part in its own memory, against the reference.
TEST(StagedRanks, DeviceMemoryAndMixedKindsMatchTheReference) {
  BACKPLANE_REQUIRE_KINDS(*shared_host, "opencl", "vulkan");
  const uint32_t processes = facts().process_count;
  const std::vector<std::vector<std::string>> mixes = {{"opencl:0"}, {"vulkan:0", "cpu:1"}, {"cpu:1", "opencl:0"}};
  const std::vector<bp_collective> collectives = {BP_ALL_REDUCE, BP_REDUCE,  BP_BROADCAST,  BP_ALL_GATHER, BP_REDUCE_SCATTER,
                                                  BP_GATHER,     BP_SCATTER, BP_ALL_TO_ALL, BP_BARRIER};
  bp_group_options options = span_options();
  for (const std::vector<std::string> &mix : mixes) {
    const size_t global = mix.size() * processes;
    for (bp_collective collective : collectives) {
      // f16 where the bytes are reduced (the copies are of bytes alike).
      for (bp_dtype dtype : {BP_F32, BP_F16}) {
        if (dtype == BP_F16 && collective != BP_ALL_REDUCE && collective != BP_REDUCE_SCATTER) continue;
        const bp_reduce_op op = collectives::ref::is_reducing(collective) && dtype == BP_F32 ? BP_MAX : BP_SUM;
        for (Placement placement : {Placement::out_of_place, Placement::in_place, Placement::mixed}) {
          const bool rooted = collectives::ref::is_rooted(collective);
          // The first and the last rank: a root on this process and one elsewhere.
          for (uint32_t root : {uint32_t{0}, static_cast<uint32_t>(global - 1)}) {
            if (root != 0 && !rooted) continue;
            const Case c{collective, dtype, op, placement};
            SCOPED_TRACE(collectives::case_name(c) + " on " + mix[0] + (mix.size() > 1 ? "+" + mix[1] : "") +
                         " root " + std::to_string(root));
            Runner(*shared_host, c, mix, 37, root, Path::named_blocking, &options).run();
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

TEST(StagedRanks, PolicyRejectRefusesMixedKinds) {
  BACKPLANE_REQUIRE_KINDS(*shared_host, "opencl");
  bp_group_options options = span_options();
  options.policy = BP_POLICY_REJECT;
  std::vector<Device> ranks = {*shared_host->find_device("cpu:1"), *shared_host->find_device("opencl:0")};
  Result<Group> group = shared_host->create_group(ranks, options);
  ASSERT_FALSE(group);
  EXPECT_EQ(group.error().code(), BP_MIXED_DEVICE_KINDS) << group.error().json();
  EXPECT_NE(group.error().json().find("\"policy\":\"reject\""), std::string::npos) << group.error().json();
  // The host goes on: the same ranks with policy stage make the group.
  options.policy = BP_POLICY_STAGE;
  Result<Group> staged = shared_host->create_group(ranks, options);
  ASSERT_TRUE(staged) << staged.error().json();
  bp_group_path path{};
  Status planned(bp_group_plan(staged->get(), BP_ALL_REDUCE, BP_F32, BP_SUM, &path));
  ASSERT_TRUE(planned) << planned.error().json();
  EXPECT_EQ(path, BP_PATH_ACROSS_PROCESSES);
  // What the cpu plugin, which computes for the staged ranks, lacks: its refusal.
  Status refused = staged->check(BP_ALL_REDUCE, BP_I32, BP_AVG);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), BP_UNSUPPORTED_REDUCE_OP) << refused.error().json();
}

// ---- the mismatch guard ----------------------------------------------------

// Each process's call: what process 0 passes, and what the others do.
struct Call {
  bp_collective collective = BP_ALL_REDUCE;
  bp_dtype dtype = BP_F32;
  bp_reduce_op op = BP_SUM;
  size_t count = 16;
  uint32_t root = 0;
};

Status call(Group &group, const Call &c, std::vector<Buffer> &buffers) {
  std::vector<bp_buffer *> handles = raw_handles(buffers);
  bp_collective_request request{};
  request.struct_size = sizeof request;
  request.collective = c.collective;
  request.dtype = c.dtype;
  request.reduce_op = c.op;
  request.root = c.root;
  request.count = c.count;
  request.send = handles.data();
  request.recv = handles.data();
  return group.run(request);
}

TEST(MismatchGuard, NamesEveryFieldThatDiffers) {
  const bp_transport_facts transport = facts();
  if (transport.process_count < 2) GTEST_SKIP() << "one process: nothing to differ from";
  const bool other = transport.process_index != 0;
  struct Mismatch {
    const char *field;
    Call differing;
  };
  Call count, op, root, dtype, collective;
  count.count = 8;
  op.op = BP_MAX;
  root.collective = dtype.collective = BP_REDUCE;
  root.root = 1;
  dtype.dtype = BP_I32;
  collective.collective = BP_BROADCAST;
  const Mismatch cases[] = {
      {"count", count}, {"reduce_op", op}, {"root", root}, {"dtype", dtype}, {"collective", collective}};
  Group group = make_group(*shared_host, 2, true, "guarded");
  EXPECT_EQ(group.span()->guard, 1u);
  std::vector<Device> devices = {group.device(0), group.device(1)};
  for (const Mismatch &mismatch : cases) {
    SCOPED_TRACE(mismatch.field);
    Call mine;
    if (std::string(mismatch.field) == "root") mine.collective = BP_REDUCE;
    if (std::string(mismatch.field) == "dtype") mine.collective = BP_REDUCE;
    if (other) mine = mismatch.differing;
    std::vector<Buffer> buffers = floats(devices, 16, 3.0f);
    Status refused = call(group, mine, buffers);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code(), BP_INVALID_ARGUMENT) << refused.error().json();
    const std::string message(refused.error().message());
    EXPECT_NE(message.find(mismatch.field), std::string::npos) << message;
    EXPECT_NE(message.find("process 0"), std::string::npos) << message;
    const nlohmann::json fields = nlohmann::json::parse(refused.error().field("mismatch"));
    EXPECT_TRUE(fields.contains(mismatch.field)) << fields.dump();
    EXPECT_EQ(fields.size(), 1u) << fields.dump();
    // Nothing moved: the data is as it was.
    EXPECT_EQ(mismatches(buffers[0], 0, 16, 3.0f), "");
  }
  // The group still works for calls that agree.
  std::vector<Buffer> buffers = floats(devices, 16, 1.0f);
  Status agreed = call(group, Call{}, buffers);
  ASSERT_TRUE(agreed) << agreed.error().json();
  EXPECT_EQ(mismatches(buffers[1], 0, 16, static_cast<float>(2 * transport.process_count)), "");
}

// A call refused on one process before it reached the others still counts:
// that process's next call carries a later sequence number than the
// others' and is caught, not paired with the call it missed.
TEST(MismatchGuard, CatchesACallOneProcessMissed) {
  const bp_transport_facts transport = facts();
  if (transport.process_count < 2) GTEST_SKIP() << "one process: nothing to differ from";
  Group group = make_group(*shared_host, 1, true, "missing");
  std::vector<Buffer> buffers = floats({group.device(0)}, 16, 1.0f);
  if (transport.process_index == 0) {
    std::vector<bp_buffer *> none = {nullptr};
    Status refused(bp_all_reduce(group.get(), none.data(), none.data(), 16, BP_F32, BP_SUM));
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code(), BP_INVALID_ARGUMENT);
  }
  Status refused = call(group, Call{}, buffers);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), BP_INVALID_ARGUMENT);
  const nlohmann::json fields = nlohmann::json::parse(refused.error().field("mismatch"));
  EXPECT_TRUE(fields.contains("sequence")) << fields.dump();
  EXPECT_EQ(fields.size(), 1u) << fields.dump();
  EXPECT_EQ(mismatches(buffers[0], 0, 16, 1.0f), "");
}

// ---- timeouts ----------------------------------------------------------------

// A process that does not call in time: the others' call returns TIMEOUT
// within the timeout, and the group is broken afterwards, saying so on
// every call. The late process calls after all (else MPI_Finalize would
// wait on the abandoned exchange), matching what was abandoned.
TEST(Timeout, AProcessThatNeverCallsBreaksTheGroup) {
  const bp_transport_facts transport = facts();
  if (transport.process_count < 2) GTEST_SKIP() << "one process: nobody to wait for";
  // A host of its own, with a short timeout; MPI stays up through the shared one.
  Host host = make_cpu_host(R"({"cpu": {"devices": 1}})");
  ASSERT_TRUE(host.load_plugin(plugin_path("mpi").string()));
  Status opened = host.open_transport("mpi", "", kShortTimeoutNs);
  ASSERT_TRUE(opened) << opened.error().json();
  Group group = make_group(host, 1, false, "stuck");
  std::vector<Buffer> buffers = floats({group.device(0)}, 16, 1.0f);
  // The timed-out exchange may still write its memory when the late
  // processes come (README: keep a timed-out call's buffers): a group made
  // on the shared host afterwards, by every process, is where they meet
  // again, before the buffers go.
  auto meet_again = [] { Group meeting = make_group(*shared_host, 1, false, "after_the_timeout"); };
  if (transport.process_index != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    // Process 0 gave up before they came: whether their call completes
    // depends on how far its part got (with more than 2 processes a
    // recursive doubling waits for a step process 0 never takes), but it
    // never hangs past the timeout.
    const auto late = std::chrono::steady_clock::now();
    Status outcome = call(group, Call{}, buffers);
    if (!outcome) {
      EXPECT_EQ(outcome.error().code(), BP_TIMEOUT) << outcome.error().json();
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - late).count(), 5.0);
    meet_again();
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  Status timed_out = call(group, Call{}, buffers);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(timed_out);
  EXPECT_EQ(timed_out.error().code(), BP_TIMEOUT) << timed_out.error().json();
  EXPECT_GE(waited, 1.4);
  EXPECT_LT(waited, 5.0);
  EXPECT_EQ(group.span()->broken, 1u);
  for (int later = 0; later < 2; ++later) {
    Status refused = call(group, Call{}, buffers);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code(), BP_DEVICE_FAILURE);
    EXPECT_NE(std::string(refused.error().message()).find("broken"), std::string::npos) << refused.error().message();
    Status checked = group.check(BP_ALL_REDUCE, BP_F32, BP_SUM);
    ASSERT_FALSE(checked);
    EXPECT_EQ(checked.error().code(), BP_DEVICE_FAILURE);
    EXPECT_EQ(checked.error().field("broken"), "true") << checked.error().json();
  }
  meet_again();
}

// configs/mpi.json: its groups span every process, and its workload's roots
// are ranks of the whole group.
TEST(Fleet, ConfigsMpiLoadsOnTheOpenTransport) {
  Status loaded = shared_host->load_fleet_file(std::string(BACKPLANE_TEST_SOURCE_DIR) + "/configs/mpi.json");
  ASSERT_TRUE(loaded) << loaded.error().json();
  Result<GroupView> world = shared_host->find_group("world");
  ASSERT_TRUE(world);
  EXPECT_EQ(world->span()->global_size, 2u * facts().process_count);
  Result<GroupView> guarded = shared_host->find_group("world_guarded");
  ASSERT_TRUE(guarded);
  EXPECT_EQ(guarded->span()->guard, 1u);
  Result<GroupView> local = shared_host->find_group("local");
  ASSERT_TRUE(local);
  EXPECT_EQ(local->span()->process_count, 1u);
}

// ---- refusals -----------------------------------------------------------------

TEST(Refusals, SpanWithoutATransport) {
  Host host = make_cpu_host();
  Result<Device> cpu = host.find_device("cpu:0");
  ASSERT_TRUE(cpu);
  std::vector<Device> ranks = {*cpu};
  Result<Group> group = host.create_group(ranks, span_options());
  ASSERT_FALSE(group);
  EXPECT_EQ(group.error().code(), BP_INVALID_ARGUMENT);
  EXPECT_NE(group.error().field("hint").find("bp_host_open_transport"), std::string::npos);
}

TEST(Refusals, TransportNoPluginProvides) {
  Host host = make_cpu_host();
  Status refused = host.open_transport("mpx");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), BP_PLUGIN_NOT_FOUND);
  ASSERT_TRUE(host.load_plugin(plugin_path("mpi").string()));
  refused = host.open_transport("mpx");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), BP_PLUGIN_NOT_FOUND);
  EXPECT_NE(refused.error().field("hint").find("mpi"), std::string::npos) << refused.error().json();
}

TEST(Refusals, ASecondTransportAndBadOptions) {
  Status again = shared_host->open_transport("mpi");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code(), BP_INVALID_ARGUMENT);
  Host host = make_cpu_host();
  ASSERT_TRUE(host.load_plugin(plugin_path("mpi").string()));
  Status unknown = host.open_transport("mpi", R"({"fragment": 3})");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code(), BP_CONFIG) << unknown.error().json();
  Status not_object = host.open_transport("mpi", "[1]");
  ASSERT_FALSE(not_object);
  EXPECT_EQ(not_object.error().code(), BP_CONFIG);
  bp_transport_options bad_flags{};
  bad_flags.struct_size = sizeof bad_flags;
  bad_flags.plugin = "mpi";
  bad_flags.flags = 0x80;
  Status flagged = host.open_transport(bad_flags);
  ASSERT_FALSE(flagged);
  EXPECT_EQ(flagged.error().code(), BP_INVALID_ARGUMENT);
}

TEST(Refusals, BadSpanAndGuardValues) {
  Result<Device> cpu = shared_host->find_device("cpu:0");
  std::vector<Device> ranks = {*cpu};
  bp_group_options options = span_options();
  options.span = 7;
  Result<Group> unknown = shared_host->create_group(ranks, options);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code(), BP_INVALID_ARGUMENT);
  options = span_options();
  options.guard = 2;
  Result<Group> bad_guard = shared_host->create_group(ranks, options);
  ASSERT_FALSE(bad_guard);
  EXPECT_EQ(bad_guard.error().code(), BP_INVALID_ARGUMENT);
  options.span = BP_SPAN_PROCESS;
  options.guard = 1;
  Result<Group> local_guard = shared_host->create_group(ranks, options);
  ASSERT_FALSE(local_guard);
  EXPECT_EQ(local_guard.error().code(), BP_INVALID_ARGUMENT);
  // A group of this process's devices only, as before.
  bp_group_options local = span_options();
  local.span = BP_SPAN_PROCESS;
  Result<Group> one_process = shared_host->create_group(ranks, local);
  ASSERT_TRUE(one_process) << one_process.error().json();
  EXPECT_EQ(one_process->span()->process_count, 1u);
  EXPECT_EQ(one_process->span()->global_size, 1u);
}

}  // namespace
}  // namespace backplane::testing
