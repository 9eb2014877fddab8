// Fleet files, stage 3: the meaning of a valid document against the loaded
// plugins, and the all-or-nothing commit of devices, groups and workload.
#include <cmath>
#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "fleet_meaning.hpp"
#include "layers.hpp"
#include "fleet_schema.hpp"
#include "host.hpp"
#include "span.hpp"
#include "names.hpp"
#include "sizes.hpp"

namespace backplane {
namespace fs = std::filesystem;

namespace {

// The most sizes the workload of one fleet expands to, all entries
// together: each range is bounded (sizes.cpp), and this bounds the memory a
// file of many ranges can ask for (65536 sizes, 512 KiB).
constexpr size_t max_fleet_sizes = size_t{1} << 16;

// Stage 3: meaning, against the plugins the host has loaded. Builds the
// named devices, groups and workload aside, and commits them only when no
// problem was found. Every check stops once problems_ is full, and every
// lookup is by index or tree, so a file of any size under the cap is
// checked in bounded time.
class FleetLoader {
 public:
  FleetLoader(bp_host &host, const nlohmann::json &document, const fs::path &base, Problems &problems)
      : host_(host), document_(document), base_(base), problems_(problems) {}

  ~FleetLoader() {
    for (bp_group *group : groups_) destroy_group(group);
  }

  Status load() {
    std::unique_lock lock(host_.mutex);
    index_host_devices();
    check_devices();
    check_groups();
    check_workload();
    if (!problems_.empty()) return std::move(problems_).to_error();
    commit();
    return {};
  }

 private:
  void index_host_devices() {
    for (const auto &device : host_.devices) {
      std::vector<bp_device *> &of_kind = devices_by_kind_[device->kind->name];
      if (of_kind.size() <= device->index) of_kind.resize(size_t{device->index} + 1, nullptr);
      of_kind[device->index] = device.get();
    }
  }

  std::vector<std::string> known_kinds() const {
    std::vector<std::string> kinds;
    for (const auto &kind : host_.kinds) kinds.push_back(kind->name);
    return kinds;
  }

  const DeviceKind *find_kind(const std::string &name) const {
    for (const auto &kind : host_.kinds) {
      if (kind->name == name) return kind.get();
    }
    return nullptr;
  }

  bp_device *find_host_device(const std::string &kind, uint64_t index) const {
    auto found = devices_by_kind_.find(kind);
    if (found == devices_by_kind_.end() || index >= found->second.size()) return nullptr;
    return found->second[index];
  }

  size_t device_count(const std::string &kind) const {
    auto found = devices_by_kind_.find(kind);
    if (found == devices_by_kind_.end()) return 0;
    return static_cast<size_t>(std::count_if(found->second.begin(), found->second.end(),
                                             [](const bp_device *device) { return device != nullptr; }));
  }

  // A kind no loaded plugin provides at `pointer`: PLUGIN_NOT_FOUND, or
  // CONFIG when the kind's plugin is there but refused its options (at
  // `options_pointer`, where the fleet gave them).
  void kind_not_found(const std::string &pointer, const std::string &kind, const std::string &options_pointer = "") {
    if (const bp_error *refusal = options_refusal(host_, kind)) {
      if (!refused_options_reported_.insert(kind).second) return;  // one problem says it
      const std::string at = options_pointer.empty() ? pointer : options_pointer;
      problems_.add(BP_CONFIG, at, value_at(document_, at), bp_error_message(refusal),
                    "fix the options of device kind '" + kind + "': its plugin enumerates no device until it takes them")
          .with("plugin_file", bp_error_field(refusal, "file"));
      return;
    }
    nlohmann::json refused = nlohmann::json::array();
    for (const RefusedPlugin &record : host_.refused) refused.push_back(nlohmann::json::parse(bp_error_json(record.error)));
    std::string reason = "unknown device kind '" + kind + "': no loaded plugin provides it";
    const std::vector<std::string> loaded = known_kinds();
    std::string list;
    for (const std::string &name : loaded) list += (list.empty() ? "" : ", ") + name;
    reason += loaded.empty() ? " (no plugin is loaded)" : " (known: " + list + ")";
    if (!refused.empty()) reason += "; " + std::to_string(refused.size()) + " plugin file(s) were refused";
    // The kind's own plugin file was refused: its reason, not a "did you mean".
    for (const RefusedPlugin &record : host_.refused) {
      const char *file = bp_error_field(record.error, "file");
      if (!file || fs::path(file).filename() != "libbackplane_" + kind + ".so") continue;
      reason = "device kind '" + kind + "': its plugin was refused: " + bp_error_message(record.error);
      const char *refusal_hint = bp_error_field(record.error, "hint");
      problems_.add(BP_PLUGIN_NOT_FOUND, pointer, kind, reason, refusal_hint ? refusal_hint : "")
          .with("known_kinds", loaded)
          .with("refused", refused);
      return;
    }
    std::string hint = problems_.suggest(kind, [&] {
      std::vector<std::string> candidates = loaded;
      for (const RefusedPlugin &record : host_.refused) {
        for (const auto &[declared_kind, set] : record.declared) candidates.push_back(declared_kind);
        // A refused libbackplane_vulkan.so makes 'vulkn' a typo of 'vulkan'.
        if (const char *file = bp_error_field(record.error, "file")) {
          const std::string stem = fs::path(file).stem().string();
          if (stem.rfind("libbackplane_", 0) == 0) candidates.push_back(stem.substr(13));
        }
      }
      return candidates;
    });
    if (hint.empty()) hint = "copy libbackplane_" + kind + ".so into a plugin directory, or see why it was refused";
    problems_.add(BP_PLUGIN_NOT_FOUND, pointer, kind, reason, hint).with("known_kinds", loaded).with("refused", refused);
  }

