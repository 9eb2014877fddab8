// Groups: creating and destroying them, and the C entry points that make,
// find and describe them (backplane.h).
#include <algorithm>
#include <memory>
#include <shared_mutex>

#include "c_api_guard.hpp"
#include "fleet_problems.hpp"
#include "host.hpp"
#include "layers.hpp"
#include "span.hpp"
#include "staging.hpp"

namespace backplane {

Status create_group(bp_host *host, bp_device *const *ranks, size_t rank_count, const bp_group_options *options,
                    bp_group **out, HostLock host_lock) {
  constexpr const char *function = "bp_group_create";
  if (!host) return null_argument(function, "host");
  if (!ranks) return null_argument(function, "ranks");
  if (!out) return null_argument(function, "out");
  if (rank_count == 0) return Error(BP_INVALID_ARGUMENT, "bp_group_create: a group needs at least one device");
  if (options && options->struct_size < BP_GROUP_OPTIONS_SIZE_V1_0)
    return Error(BP_INVALID_ARGUMENT, "bp_group_create: options->struct_size is below its 1.0 size");
  auto group = std::make_unique<bp_group>();
  group->host = host;
  bool spans = false, guard = false;
  if (options) {
    group->name = options->name ? options->name : "";
    group->policy = options->policy;
    if (group->policy != BP_POLICY_STAGE && group->policy != BP_POLICY_REJECT)
      return Error(BP_INVALID_ARGUMENT, "bp_group_create: unknown policy " + std::to_string(group->policy))
          .hint("use BP_POLICY_STAGE or BP_POLICY_REJECT");
    if (options->struct_size >= BP_GROUP_OPTIONS_SIZE_V1_4) {
      if (options->on_unsupported != BP_ON_UNSUPPORTED_ERROR && options->on_unsupported != BP_ON_UNSUPPORTED_STAGE)
        return Error(BP_INVALID_ARGUMENT,
                     "bp_group_create: unknown on_unsupported " + std::to_string(options->on_unsupported))
            .hint("use BP_ON_UNSUPPORTED_ERROR or BP_ON_UNSUPPORTED_STAGE");
      group->on_unsupported = static_cast<uint32_t>(options->on_unsupported);
    }
    if (options->struct_size >= BP_GROUP_OPTIONS_SIZE_V1_5) {
      if (options->local_first > BP_LOCAL_FIRST_NEVER)
        return Error(BP_INVALID_ARGUMENT, "bp_group_create: unknown local_first " + std::to_string(options->local_first))
            .hint("use BP_LOCAL_FIRST_AUTO, BP_LOCAL_FIRST_ALWAYS or BP_LOCAL_FIRST_NEVER");
      group->local_first = static_cast<uint32_t>(options->local_first);
    }
    if (options->struct_size >= BP_GROUP_OPTIONS_SIZE_V1_6) {
      if (options->span > BP_SPAN_WORLD)
        return Error(BP_INVALID_ARGUMENT, "bp_group_create: unknown span " + std::to_string(options->span))
            .hint("use BP_SPAN_PROCESS or BP_SPAN_WORLD");
      if (options->guard > 1)
        return Error(BP_INVALID_ARGUMENT, "bp_group_create: guard is " + std::to_string(options->guard) +
                                              ", not 0 or 1");
      spans = options->span == BP_SPAN_WORLD;
      guard = options->guard == 1;
      if (guard && !spans)
        return Error(BP_INVALID_ARGUMENT, "bp_group_create: guard compares calls across processes, and the group "
                                          "spans one process")
            .hint("set span to BP_SPAN_WORLD, or leave guard 0");
      if (spans && group->on_unsupported == BP_ON_UNSUPPORTED_STAGE)
        return Error(BP_INVALID_ARGUMENT, "bp_group_create: on_unsupported stage is not available on a group "
                                          "across processes yet")
            .hint("leave on_unsupported at BP_ON_UNSUPPORTED_ERROR");
    }
  }
  for (size_t rank = 0; rank < rank_count; ++rank) {
    bp_device *device = ranks[rank];
    if (!device) return Error(BP_INVALID_ARGUMENT, "bp_group_create: ranks[" + std::to_string(rank) + "] is NULL");
    if (device->host != host) {
      return Error(BP_INVALID_ARGUMENT, "bp_group_create: ranks[" + std::to_string(rank) + "] ('" + device->name +
                                            "') belongs to another host");
    }
    for (size_t earlier = 0; earlier < rank; ++earlier) {
      if (ranks[earlier] == device) {
        return Error(BP_INVALID_ARGUMENT, "bp_group_create: device '" + device->name + "' is rank " +
                                              std::to_string(earlier) + " and rank " + std::to_string(rank))
            .hint("a device may appear once in a group");
      }
      // Layered devices run on their base: two over one base are one device twice.
      if (ranks[earlier]->base == device->base) {
        return Error(BP_INVALID_ARGUMENT, "bp_group_create: ranks " + std::to_string(earlier) + " ('" +
                                              ranks[earlier]->name + "') and " + std::to_string(rank) + " ('" +
                                              device->name + "') are both device '" + device->base->name + "'")
            .hint("a device may appear once in a group, with or without layers");
      }
    }
    group->layered = group->layered || device->layered();
    group->layers_timed = group->layers_timed || device->wants_time;
    group->ranks.push_back(device);
  }
  group->serial = next_serial();
  group->global_ranks = rank_count;
  group->send_handles.resize(rank_count);
  group->recv_handles.resize(rank_count);
  DeviceKind *kind = group->ranks[0]->kind;
  const bool one_kind = std::all_of(group->ranks.begin(), group->ranks.end(),
                                    [&](const bp_device *device) { return device->kind == kind; });
  if (one_kind) {
    group->kind = kind;
    group->capabilities = kind->capabilities;
    for (const bp_device *device : group->ranks) group->capabilities.intersect(device->capabilities());
    std::vector<uint32_t> indices;
    for (const bp_device *device : group->ranks) indices.push_back(device->index);
    LoadedPlugin &plugin = *kind->plugin;
    Status status = call_plugin(plugin, "comm_create", [&](bp_error_sink *sink) {
      return plugin.functions.comm_create(plugin.state, kind->index_in_plugin, indices.data(), indices.size(),
                                          &group->comm, sink);
    });
    if (status && !group->comm) status = plugin_returned_null(plugin, "comm_create");
    if (!status) return status;
    if (plugin.functions.comm_info) {
      bp_plugin_comm_info info{};
      info.struct_size = sizeof info;
      status = call_plugin(plugin, "comm_info", [&](bp_error_sink *sink) {
        return plugin.functions.comm_info(plugin.state, group->comm, &info, sink);
      });
      if (!status) {
        call_plugin_release(plugin, "comm_destroy", [&] { plugin.functions.comm_destroy(plugin.state, group->comm); });
        return status;
      }
      group->route = read_bounded_string(info.route, kMaxPluginTextBytes).text;
    }
    group->plugin_queues = plugin.descriptor.abi_minor >= 2;
  }
  // From here the group owns a comm: every way out goes through destroy_group.
  try {
    if (spans) {
      if (Status status = prepare_span(*group, guard, host_lock); !status) {
        destroy_group(group.release());
        return status;
      }
    } else {
      prepare_staging(*group, host_lock);
    }
  } catch (...) {
    destroy_group(group.release());
    throw;
  }
  // A mixed group runs what staging runs (a spanning one: prepare_span said).
  if (!spans && !group->kind && group->staging) group->capabilities = group->staging->capabilities;
  *out = group.release();
  return {};
}

void destroy_group(bp_group *group) {
  finish_in_flight(*group);
  group->span.reset();  // the transport's comm, before the local comm
  if (group->comm) {
    LoadedPlugin &plugin = *group->kind->plugin;
    call_plugin_release(plugin, "comm_destroy", [&] { plugin.functions.comm_destroy(plugin.state, group->comm); });
  }
  delete group;
}

}  // namespace backplane

