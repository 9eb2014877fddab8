// What stands behind the C API's opaque handles: the host, its plugins,
// devices, buffers, groups and events.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include <boost/dll/shared_library.hpp>
#include <nlohmann/json.hpp>

#include "backplane/backplane.h"
#include "backplane/plugin.h"
#include "capability_table.hpp"
#include "error.hpp"
#include "file_digest.hpp"
#include "probe.hpp"
#include "text.hpp"

// Where a plugin function reports its failure (host_services.report_error).
// Lives on the stack of the host function making the call.
struct bp_error_sink {
  int32_t code = BP_OK;
  std::string message;
};

namespace backplane {

// Whether a function must take the host's lock itself, or its caller holds it.
enum class HostLock { take, held };

// A group's staging through host memory (staging.hpp), freed where it is defined.
struct Staging;
struct StagingDeleter {
  void operator()(Staging *staging) const;
};
// A group's side of the host's transport, and the transport (span.hpp).
struct Span;
struct SpanDeleter {
  void operator()(Span *span) const;
};
struct OpenTransport;
struct OpenTransportDeleter {
  void operator()(OpenTransport *transport) const;
};

// How a group's collectives ran (bp_group_counters). One thread at a time
// adds (the group's start claim), any thread reads: a relaxed load and
// store, no read-modify-write on the hot path.
struct GroupCounters {
  std::atomic<uint64_t> native{0}, staged{0}, refused{0}, staged_bytes{0};
  static void add(std::atomic<uint64_t> &counter, uint64_t by = 1) {
    counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
};

// A plugin file's identity to the system loader: its device and inode.
using LoaderKey = std::pair<uint64_t, uint64_t>;
// Lets go of one hold on the file's loader name; the last closes it. Under
// dynamic_loader_mutex().
void release_loader_name(const LoaderKey &key);

// One plugin loaded into one host. Its descriptor and function table are
// copied, zero-extended to this host's struct sizes, so a plugin built
// against an older minor reads as if its missing fields were NULL.
struct LoadedPlugin {
  std::string file;
  boost::dll::shared_library library;
  // The plugin file, opened and checked before it was mapped (its SHA-256
  // is read through it).
  int library_fd = -1;
  // The file's loader name (plugin_loader.cpp: the descriptor the system
  // loader knows the library by), held while this plugin holds the library.
  LoaderKey loader_key{};
  bool holds_loader_name = false;
  bp_plugin_descriptor descriptor{};
  bp_plugin_functions functions{};
  bp_plugin_state *state = nullptr;
  std::string name, version;
  // The SHA-256 of the file's bytes in hex, read through library_fd: taken
  // before the load when the file's name is pinned, else when first asked
  // (a plugin with debug info is megabytes, milliseconds of hashing that
  // most hosts never need). "" if the file could not be read.
  const std::string &sha256() const;
  void set_sha256(std::string digest) const;
  std::vector<std::string> device_kinds;
  std::vector<const char *> device_kind_pointers;  // for bp_plugin_info
  // Per kind, what the plugin's kind_info said (ABI 1.1), copied at load;
  // the pointers are NULL where it said nothing (for bp_plugin_info).
  std::vector<std::string> kind_statuses;
  std::vector<const char *> kind_status_pointers;
  // The layer table (ABI 1.3), copied zero-extended; functions are all
  // NULL for a plugin without layers.
  bp_layer_functions layer_functions{};
  std::vector<std::string> layer_kinds;            // names, in the table's order
  std::vector<const char *> layer_kind_pointers;   // for bp_plugin_info
  // The transport table (ABI 1.6), copied zero-extended; `transport` (its
  // name) is "" for a plugin without one.
  bp_transport_functions transport_functions{};
  std::string transport;
  CapabilitySet transport_capabilities;
  // Set once bp_plugin_entry was called: from then on the library is unloaded
  // only after destroy() returned (else it stays mapped: plugin code may
  // still run on threads the plugin started).
  bool entered = false;
  // Set once the plugin let an exception escape; it is then called no more.
  std::atomic<bool> failed{false};
  std::string failure;

  LoadedPlugin() = default;
  LoadedPlugin(const LoadedPlugin &) = delete;
  LoadedPlugin &operator=(const LoadedPlugin &) = delete;
  ~LoadedPlugin();  // destroys the state, then unloads the library