  void check_devices() {
    const nlohmann::json &devices = document_.value("devices", nlohmann::json::array());
    for (size_t i = 0; i < devices.size() && !problems_.full(); ++i) {
      const nlohmann::json &entry = devices[i];
      const std::string at = "/devices/" + std::to_string(i);
      const std::string name = entry["name"].get<std::string>();
      if (auto earlier = first_device_entry_.find(name); earlier != first_device_entry_.end()) {
        problems_.add(BP_CONFIG, at + "/name", name,
                      "duplicate device name '" + name + "' (first at " + earlier->second + ")");
        continue;
      }
      first_device_entry_[name] = at;
      if (entry.contains("over") || entry.contains("layers")) {
        layered_entries_.emplace(name, i);  // built once every plain device is known
        continue;
      }
      if (!entry.contains("kind")) {
        problems_.add(BP_CONFIG, at, entry, "a device needs a 'kind'", "add \"kind\": \"cpu\", for example");
        continue;
      }
      const std::string kind = entry["kind"].get<std::string>();
      if (!find_kind(kind)) {
        kind_not_found(at + "/kind", kind, entry.contains("options") ? at + "/options" : "");
        continue;
      }
      if (entry.contains("options")) check_options(at + "/options", kind, entry["options"]);
      // The schema bounds index below 2^32 and count to 65536: no overflow.
      const uint64_t first = entry.value("index", uint64_t{0});
      const uint64_t count = entry.value("count", uint64_t{1});
      const size_t available = device_count(kind);
      if (first + count > available) {
        const std::string pointer = at + (entry.contains("count") ? "/count" : "/index");
        problems_.add(BP_CONFIG, pointer, entry.contains("count") ? entry["count"] : entry["index"],
                      "devices " + kind + ":" + std::to_string(first) + ".." + kind + ":" +
                          std::to_string(first + count - 1) + " are beyond the " + std::to_string(available) + " " +
                          kind + " device(s) the plugin enumerates",
                      available ? "use indices below " + std::to_string(available) +
                                      (kind == "cpu" ? ", or raise the count with \"options\": {\"devices\": N}" : "")
                                : "this machine has no " + kind + " device");
        continue;
      }
      std::vector<bp_device *> named;
      for (uint64_t index = first; index < first + count; ++index) named.push_back(find_host_device(kind, index));
      if (host_.device_names.count(name)) {
        problems_.add(BP_CONFIG, at + "/name", name, "device name '" + name + "' is already taken by a loaded fleet");
        continue;
      }
      std::map<uint32_t, std::string> &declared = declared_by_kind_[kind];
      for (const bp_device *device : named) declared.emplace(device->index, name);
      names_[name] = std::move(named);
    }
    for (const auto &[name, entry] : layered_entries_) {
      if (problems_.full()) break;
      std::vector<std::string> path;
      build_layered(name, path);
    }
  }

