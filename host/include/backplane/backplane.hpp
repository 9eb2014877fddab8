// backplane.hpp: header-only RAII wrapper over the C API in backplane.h.
// No logic of its own: every call forwards to the C function of the same
// name. Failures come back as backplane::Result<T> (std::expected-style);
// value() throws backplane::Exception for callers who prefer exceptions.
#ifndef BACKPLANE_BACKPLANE_HPP
#define BACKPLANE_BACKPLANE_HPP

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "backplane/backplane.h"

namespace backplane {

// An owned bp_error.
class Error {
 public:
  explicit Error(bp_error *error) : error_(error, Deleter{}) {}
  bp_code code() const { return bp_error_code(error_.get()); }
  std::string_view code_name() const { return bp_code_name(code()); }
  std::string_view message() const { return bp_error_message(error_.get()); }
  std::string_view json() const { return bp_error_json(error_.get()); }
  // A context field ("hint", "alternatives", "file", ...); empty when absent.
  std::string field(const char *key) const {
    const char *value = bp_error_field(error_.get(), key);
    return value ? value : "";
  }
  bool has_field(const char *key) const { return bp_error_field(error_.get(), key) != nullptr; }
  const bp_error *get() const { return error_.get(); }
  // The problems an error gathers (a fleet that fails to load), each an
  // error of its own, borrowed from this one; empty for a single error.
  std::vector<const bp_error *> problems() const {
    std::vector<const bp_error *> problems;
    for (size_t i = 0; i < bp_error_problem_count(error_.get()); ++i)
      problems.push_back(bp_error_problem(error_.get(), i));
    return problems;
  }

 private:
  struct Deleter {
    void operator()(bp_error *error) const { bp_error_destroy(error); }
  };
  std::shared_ptr<bp_error> error_;
};

class Exception : public std::runtime_error {
 public:
  explicit Exception(Error error)
      : std::runtime_error(std::string(error.message())), error_(std::move(error)) {}
  const Error &error() const { return error_; }

 private:
  Error error_;
};

// A value or the Error that prevented it.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}
  Result(Error error) : state_(std::move(error)) {}
  bool has_value() const { return state_.index() == 0; }
  explicit operator bool() const { return has_value(); }
  T &value() & {
    throw_if_error();
    return std::get<0>(state_);
  }
  T &&value() && {
    throw_if_error();
    return std::move(std::get<0>(state_));
  }
  T &operator*() { return std::get<0>(state_); }
  T *operator->() { return &std::get<0>(state_); }
  const Error &error() const { return std::get<1>(state_); }

 private:
  void throw_if_error() const {
    if (!has_value()) throw Exception(std::get<1>(state_));
  }
  std::variant<T, Error> state_;
};

// Result of a call with nothing to return.
class [[nodiscard]] Status {
 public:
  Status() = default;
  explicit Status(bp_error *error) {
    if (error) error_ = std::make_shared<Error>(error);
  }
  bool ok() const { return error_ == nullptr; }
  explicit operator bool() const { return ok(); }
  const Error &error() const { return *error_; }
  void value() const {
    if (error_) throw Exception(*error_);
  }

 private:
  std::shared_ptr<Error> error_;
};

namespace detail {
template <typename T, auto Destroy>
struct Deleter {
  void operator()(T *handle) const { Destroy(handle); }
};
template <typename T, auto Destroy>
using Owned = std::unique_ptr<T, Deleter<T, Destroy>>;
}  // namespace detail

struct PluginInfo {
  std::string name, version, file;
  std::string sha256;  // of the file's bytes, hex (1.2)
  uint32_t abi_major = 0, abi_minor = 0;
  std::vector<std::string> device_kinds;
  // Parallel to device_kinds: the plugin's line on each kind ("" when none).
  std::vector<std::string> kind_status;
  std::vector<std::string> layer_kinds;  // 1.3
  std::string transport;                 // 1.6: "" for none
};

struct DeviceInfo {
  std::string name, kind, plugin, description;
  uint32_t index = 0, flags = 0;
  uint64_t memory_bytes = 0;
  // The plugin's named facts about the device, in its order.
  std::vector<std::pair<std::string, std::string>> properties;
  // Its layers, outermost first, the device under them and the base (1.3).
  std::vector<std::string> layers;
  std::string over, base, chain;
};

// A layer kind and its rules (1.3).
struct LayerKindInfo {
  std::string name, plugin, description;
  bool stackable = false;
  std::vector<std::string> device_kinds;  // empty: every kind
  std::vector<std::pair<std::string, std::string>> options;  // name, description
};

using CapabilityInfo = bp_capability_info;

