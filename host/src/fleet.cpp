// Fleet files: reading (bounded size and depth), validation against
// configs/schema.json with valijson, validation of meaning against the
// loaded plugins, and an all-or-nothing commit of named devices, groups and
// the workload into the host. Every problem found is reported, each with
// the file, the JSON pointer, the offending value and the reason.
#include <algorithm>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <sstream>

#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

#include "c_api_guard.hpp"
#include "fleet.hpp"
#include "fleet_schema.inc"  // kFleetSchema: configs/schema.json, embedded at build time
#include "host.hpp"
#include "log.hpp"
#include "names.hpp"
#include "sizes.hpp"

namespace backplane {
namespace fs = std::filesystem;

namespace {

constexpr uintmax_t max_fleet_bytes = 8u << 20;  // a fleet is a few KiB; this bounds memory and time
constexpr int max_fleet_depth = 32;              // the schema needs 5 levels

// Problems found so far in one fleet text.
class Problems {
 public:
  explicit Problems(std::string file) : file_(std::move(file)) {}
  const std::string &file() const { return file_; }
  bool empty() const { return list_.empty(); }

  Error &add(bp_code code, const std::string &pointer, const nlohmann::json &value, const std::string &reason,
             const std::string &hint = "") {
    Error problem(code, pointer.empty() ? reason : pointer + ": " + reason);
    problem.with("file", file_).with("pointer", pointer).with("value", value).with("reason", reason);
    if (!hint.empty()) problem.with("hint", hint);
    list_.push_back(std::move(problem));
    return list_.back();
  }
  // Adds an error built elsewhere (a refusal from dispatch) at `pointer`.
  void add(Error error, const std::string &pointer, const nlohmann::json &value) {
    Error problem(error.code(), pointer + ": " + error.message());
    for (const auto &[key, field] : error.context().items()) problem.with(key, field);
    problem.with("file", file_).with("pointer", pointer).with("value", value).with("reason", error.message());
    list_.push_back(std::move(problem));
  }

  Error to_error() && {
    const std::string first = list_.front().message();
    const size_t count = list_.size();
    Error error(list_.front().code(), file_ + ": " + std::to_string(count) + (count == 1 ? " problem: " : " problems; first: ") + first);
    error.with("file", file_);
    return std::move(error).with_problems(std::move(list_));
  }

