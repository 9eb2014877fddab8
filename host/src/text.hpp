// Text that leaves the host: backplane.h promises every string it hands out
// is valid UTF-8 and one line, whatever a plugin, a file name or a fleet
// put into it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace backplane {

// `text` as valid UTF-8 on one line: each byte that does not start a
// well-formed sequence (overlong, surrogate, past U+10FFFF, cut short)
// becomes U+FFFD, line breaks and tabs become a space and other control
// characters U+FFFD. Text that is already so comes back unchanged.
std::string one_line_utf8(std::string_view text);
bool is_one_line_utf8(std::string_view text);

// The same for every string (and object key) inside a JSON value.
void make_one_line_utf8(nlohmann::json &value);

// A NUL-terminated string a plugin handed over, read no further than
// `max_bytes`: nullopt-like empty result with `too_long` set when no NUL
// comes within the bound (the host then refuses the plugin, naming it).
struct BoundedString {
  std::string text;
  bool too_long = false;
};
BoundedString read_bounded_string(const char *text, size_t max_bytes);

}  // namespace backplane
