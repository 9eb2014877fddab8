// OptionsObject on nlohmann_json (options_object.hpp).
#include "plugin_support/options_object.hpp"

#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

namespace backplane::plugin_support {
namespace {

using Json = nlohmann::json;

// JSON text of `value`, invalid UTF-8 replaced rather than thrown on, and
// cut to a length that fits in a message.
std::string shown(const Json &value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  constexpr std::size_t kLongest = 64;
  if (text.size() > kLongest) text = text.substr(0, kLongest) + "...";
  return text;
}

std::string type_with_article(const Json &value) {
  switch (value.type()) {
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::null: return "null";
    default: return "a number";
  }
}

// nlohmann's what() without its "[json.exception.parse_error.101] " tag.
std::string without_tag(const char *what) {
  const char *end = std::strstr(what, "] ");
  return end != nullptr && what[0] == '[' ? std::string(end + 2) : std::string(what);
}

}  // namespace

std::optional<OptionsObject> OptionsObject::parse(std::string_view text, std::string *error) {
  // Keys of the top-level object (depth 1), to refuse one named twice:
  // nlohmann would keep the last silently.
  std::set<std::string> keys;
  std::string repeated;
  const Json::parser_callback_t on_event = [&](int depth, Json::parse_event_t event, Json &parsed) {
    if (event == Json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      const std::string &key = parsed.get_ref<const std::string &>();
      if (!keys.insert(key).second && repeated.empty()) repeated = key;
    }
    return true;
  };
  Json document;
  try {
    document = Json::parse(text.begin(), text.end(), on_event);
  } catch (const Json::parse_error &e) {
    *error = without_tag(e.what());
    return std::nullopt;
  }
  if (!document.is_object()) {
    *error = "expected a JSON object, got " + type_with_article(document);
    return std::nullopt;
  }
  if (!repeated.empty()) {
    *error = "key " + shown(Json(repeated)) + " appears twice";
    return std::nullopt;
  }
  OptionsObject options;
  for (const auto &[key, value] : document.items()) {
    Entry entry;
    entry.key = key;
    entry.shown_key = shown(Json(key));
    entry.type = type_with_article(value);
    entry.shown = shown(value);
    if (value.is_string()) entry.text = value.get<std::string>();
    if (value.is_number_unsigned()) entry.integer = value.get<std::uint64_t>();
    if (value.is_boolean()) entry.boolean = value.get<bool>();
    if (value.is_array()) {
      entry.items = value.size();
      std::vector<std::string> strings;
      for (const Json &item : value) {
        if (!item.is_string()) break;
        strings.push_back(item.get<std::string>());
      }
      if (strings.size() == value.size()) entry.strings = std::move(strings);
    }
    options.entries_.push_back(std::move(entry));
  }
  return options;
}

bool OptionsObject::only_keys(std::initializer_list<const char *> known, std::string *error) const {
  for (const Entry &entry : entries_) {
    bool listed = false;
    for (const char *name : known) listed = listed || entry.key == name;
    if (listed) continue;
    std::string names;
    for (const char *name : known) names += (names.empty() ? "" : ", ") + std::string(name);
    *error = "unknown key " + entry.shown_key + " (known keys: " + names + ")";
    return false;
  }
  return true;
}

const OptionsObject::Entry *OptionsObject::find(const char *key) const {
  for (const Entry &entry : entries_)
    if (entry.key == key) return &entry;
  return nullptr;
}

bool OptionsObject::read(const char *key, std::string &out, std::string *error) const {
  const Entry *entry = find(key);
  if (entry == nullptr) return true;
  if (!entry->text) {
    *error = entry->shown_key + " must be a string, got " + entry->type;
    return false;
  }
  out = *entry->text;
  return true;
}

bool OptionsObject::read(const char *key, std::initializer_list<const char *> choices, std::string &out,
                         std::string *error) const {
  std::string value = out;
  if (!read(key, value, error)) return false;
  for (const char *choice : choices) {
    if (value != choice) continue;
    out = value;
    return true;
  }
  std::string listed;
  for (const char *choice : choices) listed += (listed.empty() ? "" : ", ") + shown(Json(choice));
  *error = find(key)->shown_key + " is " + find(key)->shown + ", not one of " + listed;
  return false;
}

bool OptionsObject::read(const char *key, std::uint64_t min, std::uint64_t max, std::uint64_t &out,
                         std::string *error) const {
  const Entry *entry = find(key);
  if (entry == nullptr) return true;
  const bool a_number = entry->type == "a number";
  if (!entry->integer && !(a_number && entry->shown.find_first_of(".eE") == std::string::npos)) {
    *error = entry->shown_key + " must be an integer, got " + (a_number ? entry->shown : entry->type);
    return false;
  }
  if (!entry->integer || *entry->integer < min || *entry->integer > max) {
    *error = entry->shown_key + " is " + entry->shown + ", outside " + std::to_string(min) + ".." +
             std::to_string(max);
    return false;
  }
  out = *entry->integer;
  return true;
}

bool OptionsObject::read(const char *key, bool &out, std::string *error) const {
  const Entry *entry = find(key);
  if (entry == nullptr) return true;
  if (!entry->boolean) {
    *error = entry->shown_key + " must be true or false, got " + entry->type;
    return false;
  }
  out = *entry->boolean;
  return true;
}

bool OptionsObject::read(const char *key, std::size_t max_items, std::vector<std::string> &out,
                         std::string *error) const {
  const Entry *entry = find(key);
  if (entry == nullptr) return true;
  if (!entry->strings) {
    *error = entry->shown_key + " must be an array of strings, got " +
             (entry->type == "an array" ? "an array holding " + entry->shown : entry->type);
    return false;
  }
  if (entry->items > max_items) {
    *error = entry->shown_key + " lists " + std::to_string(entry->items) + " items, more than " +
             std::to_string(max_items);
    return false;
  }
  out = *entry->strings;
  return true;
}

}  // namespace backplane::plugin_support
