// Fingerprint files: the text validate writes ("fingerprints") and reads
// back in a later run ("expect_fingerprints"). One call a line, after a
// header line naming the format and the columns:
//
//   # backplane validate fingerprints v1: group call rank collective dtype op count root ranks fingerprint
//   "g" 3 1 all_reduce f32 sum 1024 - 4 0x5f0e3c2d1a2b3c4d
//
// The group name is quoted (`\"`, `\\` and `\xHH` for control bytes); a
// field the collective has no use for is `-`. Lines of several devices
// sharing a file interleave in blocks: a reader keys every line by (group,
// call, rank) and never relies on the order.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "call_shape.hpp"

namespace backplane::validate {

inline constexpr const char *kFileHeader = "# backplane validate fingerprints v1:";

// One collective as recorded: what a line holds.
struct CallRecord {
  const std::string *group = nullptr;  // interned by the instance that recorded it, alive as long as it
  std::uint64_t call_serial = 0;
  std::uint32_t rank = 0;
  CallShape shape;
  std::uint64_t fingerprint = 0;
};

// The line of `record`, with its newline, appended to `out`.
void append_line(const CallRecord &record, std::string &out);

// A file being written, shared by every instance of one plugin state that
// names the same path; opened (truncated) by the first of them, closed
// with the last.
class FingerprintFile {
 public:
  // nullptr with *error ("cannot write "<path>": <reason>") when the file
  // cannot be opened for writing.
  static std::shared_ptr<FingerprintFile> open(const std::string &path, std::string *error);
  ~FingerprintFile();
  FingerprintFile(const FingerprintFile &) = delete;
  FingerprintFile &operator=(const FingerprintFile &) = delete;

  const std::string &path() const { return path_; }
  // Appends the lines of `records` (buffered by stdio); with `sync`, pushes
  // them to the file. False with *error when writing failed, now or before.
  bool write(std::span<const CallRecord> records, bool sync, std::string *error);

 private:
  FingerprintFile(std::string path, std::FILE *file) : path_(std::move(path)), file_(file) {}
  std::mutex mutex_;
  const std::string path_;
  std::FILE *file_;
  std::string failure_;  // the first write error, kept: later writes report it too
  std::string text_;     // the block being formatted, reused
};

// A fingerprints file as read back: the recorded calls by (group, call,
// rank). Immutable once parsed, so hooks look it up without a lock. Calls
// are kept per (group, rank) in an array indexed by call serial, since a
// run numbers them 1, 2, 3, ...: a lookup is a hash of the group's name
// over the few (group, rank) pairs, then one index, in the order the run
// makes its calls. (A hash table over every call measured 0.7 µs a lookup
// with 100 000 calls recorded a rank, most of it cache misses.)
class ExpectedCalls {
 public:
  struct Recorded {
    CallShape shape;
    std::uint64_t fingerprint = 0;
  };

  // nullptr with *error ("line 3: ...", or the header's absence) when the
  // text does not parse.
  static std::shared_ptr<const ExpectedCalls> parse(std::string_view text, std::string *error);

  // What the run recorded for the call, usually one entry; several when
  // the key repeats (two unnamed groups, or two groups of one name, one
  // after the other), in the file's order. Empty when none. Never allocates.
  std::span<const Recorded> find(std::string_view group, std::uint64_t call_serial, std::uint32_t rank) const;
  // The highest call serial recorded for `group` at `rank`; 0 when none.
  std::uint64_t last_call(std::string_view group, std::uint32_t rank) const;
  std::size_t size() const { return records_.size(); }

 private:
  struct StreamKey {
    std::uint64_t group_hash;
    std::uint32_t rank;
    bool operator==(const StreamKey &) const = default;
  };
  struct StreamKeyHash {
    std::size_t operator()(const StreamKey &key) const noexcept;
  };
  // The calls of one group at one rank.
  struct Stream {
    std::string group;
    std::uint32_t rank = 0;
    // By call serial - 1: where its records start in records_, and how many.
    std::vector<std::pair<std::uint32_t, std::uint32_t>> by_serial;
  };
  const Stream *stream(std::string_view group, std::uint32_t rank) const;

  std::unordered_map<StreamKey, Stream, StreamKeyHash> streams_;
  std::vector<Recorded> records_;
};

}  // namespace backplane::validate
