// Layered devices: the nesting rules, checked once when a device is built
// (never at dispatch), the hooks around each call, and the host services
// layers read devices and buffers through.
#include "layers.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <shared_mutex>

#include "fleet_problems.hpp"
#include "log.hpp"
#include "names.hpp"
#include "text.hpp"

namespace backplane {
namespace {

constexpr const char *kArrow = " \u2192 ";

std::string chain_text(const std::vector<std::string> &layers, const std::string &base) {
  std::string text;
  for (const std::string &layer : layers) text += layer + kArrow;
  return text + base;
}

Error nesting_error(bp_code code, const std::string &reason, const std::vector<std::string> &chain,
                    const bp_device &over, const std::string &hint) {
  const std::string text = chain_text(chain, over.base->name);
  Error error(code, "layered device " + text + ": " + reason);
  return std::move(error.with("chain", text).with("layers", chain).with("devices", {over.describe()})).hint(hint);
}

const LayerKind *find_layer_kind(const bp_host &host, const std::string &name) {
  for (const auto &kind : host.layer_kinds)
    if (kind->name == name) return kind.get();
  return nullptr;
}

std::string list_text(const std::vector<std::string> &names) {
  std::string text;
  for (const std::string &name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

// The options of one layer: an object whose keys the kind declares; path
// options resolved against `base`.
Expected<nlohmann::json> layer_options(const LayerKind &kind, const nlohmann::json &given,
                                       const std::filesystem::path &base) {
  if (!given.is_object())
    return Error(BP_CONFIG, "the options of layer '" + kind.name + "' are not a JSON object (" + given.dump() + ")")
        .with("layer", kind.name)
        .hint("give an object, e.g. {\"" + kind.name + "\": {}}");
  nlohmann::json options = given;
  std::vector<std::string> known;
  for (const LayerKind::Option &option : kind.options) known.push_back(option.name);
  for (auto item : options.items()) {
    const std::string key = item.key();  // a named copy: clang lets no lambda capture a structured binding
    nlohmann::json &value = item.value();
    auto declared = std::find_if(kind.options.begin(), kind.options.end(),
                                 [&](const LayerKind::Option &option) { return option.name == key; });
    if (declared == kind.options.end()) {
      std::string hint = did_you_mean(key, known);
      if (hint.empty()) hint = known.empty() ? "layer '" + kind.name + "' takes no options" : "it takes " + list_text(known);
      return Error(BP_CONFIG, "layer '" + kind.name + "' has no option '" + key + "'" +
                                  (known.empty() ? "" : " (it takes " + list_text(known) + ")"))
          .with("layer", kind.name)
          .with("option", key)
          .hint(hint);
    }
    if (declared->path) {
      if (!value.is_string() || value.get<std::string>().empty())
        return Error(BP_CONFIG, "option '" + key + "' of layer '" + kind.name + "' must be a file name, not " +
                                    value.dump())
            .with("layer", kind.name)
            .with("option", key);
      const std::filesystem::path path = value.get<std::string>();
      if (path.is_relative() && !base.empty()) value = (base / path).lexically_normal().string();
    }
  }
  return options;
}

void destroy_instance(LayerKind &kind, bp_layer_instance *handle) noexcept {
  LoadedPlugin &plugin = *kind.plugin;
  if (!plugin.layer_functions.instance_destroy) return;
  call_plugin_release(plugin, "instance_destroy",
                      [&] { plugin.layer_functions.instance_destroy(plugin.state, handle); });
}

// A layer's refusal or failure, with the layer and the device named.
Error layer_error(Status status, const LayerInstance &layer, const bp_device &device) {
  Error error = status.take_error();
  error.with("layer", layer.kind->name);
  if (!error.context().contains("devices")) error.with("devices", {device.describe()});
  return error;
}

std::atomic<uint64_t> serials{0};

// A layer's refusal in its own words (validate: "validate: rank 1: ..."),
// when its code is one a plugin may return; else plugin_failure's
// DEVICE_FAILURE, as for any plugin function.
[[gnu::cold, gnu::noinline]] Status layer_refusal(LoadedPlugin &plugin, bp_error_sink &sink, int32_t code) {
  if (!plugin_may_return(code) || sink.message.empty()) return plugin_failure(plugin, "a layer hook", sink, code);
  return Error(static_cast<bp_code>(code), sink.message)
      .with("layer_plugin", {{"name", plugin.name}, {"version", plugin.version}});
}

}  // namespace

uint64_t next_serial() noexcept { return serials.fetch_add(1, std::memory_order_relaxed) + 1; }

int64_t steady_now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

LayerInstance::~LayerInstance() {
  if (kind && handle) destroy_instance(*kind, handle);
}

std::string LayerKind::chain_rule() const {
  std::string rule = stackable ? "stackable" : "not stackable";
  rule += wraps.empty() ? ", wraps every device kind" : ", wraps " + list_text(wraps);
  return rule;
}

Error layer_cycle_error(const std::vector<std::string> &names) {
  std::string text;
  for (const std::string &name : names) text += (text.empty() ? "" : kArrow) + name;
  return std::move(Error(BP_NESTED_LAYER, "layered devices wrap each other in a cycle: " + text).with("chain", text))
      .hint("make one of them wrap a device without layers");
}

Expected<std::unique_ptr<bp_device>> build_layered_device(bp_host &host, const WrapRequest &request) {
  if (!request.over) return Error(BP_INVALID_ARGUMENT, "bp_device_wrap: the device to wrap (over) is NULL");
  const bp_device &over = *request.over;
  if (request.layers.empty())
    return Error(BP_INVALID_ARGUMENT, "bp_device_wrap: no layers to wrap '" + over.name + "' in")
        .hint("name at least one layer kind, e.g. \"trace\"");
  std::vector<std::string> chain = request.layers;
  chain.insert(chain.end(), over.layer_names.begin(), over.layer_names.end());
  std::vector<const LayerKind *> kinds;
  for (const std::string &name : request.layers) {
    const LayerKind *kind = find_layer_kind(host, name);
    if (!kind) {
      std::vector<std::string> known;
      for (const auto &registered : host.layer_kinds) known.push_back(registered->name);
      std::string hint = did_you_mean(name, known);
      if (hint.empty()) hint = "copy libbackplane_" + name + ".so into a plugin directory";
      return nesting_error(BP_PLUGIN_NOT_FOUND,
                           "no loaded plugin provides layer kind '" + name + "'" +
                               (known.empty() ? " (no layer kind is loaded)" : " (loaded: " + list_text(known) + ")"),
                           chain, over, hint)
          .with("layer", name)
          .with("known_layers", known);
    }
    kinds.push_back(kind);
  }
  if (chain.size() > BP_LAYER_CHAIN_MAX)
    return nesting_error(BP_NESTED_LAYER,
                         std::to_string(chain.size()) + " layers, deeper than the " +
                             std::to_string(BP_LAYER_CHAIN_MAX) + " a chain may have",
                         chain, over, "wrap fewer layers; use bp_device_base() to get the device under the layers")
        .with("depth", chain.size());
  for (size_t i = 0; i < chain.size(); ++i) {
    const LayerKind *kind = i < kinds.size() ? kinds[i] : over.chain[i - kinds.size()]->kind;
    if (kind->stackable) continue;
    for (size_t j = i + 1; j < chain.size(); ++j) {
      if (chain[j] != chain[i]) continue;
      return nesting_error(BP_NESTED_LAYER,
                           "layer '" + chain[i] + "' appears twice and is not stackable", chain, over,
                           "remove the second `" + chain[i] +
                               "`, or use bp_device_base() to get the device under the layers")
          .with("layer", chain[i]);
    }
  }
  const std::string &base_kind = over.kind->name;
  for (const LayerKind *kind : kinds) {
    if (kind->wraps.empty() || std::find(kind->wraps.begin(), kind->wraps.end(), base_kind) != kind->wraps.end())
      continue;
    return nesting_error(BP_NESTED_LAYER,
                         "layer '" + kind->name + "' does not wrap device kind '" + base_kind + "' (it wraps " +
                             list_text(kind->wraps) + ")",
                         chain, over, "wrap a " + list_text(kind->wraps) + " device in '" + kind->name + "'")
        .with("layer", kind->name);
  }
  if (!request.options.is_object())
    return Error(BP_CONFIG, "layer options are not a JSON object keyed by layer kind")
        .hint("give e.g. {\"trace\": {\"file\": \"trace.json\"}}");
  for (const auto &[key, value] : request.options.items()) {
    if (std::find(request.layers.begin(), request.layers.end(), key) != request.layers.end()) continue;
    return Error(BP_CONFIG, "options are given for layer '" + key + "', which is not among the layers wrapped (" +
                                list_text(request.layers) + ")")
        .with("layer", key)
        .hint("key the options by a layer of this device");
  }

  auto device = std::make_unique<bp_device>();
  device->host = &host;
  device->base = over.base;
  device->over = request.over;
  device->kind = over.kind;
  device->index = over.index;
  device->plugin_device_name = over.plugin_device_name;
  device->description = over.description;
  device->flags = over.flags;
  device->memory_bytes = over.memory_bytes;
  device->property_keys = over.property_keys;
  device->property_values = over.property_values;
  for (size_t i = 0; i < device->property_keys.size(); ++i) {
    device->property_key_pointers.push_back(device->property_keys[i].c_str());
    device->property_value_pointers.push_back(device->property_values[i].c_str());
  }
  device->layer_names = chain;
  for (const std::string &name : device->layer_names) device->layer_name_pointers.push_back(name.c_str());
  device->chain_text = chain_text(chain, over.base->name);
  device->name = request.name.empty() ? device->chain_text : request.name;

  for (size_t i = 0; i < kinds.size(); ++i) {
    LayerKind &kind = *const_cast<LayerKind *>(kinds[i]);
    const nlohmann::json given = request.options.value(kind.name, nlohmann::json::object());
    Expected<nlohmann::json> options = layer_options(kind, given, request.base);
    if (!options) return options.take_error().with("chain", device->chain_text);
    const std::string options_text = options->dump();
    bp_layer_create_args args{};
    args.struct_size = sizeof args;
    args.layer_kind = kind.index_in_plugin;
    args.device = device.get();
    args.device_name = device->name.c_str();
    args.chain = device->chain_text.c_str();
    args.options_json = options_text.c_str();
    auto instance = std::make_unique<LayerInstance>();
    LoadedPlugin &plugin = *kind.plugin;
    Status status = call_plugin(plugin, "instance_create", [&](bp_error_sink *sink) {
      return plugin.layer_functions.instance_create(plugin.state, &args, &instance->handle, sink);
    });
    if (status && !instance->handle) status = plugin_returned_null(plugin, "instance_create");
    if (!status)
      return status.take_error().with("layer", kind.name).with("chain", device->chain_text).with("devices",
                                                                                                {over.describe()});
    instance->kind = &kind;
    instance->plugin = &plugin;
    instance->state = plugin.state;
    instance->before = plugin.layer_functions.before;
    instance->after = plugin.layer_functions.after;
    device->wants_time = device->wants_time || kind.timed;
    device->own_layers.push_back(std::move(instance));
  }
  for (const auto &layer : device->own_layers) device->chain.push_back(layer.get());
  device->chain.insert(device->chain.end(), over.chain.begin(), over.chain.end());
  device->wants_time = device->wants_time || over.wants_time;
  return device;
}

namespace {

// Tells the layers outside `refusing` (chain[0..refusing)) that the call
// was refused, innermost first; what they say is dropped (the call failed).
[[gnu::cold, gnu::noinline]] Error refused_by(const bp_device &device, const bp_layer_call &call, size_t refusing,
                                              Status status) {
  Error refusal = layer_error(std::move(status), *device.chain[refusing], device);
  bp_layer_outcome outcome{};
  outcome.struct_size = sizeof outcome;
  outcome.code = refusal.code();
  outcome.message = refusal.message().c_str();
  for (size_t outer = refusing; outer-- > 0;) {
    LayerInstance &seen = *device.chain[outer];
    if (!seen.after) continue;
    Status ignored = call_plugin(*seen.plugin, "after", [&](bp_error_sink *sink) {
      return seen.after(seen.state, seen.handle, &call, &outcome, sink);
    });
    (void)ignored;
  }
  return refusal;
}

}  // namespace

namespace {

// The hooks' path: the caller's one sink for every hook it runs (a plugin
// writes it only when it fails), no Status built unless a hook fails, one
// try around the loop (free until something throws). Inlined into the
// collective's loop over ranks: a call per hook, none per rank.
[[gnu::always_inline]] inline Status before_hooks(const bp_device &device, const bp_layer_call &call,
                                                  bp_error_sink &sink) {
  LayerInstance *const *chain = device.chain.data();
  const size_t layers = device.chain.size();
  size_t i = 0;
  try {
    for (; i < layers; ++i) {
      LayerInstance &layer = *chain[i];
      if (!layer.before) continue;
      if (layer.plugin->failed.load(std::memory_order_relaxed)) [[unlikely]]
        return refused_by(device, call, i, plugin_disabled(*layer.plugin, "before"));
      const int32_t code = layer.before(layer.state, layer.handle, &call, &sink);
      if (code != BP_OK) [[unlikely]]
        return refused_by(device, call, i, layer_refusal(*layer.plugin, sink, code));
    }
  } catch (const std::exception &exception) {
    return refused_by(device, call, i, plugin_threw(*chain[i]->plugin, "before", exception.what()));
  } catch (...) {
    return refused_by(device, call, i, plugin_threw(*chain[i]->plugin, "before", "an exception of unknown type"));
  }
  return {};
}

}  // namespace

Status before_chain(const bp_device &device, const bp_layer_call &call) {
  bp_error_sink sink;
  return before_hooks(device, call, sink);
}

namespace {

[[gnu::cold, gnu::noinline]] void keep_first(Status &first, Status failure, const LayerInstance &layer,
                                             const bp_device &device) {
  if (first) first = layer_error(std::move(failure), layer, device);
}

// Every after hook of the chain, innermost first; the first failure goes
// to `first`, which the caller starts empty. Inlined as before_hooks is.
[[gnu::always_inline]] inline void after_hooks(const bp_device &device, const bp_layer_call &call,
                                               const bp_layer_outcome &outcome, bp_error_sink &sink, Status &first) {
  LayerInstance *const *chain = device.chain.data();
  for (size_t i = device.chain.size(); i-- > 0;) {
    LayerInstance &layer = *chain[i];
    if (!layer.after) continue;
    try {
      if (layer.plugin->failed.load(std::memory_order_relaxed)) [[unlikely]] {
        keep_first(first, plugin_disabled(*layer.plugin, "after"), layer, device);
        continue;
      }
      const int32_t code = layer.after(layer.state, layer.handle, &call, &outcome, &sink);
      if (code != BP_OK) [[unlikely]] {
        keep_first(first, layer_refusal(*layer.plugin, sink, code), layer, device);
        sink = bp_error_sink();
      }
    } catch (const std::exception &exception) {
      keep_first(first, plugin_threw(*layer.plugin, "after", exception.what()), layer, device);
    } catch (...) {
      keep_first(first, plugin_threw(*layer.plugin, "after", "an exception of unknown type"), layer, device);
    }
  }
}

}  // namespace

Status after_chain(const bp_device &device, const bp_layer_call &call, const bp_layer_outcome &outcome) {
  bp_error_sink sink;
  Status first;
  after_hooks(device, call, outcome, sink, first);
  return first;
}

namespace {

// Sets what differs from rank to rank in `call`: the rank, its device, its
// largest buffer's bytes and whether it is in place. `block` is the bytes
// of one block (count x element size, checked for overflow by dispatch).
[[gnu::always_inline]] inline void for_rank(bp_layer_call &call, const bp_group &group, size_t block, size_t rank,
                                            uint32_t async_flag) {
  call.rank = static_cast<uint32_t>(rank);
  call.device = group.ranks[rank];
  call.flags = async_flag;
  if (call.collective == BP_BARRIER) {
    call.bytes = 0;
    return;
  }
  const bp_rank_buffers use = bp_rank_buffers_of(call.collective, group.ranks.size(), rank == call.root);
  call.bytes = block * std::max(use.uses_send ? use.send_blocks : 0, use.uses_recv ? use.recv_blocks : 0);
  if (use.uses_send && use.uses_recv && call.send[rank] == call.recv[rank]) call.flags |= BP_LAYER_CALL_IN_PLACE;
}

}  // namespace

Status before_collective(bp_group &group, const bp_collective_request &request, bool caller_waits,
                         LayeredCall &layered) {
  layered.group = &group;
  bp_layer_call &call = layered.call;
  call.struct_size = sizeof call;
  call.next = nullptr;
  call.operation = BP_LAYER_COLLECTIVE;
  call.buffer = nullptr;
  call.offset = 0;
  call.host_memory = nullptr;
  call.send = nullptr;
  call.recv = nullptr;
  call.collective = request.collective;
  call.dtype = request.dtype;
  call.reduce_op = request.reduce_op;
  call.root = request.root;
  call.count = request.count;
  call.rank_count = group.ranks.size();
  if (request.collective != BP_BARRIER) {
    if (caller_waits) {
      call.send = request.send;
      call.recv = request.recv;
    } else {
      layered.send.assign(request.send, request.send + group.ranks.size());
      layered.recv.assign(request.recv, request.recv + group.ranks.size());
      call.send = layered.send.data();
      call.recv = layered.recv.data();
    }
  }
  call.ranks = group.ranks.data();
  call.group_serial = group.serial;
  call.group_name = group.name.c_str();
  call.call_serial = ++group.calls;
  layered.timed = group.layers_timed;
  layered.block = request.count * dtype_size(request.dtype);
  const uint32_t async_flag = caller_waits ? 0 : BP_LAYER_CALL_ASYNC;
  call.flags = async_flag;
  bp_error_sink sink;
  for (size_t rank = 0; rank < group.ranks.size(); ++rank) {
    const bp_device &device = *group.ranks[rank];
    if (!device.layered()) continue;
    for_rank(call, group, layered.block, rank, async_flag);
    Status status = before_hooks(device, call, sink);
    if (status) [[likely]]
      continue;
    // The ranks before this one saw the call: they learn it was refused.
    bp_layer_outcome outcome{};
    outcome.struct_size = sizeof outcome;
    outcome.code = status.error().code();
    outcome.message = status.error().message().c_str();
    for (size_t earlier = 0; earlier < rank; ++earlier) {
      if (!group.ranks[earlier]->layered()) continue;
      for_rank(call, group, layered.block, earlier, async_flag);
      Status ignored = after_chain(*group.ranks[earlier], call, outcome);
      (void)ignored;
    }
    return status.take_error().with("rank", rank);
  }
  if (layered.timed) layered.start_ns = steady_now_ns();
  return {};
}

Status after_collective(LayeredCall &layered, Status outcome_status) {
  bp_group &group = *layered.group;
  bp_layer_outcome outcome{};
  outcome.struct_size = sizeof outcome;
  if (layered.timed) {
    outcome.start_ns = layered.start_ns;
    outcome.end_ns = steady_now_ns();
  }
  if (!outcome_status) [[unlikely]] {
    outcome.code = outcome_status.error().code();
    outcome.message = outcome_status.error().message().c_str();
  }
  const uint32_t async_flag = layered.call.flags & BP_LAYER_CALL_ASYNC;
  Status first;
  bp_error_sink sink;
  for (size_t rank = 0; rank < group.ranks.size(); ++rank) {
    const bp_device &device = *group.ranks[rank];
    if (!device.layered()) continue;
    for_rank(layered.call, group, layered.block, rank, async_flag);
    Status status;
    after_hooks(device, layered.call, outcome, sink, status);
    if (!status && first) [[unlikely]]
      first = status.take_error().with("rank", rank);
  }
  if (outcome_status && !first) [[unlikely]]
    return first;
  return outcome_status;
}

int32_t describe_device_service(const bp_device *device, bp_layer_device_facts *out) {
  if (!device || !out || out->struct_size < BP_LAYER_DEVICE_FACTS_SIZE_V1_3) return BP_INVALID_ARGUMENT;
  bp_layer_device_facts facts{};
  facts.struct_size = std::min(out->struct_size, sizeof facts);
  facts.next = out->next;
  facts.name = device->name.c_str();
  facts.kind = device->kind->name.c_str();
  facts.plugin = device->kind->plugin->name.c_str();
  facts.base = device->base;
  facts.base_name = device->base->name.c_str();
  facts.layer_count = device->layer_names.size();
  std::memcpy(out, &facts, facts.struct_size);
  return BP_OK;
}

int32_t describe_buffer_service(const bp_buffer *buffer, bp_layer_buffer_facts *out) {
  if (!buffer || !out || out->struct_size < BP_LAYER_BUFFER_FACTS_SIZE_V1_3) return BP_INVALID_ARGUMENT;
  bp_layer_buffer_facts facts{};
  facts.struct_size = std::min(out->struct_size, sizeof facts);
  facts.next = out->next;
  facts.device = buffer->device;
  facts.bytes = buffer->bytes;
  facts.host_memory = buffer->host_memory;
  facts.serial = buffer->serial;
  std::memcpy(out, &facts, facts.struct_size);
  return BP_OK;
}

int32_t read_buffer_service(const bp_buffer *buffer, size_t offset, void *destination, size_t bytes,
                            bp_error_sink *sink) {
  auto refuse = [&](const std::string &message) {
    host_services().report_error(sink, BP_INVALID_ARGUMENT, message.c_str());
    return BP_INVALID_ARGUMENT;
  };
  try {
    if (!buffer) return refuse("read_buffer: buffer is NULL");
    if (!destination && bytes > 0) return refuse("read_buffer: destination is NULL");
    size_t end = 0;
    if (__builtin_add_overflow(offset, bytes, &end) || end > buffer->bytes)
      return refuse("read_buffer: bytes [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                    ") fall outside the buffer of " + std::to_string(buffer->bytes) + " bytes");
    if (bytes == 0) return BP_OK;
    LoadedPlugin &plugin = *buffer->device->kind->plugin;
    if (plugin.failed.load()) return refuse("read_buffer: plugin '" + plugin.name + "' has failed");
    return plugin.functions.buffer_read(plugin.state, buffer->handle, offset, destination, bytes, sink);
  } catch (...) {
    host_services().report_error(sink, BP_INTERNAL, "read_buffer: an exception in the host or the plugin");
    return BP_INTERNAL;
  }
}

Status flush_layers(bp_host &host) {
  std::shared_lock lock(host.mutex);
  Status first;
  for (const auto &device : host.devices) {
    for (const auto &layer : device->own_layers) {
      LoadedPlugin &plugin = *layer->kind->plugin;
      if (!plugin.layer_functions.flush) continue;
      Status status = call_plugin(plugin, "flush", [&](bp_error_sink *sink) {
        return plugin.layer_functions.flush(plugin.state, layer->handle, sink);
      });
      if (status) continue;
      if (first) {
        first = layer_error(std::move(status), *layer, *device);
      } else {
        log(BP_LOG_WARN, "layers", "flush of layer '" + layer->kind->name + "' on '" + device->name +
                                       "' failed: " + status.error().message());
      }
    }
  }
  return first;
}

}  // namespace backplane
