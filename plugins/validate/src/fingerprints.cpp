// Writing and reading fingerprint files (fingerprints.hpp).
#include "fingerprints.hpp"

#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cstring>
#include <functional>

namespace backplane::validate {
namespace {

constexpr const char *kColumns = " group call rank collective dtype op count root ranks fingerprint\n";

void append_quoted(std::string_view text, std::string &out) {
  out += '"';
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20 || byte == 0x7f) {
      char escaped[5];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      out += escaped;
    } else {
      out += c;
    }
  }
  out += '"';
}

void append_number(std::uint64_t value, std::string &out) {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;
  out.append(digits, end);
}

void append_name_or_none(const char *name, std::uint32_t value, std::string &out) {
  if (value == kNone) {
    out += '-';
  } else if (name != nullptr) {
    out += name;
  } else {
    append_number(value, out);  // a value the host let through that we have no name for
  }
}

std::size_t hash_of(std::string_view group) noexcept { return std::hash<std::string_view>{}(group); }

// Reads the line's fields one at a time; every failure names what was
// expected, for the "line N: ..." of the error.
class LineReader {
 public:
  explicit LineReader(std::string_view line) : rest_(line) {}

  bool quoted(std::string &out, std::string *error) {
    skip_spaces();
    if (rest_.empty() || rest_.front() != '"') return fail("expected the group name in double quotes", error);
    rest_.remove_prefix(1);
    while (!rest_.empty() && rest_.front() != '"') {
      char c = rest_.front();
      rest_.remove_prefix(1);
      if (c == '\\') {
        if (rest_.empty()) break;
        c = rest_.front();
        rest_.remove_prefix(1);
        if (c == 'x') {
          unsigned value = 0;
          if (rest_.size() < 2 || std::from_chars(rest_.data(), rest_.data() + 2, value, 16).ptr != rest_.data() + 2)
            return fail("a \\x escape in the group name needs two hex digits", error);
          rest_.remove_prefix(2);
          c = static_cast<char>(value);
        } else if (c != '"' && c != '\\') {
          return fail("unknown escape in the group name (\\\", \\\\ and \\xHH are known)", error);
        }
      }
      out += c;
    }
    if (rest_.empty()) return fail("the group name's closing quote is missing", error);
    rest_.remove_prefix(1);
    return true;
  }

  std::string_view word() {
    skip_spaces();
    const std::size_t end = std::min(rest_.find(' '), rest_.size());
    const std::string_view word = rest_.substr(0, end);
    rest_.remove_prefix(end);
    return word;
  }

  bool number(const char *what, std::uint64_t &out, std::string *error) {
    const std::string_view text = word();
    const auto [end, status] = std::from_chars(text.data(), text.data() + text.size(), out);
    if (text.empty() || status != std::errc() || end != text.data() + text.size())
      return fail(std::string("expected the ") + what + " as a decimal number, got \"" + std::string(text) + "\"",
                  error);
    return true;
  }

  // A name of `name_of`'s, or "-" for kNone when `none_allowed`.
  bool named(const char *what, std::uint32_t (*value_of)(std::string_view), bool none_allowed, std::uint32_t &out,
             std::string *error) {
    const std::string_view text = word();
    if (none_allowed && text == "-") {
      out = kNone;
      return true;
    }
    out = value_of(text);
    if (out == kNone) return fail(std::string("unknown ") + what + " \"" + std::string(text) + "\"", error);
    return true;
  }

  bool at_end(std::string *error) {
    skip_spaces();
    if (rest_.empty()) return true;
    return fail("unexpected text after the fingerprint: \"" + std::string(rest_) + "\"", error);
  }

 private:
  void skip_spaces() {
    while (!rest_.empty() && rest_.front() == ' ') rest_.remove_prefix(1);
  }
  static bool fail(const std::string &reason, std::string *error) {
    *error = reason;
    return false;
  }
  std::string_view rest_;
};