  // A layered entry, {"name", "over", "layers", "options"}: the device(s)
  // it names, each wrapped (layers.cpp checks the nesting rules). `path` is
  // the chain of entries being built, to find a cycle through "over".
  // Returns false when the entry (or one under it) has a problem.
  bool build_layered(const std::string &name, std::vector<std::string> &path) {
    if (names_.count(name)) return true;
    if (failed_layered_.count(name)) return false;
    const size_t i = layered_entries_.at(name);
    const nlohmann::json &entry = document_["devices"][i];
    const std::string at = "/devices/" + std::to_string(i);
    if (std::find(path.begin(), path.end(), name) != path.end()) {
      std::vector<std::string> cycle(std::find(path.begin(), path.end(), name), path.end());
      cycle.push_back(name);
      problems_.add(layer_cycle_error(cycle), at + "/over", entry.value("over", nlohmann::json()));
      failed_layered_.insert(cycle.begin(), cycle.end());
      return false;
    }
    auto fail = [&] {
      failed_layered_.insert(name);
      return false;
    };
    for (const char *field : {"kind", "index", "count"}) {
      if (!entry.contains(field)) continue;
      problems_.add(BP_CONFIG, at + "/" + field, entry[field],
                    std::string("a layered device takes its '") + field + "' from the device it wraps",
                    "remove \"" + std::string(field) + "\", or remove \"over\" and \"layers\"");
      return fail();
    }
    if (!entry.contains("over") || !entry.contains("layers")) {
      const bool has_over = entry.contains("over");
      problems_.add(BP_CONFIG, at, entry,
                    has_over ? "a layered device needs 'layers' besides 'over'" : "'layers' need the device they wrap, 'over'",
                    has_over ? "add \"layers\": [\"trace\"], for example" : "add \"over\": \"cpu:0\", for example");
      return fail();
    }
    const std::string over = entry["over"].get<std::string>();
    // "v.1": one of the devices a layered entry "v" over several made.
    std::string over_entry = over;
    if (!layered_entries_.count(over) && over.rfind('.') != std::string::npos)
      over_entry = over.substr(0, over.rfind('.'));
    std::vector<bp_device *> under;
    if (layered_entries_.count(over_entry)) {
      path.push_back(name);
      const bool built = build_layered(over_entry, path);
      path.pop_back();
      if (!built) return fail();
      under = resolve(at + "/over", over);
      if (under.empty()) return fail();
    } else {
      under = resolve(at + "/over", over);
      if (under.empty()) return fail();
    }
    WrapRequest request;
    request.layers = entry["layers"].get<std::vector<std::string>>();
    request.options = entry.value("options", nlohmann::json::object());
    request.base = base_;
    std::vector<bp_device *> made;
    for (size_t k = 0; k < under.size(); ++k) {
      request.over = under[k];
      request.name = under.size() == 1 ? name : name + "." + std::to_string(k);
      if (host_device_named(request.name)) {
        problems_.add(BP_CONFIG, at + "/name", name, "a device named '" + request.name + "' exists on the host",
                      "give the layered device another name");
        return fail();
      }
      Expected<std::unique_ptr<bp_device>> device = build_layered_device(host_, request);
      if (!device) {
        Error error = device.take_error();
        std::string pointer = at + "/layers";
        if (error.code() == BP_PLUGIN_NOT_FOUND && error.context().contains("layer")) {
          const std::string missing = error.context()["layer"].get<std::string>();
          for (size_t l = 0; l < request.layers.size(); ++l)
            if (request.layers[l] == missing) pointer = at + "/layers/" + std::to_string(l);
        } else if (error.code() == BP_CONFIG) {
          pointer = at + "/options";
          if (error.context().contains("layer") && request.options.contains(error.context()["layer"].get<std::string>()))
            pointer += "/" + error.context()["layer"].get<std::string>();
        }
        problems_.add(std::move(error), pointer, value_at(document_, pointer));
        return fail();
      }
      made.push_back(device->get());
      layered_.push_back(std::move(*device));
    }
    if (made.size() > 1)
      for (size_t k = 0; k < made.size(); ++k) names_[name + "." + std::to_string(k)] = {made[k]};
    names_[name] = std::move(made);
    return true;
  }