// A device, borrowed from its host.
class Device {
 public:
  Device() = default;
  explicit Device(bp_device *device) : device_(device) {}
  bp_device *get() const { return device_; }
  Result<DeviceInfo> info() const {
    bp_device_info raw{};
    raw.struct_size = sizeof raw;
    if (bp_error *error = bp_device_get_info(device_, &raw)) return Error(error);
    DeviceInfo info{raw.name,  raw.kind,  raw.plugin,      raw.description ? raw.description : "",
                    raw.index, raw.flags, raw.memory_bytes, {}, {}, {}, {}, {}};
    for (size_t i = 0; i < raw.property_count; ++i)
      info.properties.emplace_back(raw.property_keys[i], raw.property_values[i]);
    info.layers.assign(raw.layers, raw.layers + raw.layer_count);
    info.over = raw.over ? raw.over : "";
    info.base = raw.base ? raw.base : info.name;
    info.chain = raw.chain ? raw.chain : info.name;
    return info;
  }
  Device base() const { return Device(bp_device_base(device_)); }

 private:
  bp_device *device_ = nullptr;
};

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(bp_buffer *buffer) : buffer_(buffer) {}
  static Result<Buffer> create(Device device, size_t bytes) {
    bp_buffer *raw = nullptr;
    if (bp_error *error = bp_buffer_create(device.get(), bytes, &raw)) return Error(error);
    return Buffer(raw);
  }
  static Result<Buffer> wrap_host(Device device, void *memory, size_t bytes) {
    bp_buffer *raw = nullptr;
    if (bp_error *error = bp_buffer_wrap_host(device.get(), memory, bytes, &raw)) return Error(error);
    return Buffer(raw);
  }
  Status write(size_t offset, const void *source, size_t bytes) {
    return Status(bp_buffer_write(buffer_.get(), offset, source, bytes));
  }
  Status read(size_t offset, void *destination, size_t bytes) const {
    return Status(bp_buffer_read(buffer_.get(), offset, destination, bytes));
  }
  template <typename T>
  Status write(std::span<const T> values, size_t offset = 0) {
    return write(offset, values.data(), values.size_bytes());
  }
  template <typename T>
  Status read(std::span<T> values, size_t offset = 0) const {
    return read(offset, values.data(), values.size_bytes());
  }
  size_t size() const { return bp_buffer_size(buffer_.get()); }
  Device device() const { return Device(bp_buffer_device(buffer_.get())); }
  bp_buffer *get() const { return buffer_.get(); }

 private:
  detail::Owned<bp_buffer, bp_buffer_destroy> buffer_;
};

class Event {
 public:
  Event() = default;
  explicit Event(bp_event *event) : event_(event) {}
  Status wait(int64_t timeout_ns = -1) { return Status(bp_event_wait(event_.get(), timeout_ns)); }
  bool test() { return bp_event_test(event_.get()); }
  bp_event *get() const { return event_.get(); }

 private:
  detail::Owned<bp_event, bp_event_destroy> event_;
};

// Raw buffer handles, one per rank, as the collectives take them.
using Ranks = std::span<bp_buffer *const>;

// A group, borrowed: every call of a group, without ownership. What the
// host lends out (fleet groups, Host::find_group, Host::groups) and what a
// Group is too.
class GroupView {
 public:
  GroupView() = default;
  explicit GroupView(bp_group *group) : group_(group) {}
  size_t size() const { return bp_group_size(group_); }
  bp_group *get() const { return group_; }
  // "" when unnamed.
  std::string_view name() const { return bp_group_name(group_); }
  // How the plugin moves data between the ranks; "" when it says nothing.
  std::string_view route() const { return bp_group_route(group_); }
  // The device of rank `rank`; a null Device when out of range.
  Device device(size_t rank) const { return Device(bp_group_device(group_, rank)); }

