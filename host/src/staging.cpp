// Collectives through host memory (staging.hpp).
#include "staging.hpp"

#include <algorithm>
#include <chrono>
#include <utility>
#include <exception>
#include <functional>
#include <system_error>
#include <mutex>
#include <new>
#include <shared_mutex>

#include "host.hpp"
#include "log.hpp"
#include "names.hpp"

namespace backplane {
namespace {

// The kind whose plugin computes staged collectives.
constexpr const char *kReducerKind = "cpu";
// Staging memory starts on a cache line (the kernels' vectors load aligned)
// and grows in whole pages.
constexpr std::align_val_t kStagingAlignment{64};
constexpr size_t kStagingGranule = 4096;

void destroy_buffer(LoadedPlugin &plugin, bp_plugin_buffer *&buffer) {
  if (!buffer) return;
  call_plugin_release(plugin, "buffer_destroy", [&] { plugin.functions.buffer_destroy(plugin.state, buffer); });
  buffer = nullptr;
}

void destroy_comm(LoadedPlugin &plugin, bp_plugin_comm *&comm) {
  if (!comm) return;
  call_plugin_release(plugin, "comm_destroy", [&] { plugin.functions.comm_destroy(plugin.state, comm); });
  comm = nullptr;
}

void release_area(LoadedPlugin &plugin, Staging::Area &area) {
  destroy_buffer(plugin, area.send);
  destroy_buffer(plugin, area.recv);
  ::operator delete[](area.send_memory, kStagingAlignment);
  area = Staging::Area{};
}

// An area of at least `bytes` each side, wrapped as cpu buffers on
// `device` of the reducer. Keeps what is there when it is big enough.
Status ensure_area(Staging &staging, Staging::Area &area, uint32_t device, size_t bytes) {
  if (bytes <= area.bytes) return {};
  LoadedPlugin &plugin = *staging.reducer->plugin;
  release_area(plugin, area);
  // bytes <= max(kMaxAreaBytes, a rank's one-element blocks): no overflow.
  const size_t rounded = (bytes + kStagingGranule - 1) / kStagingGranule * kStagingGranule;
  try {
    area.send_memory = static_cast<std::byte *>(::operator new[](2 * rounded, kStagingAlignment));
  } catch (const std::bad_alloc &) {
    return Error(BP_OUT_OF_MEMORY, "staging: cannot allocate " + std::to_string(2 * rounded) + " bytes of host memory");
  }
  area.recv_memory = area.send_memory + rounded;
  for (const std::pair<std::byte *, bp_plugin_buffer **> &part :
       {std::pair{area.send_memory, &area.send}, std::pair{area.recv_memory, &area.recv}}) {
    bp_plugin_buffer **const handle = part.second;
    Status status = call_plugin(plugin, "buffer_wrap_host", [&](bp_error_sink *sink) {
      return plugin.functions.buffer_wrap_host(plugin.state, staging.reducer->index_in_plugin, device, part.first,
                                               rounded, handle, sink);
    });
    if (status && !*handle) status = plugin_returned_null(plugin, "buffer_wrap_host");
    if (!status) {
      release_area(plugin, area);
      return status;
    }
  }
  area.bytes = rounded;
  return {};
}

// Blocks [first, first + count) of a rank's buffer.
struct Blocks {
  size_t first, count;
};
// What a collective reads of an in-place buffer (types.h): all_gather and
// gather take the rank's own block r of recv; the others the whole of send.
Blocks in_place_input(uint32_t collective, size_t rank, size_t ranks) {
  switch (collective) {
    case BP_ALL_GATHER:
    case BP_GATHER: return {rank, 1};
    case BP_REDUCE_SCATTER:
    case BP_SCATTER:
    case BP_ALL_TO_ALL: return {0, ranks};
    default: return {0, 1};
  }
}
// What it writes: reduce_scatter and scatter the rank's block r of send;
// broadcast nothing at the root, whose buffer is the source.
Blocks in_place_result(uint32_t collective, size_t rank, bool is_root, size_t ranks) {
  switch (collective) {
    case BP_REDUCE_SCATTER:
    case BP_SCATTER: return {rank, 1};
    case BP_ALL_GATHER:
    case BP_GATHER:
    case BP_ALL_TO_ALL: return {0, ranks};
    case BP_BROADCAST: return {0, is_root ? size_t{0} : size_t{1}};
    default: return {0, 1};
  }
}

// Where a cpu buffer's bytes are (NULL for a rank's unused side).
Status host_memory_of(Staging &staging, const bp_plugin_buffer *buffer, std::byte *&memory) {
  return plugin_host_memory(*staging.reducer->plugin, buffer, memory);
}

// The reducer's collective on `count` elements over the handles staging set.
Status run_reducer(Staging &staging, bp_plugin_comm *comm, const StagedArgs &request, size_t ranks, size_t count) {
  return run_collective(*staging.reducer->plugin, comm,
                        collective_args(request.collective, request.dtype, request.reduce_op, request.root, count,
                                        ranks, staging.send_handles.data(), staging.recv_handles.data(),
                                        BP_COLLECTIVE_CALLER_WAITS));
}

}  // namespace

Status plugin_host_memory(LoadedPlugin &plugin, const bp_plugin_buffer *buffer, std::byte *&memory) {
  memory = nullptr;
  if (!buffer) return {};
  void *address = nullptr;
  Status status = call_plugin(plugin, "buffer_host_memory", [&](bp_error_sink *sink) {
    return plugin.functions.buffer_host_memory(plugin.state, buffer, &address, sink);
  });
  if (status && !address) status = plugin_returned_null(plugin, "buffer_host_memory");
  memory = static_cast<std::byte *>(address);
  return status;
}

Status run_collective(LoadedPlugin &plugin, bp_plugin_comm *comm, const bp_collective_args &args) {
  bp_plugin_request *started = nullptr;
  Status status = call_plugin(plugin, "collective_start", [&](bp_error_sink *sink) {
    return plugin.functions.collective_start(plugin.state, comm, &args, &started, sink);
  });
  if (!status || !started) return status;
  status = call_plugin(plugin, "request_wait", [&](bp_error_sink *sink) {
    return plugin.functions.request_wait(plugin.state, started, -1, sink);
  });
  call_plugin_release(plugin, "request_release", [&] { plugin.functions.request_release(plugin.state, started); });
  return status;
}

// One staged call cut into chunks of `chunk_count` elements of every block,
// over `ranks` participants of `comm`: participant p moves the buffers of
// the group's rank members[p] (request's entry p), through the areas and
// the cpu device of rank homes[p].
struct StagedCall {
  bp_group &group;
  Staging &staging;
  bp_plugin_comm *comm;
  const StagedArgs &request;
  const size_t *members, *homes;
  size_t ranks, element, chunk_count, chunks;
  bool in_ranges;  // every buffer is one block: a chunk is one range of it
  bool has_views = false;  // some participant is viewed
  // An all_reduce or reduce computes a copied rank's chunk in place in its
  // send area (the input is in host memory only for the reducer): half the
  // host memory touched, out of place as in place.
  bool reduces_in_area = false;

