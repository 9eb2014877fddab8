// Fleet files, stages 0 to 2: reading with a bound on size, parsing with a
// bound on depth (refusing NUL bytes and keys that appear twice), bounds on
// strings, lists and integers, and validation against configs/schema.json
// with valijson, whose messages become one readable line each.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_set>
#include <utility>

#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

#include "fleet_schema.hpp"
#include "fleet_schema.inc"  // kFleetSchema: configs/schema.json, embedded at build time
#include "host.hpp"          // is_plugin_file_name
#include "names.hpp"

namespace backplane {
namespace fs = std::filesystem;

namespace {

constexpr int max_fleet_depth = 32;  // the schema needs 5 levels
// Bounds on what the schema validator is given, whatever the schema says:
// its patterns run std::regex, which recurses once per character (a 1 MB
// name overflows the stack), and it visits every array item.
constexpr size_t max_fleet_string_bytes = 4096;  // a path, at most; names are 128
constexpr size_t max_fleet_array_items = 65536;  // the largest count the schema allows

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

const std::map<std::string, std::vector<std::string>> &known_keys() {
  static const std::map<std::string, std::vector<std::string>> keys = {
      {"", {"version", "plugin_dirs", "plugin_pins", "probe", "transport", "devices", "groups", "workload"}},
      {"transport", {"plugin", "timeout_s", "options"}},
      {"devices", {"name", "kind", "index", "count", "options", "over", "layers"}},
      {"groups", {"name", "devices", "policy", "on_unsupported", "local_first", "span", "guard"}},
      {"workload", {"group", "collective", "dtype", "op", "root", "sizes", "iterations", "warmup", "in_place", "check"}}};
  return keys;
}

std::vector<std::string> names_of(const char *(*name)(uint32_t), uint32_t count) {
  std::vector<std::string> names;
  for (uint32_t i = 0; i < count; ++i) names.emplace_back(name(i));
  return names;
}

const char *json_type(const nlohmann::json &value) { return value.type_name(); }

const nlohmann::json &schema_document() {
  static const nlohmann::json document = nlohmann::json::parse(kFleetSchema);
  return document;
}

// Whether `alternative` (of a oneOf) is for values of `value`'s JSON type.
bool alternative_of_type(const nlohmann::json &alternative, const nlohmann::json &value) {
  if (alternative.contains("const")) return alternative["const"].type() == value.type();
  if (!alternative.contains("type")) return false;
  const std::string type = alternative["type"].get<std::string>();
  if (value.is_number()) return type == "integer" || type == "number";
  return type == json_type(value);
}

// The schema of the value at `pointer` of `document`, followed through
// "properties", "items", "$ref", and of a oneOf the alternative of the
// value's type; NULL where none is.
const nlohmann::json *schema_at(const nlohmann::json &document, const std::string &pointer) {
  const nlohmann::json &root = schema_document();
  auto resolve = [&](const nlohmann::json *node, const std::string &so_far) {
    // A few hops at most: the schema's refs are "#/definitions/NAME", and
    // its oneOfs have no oneOf inside.
    for (int hops = 0; node && hops < 8; ++hops) {
      if (node->contains("$ref")) {
        const std::string ref = (*node)["$ref"].get<std::string>();
        constexpr std::string_view prefix = "#/definitions/";
        node = ref.rfind(prefix, 0) == 0 ? &root["definitions"][ref.substr(prefix.size())] : nullptr;
      } else if (node->contains("oneOf")) {
        const nlohmann::json value = value_at(document, so_far);
        const nlohmann::json &alternatives = (*node)["oneOf"];
        auto chosen = std::find_if(alternatives.begin(), alternatives.end(),
                                   [&](const nlohmann::json &alternative) { return alternative_of_type(alternative, value); });
        node = chosen == alternatives.end() ? nullptr : &*chosen;
      } else {
        break;
      }
    }
    return node;
  };
  const nlohmann::json *node = resolve(&root, "");
  size_t at = 0;
  while (node && at < pointer.size()) {
    const size_t next = std::min(pointer.find('/', at + 1), pointer.size());
    const std::string token = pointer.substr(at + 1, next - at - 1);
    at = next;
    if (node->contains("properties") && (*node)["properties"].contains(token)) {
      node = &(*node)["properties"][token];
    } else if (node->contains("items") && (*node)["items"].is_object()) {
      node = &(*node)["items"];
    } else if (node->contains("additionalProperties") && (*node)["additionalProperties"].is_object()) {
      node = &(*node)["additionalProperties"];  // plugin_pins
    } else {
      return nullptr;
    }
    node = resolve(node, pointer.substr(0, at));
  }
  return node;
}

// What each value that may take one of several forms (a oneOf) may be.
std::string forms_at(const std::string &pointer) {
  const std::string field = pointer.substr(pointer.rfind('/') + 1);
  const std::string parent = pointer.substr(0, pointer.rfind('/'));
  if (field == "sizes") return "a size expression such as \"8B..64MiB x4\", or a list of sizes";
  if (parent.size() >= 6 && parent.ends_with("/sizes")) return "a byte count (an integer of at least 0), or a size such as \"4KiB\"";
  if (field == "in_place") return "true, false or \"both\"";
  return "one of the forms configs/schema.json allows here";
}

// The bound a schema gives at `pointer`, as written there (valijson prints
// them as doubles).
std::optional<nlohmann::json> schema_bound(const nlohmann::json &document, const std::string &pointer,
                                          const char *which) {
  const nlohmann::json *schema = schema_at(document, pointer);
  if (!schema || !schema->contains(which)) return std::nullopt;
  return (*schema)[which];
}

// The number of a valijson message ("... no more than 1024 elements.").
std::string number_in(const std::string &description) {
  const size_t digit = description.find_first_of("0123456789");
  if (digit == std::string::npos) return "?";
  return description.substr(digit, description.find_first_not_of("0123456789", digit) - digit);
}

// Turns valijson's messages into ones a user can act on.
void add_schema_problem(Problems &problems, const nlohmann::json &document, std::string pointer,
                        const std::string &description) {
  if (problems.full()) return;
  static constexpr std::string_view unknown_key = "constraints: '";
  static constexpr std::string_view missing_key = "Missing required property '";
  auto starts_with = [&](std::string_view prefix) { return description.rfind(prefix, 0) == 0; };
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
  } else if (starts_with(missing_key)) {
    const std::string key = description.substr(missing_key.size(), description.find('\'', missing_key.size()) - missing_key.size());
    reason = "the key '" + key + "' is missing; it is required";
  } else if (description.find("'const' constraint") != std::string::npos && pointer == "/version") {
    reason = "unsupported version " + value.dump() + "; this host reads version 1";
  } else if (description.find("enum values") != std::string::npos) {
    const std::string field = pointer.substr(pointer.rfind('/') + 1);
    std::vector<std::string> allowed;
    if (field == "collective") allowed = names_of(collective_name, BP_COLLECTIVE_COUNT);
    if (field == "dtype") allowed = names_of(dtype_name, BP_DTYPE_COUNT);
    if (field == "op") allowed = names_of(reduce_op_name, BP_REDUCE_OP_COUNT);
    if (field == "policy") allowed = {"stage", "reject"};
    if (field == "on_unsupported") allowed = {"error", "stage"};
    if (field == "local_first") allowed = {"auto", "always", "never"};
    if (field == "span") allowed = {"process", "world"};
    std::string list;
    for (const std::string &name : allowed) list += (list.empty() ? "" : ", ") + name;
    reason = "unknown " + field + " " + value.dump() + (list.empty() ? "" : " (known: " + list + ")");
    if (value.is_string()) hint = did_you_mean(value.get<std::string>(), allowed);
  } else if (description.find("'const' constraint") != std::string::npos) {
    reason = value.dump() + " is not " + forms_at(pointer);
  } else if (description.find("'type' constraint") != std::string::npos) {
    reason = "has the wrong type (" + std::string(json_type(value)) + ")";
  } else if (starts_with("Expected number greater than or equal to") ||
             starts_with("Expected number less than or equal to")) {
    // The number as written (a huge integer never gets here: check_limits),
    // against the bounds as the schema writes them.
    const std::optional<nlohmann::json> minimum = schema_bound(document, pointer, "minimum");
    const std::optional<nlohmann::json> maximum = schema_bound(document, pointer, "maximum");
    const bool below = starts_with("Expected number greater");
    const std::optional<nlohmann::json> &bound = below ? minimum : maximum;
    if (minimum && maximum) {
      reason = value.dump() + " is outside the range " + minimum->dump() + ".." + maximum->dump();
    } else {
      // Else valijson's bound, which it prints as a double ("1.000000").
      const std::string bound_text = bound ? bound->dump() : number_in(description);
      reason = value.dump() + (below ? " is below the minimum " : " is above the maximum ") + bound_text;
    }
  } else if (starts_with("Array should contain no fewer than") && value.is_array()) {
    reason = "must not be empty";
  } else if (starts_with("String should be no fewer than")) {
    reason = "must not be empty";
  } else if (starts_with("Array should contain no more than") && value.is_array()) {
    reason = "a list of " + std::to_string(value.size()) + " entries, more than the " + number_in(description) +
             " a fleet takes";
    value = nullptr;  // the whole list would be a copy of most of the file
  } else if (starts_with("String should be no more than") && value.is_string()) {
    reason = "a string of " + std::to_string(value.get_ref<const std::string &>().size()) +
             " characters, longer than the " + number_in(description) + " allowed here";
  } else if (description.find("'pattern' constraint") != std::string::npos) {
    const std::optional<nlohmann::json> pattern = schema_bound(document, pointer, "pattern");
    reason = value.dump() + " does not match " + (pattern ? pattern->get<std::string>() : "the pattern");
    const std::string field = pointer.substr(pointer.rfind('/') + 1);
    if (field == "name")
      hint = "a name is letters, digits, '_', '.' and '-', starting with a letter or '_'";
    else if (field == "over")
      hint = "name a device of the fleet, or one as kind:index, e.g. cpu:0";
    else if (field == "kind")
      hint = "a device kind is lower-case letters, digits and '_'";
  } else if (starts_with("Failed to validate against exactly one child schema")) {
    reason = value.dump() + " matches more than one of the forms allowed here";
  }
  problems.add(BP_CONFIG, pointer, value, reason, hint);
}

const valijson::Schema &fleet_schema() {
  // Parsed once per process (thread-safe static initialisation).
  static const std::unique_ptr<valijson::Schema> schema = [] {
    auto parsed = std::make_unique<valijson::Schema>();
    valijson::SchemaParser parser;
    valijson::adapters::NlohmannJsonAdapter adapter(schema_document());
    parser.populateSchema(adapter, *parsed);
    return parsed;
  }();
  return *schema;
}

bool is_type_failure(const std::string &description) { return description.find("'type' constraint") != std::string::npos; }

void validate_schema(const nlohmann::json &document, Problems &problems) {
  valijson::Validator validator;
  valijson::ValidationResults results;
  valijson::adapters::NlohmannJsonAdapter target(document);
  if (validator.validate(fleet_schema(), target, &results)) return;
  // valijson also reports each failure at every level above it ("Failed to
  // validate item #2", "... property name 'devices'", "... child schema
  // #1"): keep the real ones, merging repeated messages of one place, and
  // note where a oneOf failed.
  static constexpr std::string_view wrappers[] = {
      "Failed to validate item #", "Failed to validate against schema associated with property name",
      "Failed to validate against additional properties schema", "Failed to validate against child schema #",
      "Failed to validate against any schemas allowed", "Failed to validate against any child schemas allowed"};
  static constexpr std::string_view one_of_failed = "Failed to validate against any child schemas allowed by oneOf";
  std::map<std::string, std::vector<std::string>> by_pointer;
  std::vector<std::string> order;
  std::set<std::string> one_of_pointers;
  valijson::ValidationResults::Error error;
  while (results.popError(error)) {
    const std::string pointer = pointer_of(error.context);
    if (error.description.rfind(one_of_failed, 0) == 0) one_of_pointers.insert(pointer);
    const bool is_wrapper = std::any_of(std::begin(wrappers), std::end(wrappers), [&](std::string_view prefix) {
      return error.description.compare(0, prefix.size(), prefix) == 0;
    });
    if (is_wrapper) continue;
    auto &list = by_pointer[pointer];
    if (list.empty()) order.push_back(pointer);
    if (std::find(list.begin(), list.end(), error.description) == list.end()) list.push_back(error.description);
  }
  auto failed_below = [&](const std::string &pointer) {
    const std::string prefix = pointer + "/";
    auto below = by_pointer.lower_bound(prefix);
    return below != by_pointer.end() && below->first.rfind(prefix, 0) == 0;
  };
  for (const std::string &pointer : order) {
    std::vector<std::string> &descriptions = by_pointer[pointer];
    if (one_of_pointers.count(pointer)) {
      // Every alternative of the oneOf failed. Where one of them got past
      // the value's type, its own failures (here or below) are what the
      // user meant; the others only say "wrong type".
      if (failed_below(pointer)) continue;
      std::erase_if(descriptions, is_type_failure);
      if (descriptions.empty()) {
        const nlohmann::json value = value_at(document, pointer);
        problems.add(BP_CONFIG, pointer, value,
                     "has the wrong type (" + std::string(json_type(value)) + "): expected " + forms_at(pointer));
        continue;
      }
    } else if (descriptions.size() > 1) {
      // The type's failure says less than the others of the place.
      std::erase_if(descriptions, is_type_failure);
      if (descriptions.empty()) descriptions.push_back("Value type not permitted by 'type' constraint.");
    }
    for (const std::string &description : descriptions) add_schema_problem(problems, document, pointer, description);
  }
}

// The keys of "plugin_pins" are plugin file names: checked here, since
// valijson reports a failed propertyNames without naming the key.
void check_plugin_pin_names(const nlohmann::json &document, Problems &problems) {
  const auto pins = document.find("plugin_pins");
  if (pins == document.end() || !pins->is_object()) return;
  for (const auto &[name, value] : pins->items()) {
    if (is_plugin_file_name(name)) continue;
    problems.add(BP_CONFIG, "/plugin_pins/" + pointer_escape(name), value,
                 "'" + name + "' does not name a plugin file",
                 "a plugin file name is libbackplane_<name>.so, the name lower-case letters, digits and '_'");
  }
}

// The start of a long string, for the "value" of a problem about its length.
nlohmann::json shortened(const std::string &text) {
  constexpr size_t shown = 64;
  return text.size() <= shown ? nlohmann::json(text) : nlohmann::json(text.substr(0, shown) + "...");
}

// Strings, arrays and integers past what a fleet can mean, anywhere in the
// document (at most max_fleet_depth levels deep, so the recursion is bounded).
// Integers above int64 are refused here, as written: the validator would
// read them as negative.
void check_limits(const nlohmann::json &value, const std::string &pointer, Problems &problems) {
  if (problems.full()) return;
  if (value.is_string()) {
    const std::string &text = value.get_ref<const std::string &>();
    if (text.size() > max_fleet_string_bytes)
      problems.add(BP_CONFIG, pointer, shortened(text),
                   "a string of " + std::to_string(text.size()) + " bytes, longer than the " +
                       std::to_string(max_fleet_string_bytes) + " a fleet takes");
  } else if (value.is_number_unsigned()) {
    if (value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      problems.add(BP_CONFIG, pointer, value,
                   value.dump() + " is above " + std::to_string(INT64_MAX) + ", the largest integer a fleet takes");
  } else if (value.is_array()) {
    if (value.size() > max_fleet_array_items) {
      problems.add(BP_CONFIG, pointer, nullptr,
                   "a list of " + std::to_string(value.size()) + " items, more than the " +
                       std::to_string(max_fleet_array_items) + " a fleet takes");
      return;
    }
    for (size_t i = 0; i < value.size(); ++i) check_limits(value[i], pointer + "/" + std::to_string(i), problems);
  } else if (value.is_object()) {
    for (const auto &[key, item] : value.items()) {
      const std::string at = pointer + "/" + pointer_escape(key);
      if (key.size() > max_fleet_string_bytes) {
        problems.add(BP_CONFIG, pointer, shortened(key),
                     "a key of " + std::to_string(key.size()) + " bytes, longer than the " +
                         std::to_string(max_fleet_string_bytes) + " a fleet takes");
        continue;
      }
      check_limits(item, at, problems);
    }
  }
}

// Line and column (from 1) of the byte at `at`.
std::pair<size_t, size_t> line_and_column(std::string_view text, size_t at) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < at && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

// A first pass over the text that builds nothing: refuses nesting past
// max_fleet_depth before any recursion could follow it, and reports a key
// that appears twice in one object, which the parser would resolve
// silently by keeping the last. (nlohmann's parser with a callback would do
// both in one pass, but it rescans an array at the end of each object in
// it: quadratic, 13 s for 200000 devices.)
class ParseWatcher final : public nlohmann::json::json_sax_t {
 public:
  ParseWatcher(std::string_view text, Problems &problems) : text_(text), problems_(problems) {}

  bool null() override { return element_done(); }
  bool boolean(bool) override { return element_done(); }
  bool number_integer(number_integer_t) override { return element_done(); }
  bool number_unsigned(number_unsigned_t) override { return element_done(); }
  bool number_float(number_float_t, const string_t &) override { return element_done(); }
  bool string(string_t &) override { return element_done(); }
  bool binary(binary_t &) override { return element_done(); }
  bool start_object(std::size_t) override { return enter(true); }
  bool start_array(std::size_t) override { return enter(false); }
  bool end_object() override { return leave(); }
  bool end_array() override { return leave(); }

  bool key(string_t &key) override {
    Frame &frame = frames_.back();
    frame.key = key;
    if (!frame.keys.insert(key).second) {
      problems_.add(BP_CONFIG, pointer(), key, "key '" + key + "' appears twice in one object",
                    "keep one of them: JSON readers differ in which one they keep");
    }
    return true;
  }

  bool parse_error(std::size_t byte, const std::string &, const nlohmann::json::exception &error) override {
    // Line and column of the byte where parsing stopped.
    const auto [line, column] = line_and_column(text_, byte == 0 ? 0 : byte - 1);
    std::string detail = error.what();
    if (size_t colon = detail.find(": ", detail.find("parse error")); colon != std::string::npos) detail = detail.substr(colon + 2);
    problems_.add(BP_CONFIG, "", nullptr,
                  "not valid JSON at line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + detail)
        .with("line", line)
        .with("column", column);
    return false;
  }

 private:
  struct Frame {
    bool object;
    std::string key;  // the object's current key
    size_t index;     // the array's current element
    std::unordered_set<std::string> keys;
  };

  bool enter(bool object) {
    if (frames_.size() > static_cast<size_t>(max_fleet_depth)) {
      problems_.add(BP_CONFIG, "", nullptr,
                    "nesting deeper than " + std::to_string(max_fleet_depth) + " levels; a fleet needs 5");
      return false;
    }
    frames_.push_back(Frame{object, {}, 0, {}});
    return true;
  }
  bool leave() {
    frames_.pop_back();
    return element_done();
  }
  bool element_done() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
    return true;
  }

  std::string pointer() const {
    std::string text;
    for (const Frame &frame : frames_) text += "/" + (frame.object ? pointer_escape(frame.key) : std::to_string(frame.index));
    return text;
  }

  std::string_view text_;
  Problems &problems_;
  std::vector<Frame> frames_;
};

// Parses with a bound on nesting; problems name line and column.
std::optional<nlohmann::json> parse_document(std::string_view text, Problems &problems) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    problems.add(BP_CONFIG, "", nullptr, "the fleet is empty", "a fleet is a JSON object such as {\"version\": 1}");
    return std::nullopt;
  }
  // The parser takes a NUL for the end of the text: what follows it would
  // be ignored without a word.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    const auto [line, column] = line_and_column(text, nul);
    problems.add(BP_CONFIG, "", nullptr,
                 "a NUL byte at line " + std::to_string(line) + ", column " + std::to_string(column) +
                     ": a fleet is JSON text, which has none",
                 "check that this is the right file, and that nothing appended bytes to it")
        .with("line", line)
        .with("column", column);
    return std::nullopt;
  }
  ParseWatcher watcher(text, problems);
  if (!nlohmann::json::sax_parse(text.begin(), text.end(), &watcher) || !problems.empty()) return std::nullopt;
  return nlohmann::json::parse(text.begin(), text.end());
}

}  // namespace

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
  check_limits(*document, "", problems);
  if (!problems.empty()) return std::move(problems).to_error();
  validate_schema(*document, problems);
  check_plugin_pin_names(*document, problems);
  if (!problems.empty()) return std::move(problems).to_error();
  return std::move(*document);
}

}  // namespace backplane