using namespace backplane;

extern "C" {

bp_error *bp_group_create(bp_host *host, bp_device *const *ranks, size_t rank_count, const bp_group_options *options,
                          bp_group **out) {
  return guarded([&]() -> Status {
    if (Status status = create_group(host, ranks, rank_count, options, out, HostLock::take); !status) return status;
    retain_host(host);
    return {};
  });
}

size_t bp_group_size(const bp_group *group) { return group ? group->ranks.size() : 0; }

bp_error *bp_group_get_span(const bp_group *group, bp_group_span_info *out) {
  return guarded([&]() -> Status {
    if (!group) return null_argument("bp_group_get_span", "group");
    bp_group_span_info span{};
    span.struct_size = sizeof span;
    span.global_size = group->global_ranks;
    span.first_rank = group->first_rank;
    span.local_size = group->ranks.size();
    span.process_count = 1;
    if (group->span) {
      span.process_index = group->span->process_index;
      span.process_count = group->span->process_count;
      span.broken = group->span->broken.load(std::memory_order_acquire) ? 1 : 0;
      span.guard = group->span->guard ? 1 : 0;
    }
    return write_out("bp_group_get_span", out, span, BP_GROUP_SPAN_INFO_SIZE_V1_6);
  });
}

size_t bp_group_local_kinds(const bp_group *group) {
  return group && group->staging ? local_kind_count(*group->staging) : 0;
}

void bp_group_destroy(bp_group *group) {
  if (!group || group->owned_by_host) return;
  bp_host *host = group->host;
  destroy_group(group);
  release_host(host);
}

bp_error *bp_group_check(bp_group *group, bp_collective collective, bp_dtype dtype, bp_reduce_op op) {
  return guarded([&]() -> Status {
    if (!group) return null_argument("bp_group_check", "group");
    return check_support(*group, collective, dtype, op, 0);
  });
}

bp_error *bp_group_plan(bp_group *group, bp_collective collective, bp_dtype dtype, bp_reduce_op op,
                        bp_group_path *out) {
  return guarded([&]() -> Status {
    if (!group) return null_argument("bp_group_plan", "group");
    if (!out) return null_argument("bp_group_plan", "out");
    Expected<bp_group_path> path = plan(*group, collective, dtype, op, 0);
    if (!path) return path.take_error();
    *out = *path;
    return {};
  });
}

bp_error *bp_group_get_counters(const bp_group *group, bp_group_counters *out) {
  return guarded([&]() -> Status {
    if (!group) return null_argument("bp_group_get_counters", "group");
    bp_group_counters counters{};
    counters.struct_size = sizeof counters;
    counters.native_calls = group->counters.native.load(std::memory_order_relaxed);
    counters.staged_calls = group->counters.staged.load(std::memory_order_relaxed);
    counters.refused_calls = group->counters.refused.load(std::memory_order_relaxed);
    counters.staged_bytes = group->counters.staged_bytes.load(std::memory_order_relaxed);
    return write_out("bp_group_get_counters", out, counters, BP_GROUP_COUNTERS_SIZE_V1_4);
  });
}

bp_error *bp_host_find_group(bp_host *host, const char *name, bp_group **out) {
  return guarded([&]() -> Status {
    if (!host || !name || !out) return Error(BP_INVALID_ARGUMENT, "bp_host_find_group: host, name and out must not be NULL");
    std::shared_lock lock(host->mutex);
    std::vector<std::string> names;
    for (const auto &group : host->groups) {
      if (group->name == name) {
        *out = group.get();
        return {};
      }
      names.push_back(group->name);
    }
    const std::string hint = did_you_mean(name, names);
    Error error(BP_INVALID_ARGUMENT, std::string("no group named '") + name + "'" +
                                         (names.empty() ? " (no fleet with groups is loaded)" : ""));
    error.with("groups", names);
    if (!hint.empty()) error.with("hint", hint);
    return error;
  });
}

size_t bp_host_group_count(const bp_host *host) {
  if (!host) return 0;
  std::shared_lock lock(host->mutex);
  return host->groups.size();
}

bp_group *bp_host_group(const bp_host *host, size_t index) {
  if (!host) return nullptr;
  std::shared_lock lock(host->mutex);
  return index < host->groups.size() ? host->groups[index].get() : nullptr;
}

const char *bp_group_name(const bp_group *group) { return group ? group->name.c_str() : ""; }

const char *bp_group_route(const bp_group *group) { return group ? group->route.c_str() : ""; }

bp_device *bp_group_device(const bp_group *group, size_t rank) {
  return group && rank < group->ranks.size() ? group->ranks[rank] : nullptr;
}

}  // extern "C"