 private:
  mutable std::once_flag sha256_once_;
  mutable std::string sha256_;
};

// Calls one plugin function, turning a failure code (with the message the
// plugin reported), a C++ exception or a plugin already marked failed into
// an Error whose message names the plugin and the function.
template <typename Call>
Status call_plugin(LoadedPlugin &plugin, const char *function, Call &&call);

Status plugin_failure(LoadedPlugin &plugin, const char *function, bp_error_sink &sink, int32_t code);
// The codes a plugin function may return (a load-time code may not).
bool plugin_may_return(int32_t code);
// libbackplane_<[a-z0-9_]+>.so: the only file names the loader looks at.
bool is_plugin_file_name(const std::string &name);
// A function that returned BP_OK without the handle it must hand out.
Status plugin_returned_null(const LoadedPlugin &plugin, const char *function);
// The most a host reads of a string a plugin hands over (text.hpp).
constexpr size_t kMaxPluginTextBytes = 4096;
Status plugin_threw(LoadedPlugin &plugin, const char *function, const char *what);
Status plugin_disabled(const LoadedPlugin &plugin, const char *function);

template <typename Call>
Status call_plugin(LoadedPlugin &plugin, const char *function, Call &&call) {
  if (plugin.failed.load(std::memory_order_relaxed)) return plugin_disabled(plugin, function);
  bp_error_sink sink;
  int32_t code;
  try {
    code = call(&sink);
  } catch (const std::exception &exception) {
    return plugin_threw(plugin, function, exception.what());
  } catch (...) {
    return plugin_threw(plugin, function, "an exception of unknown type");
  }
  if (code == BP_OK) return {};
  return plugin_failure(plugin, function, sink, code);
}

// A plugin function that releases something and reports nothing
// (buffer_destroy, request_release, comm_destroy): skipped once the plugin
// failed, where its state may be gone; a throw marks the plugin failed.
template <typename Call>
void call_plugin_release(LoadedPlugin &plugin, const char *function, Call &&call) {
  if (plugin.failed.load(std::memory_order_relaxed)) return;
  try {
    call();
  } catch (...) {
    Status ignored = plugin_threw(plugin, function, "an exception");
    (void)ignored;
  }
}

// One collective's arguments for a plugin's collective_start over a comm of
// `rank_count` ranks; send and recv are left NULL for barrier.
inline bp_collective_args collective_args(uint32_t collective, uint32_t dtype, uint32_t reduce_op, uint32_t root,
                                          size_t count, size_t rank_count, bp_plugin_buffer *const *send,
                                          bp_plugin_buffer *const *recv, uint32_t flags) {
  bp_collective_args args{};
  args.struct_size = sizeof args;
  args.collective = collective;
  args.dtype = dtype;
  args.reduce_op = reduce_op;
  args.root = root;
  args.count = count;
  args.rank_count = rank_count;
  if (collective != BP_BARRIER) {
    args.send = send;
    args.recv = recv;
  }
  args.flags = flags;
  return args;
}

// Where a host-memory buffer's bytes are (buffer_host_memory, plugin ABI
// 1.4); NULL for a NULL buffer.
Status plugin_host_memory(LoadedPlugin &plugin, const bp_plugin_buffer *buffer, std::byte *&memory);
// One collective on `comm` of `plugin`, waited for on this thread.
Status run_collective(LoadedPlugin &plugin, bp_plugin_comm *comm, const bp_collective_args &args);

// A device kind and what runs on it.
struct DeviceKind {
  std::string name;
  LoadedPlugin *plugin = nullptr;
  uint32_t index_in_plugin = 0;
  CapabilitySet capabilities;
};

// A layer kind and its rules (plugin.h, "layers").
struct LayerKind {
  std::string name, description;
  LoadedPlugin *plugin = nullptr;
  uint32_t index_in_plugin = 0;
  bool stackable = false;
  bool timed = false;
  std::vector<std::string> wraps;  // device kinds; empty: every kind
  struct Option {
    std::string name, description;
    bool path = false;
  };
  std::vector<Option> options;
  // For bp_layer_kind_info.
  std::vector<const char *> wrap_pointers, option_name_pointers, option_description_pointers;
  std::string chain_rule() const;  // "not stackable, wraps every kind" (the CLI's text)
};

// One layer over one layered device: the plugin's instance.
struct LayerInstance {
  LayerKind *kind = nullptr;
  bp_layer_instance *handle = nullptr;
  // Copied from the kind's plugin at creation: the hooks' path reads one struct.
  LoadedPlugin *plugin = nullptr;
  bp_plugin_state *state = nullptr;
  decltype(bp_layer_functions::before) before = nullptr;
  decltype(bp_layer_functions::after) after = nullptr;
  LayerInstance() = default;
  LayerInstance(const LayerInstance &) = delete;
  LayerInstance &operator=(const LayerInstance &) = delete;
  ~LayerInstance();  // instance_destroy
};

// A plugin file that was refused, with what it declared when its
// descriptor could be read (for "alternatives" that failed to load).
struct RefusedPlugin {
  bp_error *error = nullptr;  // owned
  std::vector<std::pair<std::string, CapabilitySet>> declared;
  RefusedPlugin() = default;
  RefusedPlugin(RefusedPlugin &&other) noexcept
      : error(std::exchange(other.error, nullptr)), declared(std::move(other.declared)) {}
  RefusedPlugin &operator=(RefusedPlugin &&) = delete;
  ~RefusedPlugin() { bp_error_destroy(error); }
};

}  // namespace backplane

struct bp_device {
  bp_host *host = nullptr;
  backplane::DeviceKind *kind = nullptr;
  uint32_t index = 0;  // within its kind
  std::string name;    // "kind:index"
  std::string plugin_device_name;
  std::string description;
  uint32_t flags = 0;
  uint64_t memory_bytes = 0;
  // The plugin's named facts about the device (ABI 1.1), copied at load, and
  // the pointer arrays bp_device_info hands out.
  std::vector<std::string> property_keys, property_values;
  std::vector<const char *> property_key_pointers, property_value_pointers;
  // Set when the device declares less than its kind.
  std::unique_ptr<backplane::CapabilitySet> own_capabilities;
  const backplane::CapabilitySet &capabilities() const {
    if (base != this) return base->capabilities();
    return own_capabilities ? *own_capabilities : kind->capabilities;
  }
  nlohmann::json describe() const;  // {"name", "kind", "layers"}

