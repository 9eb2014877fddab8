// The text of Chrome trace-event JSON as the writer produces it: a growable
// buffer whose appends are inlined (a write-out formats a ring's worth of
// events at a time, and std::string's out-of-line appends cost more than the
// rest of it), strings escaped with invalid UTF-8 replaced so that every
// parser takes the file, integers, and steady-clock nanoseconds as the
// format's microseconds.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

namespace backplane::trace::json {

class TextBuffer {
 public:
  const char *data() const { return data_.get(); }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void clear() { size_ = 0; }
  // Drops what was appended after `size` (a record that does not fit).
  void truncate(std::size_t size) { size_ = size; }
  std::string_view view() const { return {data_.get(), size_}; }

  void put(std::string_view text) {
    room(text.size());
    std::memcpy(data_.get() + size_, text.data(), text.size());
    size_ += text.size();
  }
  void put(char c) {
    room(1);
    data_[size_++] = c;
  }
  void put_uint(std::uint64_t value) {
    room(20);
    size_ =
        static_cast<std::size_t>(std::to_chars(data_.get() + size_, data_.get() + size_ + 20, value).ptr - data_.get());
  }
  void put_int(std::int64_t value) {
    room(20);
    size_ =
        static_cast<std::size_t>(std::to_chars(data_.get() + size_, data_.get() + size_ + 20, value).ptr - data_.get());
  }
  // Nanoseconds as microseconds with three decimals ("1234.567"): exact,
  // and what "ts" and "dur" count in.
  void put_microseconds(std::int64_t ns);
  void put_hex(std::uint64_t value);
  // `text` as a JSON string, quotes included: ", \ and control characters
  // escaped, each byte of invalid UTF-8 written as U+FFFD.
  void put_string(std::string_view text);

 private:
  void room(std::size_t more) {
    if (capacity_ - size_ < more) grow(more);
  }
  void grow(std::size_t more);

  std::unique_ptr<char[]> data_;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

// `text` as a JSON string, for the fragments built once (device and group
// names) and for the tests of the escaping.
std::string quoted(std::string_view text);

}  // namespace backplane::trace::json