 private:
  std::string file_;
  std::vector<Error> list_;
};

std::string pointer_escape(const std::string &token) {
  std::string escaped;
  for (char c : token) {
    if (c == '~') escaped += "~0";
    else if (c == '/') escaped += "~1";
    else escaped += c;
  }
  return escaped;
}

std::string pointer_of(const std::vector<std::string> &context) {
  std::string pointer;
  for (const std::string &part : context) {
    if (part == "<root>") continue;
    // valijson writes each step as "[key]" or "[index]".
    const std::string token = part.size() >= 2 && part.front() == '[' && part.back() == ']' ? part.substr(1, part.size() - 2) : part;
    pointer += "/" + pointer_escape(token);
  }
  return pointer;
}

nlohmann::json value_at(const nlohmann::json &document, const std::string &pointer) {
  try {
    return document.at(nlohmann::json::json_pointer(pointer));
  } catch (...) {
    return nullptr;
  }
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string did_you_mean(const std::string &given, const std::vector<std::string> &known) {
  // Close enough to be a typo, and not a rewrite of the whole name.
  const std::string *best = nullptr;
  size_t best_distance = std::max<size_t>(1, given.size() / 3) + 1;
  for (const std::string &candidate : known) {
    const size_t distance = edit_distance(given, candidate);
    if (distance < best_distance && distance < given.size()) {
      best_distance = distance;
      best = &candidate;
    }
  }
  return best ? "did you mean '" + *best + "'?" : "";
}

namespace {

const std::map<std::string, std::vector<std::string>> &known_keys() {
  static const std::map<std::string, std::vector<std::string>> keys = {
      {"", {"version", "plugin_dirs", "devices", "groups", "workload"}},
      {"devices", {"name", "kind", "index", "count", "options", "over", "layers"}},
      {"groups", {"name", "devices", "policy"}},
      {"workload", {"group", "collective", "dtype", "op", "root", "sizes", "iterations", "warmup", "in_place", "check"}}};
  return keys;
}

std::vector<std::string> names_of(const char *(*name)(uint32_t), uint32_t count) {
  std::vector<std::string> names;
  for (uint32_t i = 0; i < count; ++i) names.emplace_back(name(i));
  return names;
}

const char *json_type(const nlohmann::json &value) { return value.type_name(); }

// Turns valijson's messages into ones a user can act on.
void add_schema_problem(Problems &problems, const nlohmann::json &document, std::string pointer,
                        const std::string &description) {
  static constexpr std::string_view unknown_key = "constraints: '";
  nlohmann::json value = value_at(document, pointer);
  std::string reason = description, hint;
  if (size_t at = description.find(unknown_key); at != std::string::npos) {
    const std::string key = description.substr(at + unknown_key.size(), description.size() - at - unknown_key.size() - 2);
    // The parent object: "", or "devices" for /devices/3.
    const std::string section = pointer.empty() ? "" : pointer.substr(1, pointer.find('/', 1) - 1);
    auto known = known_keys().find(section);
    pointer += "/" + pointer_escape(key);
    value = value_at(document, pointer);
    reason = "unknown key '" + key + "'";
    if (known != known_keys().end()) {
      hint = did_you_mean(key, known->second);
      std::string list;
      for (const std::string &name : known->second) list += (list.empty() ? "" : ", ") + name;
      reason += " (known: " + list + ")";
    }
  } else if (description.find("'const' constraint") != std::string::npos && pointer == "/version") {
    reason = "unsupported version " + value.dump() + "; this host reads version 1";
  } else if (description.find("enum values") != std::string::npos) {
    const std::string field = pointer.substr(pointer.rfind('/') + 1);
    std::vector<std::string> allowed;
    if (field == "collective") allowed = names_of(collective_name, BP_COLLECTIVE_COUNT);
    if (field == "dtype") allowed = names_of(dtype_name, BP_DTYPE_COUNT);
    if (field == "op") allowed = names_of(reduce_op_name, BP_REDUCE_OP_COUNT);
    if (field == "policy") allowed = {"stage", "reject"};
    std::string list;
    for (const std::string &name : allowed) list += (list.empty() ? "" : ", ") + name;
    reason = "unknown " + field + " " + value.dump() + (list.empty() ? "" : " (known: " + list + ")");
    if (value.is_string()) hint = did_you_mean(value.get<std::string>(), allowed);
  } else if (description.find("'type' constraint") != std::string::npos) {
    reason = "has the wrong type (" + std::string(json_type(value)) + ")";
  } else if (description.find("Expected number greater than or equal to") != std::string::npos) {
    // valijson prints the bound as a double ("1.000000").
    const double bound = std::strtod(description.c_str() + description.rfind(' ') + 1, nullptr);
    reason = value.dump() + " is below the minimum " + nlohmann::json(static_cast<int64_t>(bound)).dump();
  } else if (description.find("Expected number less than or equal to") != std::string::npos) {
    const double bound = std::strtod(description.c_str() + description.rfind(' ') + 1, nullptr);
    reason = value.dump() + " is above the maximum " + nlohmann::json(static_cast<int64_t>(bound)).dump();
  } else if (description.find("no fewer than") != std::string::npos && value.is_array()) {
    reason = "must not be empty";
  }
  problems.add(BP_CONFIG, pointer, value, reason, hint);
}

const valijson::Schema &fleet_schema() {
  // Parsed once per process (thread-safe static initialisation).
  static const std::unique_ptr<valijson::Schema> schema = [] {
    auto parsed = std::make_unique<valijson::Schema>();
    const nlohmann::json document = nlohmann::json::parse(kFleetSchema);
    valijson::SchemaParser parser;
    valijson::adapters::NlohmannJsonAdapter adapter(document);
    parser.populateSchema(adapter, *parsed);
    return parsed;
  }();
  return *schema;
}

void validate_schema(const nlohmann::json &document, Problems &problems) {
  valijson::Validator validator;
  valijson::ValidationResults results;
  valijson::adapters::NlohmannJsonAdapter target(document);
  if (validator.validate(fleet_schema(), target, &results)) return;
  // valijson also reports each failure at every level above it ("Failed to
  // validate item #2", "... property name 'devices'"); keep the real ones,
  // merging repeated messages of one place.
  static constexpr std::string_view wrappers[] = {
      "Failed to validate item #", "Failed to validate against schema associated with property name",
      "Failed to validate against additional properties schema", "Failed to validate against any schemas allowed",
      "Failed to validate against exactly one child schema"};
  std::map<std::string, std::vector<std::string>> by_pointer;
  std::vector<std::string> order;
  valijson::ValidationResults::Error error;
  std::vector<std::pair<std::string, std::string>> wrapper_only;
  while (results.popError(error)) {
    const std::string pointer = pointer_of(error.context);
    const bool is_wrapper = std::any_of(std::begin(wrappers), std::end(wrappers), [&](std::string_view prefix) {
      return error.description.compare(0, prefix.size(), prefix) == 0;
    });
    if (is_wrapper) {
      wrapper_only.emplace_back(pointer, error.description);
      continue;
    }
    auto &list = by_pointer[pointer];
    if (list.empty()) order.push_back(pointer);
    if (std::find(list.begin(), list.end(), error.description) == list.end()) list.push_back(error.description);
  }
  // A oneOf whose alternatives failed without a message of their own.
  if (order.empty()) {
    for (const auto &[pointer, description] : wrapper_only) {
      by_pointer[pointer].push_back(description);
      order.push_back(pointer);
    }
  }
  for (const std::string &pointer : order) {
    // Alternatives of a oneOf each say "wrong type"; one problem per place.
    std::vector<std::string> &descriptions = by_pointer[pointer];
    if (descriptions.size() > 1) {
      descriptions.erase(std::remove_if(descriptions.begin(), descriptions.end(),
                                        [](const std::string &text) { return text.find("'type' constraint") != std::string::npos; }),
                         descriptions.end());
      if (descriptions.empty()) descriptions.push_back("Value type not permitted by 'type' constraint.");
    }
    for (const std::string &description : descriptions) add_schema_problem(problems, document, pointer, description);
  }
}

struct DepthExceeded {};

// Parses with a bound on nesting; problems name line and column.
std::optional<nlohmann::json> parse_document(std::string_view text, Problems &problems) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    problems.add(BP_CONFIG, "", nullptr, "the fleet is empty", "a fleet is a JSON object such as {\"version\": 1}");
    return std::nullopt;
  }
  try {
    nlohmann::json document = nlohmann::json::parse(
        text.begin(), text.end(),
        [](int depth, nlohmann::json::parse_event_t, nlohmann::json &) {
          if (depth > max_fleet_depth) throw DepthExceeded{};
          return true;
        });
    return document;
  } catch (const DepthExceeded &) {
    problems.add(BP_CONFIG, "", nullptr,
                 "nesting deeper than " + std::to_string(max_fleet_depth) + " levels; a fleet needs 5");
  } catch (const nlohmann::json::parse_error &error) {
    // Line and column of the byte where parsing stopped.
    const size_t at = std::min<size_t>(error.byte == 0 ? 0 : error.byte - 1, text.size());
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at; ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    std::string detail = error.what();
    if (size_t colon = detail.find(": ", detail.find("parse error")); colon != std::string::npos) detail = detail.substr(colon + 2);
    problems.add(BP_CONFIG, "", nullptr,
                 "not valid JSON at line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + detail)
        .with("line", line)
        .with("column", column);
  }
  return std::nullopt;
}

// Reads a file with its size bounded before anything is allocated.
std::optional<std::string> read_fleet_file(const fs::path &path, Problems &problems) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (error || !fs::exists(status)) {
    problems.add(BP_CONFIG, "", nullptr, "the fleet file does not exist", "check the path");
    return std::nullopt;
  }
  if (!fs::is_regular_file(status)) {
    problems.add(BP_CONFIG, "", nullptr, "the fleet file is not a regular file");
    return std::nullopt;
  }
  const uintmax_t size = fs::file_size(path, error);
  if (!error && size > max_fleet_bytes) {
    problems.add(BP_CONFIG, "", nullptr,
                 "the fleet file is " + std::to_string(size) + " bytes, over the limit of " +
                     std::to_string(max_fleet_bytes) + " bytes (8 MiB)",
                 "a fleet file describes devices and groups in a few KiB; check that this is the right file");
    return std::nullopt;
  }
  std::ifstream stream(path, std::ios::binary);
  if (!stream) {
    problems.add(BP_CONFIG, "", nullptr, "the fleet file cannot be read: " + std::string(std::strerror(errno)));
    return std::nullopt;
  }
  std::string text;
  text.resize(static_cast<size_t>(size));
  stream.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(stream.gcount()));
  return text;
}

// Stages 0 to 2: read, parse, schema. Returns the document or every problem.
Expected<nlohmann::json> parse_fleet(std::optional<std::string> text, Problems &problems) {
  if (!text) return std::move(problems).to_error();
  std::optional<nlohmann::json> document = parse_document(*text, problems);
  if (!document) return std::move(problems).to_error();
  if (!document->is_object()) {
    problems.add(BP_CONFIG, "", *document,
                 std::string("the fleet must be a JSON object, not ") + json_type(*document),
                 "a fleet is a JSON object such as {\"version\": 1, \"devices\": [...]}");
    return std::move(problems).to_error();
  }
  validate_schema(*document, problems);
  if (!problems.empty()) return std::move(problems).to_error();
  return std::move(*document);
}

// Stage 3: meaning, against the plugins the host has loaded. Builds the
// named devices, groups and workload aside, and commits them only when no
// problem was found.
class FleetLoader {
 public:
  FleetLoader(bp_host &host, const nlohmann::json &document, Problems &problems)
      : host_(host), document_(document), problems_(problems) {}