  Status check(bp_collective collective, bp_dtype dtype, bp_reduce_op op = BP_SUM) const {
    return Status(bp_group_check(group_, collective, dtype, op));
  }
  // Which processes the group's ranks are in (bp_group_get_span, 1.6).
  Result<bp_group_span_info> span() const {
    bp_group_span_info info{};
    info.struct_size = sizeof info;
    if (bp_error *error = bp_group_get_span(group_, &info)) return Error(error);
    return info;
  }
  Status run(const bp_collective_request &request) {
    return Status(bp_run_collective(group_, &request));
  }
  Result<Event> start(const bp_collective_request &request) {
    bp_event *raw = nullptr;
    if (bp_error *error = bp_run_collective_async(group_, &request, &raw)) return Error(error);
    return Event(raw);
  }
  Status all_reduce(Ranks send, Ranks recv, size_t count, bp_dtype dtype, bp_reduce_op op) {
    return Status(bp_all_reduce(group_, send.data(), recv.data(), count, dtype, op));
  }
  Status reduce(Ranks send, Ranks recv, size_t count, bp_dtype dtype, bp_reduce_op op, uint32_t root) {
    return Status(bp_reduce(group_, send.data(), recv.data(), count, dtype, op, root));
  }
  Status broadcast(Ranks send, Ranks recv, size_t count, bp_dtype dtype, uint32_t root) {
    return Status(bp_broadcast(group_, send.data(), recv.data(), count, dtype, root));
  }
  Status all_gather(Ranks send, Ranks recv, size_t count, bp_dtype dtype) {
    return Status(bp_all_gather(group_, send.data(), recv.data(), count, dtype));
  }
  Status reduce_scatter(Ranks send, Ranks recv, size_t count, bp_dtype dtype, bp_reduce_op op) {
    return Status(bp_reduce_scatter(group_, send.data(), recv.data(), count, dtype, op));
  }
  Status gather(Ranks send, Ranks recv, size_t count, bp_dtype dtype, uint32_t root) {
    return Status(bp_gather(group_, send.data(), recv.data(), count, dtype, root));
  }
  Status scatter(Ranks send, Ranks recv, size_t count, bp_dtype dtype, uint32_t root) {
    return Status(bp_scatter(group_, send.data(), recv.data(), count, dtype, root));
  }
  Status all_to_all(Ranks send, Ranks recv, size_t count, bp_dtype dtype) {
    return Status(bp_all_to_all(group_, send.data(), recv.data(), count, dtype));
  }
  Status barrier() { return Status(bp_barrier(group_)); }

 protected:
  bp_group *group_ = nullptr;
};

// An owned group (bp_group_create); destroyed with the object.
class Group : public GroupView {
 public:
  Group() = default;
  explicit Group(bp_group *group) : GroupView(group) {}
  Group(const Group &) = delete;
  Group &operator=(const Group &) = delete;
  Group(Group &&other) noexcept : GroupView(std::exchange(other.group_, nullptr)) {}
  Group &operator=(Group &&other) noexcept {
    if (this != &other) {
      if (group_) bp_group_destroy(group_);
      group_ = std::exchange(other.group_, nullptr);
    }
    return *this;
  }
  ~Group() {
    if (group_) bp_group_destroy(group_);
  }
};

// One entry of a fleet's workload, sizes expanded (bp_workload_info).
struct WorkloadInfo {
  GroupView group;  // borrowed from the host
  bp_collective collective = BP_ALL_REDUCE;
  bp_dtype dtype = BP_F32;
  bp_reduce_op reduce_op = BP_SUM;
  uint32_t root = 0;
  std::vector<uint64_t> sizes;  // bytes of a rank's largest buffer, as nccl-tests counts them
  uint32_t iterations = 0, warmup = 0;
  uint32_t modes = 0;  // BP_WORKLOAD_OUT_OF_PLACE | BP_WORKLOAD_IN_PLACE
  bool check = false;
};

// Log lines: where they go and which pass (process-wide; see backplane.h).
inline void set_log_sink(bp_log_sink sink, void *context) { bp_log_set_sink(sink, context); }
inline bool configure_log(const char *spec) { return bp_log_configure(spec); }

// A size expression of the fleet file ("8B..64MiB x4", "4KiB") expanded.
inline Result<std::vector<uint64_t>> parse_sizes(const std::string &text) {
  size_t count = 0;
  if (bp_error *error = bp_parse_sizes(text.c_str(), nullptr, 0, &count)) return Error(error);
  std::vector<uint64_t> sizes(count);
  if (bp_error *error = bp_parse_sizes(text.c_str(), sizes.data(), sizes.size(), &count)) return Error(error);
  sizes.resize(count);
  return sizes;
}

struct HostOptions {
  std::vector<std::string> plugin_dirs;
  uint32_t flags = 0;
  std::string plugin_options_json;  // empty: none
  std::string plugin_pins_json;     // empty: none (1.2)
};

namespace detail {
// bp_host_options pointing into `options`, which must outlive it.
struct RawHostOptions {
  explicit RawHostOptions(const HostOptions &source) {
    for (const std::string &dir : source.plugin_dirs) dirs.push_back(dir.c_str());
    options.struct_size = sizeof options;
    options.plugin_dirs = dirs.data();
    options.plugin_dir_count = dirs.size();
    options.flags = source.flags;
    options.plugin_options_json = source.plugin_options_json.empty() ? nullptr : source.plugin_options_json.c_str();
    options.plugin_pins_json = source.plugin_pins_json.empty() ? nullptr : source.plugin_pins_json.c_str();
  }
  RawHostOptions(const RawHostOptions &) = delete;
  RawHostOptions &operator=(const RawHostOptions &) = delete;
  std::vector<const char *> dirs;
  bp_host_options options{};
};
}  // namespace detail

