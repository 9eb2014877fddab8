#include "text.hpp"

#include <cstring>
#include <utility>

namespace backplane {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed UTF-8 sequence starting at text[at], 0 if none
// (the table of well-formed byte sequences in the Unicode standard, 3.9).
size_t sequence_length(std::string_view text, size_t at) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) return 1;
  size_t length;
  unsigned char low = 0x80, high = 0xBF;  // the second byte's range
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // no overlong forms
    if (lead == 0xED) high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;   // no overlong forms
    if (lead == 0xF4) high = 0x8F;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (text.size() - at < length) return 0;
  if (byte(at + 1) < low || byte(at + 1) > high) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (byte(at + i) < 0x80 || byte(at + i) > 0xBF) return 0;
  }
  return length;
}

bool is_control(unsigned char c) { return c < 0x20 || c == 0x7F; }

}  // namespace

bool is_one_line_utf8(std::string_view text) {
  for (size_t at = 0; at < text.size();) {
    const size_t length = sequence_length(text, at);
    if (length == 0 || (length == 1 && is_control(static_cast<unsigned char>(text[at])))) return false;
    at += length;
  }
  return true;
}

std::string one_line_utf8(std::string_view text) {
  if (is_one_line_utf8(text)) return std::string(text);
  std::string clean;
  clean.reserve(text.size() + 8);
  for (size_t at = 0; at < text.size();) {
    const size_t length = sequence_length(text, at);
    if (length == 0) {
      clean += kReplacement;
      ++at;
      continue;
    }
    const auto c = static_cast<unsigned char>(text[at]);
    if (length == 1 && is_control(c)) {
      clean += (c == '\n' || c == '\r' || c == '\t') ? std::string_view(" ") : kReplacement;
    } else {
      clean.append(text.substr(at, length));
    }
    at += length;
  }
  return clean;
}

void make_one_line_utf8(nlohmann::json &value) {
  if (value.is_string()) {
    auto &text = value.get_ref<std::string &>();
    if (!is_one_line_utf8(text)) text = one_line_utf8(text);
  } else if (value.is_array()) {
    for (auto &element : value) make_one_line_utf8(element);
  } else if (value.is_object()) {
    bool keys_clean = true;
    for (auto &[key, element] : value.items()) {
      make_one_line_utf8(element);
      keys_clean = keys_clean && is_one_line_utf8(key);
    }
    if (!keys_clean) {
      nlohmann::json clean = nlohmann::json::object();
      for (auto &[key, element] : value.items()) clean[one_line_utf8(key)] = std::move(element);
      value = std::move(clean);
    }
  }
}

BoundedString read_bounded_string(const char *text, size_t max_bytes) {
  if (text == nullptr) return {};
  const size_t length = ::strnlen(text, max_bytes + 1);
  if (length > max_bytes) return {std::string(), true};
  return {one_line_utf8(std::string_view(text, length)), false};
}

}  // namespace backplane
