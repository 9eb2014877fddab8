// The application C API (backplane.h): argument checks, the guard that keeps
// every C++ exception inside the library, and the out-struct convention.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <shared_mutex>

#include "c_api_guard.hpp"
#include "host.hpp"
#include "layers.hpp"
#include "log.hpp"
#include "names.hpp"

namespace backplane {
namespace {

std::string address_text(const void *address) {
  char text[2 + 2 * sizeof(uintptr_t) + 1];
  std::snprintf(text, sizeof text, "0x%" PRIxPTR, reinterpret_cast<uintptr_t>(address));
  return text;
}

Status plugin_not_found(const bp_host &host, const std::string &kind, const std::string &asked) {
  nlohmann::json known = nlohmann::json::array(), refused = nlohmann::json::array();
  for (const auto &registered : host.kinds) known.push_back(registered->name);
  for (const RefusedPlugin &record : host.refused)
    refused.push_back(nlohmann::json::parse(bp_error_json(record.error)));
  // The kind's plugin is there and said why: its options are the problem.
  if (const bp_error *refusal = options_refusal(host, kind)) {
    return Error(BP_CONFIG, "device '" + asked + "' does not exist: " + bp_error_message(refusal))
        .with("device_kind", kind)
        .with("file", bp_error_field(refusal, "file"))
        .with("refused", refused)
        .hint("fix the options given for device kind '" + kind + "'");
  }
  std::string message = "device '" + asked + "': no loaded plugin provides device kind '" + kind + "'";
  message += known.empty() ? " (no plugin is loaded)" : " (loaded kinds: " + known.dump() + ")";
  if (!refused.empty()) message += "; " + std::to_string(refused.size()) + " plugin file(s) were refused";
  return Error(BP_PLUGIN_NOT_FOUND, message)
      .with("device_kind", kind)
      .with("known_kinds", known)
      .with("refused", refused)
      .hint("copy libbackplane_" + kind + ".so into a plugin directory, or see why it was refused");
}

Status find_device(bp_host &host, const char *name, bp_device **out) {
  if (!name) return null_argument("bp_host_find_device", "name");
  if (!out) return null_argument("bp_host_find_device", "out");
  std::shared_lock lock(host.mutex);
  for (const auto &device : host.devices) {
    if (device->name == name) {
      *out = device.get();
      return {};
    }
  }
  const std::string asked = name;
  std::string why, respelled;
  const std::optional<DeviceNameParts> parts = parse_device_name(asked, &why, &respelled);
  if (!parts) {
    return Error(BP_INVALID_ARGUMENT, "device '" + asked + "' is not a device name: " + why)
        .hint(respelled.empty() ? "name a device as kind:index, e.g. cpu:0" : "did you mean '" + respelled + "'?");
  }
  const std::string kind(parts->kind);
  size_t count = 0;
  bool known = false;
  for (const auto &registered : host.kinds) known = known || registered->name == kind;
  if (!known) return plugin_not_found(host, kind, asked);
  for (const auto &device : host.devices) count += device->kind->name == kind;
  return Error(BP_INVALID_ARGUMENT, "device '" + asked + "' does not exist: device kind '" + kind + "' has " +
                                        std::to_string(count) + " device(s)")
      .with("device_kind", kind)
      .hint(count ? "use an index below " + std::to_string(count) : "this machine has no " + kind + " device");
}

Status create_plain_buffer(bp_device *device, void *memory, size_t bytes, bool wrap, bp_buffer **out) {
  const char *function = wrap ? "bp_buffer_wrap_host" : "bp_buffer_create";
  LoadedPlugin &plugin = *device->kind->plugin;
  const uint32_t kind = device->kind->index_in_plugin;
  auto buffer = std::make_unique<bp_buffer>();
  buffer->device = device;
  buffer->bytes = bytes;
  Status status;
  if (wrap) {
    if (!memory && bytes > 0) return null_argument(function, "memory");
    uintptr_t end = 0;
    if (__builtin_add_overflow(reinterpret_cast<uintptr_t>(memory), bytes, &end)) {
      return Error(BP_INVALID_ARGUMENT, "bp_buffer_wrap_host: " + std::to_string(bytes) + " bytes from " +
                                            address_text(memory) + " run past the end of the address space")
          .with("devices", nlohmann::json::array({device->describe()}))
          .with("bytes", bytes);
    }
    buffer->host_memory = static_cast<const std::byte *>(memory);
    if (!(device->flags & BP_DEVICE_HOST_ADDRESSABLE) || !plugin.functions.buffer_wrap_host) {
      return Error(BP_UNSUPPORTED_DEVICE, "bp_buffer_wrap_host: device '" + device->name +
                                              "' cannot address host memory")
          .with("devices", nlohmann::json::array({device->describe()}))
          .with("plugin", {{"name", plugin.name}, {"version", plugin.version}})
          .hint("create a buffer with bp_buffer_create and copy into it with bp_buffer_write");
    }
    status = call_plugin(plugin, "buffer_wrap_host", [&](bp_error_sink *sink) {
      return plugin.functions.buffer_wrap_host(plugin.state, kind, device->index, memory, bytes, &buffer->handle,
                                               sink);
    });
  } else {
    status = call_plugin(plugin, "buffer_create", [&](bp_error_sink *sink) {
      return plugin.functions.buffer_create(plugin.state, kind, device->index, bytes, &buffer->handle, sink);
    });
  }
  if (status && !buffer->handle) status = plugin_returned_null(plugin, wrap ? "buffer_wrap_host" : "buffer_create");
  if (!status) {
    Error error = status.take_error();
    error.with("devices", nlohmann::json::array({device->describe()})).with("bytes", bytes);
    return error;
  }
  buffer->serial = next_serial();
  retain_host(device->host);
  *out = buffer.release();
  return {};
}

// A call on a buffer operation of a layered device, as its hooks see it.
bp_layer_call buffer_call(const bp_device &device, bp_layer_operation operation, const bp_buffer *buffer,
                          size_t offset, size_t bytes, const void *memory) {
  bp_layer_call call{};
  call.struct_size = sizeof call;
  call.operation = operation;
  call.device = &device;
  call.buffer = buffer;
  call.offset = offset;
  call.bytes = bytes;
  call.host_memory = memory;
  return call;
}

Status create_buffer(bp_device *device, void *memory, size_t bytes, bool wrap, bp_buffer **out) {
  const char *function = wrap ? "bp_buffer_wrap_host" : "bp_buffer_create";
  if (!device) return null_argument(function, "device");
  if (!out) return null_argument(function, "out");
  if (!device->layered()) [[likely]]
    return create_plain_buffer(device, memory, bytes, wrap, out);
  bp_layer_call call = buffer_call(*device, wrap ? BP_LAYER_BUFFER_WRAP_HOST : BP_LAYER_BUFFER_CREATE, nullptr, 0,
                                   bytes, memory);
  bp_buffer *made = nullptr;
  const bp_buffer *made_view = nullptr;
  Status status = around_buffer_call(*device, call, &made_view, [&]() -> Status {
    Status created = create_plain_buffer(device, memory, bytes, wrap, &made);
    made_view = made;
    return created;
  });
  if (!status) {
    bp_buffer_destroy(made);  // an after hook failed the call it saw succeed
    return status;
  }
  *out = made;
  return {};
}

// A transfer on a buffer (write, read), through the layers of its device.
template <typename Transfer>
Status transfer(const bp_buffer &buffer, bp_layer_operation operation, size_t offset, const void *memory,
                size_t bytes, Transfer &&run) {
  if (!buffer.device->layered()) [[likely]]
    return run();
  bp_layer_call call = buffer_call(*buffer.device, operation, &buffer, offset, bytes, memory);
  return around_buffer_call(*buffer.device, call, nullptr, run);
}

Status check_range(const char *function, const bp_buffer *buffer, size_t offset, const void *data, size_t bytes) {
  if (!buffer) return null_argument(function, "buffer");
  if (!data && bytes > 0) return null_argument(function, "host pointer");
  size_t end = 0;
  if (__builtin_add_overflow(offset, bytes, &end) || end > buffer->bytes) {
    return Error(BP_INVALID_ARGUMENT, std::string(function) + ": bytes [" + std::to_string(offset) + ", " +
                                          std::to_string(offset) + " + " + std::to_string(bytes) +
                                          ") fall outside the buffer of " + std::to_string(buffer->bytes) +
                                          " bytes on '" + buffer->device->name + "'");
  }
  return {};
}

bp_collective_request make_request(bp_collective collective, bp_buffer *const *send, bp_buffer *const *recv,
                                   size_t count, bp_dtype dtype, bp_reduce_op op, uint32_t root) {
  bp_collective_request request{};
  request.struct_size = sizeof request;
  request.collective = collective;
  request.dtype = dtype;
  request.reduce_op = op;
  request.root = root;
  request.count = count;
  request.send = send;
  request.recv = recv;
  return request;
}

// By reference: a by-value copy of the request just built reloads its
// narrow stores as wide ones, a store-forwarding stall that cost ~10 ns of
// the blocking call's ~40 here (perf annotate of dispatch_benchmark).
bp_error *run(const bp_collective_request &request, bp_group *group) noexcept {
  return guarded([&] { return run_collective(group, &request); });
}

bp_error *run_async(const bp_collective_request &request, bp_group *group, bp_event **out) noexcept {
  return guarded([&]() -> Status {
    if (!out) return null_argument(collective_name(request.collective), "out event");
    Expected<bp_event *> event = start_collective(group, &request);
    if (!event) return event.take_error();
    *out = *event;
    return {};
  });
}

}  // namespace

const bp_error *options_refusal(const bp_host &host, std::string_view kind) {
  const std::string file_name = "libbackplane_" + std::string(kind) + ".so";
  for (const RefusedPlugin &record : host.refused) {
    // CONFIG from its configure function, or from its entry point (as plugin_code).
    const char *entry_code = bp_error_field(record.error, "plugin_code");
    const bool config = bp_error_code(record.error) == BP_CONFIG ||
                        (entry_code && std::string_view(entry_code) == code_name(BP_CONFIG));
    if (!config) continue;
    const char *file = bp_error_field(record.error, "file");
    const bool declares_kind = std::any_of(record.declared.begin(), record.declared.end(),
                                           [&](const auto &declared) { return declared.first == kind; });
    if (declares_kind || (file && std::filesystem::path(file).filename() == file_name)) return record.error;
  }
  return nullptr;
}

}  // namespace backplane

