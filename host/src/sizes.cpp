// Size expressions of the fleet file: "4KiB", "8B..64MiB x4", "1K..4K +1K".
// Units are powers of 1024, as nccl-tests reads -b/-e.
#include "sizes.hpp"

#include <cctype>
#include <limits>

namespace backplane {
namespace {

constexpr size_t max_sizes = 4096;  // bounds the memory a range can ask for

struct Cursor {
  std::string_view text;
  size_t at = 0;
  void skip_spaces() {
    while (at < text.size() && std::isspace(static_cast<unsigned char>(text[at]))) ++at;
  }
  bool done() const { return at >= text.size(); }
  bool take(std::string_view token) {
    if (text.substr(at, token.size()) != token) return false;
    at += token.size();
    return true;
  }
};

Expected<uint64_t> parse_one(Cursor &cursor) {
  const size_t start = cursor.at;
  uint64_t value = 0;
  while (!cursor.done() && std::isdigit(static_cast<unsigned char>(cursor.text[cursor.at]))) {
    const uint64_t digit = static_cast<uint64_t>(cursor.text[cursor.at] - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10)
      return Error(BP_CONFIG, "size '" + std::string(cursor.text.substr(start)) + "' is too large");
    value = value * 10 + digit;
    ++cursor.at;
  }
  if (cursor.at == start) {
    return Error(BP_CONFIG, "expected a size such as 4KiB at '" + std::string(cursor.text.substr(start)) + "'");
  }
  const size_t unit_start = cursor.at;
  while (!cursor.done() && std::isalpha(static_cast<unsigned char>(cursor.text[cursor.at]))) ++cursor.at;
  const std::string_view unit = cursor.text.substr(unit_start, cursor.at - unit_start);
  static constexpr std::pair<std::string_view, unsigned> units[] = {
      {"", 0}, {"B", 0}, {"K", 10}, {"KiB", 10}, {"M", 20}, {"MiB", 20}, {"G", 30}, {"GiB", 30}};
  for (const auto &[name, shift] : units) {
    if (unit != name) continue;
    if (shift && value > (std::numeric_limits<uint64_t>::max() >> shift))
      return Error(BP_CONFIG, "size '" + std::string(cursor.text.substr(start, cursor.at - start)) + "' is too large");
    return value << shift;
  }
  return Error(BP_CONFIG, "unknown unit '" + std::string(unit) + "' in '" +
                              std::string(cursor.text.substr(start, cursor.at - start)) +
                              "' (units: B, K, KiB, M, MiB, G, GiB)");
}

}  // namespace

Expected<std::vector<uint64_t>> parse_sizes(std::string_view text) {
  Cursor cursor{text};
  cursor.skip_spaces();
  Expected<uint64_t> first = parse_one(cursor);
  if (!first) return first.take_error();
  cursor.skip_spaces();
  if (cursor.done()) return std::vector<uint64_t>{*first};
  if (!cursor.take("..")) {
    return Error(BP_CONFIG, "expected '..' or the end after the first size in '" + std::string(text) + "'");
  }
  cursor.skip_spaces();
  Expected<uint64_t> last = parse_one(cursor);
  if (!last) return last.take_error();
  if (*last < *first) {
    return Error(BP_CONFIG, "the range '" + std::string(text) + "' ends (" + std::to_string(*last) +
                                " B) below its start (" + std::to_string(*first) + " B)");
  }
  cursor.skip_spaces();
  uint64_t factor = 2, increment = 0;
  if (cursor.take("x")) {
    cursor.skip_spaces();
    Expected<uint64_t> parsed = parse_one(cursor);
    if (!parsed) return parsed.take_error();
    factor = *parsed;
    if (factor < 2) return Error(BP_CONFIG, "the factor in '" + std::string(text) + "' must be at least 2");
  } else if (cursor.take("+")) {
    cursor.skip_spaces();
    Expected<uint64_t> parsed = parse_one(cursor);
    if (!parsed) return parsed.take_error();
    increment = *parsed;
    if (increment == 0) return Error(BP_CONFIG, "the step in '" + std::string(text) + "' must be above 0");
  }
  cursor.skip_spaces();
  if (!cursor.done()) {
    return Error(BP_CONFIG, "unexpected '" + std::string(text.substr(cursor.at)) + "' in '" + std::string(text) +
                                "' (a range is FROM..TO xFACTOR or FROM..TO +STEP)");
  }
  if (*first == 0 && !increment) return Error(BP_CONFIG, "a range multiplied by a factor cannot start at 0");
  std::vector<uint64_t> sizes;
  for (uint64_t size = *first; size <= *last;) {
    if (sizes.size() == max_sizes) {
      return Error(BP_CONFIG, "the range '" + std::string(text) + "' has more than " + std::to_string(max_sizes) +
                                  " sizes");
    }
    sizes.push_back(size);
    const uint64_t next = increment ? size + increment : size * factor;
    if (next <= size || (!increment && next / factor != size)) break;  // overflow: the range is over
    size = next;
  }
  return sizes;
}

}  // namespace backplane
