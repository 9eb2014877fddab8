// Collectives through host memory (DESIGN.md, "Dispatch", step 4): a group
// whose ranks are of several kinds (policy "stage"), or a request a group's
// own kind does not declare (on_unsupported "stage"). Each rank's plugin
// copies its data to host memory, the cpu plugin computes the collective
// there with its own kernels (the staging memory is wrapped as cpu buffers:
// no reduction code of the host's own), and each rank's plugin copies the
// result back. A rank that is itself a cpu device takes part with its own
// buffers, without a copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backplane/backplane.h"
#include "capability_table.hpp"
#include "error.hpp"

struct bp_group;

namespace backplane {

struct DeviceKind;
enum class HostLock;

// The reducer's side of a group: a cpu comm over one cpu device per rank,
// and host memory for the ranks that are not cpu devices, allocated when a
// call first needs it and kept for the group's later calls.
struct Staging {
  DeviceKind *reducer = nullptr;  // the cpu kind
  bp_plugin_comm *comm = nullptr;
  std::vector<uint32_t> reducer_devices;  // rank r's cpu device in `comm`
  std::vector<bool> direct;               // rank r is a cpu device: its own buffers take part
  CapabilitySet capabilities;             // what staging runs: the reducer's, less what a direct rank lacks
  // Per rank that is not direct: two regions of `region_bytes` of host
  // memory (send, recv) and the cpu buffers that wrap them.
  struct Region {
    std::byte *memory = nullptr;
    bp_plugin_buffer *send = nullptr, *recv = nullptr;
  };
  std::vector<Region> regions;
  size_t region_bytes = 0;
  // The reducer call's handles, sized once.
  std::vector<bp_plugin_buffer *> send_handles, recv_handles;

  Staging() = default;
  Staging(const Staging &) = delete;
  Staging &operator=(const Staging &) = delete;
  ~Staging();  // the wrapped buffers, the memory, the comm
};

// Sets `group.staging` up when the group is mixed (and its policy is
// stage) or asks to stage what its kind does not declare; when it cannot
// be staged, `group.staging_refusal` says why ("the cpu plugin is not
// loaded: ..."), and the group is created all the same.
void prepare_staging(bp_group &group, HostLock host_lock);

// Runs `request` on a staged group. Dispatch checked the arguments (the
// group's send_handles/recv_handles hold the ranks' plugin buffers) and
// that staging runs it; the caller holds the group's start claim.
Status run_staged(bp_group &group, const bp_collective_request &request);

}  // namespace backplane
