// An application that initialised MPI itself hands the host its own
// communicator (as MPI_Comm_c2f): the transport works on a duplicate of it,
// numbers processes as that communicator does, and leaves MPI initialised
// for the application to finalise. Run under mpirun -np 2 (ctest label mpi).
#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "../support/test_support.hpp"
#include "backplane/backplane.hpp"

namespace backplane::testing {
namespace {

TEST(ApplicationComm, TheHostUsesTheCommunicatorItIsGiven) {
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  // The application's own numbering: the world reversed.
  MPI_Comm reversed = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, 0, world_size - 1 - world_rank, &reversed), MPI_SUCCESS);
  {
    Host host = make_cpu_host(R"({"cpu": {"devices": 2}})");
    ASSERT_TRUE(host.load_plugin(plugin_path("mpi").string()));
    bp_transport_options options{};
    options.struct_size = sizeof options;
    options.plugin = "mpi";
    options.flags = BP_TRANSPORT_OPTION_HANDLE;
    options.handle = MPI_Comm_c2f(reversed);
    Status opened = host.open_transport(options);
    ASSERT_TRUE(opened) << opened.error().json();
    const bp_transport_facts facts = *host.transport();
    EXPECT_EQ(facts.process_index, static_cast<uint32_t>(world_size - 1 - world_rank));
    EXPECT_EQ(facts.process_count, static_cast<uint32_t>(world_size));
    EXPECT_NE(std::string(facts.details).find("application"), std::string::npos) << facts.details;

    std::vector<Device> ranks = {*host.find_device("cpu:0"), *host.find_device("cpu:1")};
    bp_group_options group_options{};
    group_options.struct_size = sizeof group_options;
    group_options.span = BP_SPAN_WORLD;
    Result<Group> group = host.create_group(ranks, group_options);
    ASSERT_TRUE(group) << group.error().json();
    EXPECT_EQ(group->span()->first_rank, 2u * facts.process_index);
    // Global rank g holds g + 1: the sum is n (n + 1) / 2 everywhere.
    const size_t global = 2 * static_cast<size_t>(world_size);
    std::vector<Buffer> buffers = filled_buffers<double>(
        ranks, 64, [&](size_t r) { return static_cast<double>(2 * facts.process_index + r + 1); });
    std::vector<bp_buffer *> handles = raw_handles(buffers);
    Status reduced = group->all_reduce(handles, handles, 64, BP_F64, BP_SUM);
    ASSERT_TRUE(reduced) << reduced.error().json();
    for (const Buffer &buffer : buffers)
      EXPECT_EQ(mismatches(buffer, 0, 64, static_cast<double>(global * (global + 1) / 2)), "");
  }
  // The host is gone; MPI is still the application's.
  int finalized = 1;
  MPI_Finalized(&finalized);
  EXPECT_EQ(finalized, 0);
  MPI_Comm_free(&reversed);
}

}  // namespace
}  // namespace backplane::testing

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  const int failed = RUN_ALL_TESTS();
  MPI_Finalize();
  return failed;
}