  size_t first_of(size_t chunk) const { return chunk * chunk_count; }
  size_t count_of(size_t chunk) const { return std::min(chunk_count, request.count - first_of(chunk)); }
  // A call of one chunk lets a cpu rank's own buffers take part.
  bool own_buffers(size_t rank) const { return chunks == 1 && staging.direct[members[rank]]; }
  // In several chunks, a cpu rank's chunk is a view of its own buffer.
  bool viewed(size_t rank) const {
    return chunks > 1 && in_ranges && staging.direct[members[rank]] &&
           staging.reducer->plugin->functions.buffer_host_memory;
  }
  bool in_own_memory(size_t rank) const { return own_buffers(rank) || viewed(rank); }
  bool in_place(size_t rank) const { return request.in_place[rank] != 0; }
  const Staging::Area &area(size_t chunk, size_t rank) const {
    return staging.areas[chunk % kSlots * group.ranks.size() + homes[rank]];
  }
  bp_rank_buffers use(size_t rank) const { return bp_rank_buffers_of(request.collective, ranks, rank == request.root); }

  // Moves `blocks` of chunk `chunk` between a rank's buffer and `memory`,
  // whose blocks are the chunk's only (rank's plugin, `up`: to the host);
  // adds what it moved to `staged`.
  Status copy(size_t chunk, size_t rank, bool up, bp_plugin_buffer *buffer, Blocks blocks, std::byte *memory,
              uint64_t &staged) const {
    const size_t count = count_of(chunk), bytes = count * element, block_stride = request.count * element;
    const size_t first = first_of(chunk) * element;
    LoadedPlugin &plugin = *group.ranks[members[rank]]->kind->plugin;
    for (size_t block = blocks.first; block < blocks.first + blocks.count; ++block) {
      const size_t offset = block * block_stride + first;
      std::byte *host = memory + block * bytes;
      Status status = up ? call_plugin(plugin, "buffer_read", [&](bp_error_sink *sink) {
        return plugin.functions.buffer_read(plugin.state, buffer, offset, host, bytes, sink);
      })
                         : call_plugin(plugin, "buffer_write", [&](bp_error_sink *sink) {
                             return plugin.functions.buffer_write(plugin.state, buffer, offset, host, bytes, sink);
                           });
      if (!status) return status.take_error().with("rank", members[rank]);
      staged += bytes;
    }
    return {};
  }

