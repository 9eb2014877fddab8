// The options of a `trace` layer (README.md, "Options"), read from the JSON
// object the host hands instance_create.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace backplane::trace {

inline constexpr std::uint64_t kDefaultRingEvents = 65536;
inline constexpr std::uint64_t kMinRingEvents = 16;
inline constexpr std::uint64_t kMaxRingEvents = std::uint64_t{1} << 24;
inline constexpr std::uint64_t kDefaultMaxBytes = std::uint64_t{256} << 20;
// Room for the file's opening, its closing and the record of what was
// dropped, with events to spare.
inline constexpr std::uint64_t kMinMaxBytes = 4096;
inline constexpr std::uint64_t kMaxMaxBytes = std::uint64_t{1} << 62;

struct TraceOptions {
  std::string file;                                // absolute and normalised: the key writers are shared by
  std::uint64_t ring_events = kDefaultRingEvents;  // rounded up to a power of two
  std::uint64_t max_bytes = kDefaultMaxBytes;
};

// The options in `options_json` (NULL or "" for none), defaults for what
// is absent: nullopt with *error, one line naming the option, for a value
// of the wrong JSON type or out of range (and for malformed JSON and
// unknown keys, which the host has refused already).
std::optional<TraceOptions> parse_trace_options(const char *options_json, std::string *error);

}  // namespace backplane::trace
