// Fleet files, stages 0 to 2: reading with a bound on size, parsing with a
// bound on depth, and validation against configs/schema.json with valijson.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string_view>

#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

#include "fleet_schema.hpp"
#include "fleet_schema.inc"  // kFleetSchema: configs/schema.json, embedded at build time
#include "names.hpp"

namespace backplane {
namespace fs = std::filesystem;

namespace {

constexpr int max_fleet_depth = 32;  // the schema needs 5 levels

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
  validate_schema(*document, problems);
  if (!problems.empty()) return std::move(problems).to_error();
  return std::move(*document);
}

}  // namespace backplane