  ~FleetLoader() {
    for (bp_group *group : groups_) destroy_group(group);
  }

  Status load() {
    std::unique_lock lock(host_.mutex);
    check_devices();
    check_groups();
    check_workload();
    if (!problems_.empty()) return std::move(problems_).to_error();
    commit();
    return {};
  }

 private:
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
    for (const auto &device : host_.devices) {
      if (device->kind->name == kind && device->index == index) return device.get();
    }
    return nullptr;
  }

  size_t device_count(const std::string &kind) const {
    return static_cast<size_t>(std::count_if(host_.devices.begin(), host_.devices.end(),
                                             [&](const auto &device) { return device->kind->name == kind; }));
  }

  void kind_not_found(const std::string &pointer, const std::string &kind) {
    nlohmann::json refused = nlohmann::json::array();
    std::vector<std::string> candidates = known_kinds();
    for (const RefusedPlugin &record : host_.refused) {
      refused.push_back(nlohmann::json::parse(bp_error_json(record.error)));
      for (const auto &[declared_kind, set] : record.declared) candidates.push_back(declared_kind);
      // A refused libbackplane_vulkan.so makes 'vulkn' a typo of 'vulkan'.
      if (const char *file = bp_error_field(record.error, "file")) {
        const std::string stem = fs::path(file).stem().string();
        if (stem.rfind("libbackplane_", 0) == 0) candidates.push_back(stem.substr(13));
      }
    }
    std::string reason = "unknown device kind '" + kind + "': no loaded plugin provides it";
    const std::vector<std::string> loaded = known_kinds();
    std::string list;
    for (const std::string &name : loaded) list += (list.empty() ? "" : ", ") + name;
    reason += loaded.empty() ? " (no plugin is loaded)" : " (known: " + list + ")";
    if (!refused.empty()) reason += "; " + std::to_string(refused.size()) + " plugin file(s) were refused";
    std::string hint = did_you_mean(kind, candidates);
    if (hint.empty()) hint = "copy libbackplane_" + kind + ".so into a plugin directory, or see why it was refused";
    problems_.add(BP_PLUGIN_NOT_FOUND, pointer, kind, reason, hint).with("known_kinds", loaded).with("refused", refused);
  }