// One line into `record`; false with *error.
bool parse_line(std::string_view line, std::string &group, ExpectedCalls::Recorded &record,
                std::uint64_t &call_serial, std::uint32_t &rank, std::string *error) {
  LineReader reader(line);
  std::uint64_t number = 0;
  CallShape &shape = record.shape;
  if (!reader.quoted(group, error) || !reader.number("call serial", call_serial, error) ||
      !reader.number("rank", number, error))
    return false;
  if (number >= kNone) {
    *error = "rank " + std::to_string(number) + " is out of range";
    return false;
  }
  rank = static_cast<std::uint32_t>(number);
  if (!reader.named("collective", collective_from_name, false, shape.collective, error) ||
      !reader.named("element type", dtype_from_name, shape.collective == BP_BARRIER, shape.dtype, error) ||
      !reader.named("reduce op", reduce_op_from_name, true, shape.op, error) ||
      !reader.number("count", shape.count, error))
    return false;
  const std::string_view root = reader.word();
  if (root == "-") {
    shape.root = kNone;
  } else {
    const auto [end, status] = std::from_chars(root.data(), root.data() + root.size(), shape.root);
    if (root.empty() || status != std::errc() || end != root.data() + root.size()) {
      *error = "expected the root as a decimal number or -, got \"" + std::string(root) + "\"";
      return false;
    }
  }
  if (!reader.number("rank count", shape.rank_count, error)) return false;
  const std::string_view hex = reader.word();
  if (hex.size() != 18 || hex.substr(0, 2) != "0x" ||
      std::from_chars(hex.data() + 2, hex.data() + hex.size(), record.fingerprint, 16).ptr !=
          hex.data() + hex.size()) {
    *error = "expected the fingerprint as 0x and 16 hex digits, got \"" + std::string(hex) + "\"";
    return false;
  }
  if (!reader.at_end(error)) return false;
  // The fields must say what the rest of the line says: a shape that no
  // call has (an op where nothing reduces) or a fingerprint that is not the
  // fields' means a file edited by hand or written by another version.
  if ((shape.op != kNone) != collective_reduces(shape.collective) ||
      (shape.root != kNone) != collective_has_root(shape.collective)) {
    *error = std::string(collective_name(shape.collective)) + " " +
             (collective_reduces(shape.collective) ? "needs a reduce op" : "takes no reduce op (-)") + " and " +
             (collective_has_root(shape.collective) ? "a root" : "no root (-)");
    return false;
  }
  const std::uint64_t expected = fingerprint(shape, group);
  if (expected != record.fingerprint) {
    char text[128];
    std::snprintf(text, sizeof text,
                  "the fingerprint 0x%016" PRIx64 " is not that of the line's fields (0x%016" PRIx64 ")",
                  record.fingerprint, expected);
    *error = text;
    return false;
  }
  return true;
}

}  // namespace

void append_line(const CallRecord &record, std::string &out) {
  const CallShape &shape = record.shape;
  append_quoted(record.group != nullptr ? *record.group : std::string_view(), out);
  out += ' ';
  append_number(record.call_serial, out);
  out += ' ';
  append_number(record.rank, out);
  out += ' ';
  append_name_or_none(collective_name(shape.collective), shape.collective, out);
  out += ' ';
  append_name_or_none(dtype_name(shape.dtype), shape.dtype, out);
  out += ' ';
  append_name_or_none(reduce_op_name(shape.op), shape.op, out);
  out += ' ';
  append_number(shape.count, out);
  out += ' ';
  if (shape.root == kNone) {
    out += '-';
  } else {
    append_number(shape.root, out);
  }
  out += ' ';
  append_number(shape.rank_count, out);
  char hex[] = " 0x0000000000000000\n";
  for (int digit = 0; digit < 16; ++digit)
    hex[3 + digit] = "0123456789abcdef"[(record.fingerprint >> (60 - 4 * digit)) & 0xF];
  out.append(hex, sizeof hex - 1);
}

std::shared_ptr<FingerprintFile> FingerprintFile::open(const std::string &path, std::string *error) {
  std::FILE *file = std::fopen(path.c_str(), "we");
  if (file == nullptr) {
    *error = "cannot write \"" + path + "\": " + std::strerror(errno);
    return nullptr;
  }
  std::shared_ptr<FingerprintFile> opened(new FingerprintFile(path, file));
  std::string header = std::string(kFileHeader) + kColumns;
  if (std::fputs(header.c_str(), file) < 0) {
    *error = "cannot write \"" + path + "\": " + std::strerror(errno);
    return nullptr;
  }
  return opened;
}

FingerprintFile::~FingerprintFile() {
  if (file_ != nullptr) std::fclose(file_);
}

bool FingerprintFile::write(std::span<const CallRecord> records, bool sync, std::string *error) {
  std::lock_guard lock(mutex_);
  if (failure_.empty()) {
    text_.clear();
    for (const CallRecord &record : records) append_line(record, text_);
    if (!text_.empty() && std::fwrite(text_.data(), 1, text_.size(), file_) != text_.size())
      failure_ = "writing \"" + path_ + "\" failed: " + std::strerror(errno);
    else if (sync && std::fflush(file_) != 0)
      failure_ = "writing \"" + path_ + "\" failed: " + std::strerror(errno);
  }
  if (failure_.empty()) return true;
  *error = failure_;
  return false;
}