  bool host_device_named(const std::string &name) const {
    for (const auto &device : host_.devices)
      if (device->name == name) return true;
    for (const auto &device : layered_)
      if (device->name == name) return true;
    return false;
  }

  void check_options(const std::string &pointer, const std::string &kind, const nlohmann::json &options) {
    auto configured = host_.plugin_options.find(kind);
    const nlohmann::json current = configured == host_.plugin_options.end() ? nlohmann::json::object() : *configured;
    if (options != current) {
      problems_.add(BP_CONFIG, pointer, options,
                    "options for device kind '" + kind + "' differ from those its plugin was configured with (" +
                        current.dump() + ")",
                    "create the host with bp_host_create_from_fleet_file (as `backplane run FLEET` does) so the "
                    "options reach the plugin before its devices are enumerated");
    }
  }

  // A group member as kind:index, by the one spelling of device names
  // (names.hpp). Once the fleet declares devices of a kind, those are the
  // devices of that kind its groups may name.
  std::vector<bp_device *> resolve_device_name(const std::string &pointer, const std::string &reference) {
    std::string why, respelled;
    const std::optional<DeviceNameParts> parts = parse_device_name(reference, &why, &respelled);
    if (!parts) {
      problems_.add(BP_CONFIG, pointer, reference, "device '" + reference + "' is not a device name: " + why,
                    respelled.empty() ? "name a device of the fleet, or one as kind:index, e.g. cpu:0"
                                      : "did you mean '" + respelled + "'?");
      return {};
    }
    const std::string kind(parts->kind);
    if (!find_kind(kind)) {
      kind_not_found(pointer, kind);
      return {};
    }
    auto declared = declared_by_kind_.find(kind);
    if (declared != declared_by_kind_.end() && !declared->second.count(parts->index)) {
      std::string list;
      for (const auto &[index, name] : declared->second) {
        if (list.size() > 200) {
          list += ", ...";
          break;
        }
        list += (list.empty() ? "" : ", ") + kind + ":" + std::to_string(index) + " ('" + name + "')";
      }
      problems_.add(BP_CONFIG, pointer, reference,
                    "device '" + reference + "' is not one of the " + kind + " devices the fleet declares (" + list + ")",
                    problems_.suggest(reference, [&] {
                      std::vector<std::string> candidates;
                      for (const auto &[index, name] : declared->second) candidates.push_back(kind + ":" + std::to_string(index));
                      return candidates;
                    }));
      return {};
    }
    bp_device *device = find_host_device(kind, parts->index);
    if (!device) {
      problems_.add(BP_CONFIG, pointer, reference,
                    "device '" + reference + "' does not exist: the plugin enumerates " +
                        std::to_string(device_count(kind)) + " " + kind + " device(s)");
      return {};
    }
    return {device};
  }

  // A group member: a fleet name (all its devices) or kind:index.
  std::vector<bp_device *> resolve(const std::string &pointer, const std::string &reference) {
    if (auto named = names_.find(reference); named != names_.end()) return named->second;
    if (auto named = host_.device_names.find(reference); named != host_.device_names.end()) return named->second;
    // A device entry that failed its own checks was already reported (and
    // so was "t.1" of a layered entry "t" that failed).
    if (first_device_entry_.count(reference)) return {};
    if (const size_t dot = reference.rfind('.');
        dot != std::string::npos && failed_layered_.count(reference.substr(0, dot)))
      return {};
    // Fleet names have no ':' (the schema's pattern).
    if (reference.find(':') != std::string::npos) return resolve_device_name(pointer, reference);
    problems_.add(BP_CONFIG, pointer, reference, "unknown device '" + reference + "'",
                  problems_.suggest(reference, [&] {
                    std::vector<std::string> candidates;
                    for (const auto &[name, devices] : names_) candidates.push_back(name);
                    for (const auto &device : host_.devices) candidates.push_back(device->name);
                    return candidates;
                  }));
    return {};
  }

