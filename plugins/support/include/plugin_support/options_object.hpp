// A plugin's options (bp_plugin_functions.configure's text): one JSON
// object of scalar values, read with nlohmann_json. Every error names the
// key and what was wrong, so a typo or a wrong type never silently means
// the default.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace backplane::plugin_support {

class OptionsObject {
 public:
  // `text` as one JSON object: nullopt with *error when it is not JSON (the
  // parser's message, with line and column), not an object, or names a
  // key twice.
  static std::optional<OptionsObject> parse(std::string_view text, std::string *error);

  // False with *error = `unknown key "k" (known keys: a, b)` for the first
  // key not among `known`.
  bool only_keys(std::initializer_list<const char *> known, std::string *error) const;

  bool has(const char *key) const { return find(key) != nullptr; }
  // When `key` is there, its string into `out`; false with *error when its
  // value is of another JSON type.
  bool read(const char *key, std::string &out, std::string *error) const;
  // When `key` is there, its string into `out`; false with *error when it
  // is no string or none of `choices`.
  bool read(const char *key, std::initializer_list<const char *> choices, std::string &out, std::string *error) const;
  // When `key` is there, its integer into `out`; false with *error when it
  // is no integer or lies outside min..max.
  bool read(const char *key, std::uint64_t min, std::uint64_t max, std::uint64_t &out, std::string *error) const;
  // When `key` is there, its boolean into `out`; false with *error when it
  // is of another JSON type.
  bool read(const char *key, bool &out, std::string *error) const;
  // When `key` is there, its array of strings into `out`; false with *error
  // when it is no array, holds anything but strings, or more than
  // `max_items` of them.
  bool read(const char *key, std::size_t max_items, std::vector<std::string> &out, std::string *error) const;

 private:
  struct Entry {
    std::string key;
    std::string shown_key;   // as JSON text, quoted and escaped
    std::string type;        // "a string", "a number", "an object", ...
    std::string shown;       // the value as JSON text, for messages
    std::optional<std::string> text;       // a string value
    std::optional<std::uint64_t> integer;  // a non-negative integer value
    std::optional<bool> boolean;
    std::optional<std::vector<std::string>> strings;  // an array of strings only
    std::size_t items = 0;                            // an array's length
  };
  const Entry *find(const char *key) const;
  std::vector<Entry> entries_;
};

}  // namespace backplane::plugin_support