  // Layers (layers.cpp). A layered device copies its base's kind, index,
  // flags, memory and properties, so every path that runs on a device runs
  // on the base; `chain` is what tells the hooks apart, and is empty (one
  // test on the hot path, no indirect call) on a device without layers.
  bp_device *base = this;    // through every layer
  bp_device *over = nullptr; // directly under this device's own layers
  std::vector<std::unique_ptr<backplane::LayerInstance>> own_layers;  // outermost first
  std::vector<backplane::LayerInstance *> chain;  // own, then over's: outermost first
  bool wants_time = false;   // some layer of the chain is BP_LAYER_TIMED
  std::vector<std::string> layer_names;
  std::vector<const char *> layer_name_pointers;
  std::string chain_text;    // "trace → validate → cpu:0", or the name alone
  bool layered() const { return !chain.empty(); }
};

struct bp_buffer {
  bp_device *device = nullptr;
  bp_plugin_buffer *handle = nullptr;
  size_t bytes = 0;
  // The caller's memory of bp_buffer_wrap_host (NULL otherwise): dispatch
  // refuses a call whose ranks' wrapped ranges overlap.
  const std::byte *host_memory = nullptr;
  uint64_t serial = 0;  // process-wide, never reused (bp_layer_buffer_facts)
};

namespace backplane {
struct LayeredCall;  // layers.hpp
// One collective that was started with a request, shared by its event and
// its group's list of collectives in flight, so that either may go first.
// `mutex` serialises waiting, testing and completing it.
struct InFlight {
  std::mutex mutex;
  LoadedPlugin *plugin = nullptr;
  bp_plugin_request *request = nullptr;  // released and NULL once complete
  std::atomic<bool> complete{false};
  std::unique_ptr<Error> outcome;  // the failure, once complete
  // A collective on a group with layered ranks: its `after` hooks run when
  // it is seen complete (layers.hpp).
  std::unique_ptr<LayeredCall> layered;
  // An _async call through host memory: the group whose staging runner
  // runs it (plugin and request stay NULL).
  bp_group *staged = nullptr;
  // An _async call on a group across processes: the group whose span
  // runner runs it (plugin and request stay NULL).
  bp_group *spanning = nullptr;
};
}  // namespace backplane

struct bp_group {
  bp_host *host = nullptr;
  std::string name;
  uint32_t policy = BP_POLICY_STAGE;
  uint32_t on_unsupported = BP_ON_UNSUPPORTED_ERROR;
  uint32_t local_first = BP_LOCAL_FIRST_AUTO;
  std::vector<bp_device *> ranks;
  // Set when every rank has one kind; the plugin's communicator then exists.
  backplane::DeviceKind *kind = nullptr;
  bp_plugin_comm *comm = nullptr;
  std::string route;  // the plugin's comm_info (ABI 1.1); "" when it said nothing
  // What every rank can run (the intersection of the ranks' sets).
  backplane::CapabilitySet capabilities;
  // Scratch for the plugin's buffer handles, sized once, used under `busy`.
  std::vector<bp_plugin_buffer *> send_handles, recv_handles;
  std::atomic<bool> busy{false};
  bool owned_by_host = false;  // created by a fleet; bp_group_destroy leaves it
  // Whether the plugin may have several requests in flight on the comm
  // (plugin ABI minor >= 2); else the host waits for one before the next.
  bool plugin_queues = false;
  // Collectives through host memory: a mixed group with policy stage, or a
  // group with on_unsupported stage. NULL when neither was asked for or the
  // group cannot be staged; `staging_refusal` then says why (a sentence).
  std::unique_ptr<backplane::Staging, backplane::StagingDeleter> staging;
  std::string staging_refusal;
  // A staged _async call is in flight: a native call waits for it (its
  // plugin does not order itself after the host's copies). Set under the
  // start claim; `staged_started` hands its entry to start_collective.
  std::atomic<bool> staged_pending{false};
  std::shared_ptr<backplane::InFlight> staged_started;
  backplane::GroupCounters counters;
  // A group across processes (span BP_SPAN_WORLD); NULL for one process.
  std::unique_ptr<backplane::Span, backplane::SpanDeleter> span;
  size_t global_ranks = 0;  // the ranks of every process: ranks.size() for one process
  size_t first_rank = 0;    // this process's first rank
  // Some rank is a layered device: collectives run the layers' hooks.
  bool layered = false;
  bool layers_timed = false;  // some rank's chain has a BP_LAYER_TIMED layer
  uint64_t serial = 0;       // process-wide, never reused (bp_layer_call.group_serial)
  uint64_t calls = 0;        // collectives started on a layered group, under the start claim
  // Collectives started with a request, in start order; completed entries
  // are dropped at the next start. Guarded by in_flight_mutex; `tracked`
  // mirrors its size for the one check a blocking call makes.
  std::mutex in_flight_mutex;
  std::vector<std::shared_ptr<backplane::InFlight>> in_flight;
  std::atomic<size_t> tracked{0};
};

namespace backplane {
// A fleet's workload entry, with its sizes expanded.
struct Workload {
  bp_workload_info info{};
  std::vector<uint64_t> sizes;
};
// Destroys a group's communicator and the group.
void destroy_group(bp_group *group);
}  // namespace backplane

struct bp_event {
  bp_host *host = nullptr;  // holds a reference (retain_host)
  // NULL when the collective completed inside its start.
  std::shared_ptr<backplane::InFlight> in_flight;
};

struct bp_host {
  // The application's reference (bp_host_destroy drops it) plus one per
  // buffer, user group and event alive: the host goes with the last.
  std::atomic<size_t> references{1};
  mutable std::shared_mutex mutex;  // guards the listings below against load_plugin
  std::vector<std::unique_ptr<backplane::LoadedPlugin>> plugins;
  std::vector<backplane::RefusedPlugin> refused;
  std::vector<std::unique_ptr<backplane::DeviceKind>> kinds;
  std::vector<std::unique_ptr<bp_device>> devices;
  std::vector<bp_capability_info> capability_listing;
  std::vector<std::unique_ptr<backplane::LayerKind>> layer_kinds;
  // The transport (bp_host_open_transport), closed after the groups.
  std::unique_ptr<backplane::OpenTransport, backplane::OpenTransportDeleter> transport;
  nlohmann::json plugin_options = nlohmann::json::object();
  // Plugin file name -> SHA-256 hex its content must have (bp_host_options).
  std::map<std::string, std::string, std::less<>> plugin_pins;
  // Whether each plugin file is loaded in a probe process first (probe.hpp):
  // set at creation; a fleet's "probe": true sets probe = probe_options(true)
  // before its plugin_dirs load.
  backplane::ProbeOptions probe;
  std::vector<std::filesystem::path> loaded_files;   // canonical, to skip repeats
  std::vector<std::filesystem::path> refused_files;  // canonical: one refusal a file, however often found
  // From fleets: device names (a name with a count stands for several),
  // groups the host owns, and the workload.
  std::map<std::string, std::vector<bp_device *>, std::less<>> device_names;
  std::vector<std::unique_ptr<bp_group, void (*)(bp_group *)>> groups;
  std::vector<backplane::Workload> workloads;