  void check_groups() {
    const nlohmann::json &groups = document_.value("groups", nlohmann::json::array());
    std::map<std::string, std::string> first_entry;
    for (size_t g = 0; g < groups.size() && !problems_.full(); ++g) {
      const nlohmann::json &entry = groups[g];
      const std::string at = "/groups/" + std::to_string(g);
      const std::string name = entry["name"].get<std::string>();
      bool good = true;
      if (auto earlier = first_entry.find(name); earlier != first_entry.end()) {
        problems_.add(BP_CONFIG, at + "/name", name, "duplicate group name '" + name + "' (first at " + earlier->second + ")");
        good = false;
      } else if (std::any_of(host_.groups.begin(), host_.groups.end(), [&](const auto &group) { return group->name == name; })) {
        problems_.add(BP_CONFIG, at + "/name", name, "group name '" + name + "' is already taken by a loaded fleet");
        good = false;
      }
      first_entry.emplace(name, at);
      std::vector<bp_device *> ranks;
      std::map<bp_device *, size_t> seen;  // device -> the member that named it first
      const nlohmann::json &members = entry["devices"];
      for (size_t k = 0; k < members.size() && !problems_.full(); ++k) {
        const std::string pointer = at + "/devices/" + std::to_string(k);
        const std::string reference = members[k].get<std::string>();
        std::vector<bp_device *> resolved = resolve(pointer, reference);
        if (resolved.empty()) good = false;
        for (bp_device *device : resolved) {
          if (auto twice = seen.find(device); twice != seen.end()) {
            problems_.add(BP_CONFIG, pointer, reference,
                          "device '" + device->name + "' appears twice in group '" + name + "' (also at " + at +
                              "/devices/" + std::to_string(twice->second) + ")",
                          "a device may appear once in a group");
            good = false;
            // The rest of a name that repeats are repeats too: one problem is enough.
            break;
          }
          seen.emplace(device, k);
          ranks.push_back(device);
        }
      }
      if (!good) continue;
      bp_group_options options{};
      options.struct_size = sizeof options;
      options.name = name.c_str();
      options.policy = entry.value("policy", std::string("stage")) == "reject" ? BP_POLICY_REJECT : BP_POLICY_STAGE;
      options.on_unsupported = entry.value("on_unsupported", std::string("error")) == "stage"
                                   ? BP_ON_UNSUPPORTED_STAGE
                                   : BP_ON_UNSUPPORTED_ERROR;
      const std::string local_first = entry.value("local_first", std::string("auto"));
      options.local_first = local_first == "always" ? BP_LOCAL_FIRST_ALWAYS
                            : local_first == "never" ? BP_LOCAL_FIRST_NEVER
                                                     : BP_LOCAL_FIRST_AUTO;
      options.span = entry.value("span", std::string("process")) == "world" ? BP_SPAN_WORLD : BP_SPAN_PROCESS;
      options.guard = entry.value("guard", false) ? 1 : 0;
      bp_group *group = nullptr;
      Status status = create_group(&host_, ranks.data(), ranks.size(), &options, &group, HostLock::held);
      if (!status) {
        problems_.add(status.take_error(), at, entry);
        continue;
      }
      group->owned_by_host = true;
      groups_.push_back(group);
    }
  }

  bp_group *find_group(const std::string &name) const {
    for (bp_group *group : groups_) {
      if (group->name == name) return group;
    }
    for (const auto &group : host_.groups) {
      if (group->name == name) return group.get();
    }
    return nullptr;
  }

  // Fields of a workload entry its collective has no use for: a barrier
  // moves no data, only reducing collectives have an op, only rooted ones a
  // root. Given anyway, they would be read as meaning something.
  bool check_unused_fields(const std::string &at, const nlohmann::json &entry, bp_collective collective) {
    const std::string name = collective_name(collective);
    struct Unused {
      const char *field;
      bool unused;
      std::string why;
    };
    const Unused fields[] = {
        {"dtype", collective == BP_BARRIER, "a barrier moves no data"},
        {"sizes", collective == BP_BARRIER, "a barrier moves no data"},
        {"op", !collective_reduces(collective), name + " does not reduce"},
        {"root", !collective_has_root(collective), name + " has no root"},
    };
    bool good = true;
    for (const Unused &field : fields) {
      if (!field.unused || !entry.contains(field.field)) continue;
      problems_.add(BP_CONFIG, at + "/" + field.field, entry[field.field],
                    "'" + std::string(field.field) + "' means nothing here: " + field.why,
                    "remove \"" + std::string(field.field) + "\" from the entry");
      good = false;
    }
    return good;
  }

