// configure()'s text: the opencl kind's options, a small JSON object such as
// {"platform": "NVIDIA", "device_type": "gpu"}, parsed by hand (plugins link
// no JSON library). Strict JSON for an object whose values are strings;
// keys not listed are refused, so a typo never silently means "all".
#include "options.hpp"

#include <cstddef>
#include <string>

namespace backplane::opencl {
namespace {

constexpr const char *kKnownKeys = "platform, device_type, build_options";
constexpr const char *kDeviceTypes = "\"all\", \"cpu\", \"gpu\", \"accelerator\"";

class OptionsParser {
 public:
  explicit OptionsParser(std::string_view text) : text_(text) {}

  std::optional<Options> parse() {
    Options options;
    bool seen_platform = false;
    bool seen_device_type = false;
    bool seen_build_options = false;
    skip_space();
    if (!consume('{')) return error_at("expected a JSON object starting with '{'");
    skip_space();
    if (consume('}')) return finish(options);
    for (;;) {
      skip_space();
      std::string key;
      if (!parse_string(key, "a string key")) return std::nullopt;
      skip_space();
      if (!consume(':')) return error_at("expected ':' after key \"" + shown(key) + "\"");
      skip_space();
      if (key == "platform") {
        if (seen_platform) return error_at("key \"platform\" appears twice");
        seen_platform = true;
        if (!parse_string_value("platform", options.platform)) return std::nullopt;
      } else if (key == "device_type") {
        if (seen_device_type) return error_at("key \"device_type\" appears twice");
        seen_device_type = true;
        std::string value;
        if (!parse_string_value("device_type", value)) return std::nullopt;
        if (value == "all") {
          options.device_type = DeviceTypeFilter::all;
        } else if (value == "cpu") {
          options.device_type = DeviceTypeFilter::cpu;
        } else if (value == "gpu") {
          options.device_type = DeviceTypeFilter::gpu;
        } else if (value == "accelerator") {
          options.device_type = DeviceTypeFilter::accelerator;
        } else {
          return fail_with("\"device_type\" is \"" + shown(value) + "\", not one of " + kDeviceTypes);
        }
      } else if (key == "build_options") {
        if (seen_build_options) return error_at("key \"build_options\" appears twice");
        seen_build_options = true;
        if (!parse_string_value("build_options", options.build_options)) return std::nullopt;
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

  static void append_utf8(std::string &out, unsigned code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  // A value that must be a string: other JSON types are named in the error.
  bool parse_string_value(const char *key, std::string &value) {
    if (pos_ < text_.size() && text_[pos_] != '"') {
      const char c = text_[pos_];
      const char *type = c == '{' ? "an object" : c == '[' ? "an array" : c == 'n' ? "null"
                         : (c == 't' || c == 'f') ? "a boolean" : "a number";
      fail_with(std::string("\"") + key + "\" must be a string, got " + type);
      return false;
    }
    return parse_string(value, (std::string("a string for \"") + key + "\"").c_str());
  }

  // A JSON string with its escapes; a \u escape becomes its UTF-8 bytes
  // (the halves of a surrogate pair each on their own: platform names are
  // matched as bytes, and none has characters outside the BMP).
  bool parse_string(std::string &out, const char *expected) {
    if (!consume('"')) {
      error_at(std::string("expected ") + expected);
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
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) {
        error_at("unterminated escape");
        return false;
      }
      const char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
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
          append_utf8(out, code);
          break;
        }
        default:
          --pos_;
          error_at("invalid escape in a string");
          return false;
      }
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  std::string error_;
};

}  // namespace

const char *device_type_filter_name(DeviceTypeFilter filter) noexcept {
  switch (filter) {
    case DeviceTypeFilter::all: return "all";
    case DeviceTypeFilter::cpu: return "cpu";
    case DeviceTypeFilter::gpu: return "gpu";
    case DeviceTypeFilter::accelerator: return "accelerator";
  }
  return "all";
}

std::optional<Options> parse_options(std::string_view json, std::string *error) {
  OptionsParser parser(json);
  std::optional<Options> options = parser.parse();
  if (!options && error != nullptr) *error = parser.error();
  return options;
}

}  // namespace backplane::opencl
