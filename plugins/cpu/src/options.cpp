// configure(): the cpu kind's options, a small JSON object such as
// {"devices": 16, "threads": 2, "parallel_threshold_bytes": 262144}, parsed
// by hand (plugins link no JSON library).
//
// The grammar accepted is strict JSON for an object whose values are
// integers; every known key takes an integer, so a value of any other JSON
// type is reported as the wrong type rather than parsed. Keys not listed are
// refused, so a typo never silently falls back to a default.
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "plugin_state.hpp"

namespace backplane::cpu {
namespace {

// Keys left out take their defaults; 0 (threads) and nullopt (thresholds)
// stand for "the default of this machine", filled in by configure.
struct Options {
  std::uint32_t devices = kDefaultDeviceCount;
  std::uint32_t threads = 0;
  std::optional<std::size_t> parallel_threshold_bytes;
  std::optional<std::size_t> streaming_threshold_bytes;
};

constexpr const char *kKnownKeys = "devices, threads, parallel_threshold_bytes, streaming_threshold_bytes";

// Cursor over the options text; every error names what was expected and the
// byte offset where it was not found.
class OptionsParser {
 public:
  explicit OptionsParser(std::string_view text) : text_(text) {}

  // On failure returns nullopt with error() set.
  std::optional<Options> parse() {
    Options options;
    bool seen_devices = false;
    bool seen_threads = false;
    bool seen_parallel = false;
    bool seen_streaming = false;
    skip_space();
    if (!consume('{')) return error_at("expected a JSON object starting with '{'");
    skip_space();
    if (consume('}')) return finish(options);
    for (;;) {
      skip_space();
      std::string key;
      if (!parse_key(key)) return std::nullopt;
      skip_space();
      if (!consume(':')) return error_at("expected ':' after key \"" + shown(key) + "\"");
      skip_space();
      if (key == "devices") {
        if (seen_devices) return error_at("key \"devices\" appears twice");
        seen_devices = true;
        std::uint64_t value = 0;
        if (!parse_count("devices", 1, kMaxDeviceCount, value)) return std::nullopt;
        options.devices = static_cast<std::uint32_t>(value);
      } else if (key == "threads") {
        if (seen_threads) return error_at("key \"threads\" appears twice");
        seen_threads = true;
        std::uint64_t value = 0;
        if (!parse_count("threads", 1, kMaxThreads, value)) return std::nullopt;
        options.threads = static_cast<std::uint32_t>(value);
      } else if (key == "parallel_threshold_bytes" || key == "streaming_threshold_bytes") {
        const bool parallel = key == "parallel_threshold_bytes";
        bool &seen = parallel ? seen_parallel : seen_streaming;
        if (seen) return error_at("key \"" + key + "\" appears twice");
        seen = true;
        std::uint64_t value = 0;
        if (!parse_count(key.c_str(), 0, kMaxThresholdBytes, value)) return std::nullopt;
        (parallel ? options.parallel_threshold_bytes : options.streaming_threshold_bytes) =
            static_cast<std::size_t>(value);
      } else {
        return fail_with("unknown key \"" + shown(key) + "\" (known keys: " + kKnownKeys + ")");
      }
      skip_space();
      if (consume('}')) return finish(options);
      if (!consume(',')) return error_at("expected ',' or '}' after a value");
    }
  }

  const std::string &error() const { return error_; }

 private:
  std::optional<Options> finish(const Options &options) {
    skip_space();
    if (pos_ != text_.size()) return error_at("unexpected text after the closing '}'");
    return options;
  }

  std::optional<Options> fail_with(std::string message) {
    error_ = std::move(message);
    return std::nullopt;
  }

  std::optional<Options> error_at(const std::string &what) {
    if (pos_ >= text_.size()) return fail_with(what + " (at end of text)");
    return fail_with(what + " (at byte " + std::to_string(pos_) + ", '" +
                     shown(std::string(text_.substr(pos_, 16))) + "')");
  }

  // Text quoted back in a message: cut long, control characters escaped.
  static std::string shown(const std::string &raw) {
    std::string out;
    for (char c : raw.substr(0, 40)) {
      if (static_cast<unsigned char>(c) < 0x20) {
        out += "\\x";
        out += "0123456789abcdef"[(c >> 4) & 0xf];
        out += "0123456789abcdef"[c & 0xf];
      } else {
        out += c;
      }
    }
    if (raw.size() > 40) out += "...";
    return out;
  }

  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // A JSON string. Escapes are validated; \u escapes outside ASCII become
  // '?', which is enough since every known key is ASCII.
  bool parse_key(std::string &key) {
    if (!consume('"')) {
      error_at(pos_ < text_.size() && text_[pos_] == '}' ? "expected a key after ','"
                                                         : "expected a string key");
      return false;
    }
    for (;;) {
      if (pos_ >= text_.size()) {
        error_at("unterminated string");
        return false;
      }
      const char c = text_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) {
        --pos_;
        error_at("control character inside a string");
        return false;
      }
      if (c != '\\') {
        key += c;
        continue;
      }
      if (pos_ >= text_.size()) {
        error_at("unterminated escape");
        return false;
      }
      const char e = text_[pos_++];
      switch (e) {
        case '"': key += '"'; break;
        case '\\': key += '\\'; break;
        case '/': key += '/'; break;
        case 'b': key += '\b'; break;
        case 'f': key += '\f'; break;
        case 'n': key += '\n'; break;
        case 'r': key += '\r'; break;
        case 't': key += '\t'; break;
        case 'u': {
          unsigned code = 0;
          for (int i = 0; i < 4; ++i) {
            const int h = pos_ < text_.size() ? hex_value(text_[pos_]) : -1;
            if (h < 0) {
              error_at("\\u needs four hex digits");
              return false;
            }
            code = code * 16 + static_cast<unsigned>(h);
            ++pos_;
          }
          key += code < 0x80 ? static_cast<char>(code) : '?';
          break;
        }
        default:
          --pos_;
          error_at("invalid escape in a string");
          return false;
      }
    }
  }