  void check_workload() {
    const nlohmann::json &workload = document_.value("workload", nlohmann::json::array());
    for (size_t w = 0; w < workload.size() && !problems_.full(); ++w) {
      const nlohmann::json &entry = workload[w];
      const std::string at = "/workload/" + std::to_string(w);
      const std::string group_name = entry["group"].get<std::string>();
      bp_group *group = find_group(group_name);
      if (!group) {
        // A group that failed its own checks was already reported.
        const nlohmann::json &defined_groups = document_.value("groups", nlohmann::json::array());
        const bool defined_here = std::any_of(defined_groups.begin(), defined_groups.end(), [&](const nlohmann::json &defined) {
          return defined["name"] == group_name;
        });
        if (!defined_here) {
          problems_.add(BP_CONFIG, at + "/group", group_name, "unknown group '" + group_name + "'",
                        problems_.suggest(group_name, [&] {
                          std::vector<std::string> candidates;
                          for (const nlohmann::json &defined : defined_groups) candidates.push_back(defined["name"]);
                          for (const auto &defined : host_.groups) candidates.push_back(defined->name);
                          return candidates;
                        }));
        }
        continue;
      }
      Workload item;
      bp_collective collective{};
      bp_dtype dtype = BP_F32;
      bp_reduce_op op = BP_SUM;
      bp_collective_from_name(entry["collective"].get<std::string>().c_str(), &collective);
      if (entry.contains("dtype")) bp_dtype_from_name(entry["dtype"].get<std::string>().c_str(), &dtype);
      if (entry.contains("op")) bp_reduce_op_from_name(entry["op"].get<std::string>().c_str(), &op);
      item.info.struct_size = sizeof item.info;
      item.info.group = group;
      item.info.collective = collective;
      item.info.dtype = dtype;
      item.info.reduce_op = op;
      // The schema bounds root below 2^32.
      item.info.root = entry.value("root", uint32_t{0});
      item.info.iterations = entry.value("iterations", uint32_t{20});
      item.info.warmup = entry.value("warmup", uint32_t{5});
      item.info.check = entry.value("check", true);
      const nlohmann::json in_place = entry.value("in_place", nlohmann::json("both"));
      item.info.modes = in_place.is_boolean() ? (in_place.get<bool>() ? BP_WORKLOAD_IN_PLACE : BP_WORKLOAD_OUT_OF_PLACE)
                                              : BP_WORKLOAD_IN_PLACE | BP_WORKLOAD_OUT_OF_PLACE;
      bool good = check_unused_fields(at, entry, collective);
      if (collective_has_root(collective) && item.info.root >= group->global_ranks) {
        problems_.add(BP_CONFIG, at + "/root", entry["root"],
                      "root " + std::to_string(item.info.root) + " is outside group '" + group_name + "' of " +
                          std::to_string(group->global_ranks) + " device(s)",
                      "use a root below " + std::to_string(group->global_ranks));
        good = false;
      }
      good = parse_workload_sizes(at, entry, collective, item.sizes) && good;
      if (collective != BP_BARRIER) {
        uint32_t modes = 0;
        if (item.info.modes & BP_WORKLOAD_IN_PLACE) modes |= BP_CAPABILITY_IN_PLACE;
        if (item.info.modes & BP_WORKLOAD_OUT_OF_PLACE) modes |= BP_CAPABILITY_OUT_OF_PLACE;
        if (Status status = check_support(*group, collective, dtype, op, modes, HostLock::held); !status) {
          Error error = status.take_error();
          std::string pointer = at;
          if (error.code() == BP_UNSUPPORTED_DTYPE) pointer += "/dtype";
          else if (error.code() == BP_UNSUPPORTED_REDUCE_OP) pointer += "/op";
          else if (error.code() == BP_UNSUPPORTED_COLLECTIVE) pointer += "/collective";
          else pointer += "/group";
          problems_.add(std::move(error), pointer, value_at(document_, pointer));
          good = false;
        }
      }
      if (good) workloads_.push_back(std::move(item));
    }
  }

