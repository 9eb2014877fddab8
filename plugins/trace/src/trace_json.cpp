// The trace file's text (trace_json.hpp): what is not inlined.
#include "trace_json.hpp"

#include <algorithm>

namespace backplane::trace::json {
namespace {

// The length of the valid UTF-8 sequence at the start of `text`, or 0.
std::size_t utf8_sequence(std::string_view text) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  std::size_t length = 0;
  std::uint32_t point = 0;
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    point = lead & 0x1Fu;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    point = lead & 0x0Fu;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    point = lead & 0x07u;
  } else {
    return 0;
  }
  if (text.size() < length) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0u) != 0x80u) return 0;
    point = (point << 6) | (byte(i) & 0x3Fu);
  }
  // Overlong forms, surrogates and points past U+10FFFF are not UTF-8.
  if ((length == 3 && point < 0x800) || (length == 4 && (point < 0x10000 || point > 0x10FFFF))) return 0;
  if (point >= 0xD800 && point <= 0xDFFF) return 0;
  return length;
}

}  // namespace

void TextBuffer::grow(std::size_t more) {
  const std::size_t capacity = std::max({capacity_ * 2, size_ + more, std::size_t{4096}});
  auto data = std::make_unique_for_overwrite<char[]>(capacity);
  if (size_ > 0) std::memcpy(data.get(), data_.get(), size_);
  data_ = std::move(data);
  capacity_ = capacity;
}

void TextBuffer::put_microseconds(std::int64_t ns) {
  std::uint64_t magnitude = static_cast<std::uint64_t>(ns);
  if (ns < 0) {
    put('-');
    magnitude = 0 - magnitude;  // in unsigned arithmetic: -INT64_MIN does not fit
  }
  put_uint(magnitude / 1000);
  const unsigned fraction = static_cast<unsigned>(magnitude % 1000);
  room(4);
  data_[size_++] = '.';
  data_[size_++] = static_cast<char>('0' + fraction / 100);
  data_[size_++] = static_cast<char>('0' + fraction / 10 % 10);
  data_[size_++] = static_cast<char>('0' + fraction % 10);
}

void TextBuffer::put_hex(std::uint64_t value) {
  room(16);
  size_ = static_cast<std::size_t>(std::to_chars(data_.get() + size_, data_.get() + size_ + 16, value, 16).ptr -
                                   data_.get());
}

void TextBuffer::put_string(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  put('"');
  std::size_t i = 0;
  while (i < text.size()) {
    // The run that needs no escaping, copied at once.
    std::size_t plain = i;
    while (plain < text.size()) {
      const unsigned char c = static_cast<unsigned char>(text[plain]);
      if (c < 0x20 || c == '"' || c == '\\' || c >= 0x80) break;
      ++plain;
    }
    put(text.substr(i, plain - i));
    i = plain;
    if (i == text.size()) break;
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      put('\\');
      put(static_cast<char>(c));
      ++i;
    } else if (c < 0x20) {
      switch (c) {
        case '\n': put("\\n"); break;
        case '\t': put("\\t"); break;
        case '\r': put("\\r"); break;
        default:
          put("\\u00");
          put(kHex[c >> 4]);
          put(kHex[c & 0xF]);
      }
      ++i;
    } else if (const std::size_t length = utf8_sequence(text.substr(i)); length > 0) {
      put(text.substr(i, length));
      i += length;
    } else {
      put("\xEF\xBF\xBD");  // U+FFFD REPLACEMENT CHARACTER
      ++i;
    }
  }
  put('"');
}

std::string quoted(std::string_view text) {
  TextBuffer buffer;
  buffer.put_string(text);
  return std::string(buffer.view());
}

}  // namespace backplane::trace::json