  ~bp_host();
};

namespace backplane {

const bp_host_services &host_services();

// The folder libbackplane.so itself is in (empty when unknown): plugins and
// the probe helper are found relative to it (host.cpp).
std::filesystem::path host_library_directory();

// Loading (plugin_loader.cpp). Both take the host's lock themselves.
void load_search_path(bp_host &host, const bp_host_options &options);
Status load_plugin_file(bp_host &host, const std::filesystem::path &file);

// Loads the plugins of one directory (must_exist: a missing one is a refusal).
void load_directory(bp_host &host, const std::filesystem::path &directory, bool must_exist);
// Creates a group (bp_group_create's work).
Status create_group(bp_host *host, bp_device *const *ranks, size_t rank_count, const bp_group_options *options,
                    bp_group **out, HostLock host_lock);

// The refusal of libbackplane_<kind>.so when it refused the options it was
// given (its entry returned BP_CONFIG), else NULL; caller holds the lock
// (c_api.cpp). A kind missing for that reason is a CONFIG problem.
const bp_error *options_refusal(const bp_host &host, std::string_view kind);

// Rebuilds capability_listing from the kinds; caller holds the lock.
void rebuild_capability_listing(bp_host &host);

// Dispatch helpers shared by collectives, bp_group_check and fleets (dispatch.cpp).
Status check_support(const bp_group &group, uint32_t collective, uint32_t dtype, uint32_t op,
                     uint32_t mode_flags, HostLock host_lock = HostLock::take);
// Which way the request would run (bp_group_plan), or the refusal.
Expected<bp_group_path> plan(const bp_group &group, uint32_t collective, uint32_t dtype, uint32_t op,
                             uint32_t mode_flags, HostLock host_lock = HostLock::take);

}  // namespace backplane

namespace backplane {
// A buffer, user group or event keeps its host alive (bp_host_destroy).
void retain_host(bp_host *host) noexcept;
void release_host(bp_host *host) noexcept;
// Collectives and events (dispatch.cpp).
Status run_collective(bp_group *group, const bp_collective_request *request);
Expected<bp_event *> start_collective(bp_group *group, const bp_collective_request *request);
Status wait_event(bp_event *event, int64_t timeout_ns);
bool test_event(bp_event *event);
void destroy_event(bp_event *event);
// Waits for every collective of the group still in flight (bp_group_destroy).
void finish_in_flight(bp_group &group);
// Host creation (host.cpp). check_host_options is every check
// bp_host_create makes of its options, for the entry points that take
// bp_host_options too (bp_host_create_from_fleet_file): a copy zero-extended
// to this version's size, and plugin_options_json parsed.
struct CheckedHostOptions {
  bp_host_options options{};
  nlohmann::json plugin_options = nlohmann::json::object();
  backplane::PluginPins plugin_pins;  // parsed from options.plugin_pins_json
};
Expected<CheckedHostOptions> check_host_options(const bp_host_options *given);
Expected<bp_host *> create_host(const bp_host_options *options);
}  // namespace backplane