  bool parse_workload_sizes(const std::string &at, const nlohmann::json &entry, bp_collective collective,
                            std::vector<uint64_t> &sizes) {
    if (collective == BP_BARRIER) return true;
    const nlohmann::json given = entry.value("sizes", nlohmann::json("8B..1MiB x8"));
    auto add = [&](const std::string &pointer, const nlohmann::json &value) {
      std::vector<uint64_t> parsed_sizes;
      if (value.is_number()) {
        // An integer of at least 0 below 2^63 (the schema), perhaps written as 4096.0.
        parsed_sizes.push_back(value.get<uint64_t>());
      } else {
        Expected<std::vector<uint64_t>> parsed = parse_sizes(value.get<std::string>());
        if (!parsed) {
          problems_.add(BP_CONFIG, pointer, value, parsed.error().message(), "write sizes like \"4KiB\" or \"8B..64MiB x4\"");
          return false;
        }
        parsed_sizes = std::move(*parsed);
      }
      if (sizes_over_limit_) return false;  // reported once, where the workload went past it
      if (parsed_sizes.size() > max_fleet_sizes - sizes_in_fleet_) {
        problems_.add(BP_CONFIG, pointer, value,
                      "these " + std::to_string(parsed_sizes.size()) + " size(s) take the workload past " +
                          std::to_string(max_fleet_sizes) + " sizes in all, the most a fleet takes",
                      "sweep fewer sizes: a larger factor or step, or fewer entries");
        sizes_over_limit_ = true;
        return false;
      }
      sizes_in_fleet_ += parsed_sizes.size();
      sizes.insert(sizes.end(), parsed_sizes.begin(), parsed_sizes.end());
      return true;
    };
    if (!given.is_array()) return add(at + "/sizes", given);
    bool good = true;
    for (size_t k = 0; k < given.size() && !problems_.full(); ++k)
      good = add(at + "/sizes/" + std::to_string(k), given[k]) && good;
    return good;
  }

  void commit() {
    for (auto &device : layered_) host_.devices.push_back(std::move(device));
    layered_.clear();
    for (auto &[name, devices] : names_) host_.device_names.emplace(name, std::move(devices));
    for (bp_group *group : groups_) host_.groups.emplace_back(group, destroy_group);
    groups_.clear();
    for (Workload &item : workloads_) {
      host_.workloads.push_back(std::move(item));
      Workload &stored = host_.workloads.back();
      stored.info.sizes = stored.sizes.data();
      stored.info.size_count = stored.sizes.size();
    }
  }