  void check_devices() {
    const nlohmann::json &devices = document_.value("devices", nlohmann::json::array());
    for (size_t i = 0; i < devices.size(); ++i) {
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
        problems_.add(BP_CONFIG, at + (entry.contains("over") ? "/over" : "/layers"),
                      entry.contains("over") ? entry["over"] : entry["layers"],
                      "layered devices are not available in this version", "remove 'over' and 'layers'");
        continue;
      }
      if (!entry.contains("kind")) {
        problems_.add(BP_CONFIG, at, entry, "a device needs a 'kind'", "add \"kind\": \"cpu\", for example");
        continue;
      }
      const std::string kind = entry["kind"].get<std::string>();
      if (!find_kind(kind)) {
        kind_not_found(at + "/kind", kind);
        continue;
      }
      if (entry.contains("options")) check_options(at + "/options", kind, entry["options"]);
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
      names_[name] = std::move(named);
    }
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

  // A group member: a fleet name (all its devices) or kind:index.
  std::vector<bp_device *> resolve(const std::string &pointer, const std::string &reference) {
    if (auto named = names_.find(reference); named != names_.end()) return named->second;
    if (auto named = host_.device_names.find(reference); named != host_.device_names.end()) return named->second;
    const size_t colon = reference.rfind(':');
    if (colon != std::string::npos) {
      const std::string kind = reference.substr(0, colon), index_text = reference.substr(colon + 1);
      const bool numeric = !index_text.empty() && index_text.find_first_not_of("0123456789") == std::string::npos &&
                           index_text.size() < 10;
      if (numeric && find_kind(kind)) {
        const uint64_t index = std::stoull(index_text);
        if (bp_device *device = find_host_device(kind, index)) return {device};
        problems_.add(BP_CONFIG, pointer, reference,
                      "device '" + reference + "' does not exist: the plugin enumerates " +
                          std::to_string(device_count(kind)) + " " + kind + " device(s)");
        return {};
      }
      if (numeric) {
        kind_not_found(pointer, kind);
        return {};
      }
    }
    std::vector<std::string> candidates;
    for (const auto &[name, devices] : names_) candidates.push_back(name);
    for (const auto &device : host_.devices) candidates.push_back(device->name);
    problems_.add(BP_CONFIG, pointer, reference, "unknown device '" + reference + "'", did_you_mean(reference, candidates));
    return {};
  }