class Host {
 public:
  Host() = default;
  explicit Host(bp_host *host) : host_(host) {}

  static Result<Host> create(const HostOptions &options = {}) {
    detail::RawHostOptions raw(options);
    bp_host *host = nullptr;
    if (bp_error *error = bp_host_create(&raw.options, &host)) return Error(error);
    return Host(host);
  }

  // A host for a fleet file (bp_host_create_from_fleet_file). A fleet that
  // does not load is an Error whose problems() are its problems.
  static Result<Host> create_from_fleet_file(const std::string &path, const HostOptions &options = {}) {
    detail::RawHostOptions raw(options);
    bp_host *host = nullptr;
    if (bp_error *error = bp_host_create_from_fleet_file(path.c_str(), &raw.options, &host)) return Error(error);
    return Host(host);
  }

  Status load_fleet_file(const std::string &path) {
    return Status(bp_host_load_fleet_file(host_.get(), path.c_str()));
  }
  Status load_fleet_text(std::string_view json) {
    return Status(bp_host_load_fleet_text(host_.get(), json.data(), json.size()));
  }

  // A group the fleet created, borrowed from the host.
  Result<GroupView> find_group(const std::string &name) {
    bp_group *group = nullptr;
    if (bp_error *error = bp_host_find_group(host_.get(), name.c_str(), &group)) return Error(error);
    return GroupView(group);
  }
  std::vector<GroupView> groups() const {
    std::vector<GroupView> groups;
    for (size_t i = 0; i < bp_host_group_count(host_.get()); ++i) groups.emplace_back(bp_host_group(host_.get(), i));
    return groups;
  }

  size_t workload_count() const { return bp_host_workload_count(host_.get()); }
  Result<WorkloadInfo> workload(size_t index) const {
    bp_workload_info raw{};
    raw.struct_size = sizeof raw;
    if (bp_error *error = bp_host_workload(host_.get(), index, &raw)) return Error(error);
    return WorkloadInfo{GroupView(raw.group),
                        static_cast<bp_collective>(raw.collective),
                        static_cast<bp_dtype>(raw.dtype),
                        static_cast<bp_reduce_op>(raw.reduce_op),
                        raw.root,
                        std::vector<uint64_t>(raw.sizes, raw.sizes + raw.size_count),
                        raw.iterations,
                        raw.warmup,
                        raw.modes,
                        raw.check};
  }
  // Every entry, or the first error.
  Result<std::vector<WorkloadInfo>> workloads() const {
    std::vector<WorkloadInfo> entries;
    for (size_t i = 0; i < workload_count(); ++i) {
      Result<WorkloadInfo> entry = workload(i);
      if (!entry) return entry.error();
      entries.push_back(std::move(*entry));
    }
    return entries;
  }

  bp_host *get() const { return host_.get(); }

  // The host's transport across processes (bp_host_open_transport, 1.6):
  // plugin "mpi", its options as JSON ("" for none), timeout_ns 0 for 60 s.
  Status open_transport(const std::string &plugin, const std::string &options_json = "", int64_t timeout_ns = 0) {
    bp_transport_options options{};
    options.struct_size = sizeof options;
    options.plugin = plugin.c_str();
    options.options_json = options_json.empty() ? nullptr : options_json.c_str();
    options.timeout_ns = timeout_ns;
    return Status(bp_host_open_transport(host_.get(), &options));
  }
  Status open_transport(const bp_transport_options &options) {
    return Status(bp_host_open_transport(host_.get(), &options));
  }
  Result<bp_transport_facts> transport() const {
    bp_transport_facts facts{};
    facts.struct_size = sizeof facts;
    if (bp_error *error = bp_host_transport(host_.get(), &facts)) return Error(error);
    return facts;
  }