  // Wraps `count` elements of `memory` from `first` on as a cpu buffer on
  // the rank's own device.
  Status wrap_view(size_t rank, std::byte *memory, size_t first, size_t count, bp_plugin_buffer *&view) const {
    LoadedPlugin &plugin = *staging.reducer->plugin;
    Status status = call_plugin(plugin, "buffer_wrap_host", [&](bp_error_sink *sink) {
      return plugin.functions.buffer_wrap_host(plugin.state, staging.reducer->index_in_plugin,
                                               staging.reducer_devices[homes[rank]], memory + first * element,
                                               count * element, &view, sink);
    });
    if (status && !view) status = plugin_returned_null(plugin, "buffer_wrap_host");
    return status;
  }
  void release_views() const {
    if (!has_views) return;
    for (Staging::Area &view : staging.views) {
      destroy_buffer(*staging.reducer->plugin, view.send);
      destroy_buffer(*staging.reducer->plugin, view.recv);
    }
  }

  // Chunk `chunk` of every rank's input into its area, and the reducer's
  // handles set (views of a viewed rank's buffers: release_views after).
  Status copy_up(size_t chunk, uint64_t &staged) const {
    for (size_t rank = 0; rank < ranks; ++rank) {
      if (own_buffers(rank)) {
        staging.send_handles[rank] = request.send[rank];
        staging.recv_handles[rank] = request.recv[rank];
        continue;
      }
      const bp_rank_buffers use = this->use(rank);
      if (viewed(rank)) {
        Staging::Area &view = staging.views[rank];
        const bool in_place = use.uses_send && use.uses_recv && this->in_place(rank);
        if (use.uses_send) {
          if (Status status = wrap_view(rank, staging.direct_send[rank], first_of(chunk), count_of(chunk), view.send);
              !status)
            return status.take_error().with("rank", members[rank]);
        }
        if (use.uses_recv && !in_place) {
          if (Status status = wrap_view(rank, staging.direct_recv[rank], first_of(chunk), count_of(chunk), view.recv);
              !status)
            return status.take_error().with("rank", members[rank]);
        }
        staging.send_handles[rank] = use.uses_send ? view.send : nullptr;
        staging.recv_handles[rank] = use.uses_recv ? (in_place ? view.send : view.recv) : nullptr;
        continue;
      }
      const Staging::Area &area = this->area(chunk, rank);
      const bool in_place = use.uses_send && use.uses_recv && this->in_place(rank);
      const bool in_area = in_place || (reduces_in_area && use.uses_send && use.uses_recv);
      staging.send_handles[rank] = use.uses_send ? area.send : nullptr;
      staging.recv_handles[rank] = use.uses_recv ? (in_area ? area.send : area.recv) : nullptr;
      if (!use.uses_send) continue;
      const Blocks input = in_place ? in_place_input(request.collective, rank, ranks) : Blocks{0, use.send_blocks};
      if (Status status = copy(chunk, rank, true, request.send[rank], input, area.send_memory, staged); !status)
        return status;
    }
    return {};
  }