  void check_groups() {
    const nlohmann::json &groups = document_.value("groups", nlohmann::json::array());
    std::map<std::string, std::string> first_entry;
    for (size_t g = 0; g < groups.size(); ++g) {
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
      std::map<bp_device *, std::string> seen;
      const nlohmann::json &members = entry["devices"];
      for (size_t k = 0; k < members.size(); ++k) {
        const std::string pointer = at + "/devices/" + std::to_string(k);
        const std::string reference = members[k].get<std::string>();
        std::vector<bp_device *> resolved = resolve(pointer, reference);
        if (resolved.empty()) good = false;
        for (bp_device *device : resolved) {
          if (auto twice = seen.find(device); twice != seen.end()) {
            problems_.add(BP_CONFIG, pointer, reference,
                          "device '" + device->name + "' appears twice in group '" + name + "' (also at " + twice->second + ")",
                          "a device may appear once in a group");
            good = false;
            continue;
          }
          seen.emplace(device, pointer);
          ranks.push_back(device);
        }
      }
      if (!good) continue;
      bp_group_options options{};
      options.struct_size = sizeof options;
      options.name = name.c_str();
      options.policy = entry.value("policy", std::string("stage")) == "reject" ? BP_POLICY_REJECT : BP_POLICY_STAGE;
      bp_group *group = nullptr;
      Status status = create_group(&host_, ranks.data(), ranks.size(), &options, &group);
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

  void check_workload() {
    const nlohmann::json &workload = document_.value("workload", nlohmann::json::array());
    for (size_t w = 0; w < workload.size(); ++w) {
      const nlohmann::json &entry = workload[w];
      const std::string at = "/workload/" + std::to_string(w);
      const std::string group_name = entry["group"].get<std::string>();
      bp_group *group = find_group(group_name);
      if (!group) {
        std::vector<std::string> candidates;
        for (const nlohmann::json &defined : document_.value("groups", nlohmann::json::array())) candidates.push_back(defined["name"]);
        for (const auto &defined : host_.groups) candidates.push_back(defined->name);
        // A group that failed its own checks was already reported.
        const bool defined_here = std::find(candidates.begin(), candidates.end(), group_name) != candidates.end();
        if (!defined_here) problems_.add(BP_CONFIG, at + "/group", group_name, "unknown group '" + group_name + "'", did_you_mean(group_name, candidates));
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
      item.info.root = entry.value("root", uint32_t{0});
      item.info.iterations = entry.value("iterations", uint32_t{20});
      item.info.warmup = entry.value("warmup", uint32_t{5});
      item.info.check = entry.value("check", true);
      const nlohmann::json in_place = entry.value("in_place", nlohmann::json("both"));
      item.info.modes = in_place.is_boolean() ? (in_place.get<bool>() ? BP_WORKLOAD_IN_PLACE : BP_WORKLOAD_OUT_OF_PLACE)
                                              : BP_WORKLOAD_IN_PLACE | BP_WORKLOAD_OUT_OF_PLACE;
      bool good = true;
      if (collective_has_root(collective) && item.info.root >= group->ranks.size()) {
        problems_.add(BP_CONFIG, at + "/root", entry["root"],
                      "root " + std::to_string(item.info.root) + " is outside group '" + group_name + "' of " +
                          std::to_string(group->ranks.size()) + " device(s)",
                      "use a root below " + std::to_string(group->ranks.size()));
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
      if (value.is_number_unsigned() || value.is_number_integer()) {
        sizes.push_back(value.get<uint64_t>());
        return true;
      }
      Expected<std::vector<uint64_t>> parsed = parse_sizes(value.get<std::string>());
      if (!parsed) {
        problems_.add(BP_CONFIG, pointer, value, parsed.error().message(), "write sizes like \"4KiB\" or \"8B..64MiB x4\"");
        return false;
      }
      sizes.insert(sizes.end(), parsed->begin(), parsed->end());
      return true;
    };
    if (!given.is_array()) return add(at + "/sizes", given);
    bool good = true;
    for (size_t k = 0; k < given.size(); ++k) good = add(at + "/sizes/" + std::to_string(k), given[k]) && good;
    return good;
  }

  void commit() {
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
  Problems &problems_;
  std::map<std::string, std::string> first_device_entry_;
  std::map<std::string, std::vector<bp_device *>> names_;
  std::vector<bp_group *> groups_;  // created, not yet committed
  std::vector<Workload> workloads_;
};

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

struct FleetSource {
  std::string name;  // the file as the user wrote it, or "<text>"
  fs::path base;     // where relative paths start
  std::optional<std::string> text;
};

FleetSource read_source(const char *path, Problems &problems) {
  FleetSource source{path, fs::path(path).parent_path(), std::nullopt};
  source.text = read_fleet_file(path, problems);
  return source;
}

Status load_into(bp_host &host, const nlohmann::json &document, const fs::path &base, Problems &problems,
                 bool load_plugin_dirs) {
  std::vector<fs::path> directories = plugin_directories(document, base, problems);
  if (load_plugin_dirs) {
    for (const fs::path &directory : directories) load_directory(host, directory, true);
  }
  FleetLoader loader(host, document, problems);
  return loader.load();
}

}  // namespace
}  // namespace backplane

using namespace backplane;

extern "C" {

bp_error *bp_host_load_fleet_file(bp_host *host, const char *path) {
  return guarded([&]() -> Status {
    if (!host) return Error(BP_INVALID_ARGUMENT, "bp_host_load_fleet_file: host is NULL");
    if (!path) return Error(BP_INVALID_ARGUMENT, "bp_host_load_fleet_file: path is NULL");
    Problems problems(path);
    FleetSource source = read_source(path, problems);
    Expected<nlohmann::json> document = parse_fleet(std::move(source.text), problems);
    if (!document) return document.take_error();
    return load_into(*host, *document, source.base, problems, true);
  });
}

bp_error *bp_host_load_fleet_text(bp_host *host, const char *json, size_t length) {
  return guarded([&]() -> Status {
    if (!host) return Error(BP_INVALID_ARGUMENT, "bp_host_load_fleet_text: host is NULL");
    if (!json && length > 0) return Error(BP_INVALID_ARGUMENT, "bp_host_load_fleet_text: json is NULL");
    Problems problems("<text>");
    std::optional<std::string> text;
    if (length > max_fleet_bytes) {
      problems.add(BP_CONFIG, "", nullptr, "the fleet text is " + std::to_string(length) + " bytes, over the limit of " +
                                               std::to_string(max_fleet_bytes) + " bytes (8 MiB)");
    } else {
      text = std::string(json ? json : "", length);
    }
    Expected<nlohmann::json> document = parse_fleet(std::move(text), problems);
    if (!document) return document.take_error();
    return load_into(*host, *document, fs::current_path(), problems, true);
  });
}

bp_error *bp_host_create_from_fleet_file(const char *path, const bp_host_options *given, bp_host **out) {
  return guarded([&]() -> Status {
    if (!path) return Error(BP_INVALID_ARGUMENT, "bp_host_create_from_fleet_file: path is NULL");
    if (!out) return Error(BP_INVALID_ARGUMENT, "bp_host_create_from_fleet_file: out is NULL");
    if (given && given->struct_size < BP_HOST_OPTIONS_SIZE_V1_0)
      return Error(BP_INVALID_ARGUMENT, "bp_host_create_from_fleet_file: options->struct_size is below its 1.0 size");
    Problems problems(path);
    FleetSource source = read_source(path, problems);
    Expected<nlohmann::json> document = parse_fleet(std::move(source.text), problems);
    if (!document) return document.take_error();

    // The fleet's directories come first in the search order, and its
    // devices' options reach their plugins before enumeration.
    std::vector<fs::path> directories = plugin_directories(*document, source.base, problems);
    nlohmann::json plugin_options = nlohmann::json::object();
    bp_host_options options{};
    if (given) std::memcpy(&options, given, std::min(given->struct_size, sizeof options));
    if (options.plugin_options_json && *options.plugin_options_json) {
      plugin_options = nlohmann::json::parse(options.plugin_options_json, nullptr, false);
      if (!plugin_options.is_object()) plugin_options = nlohmann::json::object();
    }
    const nlohmann::json &devices = document->value("devices", nlohmann::json::array());
    for (size_t i = 0; i < devices.size(); ++i) {
      if (!devices[i].contains("options") || !devices[i].contains("kind")) continue;
      const std::string kind = devices[i]["kind"].get<std::string>();
      if (plugin_options.contains(kind) && plugin_options[kind] != devices[i]["options"]) {
        problems.add(BP_CONFIG, "/devices/" + std::to_string(i) + "/options", devices[i]["options"],
                     "options for device kind '" + kind + "' differ from options given for it elsewhere (" +
                         plugin_options[kind].dump() + ")",
                     "give one set of options per device kind");
        continue;
      }
      plugin_options[kind] = devices[i]["options"];
    }
    if (!problems.empty()) return std::move(problems).to_error();
    std::vector<std::string> directory_texts;
    for (const fs::path &directory : directories) directory_texts.push_back(directory.string());
    for (size_t i = 0; i < options.plugin_dir_count; ++i) directory_texts.emplace_back(options.plugin_dirs[i]);
    std::vector<const char *> directory_pointers;
    for (const std::string &directory : directory_texts) directory_pointers.push_back(directory.c_str());
    const std::string options_text = plugin_options.dump();
    options.struct_size = sizeof options;
    options.plugin_dirs = directory_pointers.data();
    options.plugin_dir_count = directory_pointers.size();
    options.plugin_options_json = options_text.c_str();
    Expected<bp_host *> created = create_host(&options);
    if (!created) return created.take_error();
    std::unique_ptr<bp_host> host(*created);
    if (Status status = load_into(*host, *document, source.base, problems, false); !status) return status;
    *out = host.release();
    return {};
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

size_t bp_host_workload_count(const bp_host *host) {
  if (!host) return 0;
  std::shared_lock lock(host->mutex);
  return host->workloads.size();
}

bp_error *bp_host_workload(const bp_host *host, size_t index, bp_workload_info *out) {
  return guarded([&]() -> Status {
    if (!host || !out) return Error(BP_INVALID_ARGUMENT, "bp_host_workload: host and out must not be NULL");
    std::shared_lock lock(host->mutex);
    if (index >= host->workloads.size())
      return Error(BP_INVALID_ARGUMENT, "bp_host_workload: index " + std::to_string(index) + " is past the " +
                                            std::to_string(host->workloads.size()) + " workload entries");
    return write_out("bp_host_workload", out, host->workloads[index].info, BP_WORKLOAD_INFO_SIZE_V1_0);
  });
}

bp_error *bp_parse_sizes(const char *text, uint64_t *sizes, size_t capacity, size_t *count) {
  return guarded([&]() -> Status {
    if (!text || !count || (!sizes && capacity > 0))
      return Error(BP_INVALID_ARGUMENT, "bp_parse_sizes: text, count (and sizes when capacity > 0) must not be NULL");
    Expected<std::vector<uint64_t>> parsed = parse_sizes(text);
    if (!parsed) return parsed.take_error();
    *count = parsed->size();
    std::copy_n(parsed->begin(), std::min(capacity, parsed->size()), sizes);
    return {};
  });
}

}  // extern "C"