using namespace backplane;

extern "C" {

uint32_t bp_api_version(void) { return BP_MAKE_API_VERSION(BP_API_VERSION_MAJOR, BP_API_VERSION_MINOR); }

bp_error *bp_host_create(const bp_host_options *options, bp_host **out) {
  return guarded([&]() -> Status {
    if (!out) return null_argument("bp_host_create", "out");
    Expected<bp_host *> host = create_host(options);
    if (!host) return host.take_error();
    *out = *host;
    return {};
  });
}

void bp_host_destroy(bp_host *host) { release_host(host); }

bp_error *bp_host_load_plugin(bp_host *host, const char *path) {
  return guarded([&]() -> Status {
    if (!host) return null_argument("bp_host_load_plugin", "host");
    if (!path) return null_argument("bp_host_load_plugin", "path");
    return load_plugin_file(*host, path);
  });
}

size_t bp_host_plugin_count(const bp_host *host) {
  if (!host) return 0;
  std::shared_lock lock(host->mutex);
  return host->plugins.size();
}

bp_error *bp_host_plugin(const bp_host *host, size_t index, bp_plugin_info *out) {
  return guarded([&]() -> Status {
    if (!host) return null_argument("bp_host_plugin", "host");
    std::shared_lock lock(host->mutex);
    if (index >= host->plugins.size())
      return Error(BP_INVALID_ARGUMENT, "bp_host_plugin: index " + std::to_string(index) + " is past the " +
                                            std::to_string(host->plugins.size()) + " loaded plugins");
    const LoadedPlugin &plugin = *host->plugins[index];
    bp_plugin_info info{};
    info.struct_size = sizeof info;
    info.name = plugin.name.c_str();
    info.version = plugin.version.c_str();
    info.abi_major = plugin.descriptor.abi_major;
    info.abi_minor = plugin.descriptor.abi_minor;
    info.file = plugin.file.c_str();
    info.sha256 = plugin.sha256().c_str();
    info.device_kinds = plugin.device_kind_pointers.data();
    info.device_kind_count = plugin.device_kind_pointers.size();
    info.kind_status = plugin.kind_status_pointers.data();
    info.layer_kinds = plugin.layer_kind_pointers.data();
    info.layer_kind_count = plugin.layer_kind_pointers.size();
    info.transport = plugin.transport.c_str();
    return write_out("bp_host_plugin", out, info, BP_PLUGIN_INFO_SIZE_V1_0);
  });
}

size_t bp_host_refused_count(const bp_host *host) {
  if (!host) return 0;
  std::shared_lock lock(host->mutex);
  return host->refused.size();
}

const bp_error *bp_host_refused(const bp_host *host, size_t index) {
  if (!host) return nullptr;
  std::shared_lock lock(host->mutex);
  return index < host->refused.size() ? host->refused[index].error : nullptr;
}

size_t bp_host_device_count(const bp_host *host) {
  if (!host) return 0;
  std::shared_lock lock(host->mutex);
  return host->devices.size();
}

bp_device *bp_host_device(const bp_host *host, size_t index) {
  if (!host) return nullptr;
  std::shared_lock lock(host->mutex);
  return index < host->devices.size() ? host->devices[index].get() : nullptr;
}

bp_error *bp_host_find_device(bp_host *host, const char *name, bp_device **out) {
  return guarded([&]() -> Status {
    if (!host) return null_argument("bp_host_find_device", "host");
    return find_device(*host, name, out);
  });
}

bp_error *bp_device_get_info(const bp_device *device, bp_device_info *out) {
  return guarded([&]() -> Status {
    if (!device) return null_argument("bp_device_get_info", "device");
    bp_device_info info{};
    info.struct_size = sizeof info;
    info.name = device->name.c_str();
    info.kind = device->kind->name.c_str();
    info.index = device->index;
    info.plugin = device->kind->plugin->name.c_str();
    info.description = device->description.empty() ? device->plugin_device_name.c_str() : device->description.c_str();
    info.flags = device->flags;
    info.memory_bytes = device->memory_bytes;
    info.property_keys = device->property_key_pointers.data();
    info.property_values = device->property_value_pointers.data();
    info.property_count = device->property_key_pointers.size();
    info.layers = device->layer_name_pointers.data();
    info.layer_count = device->layer_name_pointers.size();
    info.over = device->over ? device->over->name.c_str() : nullptr;
    info.base = device->base->name.c_str();
    info.chain = device->layered() ? device->chain_text.c_str() : device->name.c_str();
    return write_out("bp_device_get_info", out, info, BP_DEVICE_INFO_SIZE_V1_0);
  });
}

bp_device *bp_device_base(bp_device *device) { return device ? device->base : nullptr; }

bp_error *bp_device_wrap(bp_host *host, const bp_device_wrap_options *options, bp_device **out) {
  return guarded([&]() -> Status {
    constexpr const char *function = "bp_device_wrap";
    if (!host) return null_argument(function, "host");
    if (!options) return null_argument(function, "options");
    if (!out) return null_argument(function, "out");
    if (options->struct_size < BP_DEVICE_WRAP_OPTIONS_SIZE_V1_3)
      return Error(BP_INVALID_ARGUMENT, "bp_device_wrap: options->struct_size is below its 1.3 size")
          .hint("set struct_size = sizeof(bp_device_wrap_options)");
    if (!options->over) return null_argument(function, "options->over");
    if (options->over->host != host)
      return Error(BP_INVALID_ARGUMENT, "bp_device_wrap: device '" + options->over->name + "' belongs to another host");
    if (options->layer_count > 0 && !options->layers) return null_argument(function, "options->layers");
    WrapRequest request;
    request.over = options->over;
    if (options->name) {
      BoundedString name = read_bounded_string(options->name, kMaxPluginTextBytes);
      if (name.too_long || name.text.empty() || name.text != options->name)
        return Error(BP_INVALID_ARGUMENT, "bp_device_wrap: name is empty, longer than " +
                                              std::to_string(kMaxPluginTextBytes) + " bytes, or not one line of UTF-8");
      request.name = name.text;
    }
    if (options->layer_count > BP_LAYER_CHAIN_MAX * 4)
      return Error(BP_NESTED_LAYER, "bp_device_wrap: " + std::to_string(options->layer_count) +
                                        " layers, far deeper than the " + std::to_string(BP_LAYER_CHAIN_MAX) +
                                        " a chain may have");
    for (size_t i = 0; i < options->layer_count; ++i) {
      if (!options->layers[i])
        return Error(BP_INVALID_ARGUMENT, "bp_device_wrap: layers[" + std::to_string(i) + "] is NULL");
      request.layers.push_back(read_bounded_string(options->layers[i], kMaxPluginTextBytes).text);
    }
    if (options->options_json && *options->options_json) {
      request.options = nlohmann::json::parse(options->options_json, nullptr, false);
      if (request.options.is_discarded() || !request.options.is_object())
        return Error(BP_CONFIG, "bp_device_wrap: options_json is not a JSON object keyed by layer kind")
            .hint("give e.g. {\"trace\": {\"file\": \"trace.json\"}}");
    }
    std::unique_lock lock(host->mutex);
    auto name_taken = [&](const std::string &name) -> Status {
      for (const auto &existing : host->devices)
        if (existing->name == name)
          return Error(BP_INVALID_ARGUMENT, "bp_device_wrap: a device named '" + name + "' exists")
              .hint("give the layered device a name of its own");
      return {};
    };
    // A name given is checked before any layer instance is made (a trace
    // layer opens its file); the chain's text, once the device knows it.
    if (!request.name.empty())
      if (Status taken = name_taken(request.name); !taken) return taken;
    Expected<std::unique_ptr<bp_device>> device = build_layered_device(*host, request);
    if (!device) return device.take_error();
    if (request.name.empty())
      if (Status taken = name_taken((*device)->name); !taken) return taken;
    *out = device->get();
    host->devices.push_back(std::move(*device));
    return {};
  });
}

bp_error *bp_host_flush(bp_host *host) {
  return guarded([&]() -> Status {
    if (!host) return null_argument("bp_host_flush", "host");
    return flush_layers(*host);
  });
}

size_t bp_host_layer_kind_count(const bp_host *host) {
  if (!host) return 0;
  std::shared_lock lock(host->mutex);
  return host->layer_kinds.size();
}

bp_error *bp_host_layer_kind(const bp_host *host, size_t index, bp_layer_kind_info *out) {
  return guarded([&]() -> Status {
    if (!host) return null_argument("bp_host_layer_kind", "host");
    std::shared_lock lock(host->mutex);
    if (index >= host->layer_kinds.size())
      return Error(BP_INVALID_ARGUMENT, "bp_host_layer_kind: index " + std::to_string(index) + " is past the " +
                                            std::to_string(host->layer_kinds.size()) + " layer kinds");
    const LayerKind &kind = *host->layer_kinds[index];
    bp_layer_kind_info info{};
    info.struct_size = sizeof info;
    info.name = kind.name.c_str();
    info.plugin = kind.plugin->name.c_str();
    info.description = kind.description.c_str();
    info.stackable = kind.stackable;
    info.device_kinds = kind.wrap_pointers.data();
    info.device_kind_count = kind.wrap_pointers.size();
    info.option_names = kind.option_name_pointers.data();
    info.option_descriptions = kind.option_description_pointers.data();
    info.option_count = kind.option_name_pointers.size();
    return write_out("bp_host_layer_kind", out, info, BP_LAYER_KIND_INFO_SIZE_V1_3);
  });
}

size_t bp_host_capability_count(const bp_host *host) {
  if (!host) return 0;
  std::shared_lock lock(host->mutex);
  return host->capability_listing.size();
}

bp_error *bp_host_capability(const bp_host *host, size_t index, bp_capability_info *out) {
  return guarded([&]() -> Status {
    if (!host) return null_argument("bp_host_capability", "host");
    std::shared_lock lock(host->mutex);
    if (index >= host->capability_listing.size())
      return Error(BP_INVALID_ARGUMENT, "bp_host_capability: index " + std::to_string(index) + " is past the " +
                                            std::to_string(host->capability_listing.size()) + " entries");
    return write_out("bp_host_capability", out, host->capability_listing[index], BP_CAPABILITY_INFO_SIZE_V1_0);
  });
}

bp_error *bp_buffer_create(bp_device *device, size_t bytes, bp_buffer **out) {
  return guarded([&] { return create_buffer(device, nullptr, bytes, false, out); });
}

bp_error *bp_buffer_wrap_host(bp_device *device, void *memory, size_t bytes, bp_buffer **out) {
  return guarded([&] { return create_buffer(device, memory, bytes, true, out); });
}

bp_error *bp_buffer_write(bp_buffer *buffer, size_t offset, const void *source, size_t bytes) {
  return guarded([&]() -> Status {
    if (Status status = check_range("bp_buffer_write", buffer, offset, source, bytes); !status) return status;
    if (bytes == 0) return {};
    LoadedPlugin &plugin = *buffer->device->kind->plugin;
    return transfer(*buffer, BP_LAYER_BUFFER_WRITE, offset, source, bytes, [&] {
      return call_plugin(plugin, "buffer_write", [&](bp_error_sink *sink) {
        return plugin.functions.buffer_write(plugin.state, buffer->handle, offset, source, bytes, sink);
      });
    });
  });
}

bp_error *bp_buffer_read(const bp_buffer *buffer, size_t offset, void *destination, size_t bytes) {
  return guarded([&]() -> Status {
    if (Status status = check_range("bp_buffer_read", buffer, offset, destination, bytes); !status) return status;
    if (bytes == 0) return {};
    LoadedPlugin &plugin = *buffer->device->kind->plugin;
    return transfer(*buffer, BP_LAYER_BUFFER_READ, offset, destination, bytes, [&] {
      return call_plugin(plugin, "buffer_read", [&](bp_error_sink *sink) {
        return plugin.functions.buffer_read(plugin.state, buffer->handle, offset, destination, bytes, sink);
      });
    });
  });
}

size_t bp_buffer_size(const bp_buffer *buffer) { return buffer ? buffer->bytes : 0; }

bp_device *bp_buffer_device(const bp_buffer *buffer) { return buffer ? buffer->device : nullptr; }

void bp_buffer_destroy(bp_buffer *buffer) {
  if (!buffer) return;
  LoadedPlugin &plugin = *buffer->device->kind->plugin;
  const bp_device &device = *buffer->device;
  // A destroy is never refused: the layers see it, and what they say is logged.
  bp_layer_call call{};
  bool layers_saw = false;
  if (device.layered()) [[unlikely]] {
    try {
      call = buffer_call(device, BP_LAYER_BUFFER_DESTROY, buffer, 0, buffer->bytes, nullptr);
      Status before = before_chain(device, call);
      layers_saw = before.ok();
      if (!before) log(BP_LOG_WARN, "layers", "bp_buffer_destroy: " + before.error().message());
    } catch (...) {
    }
  }
  call_plugin_release(plugin, "buffer_destroy", [&] { plugin.functions.buffer_destroy(plugin.state, buffer->handle); });
  if (layers_saw) {
    try {
      bp_layer_outcome outcome{};
      outcome.struct_size = sizeof outcome;
      Status after = after_chain(device, call, outcome);
      if (!after) log(BP_LOG_WARN, "layers", "bp_buffer_destroy: " + after.error().message());
    } catch (...) {
    }
  }
  bp_host *host = buffer->device->host;
  delete buffer;
  release_host(host);
}

bp_error *bp_run_collective(bp_group *group, const bp_collective_request *request) {
  return guarded([&] { return run_collective(group, request); });
}

bp_error *bp_run_collective_async(bp_group *group, const bp_collective_request *request, bp_event **out) {
  return guarded([&]() -> Status {
    if (!out) return null_argument("bp_run_collective_async", "out");
    Expected<bp_event *> event = start_collective(group, request);
    if (!event) return event.take_error();
    *out = *event;
    return {};
  });
}

bp_error *bp_all_reduce(bp_group *g, bp_buffer *const *send, bp_buffer *const *recv, size_t count, bp_dtype dtype,
                        bp_reduce_op op) {
  return run(make_request(BP_ALL_REDUCE, send, recv, count, dtype, op, 0), g);
}
bp_error *bp_reduce(bp_group *g, bp_buffer *const *send, bp_buffer *const *recv, size_t count, bp_dtype dtype,
                    bp_reduce_op op, uint32_t root) {
  return run(make_request(BP_REDUCE, send, recv, count, dtype, op, root), g);
}
bp_error *bp_broadcast(bp_group *g, bp_buffer *const *send, bp_buffer *const *recv, size_t count, bp_dtype dtype,
                       uint32_t root) {
  return run(make_request(BP_BROADCAST, send, recv, count, dtype, BP_SUM, root), g);
}
bp_error *bp_all_gather(bp_group *g, bp_buffer *const *send, bp_buffer *const *recv, size_t count, bp_dtype dtype) {
  return run(make_request(BP_ALL_GATHER, send, recv, count, dtype, BP_SUM, 0), g);
}
bp_error *bp_reduce_scatter(bp_group *g, bp_buffer *const *send, bp_buffer *const *recv, size_t count,
                            bp_dtype dtype, bp_reduce_op op) {
  return run(make_request(BP_REDUCE_SCATTER, send, recv, count, dtype, op, 0), g);
}
bp_error *bp_gather(bp_group *g, bp_buffer *const *send, bp_buffer *const *recv, size_t count, bp_dtype dtype,
                    uint32_t root) {
  return run(make_request(BP_GATHER, send, recv, count, dtype, BP_SUM, root), g);
}
bp_error *bp_scatter(bp_group *g, bp_buffer *const *send, bp_buffer *const *recv, size_t count, bp_dtype dtype,
                     uint32_t root) {
  return run(make_request(BP_SCATTER, send, recv, count, dtype, BP_SUM, root), g);
}
bp_error *bp_all_to_all(bp_group *g, bp_buffer *const *send, bp_buffer *const *recv, size_t count, bp_dtype dtype) {
  return run(make_request(BP_ALL_TO_ALL, send, recv, count, dtype, BP_SUM, 0), g);
}
bp_error *bp_barrier(bp_group *g) {
  return run(make_request(BP_BARRIER, nullptr, nullptr, 0, BP_F32, BP_SUM, 0), g);
}

bp_error *bp_all_reduce_async(bp_group *g, bp_buffer *const *send, bp_buffer *const *recv, size_t count,
                              bp_dtype dtype, bp_reduce_op op, bp_event **out) {
  return run_async(make_request(BP_ALL_REDUCE, send, recv, count, dtype, op, 0), g, out);
}
bp_error *bp_reduce_async(bp_group *g, bp_buffer *const *send, bp_buffer *const *recv, size_t count, bp_dtype dtype,
                          bp_reduce_op op, uint32_t root, bp_event **out) {
  return run_async(make_request(BP_REDUCE, send, recv, count, dtype, op, root), g, out);
}
bp_error *bp_broadcast_async(bp_group *g, bp_buffer *const *send, bp_buffer *const *recv, size_t count,
                             bp_dtype dtype, uint32_t root, bp_event **out) {
  return run_async(make_request(BP_BROADCAST, send, recv, count, dtype, BP_SUM, root), g, out);
}
bp_error *bp_all_gather_async(bp_group *g, bp_buffer *const *send, bp_buffer *const *recv, size_t count,
                              bp_dtype dtype, bp_event **out) {
  return run_async(make_request(BP_ALL_GATHER, send, recv, count, dtype, BP_SUM, 0), g, out);
}
bp_error *bp_reduce_scatter_async(bp_group *g, bp_buffer *const *send, bp_buffer *const *recv, size_t count,
                                  bp_dtype dtype, bp_reduce_op op, bp_event **out) {
  return run_async(make_request(BP_REDUCE_SCATTER, send, recv, count, dtype, op, 0), g, out);
}
bp_error *bp_gather_async(bp_group *g, bp_buffer *const *send, bp_buffer *const *recv, size_t count, bp_dtype dtype,
                          uint32_t root, bp_event **out) {
  return run_async(make_request(BP_GATHER, send, recv, count, dtype, BP_SUM, root), g, out);
}
bp_error *bp_scatter_async(bp_group *g, bp_buffer *const *send, bp_buffer *const *recv, size_t count,
                           bp_dtype dtype, uint32_t root, bp_event **out) {
  return run_async(make_request(BP_SCATTER, send, recv, count, dtype, BP_SUM, root), g, out);
}
bp_error *bp_all_to_all_async(bp_group *g, bp_buffer *const *send, bp_buffer *const *recv, size_t count,
                              bp_dtype dtype, bp_event **out) {
  return run_async(make_request(BP_ALL_TO_ALL, send, recv, count, dtype, BP_SUM, 0), g, out);
}
bp_error *bp_barrier_async(bp_group *g, bp_event **out) {
  return run_async(make_request(BP_BARRIER, nullptr, nullptr, 0, BP_F32, BP_SUM, 0), g, out);
}

bp_error *bp_event_wait(bp_event *event, int64_t timeout_ns) {
  return guarded([&] { return wait_event(event, timeout_ns); });
}

bool bp_event_test(bp_event *event) {
  try {
    return test_event(event);
  } catch (...) {
    return false;
  }
}

void bp_event_destroy(bp_event *event) {
  try {
    destroy_event(event);
  } catch (...) {
  }
}

}  // extern "C"