  // A layered device over `over` (bp_device_wrap): layers outermost first,
  // options keyed by layer ("" for none), name "" for the chain's text.
  Result<Device> wrap(Device over, const std::vector<std::string> &layers, const std::string &options_json = "",
                      const std::string &name = "") {
    std::vector<const char *> names;
    for (const std::string &layer : layers) names.push_back(layer.c_str());
    bp_device_wrap_options options{};
    options.struct_size = sizeof options;
    options.name = name.empty() ? nullptr : name.c_str();
    options.over = over.get();
    options.layers = names.data();
    options.layer_count = names.size();
    options.options_json = options_json.empty() ? nullptr : options_json.c_str();
    bp_device *device = nullptr;
    if (bp_error *error = bp_device_wrap(host_.get(), &options, &device)) return Error(error);
    return Device(device);
  }
  // Every layer writes out what it holds (bp_host_flush).
  Status flush() { return Status(bp_host_flush(host_.get())); }
  std::vector<LayerKindInfo> layer_kinds() const {
    std::vector<LayerKindInfo> kinds;
    for (size_t i = 0; i < bp_host_layer_kind_count(host_.get()); ++i) {
      bp_layer_kind_info raw{};
      raw.struct_size = sizeof raw;
      if (bp_error *error = bp_host_layer_kind(host_.get(), i, &raw)) {
        bp_error_destroy(error);
        continue;
      }
      LayerKindInfo kind{raw.name, raw.plugin, raw.description, raw.stackable,
                         std::vector<std::string>(raw.device_kinds, raw.device_kinds + raw.device_kind_count), {}};
      for (size_t o = 0; o < raw.option_count; ++o) kind.options.emplace_back(raw.option_names[o], raw.option_descriptions[o]);
      kinds.push_back(std::move(kind));
    }
    return kinds;
  }

  Status load_plugin(const std::string &path) {
    return Status(bp_host_load_plugin(host_.get(), path.c_str()));
  }

  std::vector<PluginInfo> plugins() const {
    std::vector<PluginInfo> plugins;
    for (size_t i = 0; i < bp_host_plugin_count(host_.get()); ++i) {
      bp_plugin_info raw{};
      raw.struct_size = sizeof raw;
      if (bp_error *error = bp_host_plugin(host_.get(), i, &raw)) {
        bp_error_destroy(error);
        continue;
      }
      PluginInfo info{raw.name, raw.version, raw.file, raw.sha256 ? raw.sha256 : "", raw.abi_major, raw.abi_minor,
                      {}, {}, {}, raw.transport ? raw.transport : ""};
      for (size_t k = 0; k < raw.device_kind_count; ++k) {
        info.device_kinds.emplace_back(raw.device_kinds[k]);
        info.kind_status.emplace_back(raw.kind_status && raw.kind_status[k] ? raw.kind_status[k] : "");
      }
      for (size_t k = 0; k < raw.layer_kind_count; ++k) info.layer_kinds.emplace_back(raw.layer_kinds[k]);
      plugins.push_back(std::move(info));
    }
    return plugins;
  }

  // Refused plugin files; the errors are borrowed from the host.
  std::vector<const bp_error *> refused() const {
    std::vector<const bp_error *> refused;
    for (size_t i = 0; i < bp_host_refused_count(host_.get()); ++i)
      refused.push_back(bp_host_refused(host_.get(), i));
    return refused;
  }

  std::vector<Device> devices() const {
    std::vector<Device> devices;
    for (size_t i = 0; i < bp_host_device_count(host_.get()); ++i)
      devices.emplace_back(bp_host_device(host_.get(), i));
    return devices;
  }

  Result<Device> find_device(const std::string &name) {
    bp_device *device = nullptr;
    if (bp_error *error = bp_host_find_device(host_.get(), name.c_str(), &device)) return Error(error);
    return Device(device);
  }

  std::vector<CapabilityInfo> capabilities() const {
    std::vector<CapabilityInfo> rows;
    for (size_t i = 0; i < bp_host_capability_count(host_.get()); ++i) {
      bp_capability_info raw{};
      raw.struct_size = sizeof raw;
      if (bp_error *error = bp_host_capability(host_.get(), i, &raw)) {
        bp_error_destroy(error);
        continue;
      }
      rows.push_back(raw);
    }
    return rows;
  }

  Result<Group> create_group(std::span<const Device> ranks, const char *name = nullptr,
                             bp_group_policy policy = BP_POLICY_STAGE) {
    bp_group_options options{};
    options.struct_size = sizeof options;
    options.name = name;
    options.policy = policy;
    return create_group(ranks, options);
  }
  Result<Group> create_group(std::span<const Device> ranks, const bp_group_options &options) {
    std::vector<bp_device *> raw_ranks;
    for (const Device &device : ranks) raw_ranks.push_back(device.get());
    bp_group *group = nullptr;
    if (bp_error *error = bp_group_create(host_.get(), raw_ranks.data(), raw_ranks.size(), &options, &group))
      return Error(error);
    return Group(group);
  }

 private:
  detail::Owned<bp_host, bp_host_destroy> host_;
};

}  // namespace backplane

#endif  // BACKPLANE_BACKPLANE_HPP
