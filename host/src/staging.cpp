// Collectives through host memory (staging.hpp).
#include "staging.hpp"

#include <algorithm>
#include <mutex>
#include <new>
#include <shared_mutex>

#include "host.hpp"
#include "names.hpp"

namespace backplane {
namespace {

// The kind whose plugin computes staged collectives.
constexpr const char *kReducerKind = "cpu";
// Staging memory starts on a cache line (the kernels' vectors load aligned)
// and grows in whole pages.
constexpr std::align_val_t kStagingAlignment{64};
constexpr size_t kStagingGranule = 4096;

void free_region_memory(std::byte *memory) { ::operator delete[](memory, kStagingAlignment); }

void destroy_wrapped(LoadedPlugin &plugin, bp_plugin_buffer *&buffer) {
  if (!buffer) return;
  if (!plugin.failed.load()) {
    try {
      plugin.functions.buffer_destroy(plugin.state, buffer);
    } catch (...) {
      Status ignored = plugin_threw(plugin, "buffer_destroy", "an exception");
      (void)ignored;
    }
  }
  buffer = nullptr;
}

void release_regions(Staging &staging) {
  LoadedPlugin &plugin = *staging.reducer->plugin;
  for (Staging::Region &region : staging.regions) {
    destroy_wrapped(plugin, region.send);
    destroy_wrapped(plugin, region.recv);
    free_region_memory(region.memory);
    region.memory = nullptr;
  }
  staging.region_bytes = 0;
}

// Host memory of `bytes` for each rank that is not a cpu device, wrapped as
// cpu buffers on its reducer device. Keeps what is there when it is big enough.
Status ensure_regions(Staging &staging, size_t bytes) {
  if (bytes <= staging.region_bytes) return {};
  release_regions(staging);
  const size_t rounded = (bytes + kStagingGranule - 1) / kStagingGranule * kStagingGranule;
  if (rounded < bytes) return Error(BP_OUT_OF_MEMORY, "staging: " + std::to_string(bytes) + " bytes a rank is too large");
  LoadedPlugin &plugin = *staging.reducer->plugin;
  for (size_t rank = 0; rank < staging.regions.size(); ++rank) {
    if (staging.direct[rank]) continue;
    Staging::Region &region = staging.regions[rank];
    try {
      region.memory = static_cast<std::byte *>(::operator new[](2 * rounded, kStagingAlignment));
    } catch (const std::bad_alloc &) {
      release_regions(staging);
      return Error(BP_OUT_OF_MEMORY, "staging: cannot allocate " + std::to_string(2 * rounded) +
                                         " bytes of host memory for rank " + std::to_string(rank));
    }
    for (const std::pair<size_t, bp_plugin_buffer **> &part : {std::pair{size_t{0}, &region.send},
                                                               std::pair{rounded, &region.recv}}) {
      const size_t offset = part.first;
      bp_plugin_buffer **const handle = part.second;
      Status status = call_plugin(plugin, "buffer_wrap_host", [&](bp_error_sink *sink) {
        return plugin.functions.buffer_wrap_host(plugin.state, staging.reducer->index_in_plugin,
                                                 staging.reducer_devices[rank], region.memory + offset, rounded,
                                                 handle, sink);
      });
      if (status && !*handle) status = plugin_returned_null(plugin, "buffer_wrap_host");
      if (!status) {
        release_regions(staging);
        return status;
      }
    }
  }
  staging.region_bytes = rounded;
  return {};
}

// Copies between a rank's own buffer and its staging memory, through the
// rank's plugin; `bytes` is added to the staged count when it succeeds.
Status copy_to_host(const bp_device &device, const bp_plugin_buffer *buffer, size_t offset, std::byte *memory,
                    size_t bytes, uint64_t &staged) {
  if (bytes == 0) return {};
  LoadedPlugin &plugin = *device.kind->plugin;
  Status status = call_plugin(plugin, "buffer_read", [&](bp_error_sink *sink) {
    return plugin.functions.buffer_read(plugin.state, buffer, offset, memory + offset, bytes, sink);
  });
  if (status) staged += bytes;
  return status;
}

Status copy_to_device(const bp_device &device, bp_plugin_buffer *buffer, size_t offset, const std::byte *memory,
                      size_t bytes, uint64_t &staged) {
  if (bytes == 0) return {};
  LoadedPlugin &plugin = *device.kind->plugin;
  Status status = call_plugin(plugin, "buffer_write", [&](bp_error_sink *sink) {
    return plugin.functions.buffer_write(plugin.state, buffer, offset, memory + offset, bytes, sink);
  });
  if (status) staged += bytes;
  return status;
}

// A part of a rank's in-place buffer: [offset, offset + bytes).
struct Span {
  size_t offset, bytes;
};
// What a collective reads of an in-place buffer (types.h): all_gather and
// gather take the rank's own block r of recv; the others the whole of send.
Span in_place_input(uint32_t collective, size_t rank, size_t block, size_t all_blocks) {
  switch (collective) {
    case BP_ALL_GATHER:
    case BP_GATHER: return {rank * block, block};
    case BP_REDUCE_SCATTER:
    case BP_SCATTER:
    case BP_ALL_TO_ALL: return {0, all_blocks};
    default: return {0, block};
  }
}
// What it writes: reduce_scatter and scatter the rank's block r of send;
// broadcast nothing at the root, whose buffer is the source.
Span in_place_result(uint32_t collective, size_t rank, bool is_root, size_t block, size_t all_blocks) {
  switch (collective) {
    case BP_REDUCE_SCATTER:
    case BP_SCATTER: return {rank * block, block};
    case BP_ALL_GATHER:
    case BP_GATHER:
    case BP_ALL_TO_ALL: return {0, all_blocks};
    case BP_BROADCAST: return {0, is_root ? 0 : block};
    default: return {0, block};
  }
}

Status run_reducer(Staging &staging, const bp_collective_request &request, size_t ranks) {
  LoadedPlugin &plugin = *staging.reducer->plugin;
  bp_collective_args args{};
  args.struct_size = sizeof args;
  args.collective = request.collective;
  args.dtype = request.dtype;
  args.reduce_op = request.reduce_op;
  args.root = request.root;
  args.count = request.count;
  args.rank_count = ranks;
  if (request.collective != BP_BARRIER) {
    args.send = staging.send_handles.data();
    args.recv = staging.recv_handles.data();
  }
  args.flags = BP_COLLECTIVE_CALLER_WAITS;
  bp_plugin_request *started = nullptr;
  Status status = call_plugin(plugin, "collective_start", [&](bp_error_sink *sink) {
    return plugin.functions.collective_start(plugin.state, staging.comm, &args, &started, sink);
  });
  if (!status || !started) return status;
  status = call_plugin(plugin, "request_wait", [&](bp_error_sink *sink) {
    return plugin.functions.request_wait(plugin.state, started, -1, sink);
  });
  if (!plugin.failed.load()) {
    try {
      plugin.functions.request_release(plugin.state, started);
    } catch (...) {
      Status ignored = plugin_threw(plugin, "request_release", "an exception");
      (void)ignored;
    }
  }
  return status;
}

}  // namespace

Staging::~Staging() {
  if (!reducer) return;
  release_regions(*this);
  LoadedPlugin &plugin = *reducer->plugin;
  if (comm && !plugin.failed.load()) {
    try {
      plugin.functions.comm_destroy(plugin.state, comm);
    } catch (...) {
      Status ignored = plugin_threw(plugin, "comm_destroy", "an exception");
      (void)ignored;
    }
  }
}

void StagingDeleter::operator()(Staging *staging) const { delete staging; }

void prepare_staging(bp_group &group, HostLock host_lock) {
  const bool mixed = group.kind == nullptr;
  if (mixed ? group.policy != BP_POLICY_STAGE : group.on_unsupported != BP_ON_UNSUPPORTED_STAGE) return;
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
  staging->regions.resize(ranks);
  staging->send_handles.resize(ranks);
  staging->recv_handles.resize(ranks);
  group.staging.reset(staging.release());
}

Status run_staged(bp_group &group, const bp_collective_request &request) {
  Staging &staging = *group.staging;
  const size_t ranks = group.ranks.size();
  const uint32_t collective = request.collective;
  if (collective == BP_BARRIER) return run_reducer(staging, request, ranks);
  // Dispatch checked these products for overflow.
  const size_t block = request.count * dtype_size(request.dtype), all_blocks = block * ranks;
  if (block == 0) return {};  // nothing to move: no buffer of the reducer's is needed either
  size_t region = 0;
  for (size_t rank = 0; rank < ranks; ++rank) {
    if (staging.direct[rank]) continue;
    const bp_rank_buffers use = bp_rank_buffers_of(collective, ranks, rank == request.root);
    if (use.uses_send) region = std::max(region, use.send_blocks == 1 ? block : all_blocks);
    if (use.uses_recv) region = std::max(region, use.recv_blocks == 1 ? block : all_blocks);
  }
  if (Status status = ensure_regions(staging, region); !status) return status;

  uint64_t staged = 0;
  // Out to the host: each rank's send data, or its whole in-place buffer.
  for (size_t rank = 0; rank < ranks; ++rank) {
    bp_plugin_buffer *send = group.send_handles[rank], *recv = group.recv_handles[rank];
    if (staging.direct[rank]) {
      staging.send_handles[rank] = send;
      staging.recv_handles[rank] = recv;
      continue;
    }
    const bp_rank_buffers use = bp_rank_buffers_of(collective, ranks, rank == request.root);
    const size_t send_bytes = use.send_blocks == 1 ? block : all_blocks;
    const Staging::Region &memory = staging.regions[rank];
    const bp_device &device = *group.ranks[rank];
    const bool in_place = use.uses_send && use.uses_recv && request.send[rank] == request.recv[rank];
    staging.send_handles[rank] = use.uses_send ? memory.send : nullptr;
    staging.recv_handles[rank] = use.uses_recv ? (in_place ? memory.send : memory.recv) : nullptr;
    Status status;
    if (in_place) {
      const Span input = in_place_input(collective, rank, block, all_blocks);
      status = copy_to_host(device, send, input.offset, memory.memory, input.bytes, staged);
    } else if (use.uses_send) {
      status = copy_to_host(device, send, 0, memory.memory, send_bytes, staged);
    }
    if (!status) {
      group.counters.add(group.counters.staged_bytes, staged);
      return status.take_error().with("rank", rank);
    }
  }
  Status status = run_reducer(staging, request, ranks);
  // Back down: each rank's result, and only the part the collective writes.
  for (size_t rank = 0; status && rank < ranks; ++rank) {
    if (staging.direct[rank]) continue;
    const bp_rank_buffers use = bp_rank_buffers_of(collective, ranks, rank == request.root);
    if (!use.uses_recv) continue;
    const Staging::Region &memory = staging.regions[rank];
    const bool in_place = use.uses_send && request.send[rank] == request.recv[rank];
    const Span result = in_place ? in_place_result(collective, rank, rank == request.root, block, all_blocks)
                                 : Span{0, use.recv_blocks == 1 ? block : all_blocks};
    const std::byte *from = in_place ? memory.memory : memory.memory + staging.region_bytes;
    status = copy_to_device(*group.ranks[rank], group.recv_handles[rank], result.offset, from, result.bytes, staged);
    if (!status) status = status.take_error().with("rank", rank);
  }
  group.counters.add(group.counters.staged_bytes, staged);
  return status;
}

}  // namespace backplane