  // Chunk `chunk` of every rank's result back, only the blocks the collective writes.
  Status copy_back(size_t chunk, uint64_t &staged) const {
    for (size_t rank = 0; rank < ranks; ++rank) {
      if (in_own_memory(rank)) continue;
      const bp_rank_buffers use = this->use(rank);
      if (!use.uses_recv) continue;
      const Staging::Area &area = this->area(chunk, rank);
      const bool in_place = use.uses_send && this->in_place(rank);
      const Blocks result = in_place ? in_place_result(request.collective, rank, rank == request.root, ranks)
                                     : Blocks{0, use.recv_blocks};
      const bool in_area = in_place || (reduces_in_area && use.uses_send);
      if (Status status = copy(chunk, rank, false, request.recv[rank], result,
                               in_area ? area.send_memory : area.recv_memory, staged);
          !status)
        return status;
    }
    return {};
  }
};

namespace {

// The copier's job: chunk job - first_job of the pipeline's call back,
// unless an earlier one failed.
void copy_chunk_back(void *context, uint64_t job) {
  Staging::Pipeline &pipeline = static_cast<Staging *>(context)->pipeline;
  if (pipeline.failed.load(std::memory_order_relaxed)) return;
  Status status;
  try {
    status = pipeline.call->copy_back(job - pipeline.first_job, pipeline.staged_bytes);
  } catch (const std::exception &e) {
    status = Error(BP_OUT_OF_MEMORY, std::string("staging: copying a chunk back failed: ") + e.what());
  }
  if (status) return;
  pipeline.failure = std::move(status);
  pipeline.failed.store(true, std::memory_order_relaxed);
}

// Every chunk: copied up and computed on the calling thread, copied back
// by the copier, which trails by at most kSlots - 1 chunks.
Status run_pipelined(const StagedCall &call, uint64_t &staged) {
  Staging &staging = call.staging;
  Staging::Pipeline &pipeline = staging.pipeline;
  pipeline.call = &call;
  pipeline.first_job = staging.copier.given();
  pipeline.failed.store(false, std::memory_order_relaxed);
  pipeline.failure = Status();
  pipeline.staged_bytes = 0;
  Status status;
  uint64_t given = pipeline.first_job;
  for (size_t chunk = 0; chunk < call.chunks; ++chunk) {
    // Its slot is free once chunk - kSlots was copied back.
    if (chunk >= kSlots) staging.copier.wait_done(pipeline.first_job + chunk - kSlots + 1);
    if (pipeline.failed.load(std::memory_order_relaxed)) break;
    status = call.copy_up(chunk, staged);
    if (status) status = run_reducer(staging, call.comm, call.request, call.ranks, call.count_of(chunk));
    call.release_views();
    if (!status) break;
    given = staging.copier.give() + 1;
  }
  staging.copier.wait_done(given);
  staged += pipeline.staged_bytes;
  pipeline.call = nullptr;
  if (status && !pipeline.failure.ok()) status = std::exchange(pipeline.failure, Status());
  return status;
}

}  // namespace

namespace {

void release_local_kinds(Staging &staging) {
  for (Staging::LocalKind &local : staging.local_kinds) {
    destroy_buffer(*local.kind->plugin, local.sum);
    destroy_comm(*local.kind->plugin, local.comm);
  }
  staging.local_kinds.clear();
  staging.leader_kinds.clear();
  staging.leader_homes.clear();
  if (staging.leader_comm) destroy_comm(*staging.reducer->plugin, staging.leader_comm);
}

Staging::LocalKind *local_kind_of(Staging &staging, size_t rank) {
  for (Staging::LocalKind &local : staging.local_kinds)
    if (std::find(local.ranks.begin(), local.ranks.end(), rank) != local.ranks.end()) return &local;
  return nullptr;
}

// A mixed group's kinds with several ranks, each with a comm of its own
// plugin, and the reducer's comm over one participant per such kind beside
// every other rank. Without them every call stages every rank, which runs
// all the same: a failure here is a warning, not a refusal.
void prepare_local_kinds(const bp_group &group, Staging &staging) {
  const size_t ranks = group.ranks.size();
  std::vector<Staging::LocalKind> kinds;
  for (size_t rank = 0; rank < ranks; ++rank) {
    DeviceKind *kind = group.ranks[rank]->kind;
    if (kind == staging.reducer) continue;
    auto local = std::find_if(kinds.begin(), kinds.end(), [&](const auto &known) { return known.kind == kind; });
    if (local == kinds.end()) {
      local = kinds.emplace(kinds.end());
      local->kind = kind;
      local->capabilities = kind->capabilities;
    }
    local->ranks.push_back(rank);
    local->capabilities.intersect(group.ranks[rank]->capabilities());
  }
  // auto: not among devices that compute on the host's cores, where the
  // local step costs what staging them costs (lavapipe's all_reduce of two
  // ranks measured 3x the staged call: docs/PERFORMANCE.md).
  const auto on_host_cores = [&](const Staging::LocalKind &local) {
    return std::all_of(local.ranks.begin(), local.ranks.end(), [&](size_t rank) {
      return (group.ranks[rank]->flags & BP_DEVICE_ON_HOST_CORES) != 0;
    });
  };
  std::erase_if(kinds, [&](const auto &local) {
    return local.ranks.size() < 2 || group.local_first == BP_LOCAL_FIRST_NEVER ||
           (group.local_first == BP_LOCAL_FIRST_AUTO && on_host_cores(local));
  });
  if (kinds.empty()) return;
  staging.local_kinds = std::move(kinds);
  const auto give_up = [&](const std::string &what, const Status &status) {
    log(BP_LOG_WARN, "dispatch",
        "group '" + group.name + "': " + what + " (" + status.error().message() +
            "); every rank of the group is staged through host memory");
    release_local_kinds(staging);
  };
  Status failed;
  std::string failed_kind;
  for (Staging::LocalKind &local : staging.local_kinds) {
    std::vector<uint32_t> devices;
    for (size_t rank : local.ranks) devices.push_back(group.ranks[rank]->index);
    LoadedPlugin &plugin = *local.kind->plugin;
    Status status = call_plugin(plugin, "comm_create", [&](bp_error_sink *sink) {
      return plugin.functions.comm_create(plugin.state, local.kind->index_in_plugin, devices.data(), devices.size(),
                                          &local.comm, sink);
    });
    if (status && !local.comm) status = plugin_returned_null(plugin, "comm_create");
    if (!status) {
      failed = std::move(status);
      failed_kind = local.kind->name;
      break;
    }
    local.send.resize(local.ranks.size());
    local.recv.resize(local.ranks.size());
  }
  // Given up after the loop: it releases every local kind's comm.
  if (!failed) return give_up("no comm among the ranks of kind " + failed_kind, failed);
  std::vector<uint32_t> devices;
  for (size_t rank = 0; rank < ranks; ++rank) {
    Staging::LocalKind *local = local_kind_of(staging, rank);
    if (local && local->ranks[0] != rank) continue;
    staging.leader_homes.push_back(rank);
    staging.leader_kinds.push_back(local);
    devices.push_back(staging.reducer_devices[rank]);
  }
  LoadedPlugin &plugin = *staging.reducer->plugin;
  Status status = call_plugin(plugin, "comm_create", [&](bp_error_sink *sink) {
    return plugin.functions.comm_create(plugin.state, staging.reducer->index_in_plugin, devices.data(),
                                        devices.size(), &staging.leader_comm, sink);
  });
  if (status && !staging.leader_comm) status = plugin_returned_null(plugin, "comm_create");
  if (!status) return give_up("no cpu comm over one rank per kind", status);
  const size_t participants = devices.size();
  staging.leader_members.resize(participants);
  staging.leader_args.send.resize(participants);
  staging.leader_args.recv.resize(participants);
  staging.leader_args.in_place.resize(participants);
}

}  // namespace

Staging::~Staging() {
  runner.stop();
  copier.stop();
  release_local_kinds(*this);
  if (!reducer) return;
  for (Area &area : areas) release_area(*reducer->plugin, area);
  destroy_comm(*reducer->plugin, comm);
}

size_t local_kind_count(const Staging &staging) { return staging.local_kinds.size(); }

void StagingDeleter::operator()(Staging *staging) const { delete staging; }

void prepare_staging(bp_group &group, HostLock host_lock, StagingFor use) {
  const bool mixed = group.kind == nullptr;
  if (use == StagingFor::calls &&
      (mixed ? group.policy != BP_POLICY_STAGE : group.on_unsupported != BP_ON_UNSUPPORTED_STAGE))
    return;
  const bp_host &host = *group.host;
  std::shared_lock lock(host.mutex, std::defer_lock);
  if (host_lock == HostLock::take) lock.lock();
  const size_t ranks = group.ranks.size();

  DeviceKind *reducer = nullptr;
  for (const auto &kind : host.kinds)
    if (kind->name == kReducerKind) reducer = kind.get();
  if (!reducer) {
    group.staging_refusal = "staging through host memory needs the cpu plugin (libbackplane_cpu.so), whose kernels "
                            "compute there, and no loaded plugin provides device kind 'cpu'";
    return;
  }
  if (group.kind == reducer) {
    group.staging_refusal = "the group's own kind, cpu, is the one that computes staged collectives";
    return;
  }
  LoadedPlugin &plugin = *reducer->plugin;
  if (!plugin.functions.buffer_wrap_host) {
    group.staging_refusal = "plugin " + plugin.name + " cannot wrap host memory as cpu buffers";
    return;
  }

  auto staging = std::make_unique<Staging>();
  staging->reducer_devices.assign(ranks, 0);
  staging->direct.assign(ranks, false);
  std::vector<uint32_t> free_devices;
  for (const auto &device : host.devices)
    if (device->kind == reducer && device->base == device.get()) free_devices.push_back(device->index);
  const size_t cpu_devices = free_devices.size();
  for (size_t rank = 0; rank < ranks; ++rank) {
    const bp_device &device = *group.ranks[rank];
    if (device.kind != reducer) continue;
    staging->direct[rank] = true;
    staging->reducer_devices[rank] = device.index;
    std::erase(free_devices, device.index);
  }
  size_t next_free = 0;
  for (size_t rank = 0; rank < ranks; ++rank) {
    if (staging->direct[rank]) continue;
    if (next_free == free_devices.size()) {
      group.staging_refusal = "staging needs a cpu device for each of the group's " + std::to_string(ranks) +
                              " ranks, and the cpu plugin has " + std::to_string(cpu_devices) +
                              " (raise its \"devices\" option)";
      return;
    }
    staging->reducer_devices[rank] = free_devices[next_free++];
  }
  Status status = call_plugin(plugin, "comm_create", [&](bp_error_sink *sink) {
    return plugin.functions.comm_create(plugin.state, reducer->index_in_plugin, staging->reducer_devices.data(),
                                        ranks, &staging->comm, sink);
  });
  if (status && !staging->comm) status = plugin_returned_null(plugin, "comm_create");
  if (!status) {
    group.staging_refusal = "the cpu plugin could not set up staging: " + status.error().message();
    return;
  }
  staging->reducer = reducer;
  staging->capabilities = reducer->capabilities;
  for (size_t rank = 0; rank < ranks; ++rank)
    if (staging->direct[rank]) staging->capabilities.intersect(group.ranks[rank]->capabilities());
  staging->areas.resize(kSlots * ranks);
  staging->send_handles.resize(ranks);
  staging->args.send.resize(ranks);
  staging->args.recv.resize(ranks);
  staging->args.in_place.resize(ranks);
  staging->direct_send.resize(ranks);
  staging->direct_recv.resize(ranks);
  staging->views.resize(ranks);
  staging->recv_handles.resize(ranks);
  staging->every_rank.resize(ranks);
  for (size_t rank = 0; rank < ranks; ++rank) staging->every_rank[rank] = rank;
  if (mixed && use == StagingFor::calls) prepare_local_kinds(group, *staging);
  group.staging.reset(staging.release());
}

void take_arguments(bp_group &group, const bp_collective_request &request) {
  StagedArgs &args = group.staging->args;
  args.collective = request.collective;
  args.dtype = request.dtype;
  args.reduce_op = request.reduce_op;
  args.root = request.root;
  args.count = request.count;
  for (size_t rank = 0; rank < group.ranks.size(); ++rank) {
    const bool has_buffers = request.collective != BP_BARRIER;
    args.send[rank] = has_buffers ? group.send_handles[rank] : nullptr;
    args.recv[rank] = has_buffers ? group.recv_handles[rank] : nullptr;
    args.in_place[rank] = has_buffers && request.send[rank] == request.recv[rank];
  }
}

namespace {

// Stages `request` over `ranks` participants of `comm` (StagedCall).
Status stage_participants(bp_group &group, bp_plugin_comm *comm, const StagedArgs &request, const size_t *members,
                          const size_t *homes, size_t ranks) {
  Staging &staging = *group.staging;
  const uint32_t collective = request.collective;
  // A chunk's area holds its elements of every block of the rank's largest
  // buffer; dispatch checked count x element x blocks for overflow.
  const size_t element = dtype_size(request.dtype);
  size_t blocks = 1;
  for (size_t rank = 0; rank < ranks; ++rank) {
    const bp_rank_buffers use = bp_rank_buffers_of(collective, ranks, rank == request.root);
    if (use.uses_send) blocks = std::max<size_t>(blocks, use.send_blocks);
    if (use.uses_recv) blocks = std::max<size_t>(blocks, use.recv_blocks);
  }
  const size_t chunk_count = std::min(request.count, std::max<size_t>(1, kMaxAreaBytes / (blocks * element)));
  const size_t chunks = (request.count + chunk_count - 1) / chunk_count;
  const bool in_ranges = blocks == 1;
  bool has_views = false;
  if (chunks > 1 && in_ranges && staging.reducer->plugin->functions.buffer_host_memory)
    for (size_t rank = 0; rank < ranks; ++rank) has_views = has_views || staging.direct[members[rank]];
  const bool reduces_in_area =
      (collective == BP_ALL_REDUCE || collective == BP_REDUCE) &&
      (staging.reducer->capabilities.flags(collective, request.dtype) & BP_CAPABILITY_IN_PLACE);
  const StagedCall call{group,   staging,     comm,   request,   members,   homes,          ranks,
                        element, chunk_count, chunks, in_ranges, has_views, reduces_in_area};
  for (size_t rank = 0; rank < ranks; ++rank) {
    if (call.in_own_memory(rank)) continue;
    const size_t home = homes[rank];
    for (size_t slot = 0; slot < std::min(kSlots, call.chunks); ++slot) {
      if (Status status = ensure_area(staging, staging.areas[slot * group.ranks.size() + home],
                                      staging.reducer_devices[home], chunk_count * blocks * element);
          !status)
        return status.take_error().with("rank", members[rank]);
    }
  }
  for (size_t rank = 0; rank < ranks; ++rank) {
    if (!call.viewed(rank)) continue;
    if (Status status = host_memory_of(staging, request.send[rank], staging.direct_send[rank]); !status)
      return status.take_error().with("rank", members[rank]);
    if (Status status = host_memory_of(staging, request.recv[rank], staging.direct_recv[rank]); !status)
      return status.take_error().with("rank", members[rank]);
  }

  uint64_t staged = 0;
  Status status;
  if (call.chunks > 1 && staging.copier.ensure_started(copy_chunk_back, &staging,
                                                       "copy results back while the next chunk is copied up")) {
    status = run_pipelined(call, staged);
  } else {
    for (size_t chunk = 0; status && chunk < call.chunks; ++chunk) {
      status = call.copy_up(chunk, staged);
      if (status) status = run_reducer(staging, comm, request, ranks, call.count_of(chunk));
      call.release_views();
      if (status) status = call.copy_back(chunk, staged);
    }
  }
  group.counters.add(group.counters.staged_bytes, staged);
  return status;
}

// The rank of a local kind whose buffers cross host memory: the root when
// it is one of the kind's, else the kind's first rank.
size_t leader_of(const Staging::LocalKind &local, const StagedArgs &request) {
  if (request.collective != BP_ALL_REDUCE &&
      std::find(local.ranks.begin(), local.ranks.end(), request.root) != local.ranks.end())
    return request.root;
  return local.ranks[0];
}

// Whether every local kind runs its part of the call natively: an
// all_reduce is a local reduce to the leader and a broadcast from it, a
// reduce the local reduce, a broadcast the local broadcast. Never avg: a
// mean of the kinds' means is not the mean of the ranks.
bool runs_locally_first(const Staging &staging, const StagedArgs &request) {
  const uint32_t collective = request.collective;
  if (!staging.leader_comm || request.count == 0) return false;
  if (collective != BP_ALL_REDUCE && collective != BP_REDUCE && collective != BP_BROADCAST) return false;
  if (collective != BP_BROADCAST && request.reduce_op == BP_AVG) return false;
  const uint64_t bytes = uint64_t{request.count} * dtype_size(request.dtype);
  for (const Staging::LocalKind &local : staging.local_kinds) {
    const auto runs = [&](uint32_t local_collective, uint32_t mode) {
      if (local.capabilities.lookup(local_collective, request.dtype, request.reduce_op, mode) != Support::yes)
        return false;
      const uint64_t limit = local.capabilities.max_bytes(local_collective, request.dtype);
      return limit == 0 || bytes <= limit;
    };
    const size_t leader = leader_of(local, request);
    const bool at_root = collective != BP_ALL_REDUCE && leader == request.root;
    const uint32_t own_mode = request.in_place[leader] ? BP_CAPABILITY_IN_PLACE : BP_CAPABILITY_OUT_OF_PLACE;
    const bool ok = collective == BP_ALL_REDUCE ? runs(BP_REDUCE, own_mode) && runs(BP_BROADCAST, BP_CAPABILITY_IN_PLACE)
                    : collective == BP_REDUCE   ? runs(BP_REDUCE, at_root ? own_mode : BP_CAPABILITY_OUT_OF_PLACE)
                                                : runs(BP_BROADCAST, at_root ? own_mode : BP_CAPABILITY_IN_PLACE);
    if (!ok) return false;
  }
  return true;
}

// A local kind's reduce to, or broadcast from, `leader` on its own plugin,
// with the leader's buffers given and the others' the request's.
Status run_local(Staging::LocalKind &local, uint32_t collective, const StagedArgs &request, size_t leader,
                 bp_plugin_buffer *leader_send, bp_plugin_buffer *leader_recv) {
  uint32_t local_root = 0;
  for (size_t i = 0; i < local.ranks.size(); ++i) {
    const size_t rank = local.ranks[i];
    if (rank == leader) {
      local_root = static_cast<uint32_t>(i);
      local.send[i] = leader_send;
      local.recv[i] = leader_recv;
    } else {
      local.send[i] = collective == BP_REDUCE ? request.send[rank] : nullptr;
      local.recv[i] = collective == BP_REDUCE ? nullptr : request.recv[rank];
    }
  }
  Status status = run_collective(*local.kind->plugin, local.comm,
                                 collective_args(collective, request.dtype, request.reduce_op, local_root,
                                                 request.count, local.ranks.size(), local.send.data(),
                                                 local.recv.data(), BP_COLLECTIVE_CALLER_WAITS));
  if (!status) return status.take_error().with("rank", leader);
  return status;
}

// A buffer of `bytes` at least on the local kind's first rank's device.
Status ensure_sum(const bp_group &group, Staging::LocalKind &local, size_t bytes) {
  if (bytes <= local.sum_bytes) return {};
  LoadedPlugin &plugin = *local.kind->plugin;
  destroy_buffer(plugin, local.sum);
  local.sum_bytes = 0;
  Status status = call_plugin(plugin, "buffer_create", [&](bp_error_sink *sink) {
    return plugin.functions.buffer_create(plugin.state, local.kind->index_in_plugin,
                                          group.ranks[local.ranks[0]]->index, bytes, &local.sum, sink);
  });
  if (status && !local.sum) status = plugin_returned_null(plugin, "buffer_create");
  if (!status) return status.take_error().with("rank", local.ranks[0]);
  local.sum_bytes = bytes;
  return {};
}

// The call with its local kinds first (runs_locally_first): each reduces to
// its leader, the leaders and the other ranks are staged, and each local
// kind's leader broadcasts the result to the kind's other ranks.
Status run_with_local_kinds(bp_group &group) {
  Staging &staging = *group.staging;
  const StagedArgs &request = staging.args;
  StagedArgs &leaders = staging.leader_args;
  const uint32_t collective = request.collective;
  leaders.collective = collective;
  leaders.dtype = request.dtype;
  leaders.reduce_op = request.reduce_op;
  leaders.count = request.count;
  leaders.root = 0;
  const size_t participants = staging.leader_homes.size();
  for (size_t p = 0; p < participants; ++p) {
    Staging::LocalKind *local = staging.leader_kinds[p];
    const size_t member = local ? leader_of(*local, request) : staging.leader_homes[p];
    staging.leader_members[p] = member;
    if (member == request.root) leaders.root = static_cast<uint32_t>(p);
    if (!local || collective == BP_BROADCAST) {
      leaders.send[p] = request.send[member];
      leaders.recv[p] = request.recv[member];
      leaders.in_place[p] = request.in_place[member];
      // A root of a local kind is only the source: the local broadcast fills its recv.
      if (local && member == request.root) {
        leaders.recv[p] = request.send[member];
        leaders.in_place[p] = 1;
      }
      continue;
    }
    // The kind's sum lands at the leader and takes part in place there.
    bp_plugin_buffer *sum = request.recv[member];
    if (collective == BP_REDUCE && member != request.root) {
      if (Status status = ensure_sum(group, *local, request.count * dtype_size(request.dtype)); !status) return status;
      sum = local->sum;
    }
    if (Status status = run_local(*local, BP_REDUCE, request, member, request.send[member], sum); !status)
      return status;
    leaders.send[p] = leaders.recv[p] = sum;
    leaders.in_place[p] = 1;
  }
  if (Status status = stage_participants(group, staging.leader_comm, leaders, staging.leader_members.data(),
                                         staging.leader_homes.data(), participants);
      !status)
    return status;
  if (collective == BP_REDUCE) return {};
  for (Staging::LocalKind &local : staging.local_kinds) {
    const size_t leader = leader_of(local, request);
    bp_plugin_buffer *source = collective == BP_BROADCAST && leader == request.root ? request.send[leader]
                                                                                    : request.recv[leader];
    if (Status status = run_local(local, BP_BROADCAST, request, leader, source, request.recv[leader]); !status)
      return status;
  }
  return {};
}

}  // namespace

Status run_staged(bp_group &group) {
  Staging &staging = *group.staging;
  const StagedArgs &request = staging.args;
  const size_t ranks = group.ranks.size();
  if (request.collective == BP_BARRIER) return run_reducer(staging, staging.comm, request, ranks, 0);
  if (request.count == 0) return {};  // nothing to move: no buffer of the reducer's is needed either
  if (runs_locally_first(staging, request)) return run_with_local_kinds(group);
  return stage_participants(group, staging.comm, request, staging.every_rank.data(), staging.every_rank.data(),
                            ranks);
}

namespace {

// The runner's job: the group's staged call.
void run_handed_call(void *context, uint64_t) {
  bp_group &group = *static_cast<bp_group *>(context);
  Status outcome;
  try {
    outcome = run_staged(group);
  } catch (const std::exception &e) {
    outcome = Error(BP_OUT_OF_MEMORY, std::string("staging: the call failed: ") + e.what());
  }
  group.staging->outcome = std::move(outcome);
}

}  // namespace

bool start_staged(bp_group &group) {
  Staging &staging = *group.staging;
  if (!staging.runner.ensure_started(run_handed_call, &group, "run an _async call apart from its caller")) return false;
  staging.runner_job = staging.runner.give();
  return true;
}

bool wait_staged(Staging &staging, int64_t timeout_ns, Status &outcome) {
  if (!staging.runner.wait_done(staging.runner_job + 1, timeout_ns)) return false;
  outcome = std::exchange(staging.outcome, Status());
  return true;
}

bool staged_finished(Staging &staging) { return staging.runner.wait_done(staging.runner_job + 1, 0); }

OrderedThread::~OrderedThread() { stop(); }

bool OrderedThread::ensure_started(Run run, void *context, const char *purpose) {
  if (thread_.joinable()) return true;
  run_ = run;
  context_ = context;
  try {
    thread_ = std::thread(&OrderedThread::run_jobs, this);
    return true;
  } catch (const std::system_error &e) {
    log(BP_LOG_WARN, "dispatch",
        std::string("staging: no thread to ") + purpose + " (" + e.what() + "); the call runs on its caller");
    return false;
  }
}

uint64_t OrderedThread::give() {
  uint64_t job;
  {
    std::lock_guard lock(mutex_);
    job = given_++;
  }
  wake_thread_.notify_one();
  return job;
}

uint64_t OrderedThread::given() {
  std::lock_guard lock(mutex_);
  return given_;
}

bool OrderedThread::wait_done(uint64_t count, int64_t timeout_ns) {
  std::unique_lock lock(mutex_);
  const auto ran = [&] { return done_ >= count; };
  if (timeout_ns < 0) {
    wake_waiters_.wait(lock, ran);
    return true;
  }
  return wake_waiters_.wait_for(lock, std::chrono::nanoseconds(timeout_ns), ran);
}

void OrderedThread::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_thread_.notify_one();
  thread_.join();
}

void OrderedThread::run_jobs() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_thread_.wait(lock, [&] { return stopping_ || done_ < given_; });
    if (done_ == given_) return;  // stopping, and nothing left
    const uint64_t job = done_;
    lock.unlock();
    run_(context_, job);
    lock.lock();
    done_ = job + 1;
    wake_waiters_.notify_all();
  }
}

}  // namespace backplane