  // A JSON integer within [min, max]. Fractions, exponents, other JSON
  // types and out-of-range values are refused, each quoting what was found.
  bool parse_count(const char *key, std::uint64_t min, std::uint64_t max, std::uint64_t &value) {
    const std::string wants = std::string("\"") + key + "\" must be an integer";
    if (pos_ >= text_.size()) {
      error_at(wants);
      return false;
    }
    const char c = text_[pos_];
    if (c == '"' || c == '{' || c == '[' || c == 't' || c == 'f' || c == 'n') {
      const char *type = c == '"' ? "a string" : c == '{' ? "an object" : c == '[' ? "an array"
                                            : c == 'n' ? "null" : "a boolean";
      fail_with(wants + ", got " + type);
      return false;
    }
    // The token runs to the next delimiter; it is quoted whole in errors.
    const std::size_t start = pos_;
    std::size_t end = pos_;
    while (end < text_.size() && std::strchr(" \t\r\n,}", text_[end]) == nullptr) ++end;
    const std::string token = shown(std::string(text_.substr(start, end - start)));
    if (end == start) {
      error_at(wants);
      return false;
    }

    const bool negative = consume('-');
    bool digits = false;
    bool overflow = false;
    value = 0;
    const std::size_t first_digit = pos_;
    while (pos_ < end && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const auto digit = static_cast<std::uint64_t>(text_[pos_] - '0');
      if (value > (UINT64_MAX - digit) / 10) overflow = true;
      if (!overflow) value = value * 10 + digit;
      digits = true;
      ++pos_;
    }
    if (!digits || pos_ != end) {
      pos_ = start;
      fail_with(wants + ", got " + token);
      return false;
    }
    if (text_[first_digit] == '0' && end - first_digit > 1) {
      pos_ = start;
      fail_with(wants + " without leading zeros, got " + token);
      return false;
    }
    if ((negative && value != 0) || overflow || value < min || value > max) {
      fail_with(std::string("\"") + key + "\" is " + token + ", outside " + std::to_string(min) + ".." +
                std::to_string(max));
      return false;
    }
    return true;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  std::string error_;
};

}  // namespace

std::int32_t configure(bp_plugin_state &state, std::uint32_t kind, const char *options_json,
                       bp_error_sink *sink) {
  if (const std::int32_t status = check_kind(state, kind, sink); status != BP_OK) return status;
  // No options at all keeps the current configuration.
  if (options_json == nullptr) return BP_OK;

  OptionsParser parser{std::string_view(options_json)};
  const std::optional<Options> options = parser.parse();
  if (!options) {
    return fail(state.services, sink, BP_CONFIG, "cpu options: %s", parser.error().c_str());
  }

  std::lock_guard<std::mutex> lock(state.mutex);
  const std::uint32_t threads = options->threads != 0 ? options->threads : state.available_cpus;
  if (state.live_objects != 0 && options->devices != state.device_count) {
    return fail(state.services, sink, BP_CONFIG,
                "cpu options: cannot change the device count from %u to %u while %zu buffers or "
                "groups of cpu devices exist; configure before creating any",
                static_cast<unsigned>(state.device_count), static_cast<unsigned>(options->devices),
                state.live_objects);
  }
  // Groups hold on to the pool, so it is only replaced while none exists.
  if (state.live_objects != 0 && threads != state.threads) {
    return fail(state.services, sink, BP_CONFIG,
                "cpu options: cannot change threads from %u to %u while %zu buffers or groups of cpu "
                "devices exist; configure before creating any",
                static_cast<unsigned>(state.threads), static_cast<unsigned>(threads), state.live_objects);
  }
  if (threads != state.threads) state.pool.reset();  // the next group starts one of the new size
  state.device_count = options->devices;
  state.threads = threads;
  // Thresholds apply to groups created from now on.
  state.parallel_threshold_bytes = options->parallel_threshold_bytes.value_or(kDefaultParallelThresholdBytes);
  state.streaming_threshold_bytes = options->streaming_threshold_bytes.value_or(
      default_streaming_threshold(state.last_level_cache_bytes));
  log(state.services, BP_LOG_DEBUG,
      "configured %u logical cpu devices, %u threads, parallel above %zu bytes, streaming above %zu bytes",
      static_cast<unsigned>(options->devices), static_cast<unsigned>(threads), state.parallel_threshold_bytes,
      state.streaming_threshold_bytes);
  return BP_OK;
}

}  // namespace backplane::cpu