std::size_t ExpectedCalls::StreamKeyHash::operator()(const StreamKey &key) const noexcept {
  const std::uint64_t hash = key.group_hash ^ (std::uint64_t{key.rank} * 0x9e3779b97f4a7c15ull);
  return static_cast<std::size_t>(hash ^ (hash >> 29));
}

std::shared_ptr<const ExpectedCalls> ExpectedCalls::parse(std::string_view text, std::string *error) {
  auto calls = std::make_shared<ExpectedCalls>();
  // Every line, then sorted by stream and serial (stably: repeated keys
  // keep the file's order) into the streams' arrays.
  struct Line {
    Stream *stream;
    std::uint64_t call_serial;
    std::size_t number;
    Recorded record;
  };
  std::vector<Line> lines;
  std::size_t line_number = 0;
  bool header_seen = false;
  std::string group;
  while (!text.empty()) {
    const std::size_t end = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!header_seen) {
      if (line.substr(0, std::strlen(kFileHeader)) != kFileHeader) {
        *error = "line 1 is not \"" + std::string(kFileHeader) + " ...\": not a fingerprints file of validate v1";
        return nullptr;
      }
      header_seen = true;
      continue;
    }
    if (line.empty() || line.front() == '#') continue;
    Recorded record;
    std::uint64_t call_serial = 0;
    std::uint32_t rank = 0;
    std::string reason;
    group.clear();
    if (!parse_line(line, group, record, call_serial, rank, &reason)) {
      *error = "line " + std::to_string(line_number) + ": " + reason;
      return nullptr;
    }
    if (call_serial == 0) {
      *error = "line " + std::to_string(line_number) + ": call serial 0 (a group's calls count from 1)";
      return nullptr;
    }
    auto [found, fresh] = calls->streams_.try_emplace(StreamKey{hash_of(group), rank});
    Stream &stream = found->second;
    if (fresh) {
      stream.group = group;
      stream.rank = rank;
    } else if (stream.group != group) {
      *error = "line " + std::to_string(line_number) + ": the group names \"" + stream.group + "\" and \"" + group +
               "\" hash alike; rename one";
      return nullptr;
    }
    lines.push_back(Line{&stream, call_serial, line_number, record});
  }
  if (!header_seen) {
    *error = "the file is empty: not a fingerprints file of validate v1";
    return nullptr;
  }
  std::stable_sort(lines.begin(), lines.end(), [](const Line &a, const Line &b) {
    return a.stream != b.stream ? a.stream < b.stream : a.call_serial < b.call_serial;
  });
  calls->records_.reserve(lines.size());
  for (std::size_t first = 0; first < lines.size();) {
    Stream &stream = *lines[first].stream;
    std::size_t last = first;  // the stream's lines are [first, last)
    while (last < lines.size() && lines[last].stream == &stream) ++last;
    // A run numbers its calls from 1 without gaps (a call an outer layer
    // refused leaves one); an array up to a serial far past the calls it
    // holds would be memory for nothing, and means an edited file.
    const Line &highest = lines[last - 1];
    if (highest.call_serial > 2 * (last - first) + 65536) {
      *error = "line " + std::to_string(highest.number) + ": call " + std::to_string(highest.call_serial) +
               " of group \"" + stream.group + "\" at rank " + std::to_string(stream.rank) +
               " lies far past the " + std::to_string(last - first) + " calls recorded there";
      return nullptr;
    }
    stream.by_serial.assign(static_cast<std::size_t>(highest.call_serial), {0, 0});
    for (std::size_t i = first; i < last; ++i) {
      auto &slot = stream.by_serial[static_cast<std::size_t>(lines[i].call_serial - 1)];
      if (slot.second == 0) slot.first = static_cast<std::uint32_t>(calls->records_.size());
      ++slot.second;
      calls->records_.push_back(lines[i].record);
    }
    first = last;
  }
  return calls;
}

const ExpectedCalls::Stream *ExpectedCalls::stream(std::string_view group, std::uint32_t rank) const {
  const auto found = streams_.find(StreamKey{hash_of(group), rank});
  if (found == streams_.end() || found->second.group != group) return nullptr;
  return &found->second;
}

std::span<const ExpectedCalls::Recorded> ExpectedCalls::find(std::string_view group, std::uint64_t call_serial,
                                                             std::uint32_t rank) const {
  const Stream *calls = stream(group, rank);
  if (calls == nullptr || call_serial == 0 || call_serial > calls->by_serial.size()) return {};
  const auto [first, count] = calls->by_serial[static_cast<std::size_t>(call_serial - 1)];
  return {records_.data() + first, count};
}

std::uint64_t ExpectedCalls::last_call(std::string_view group, std::uint32_t rank) const {
  const Stream *calls = stream(group, rank);
  return calls == nullptr ? 0 : calls->by_serial.size();
}

}  // namespace backplane::validate