  bp_host &host_;
  const nlohmann::json &document_;
  const fs::path &base_;  // where relative paths of layer options start
  Problems &problems_;
  // Layered entries by name -> index in "devices"; the devices they made,
  // not yet the host's (destroyed with the loader unless committed), and
  // the entries that failed.
  std::map<std::string, size_t> layered_entries_;
  std::vector<std::unique_ptr<bp_device>> layered_;
  std::set<std::string> failed_layered_;
  // The host's devices by kind, each at its index (NULL in a gap).
  std::map<std::string, std::vector<bp_device *>, std::less<>> devices_by_kind_;
  std::map<std::string, std::string> first_device_entry_;
  std::map<std::string, std::vector<bp_device *>> names_;
  // Per kind, the indices of the devices the fleet's entries name, and the name.
  std::map<std::string, std::map<uint32_t, std::string>> declared_by_kind_;
  std::set<std::string> refused_options_reported_;  // kinds whose plugin refused its options
  size_t sizes_in_fleet_ = 0;
  bool sizes_over_limit_ = false;
  std::vector<bp_group *> groups_;  // created, not yet committed
  std::vector<Workload> workloads_;
};

}  // namespace

// plugin_dirs resolve against the fleet's folder; a missing one is a problem.
std::vector<fs::path> plugin_directories(const nlohmann::json &document, const fs::path &base, Problems &problems) {
  std::vector<fs::path> directories;
  const nlohmann::json &dirs = document.value("plugin_dirs", nlohmann::json::array());
  for (size_t i = 0; i < dirs.size(); ++i) {
    fs::path directory = dirs[i].get<std::string>();
    if (directory.is_relative()) directory = base / directory;
    directory = directory.lexically_normal();
    std::error_code error;
    if (!fs::is_directory(directory, error)) {
      problems.add(BP_CONFIG, "/plugin_dirs/" + std::to_string(i), dirs[i],
                   "plugin directory '" + directory.string() + "' does not exist",
                   "relative directories resolve against the fleet file's folder");
      continue;
    }
    directories.push_back(directory);
  }
  return directories;
}

FleetSource read_source(const char *path, Problems &problems) {
  FleetSource source{path, fs::path(path).parent_path(), std::nullopt};
  source.text = read_fleet_file(path, problems);
  return source;
}

void add_fleet_pins(const nlohmann::json &document, PluginPins &pins, std::string_view pins_source,
                    Problems &problems) {
  if (!document.contains("plugin_pins")) return;
  const nlohmann::json &given = document["plugin_pins"];
  Expected<PluginPins> fleet_pins = plugin_pins_from_json(given);
  if (!fleet_pins) {
    problems.add(fleet_pins.take_error(), "/plugin_pins", given);
    return;
  }
  for (const auto &[file, sha256] : *fleet_pins) {
    if (Status merged = add_plugin_pin(pins, file, sha256, pins_source, "the fleet"); !merged)
      problems.add(merged.take_error(), "/plugin_pins/" + pointer_escape(file), given[file]);
  }
}

namespace {

// Loading into a live host: the fleet's pins join the host's, for this
// load and every later one, and must hold for the plugins already loaded
// (those were checked against the host's own pins only); "probe": true
// turns probing on for the host. On a problem nothing changes and the
// fleet's directories are not loaded.
bool take_fleet_plugin_checks(bp_host &host, const nlohmann::json &document, Problems &problems) {
  std::unique_lock lock(host.mutex);
  PluginPins pins = host.plugin_pins;
  const size_t problems_before = problems.size();
  add_fleet_pins(document, pins, "the host", problems);
  const nlohmann::json &fleet_pins = document.value("plugin_pins", nlohmann::json::object());
  for (const auto &plugin : host.plugins) {
    const std::string file = fs::path(plugin->file).filename().string();
    const auto pin = pins.find(file);
    if (!fleet_pins.contains(file) || pin == pins.end() || plugin->sha256().empty() ||
        pin->second == plugin->sha256())
      continue;
    problems.add(BP_CONFIG, "/plugin_pins/" + pointer_escape(file), fleet_pins[file],
                 file + " is already loaded from '" + plugin->file + "' with SHA-256 " + plugin->sha256() +
                     ", not the pinned " + pin->second,
                 "create a host from this fleet (bp_host_create_from_fleet_file, as backplane run does), so that the "
                 "pin is checked before the plugin loads");
  }
  // A missing directory alone still loads the others (the load fails later).
  if (problems.size() != problems_before || problems.full()) return false;
  host.plugin_pins = std::move(pins);
  if (document.value("probe", false) && !host.probe.enabled) host.probe = probe_options(true);
  return true;
}

// The fleet's "transport": opened before its groups are made (a group that
// spans processes needs it); a host with that transport open keeps it. It
// stays open when a later part of the fleet fails, as its plugins stay loaded.
void open_fleet_transport(bp_host &host, const nlohmann::json &entry, Problems &problems) {
  const std::string plugin = entry.value("plugin", std::string());
  {
    std::shared_lock lock(host.mutex);
    if (host.transport) {
      if (host.transport->plugin->transport != plugin)
        problems.add(BP_CONFIG, "/transport/plugin", plugin,
                     "the host has transport '" + host.transport->plugin->transport + "' open already",
                     "a host opens one transport");
      return;
    }
  }
  const std::string options = entry.value("options", nlohmann::json::object()).dump();
  bp_transport_options given{};
  given.struct_size = sizeof given;
  given.plugin = plugin.c_str();
  given.options_json = options.c_str();
  if (entry.contains("timeout_s"))
    given.timeout_ns = static_cast<int64_t>(std::llround(entry["timeout_s"].get<double>() * 1e9));
  if (Status status = open_transport(host, given); !status) problems.add(status.take_error(), "/transport", entry);
}

}  // namespace

Status load_into(bp_host &host, const nlohmann::json &document, const fs::path &base, Problems &problems,
                 bool load_plugin_dirs) {
  std::vector<fs::path> directories = plugin_directories(document, base, problems);
  if (load_plugin_dirs && take_fleet_plugin_checks(host, document, problems)) {
    for (const fs::path &directory : directories) load_directory(host, directory, true);
  }
  if (document.contains("transport") && problems.empty()) open_fleet_transport(host, document["transport"], problems);
  FleetLoader loader(host, document, base, problems);
  return loader.load();
}

}  // namespace backplane
