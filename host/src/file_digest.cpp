#include "file_digest.hpp"

#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "host.hpp"

namespace backplane {
namespace {

constexpr size_t kDigestHexLength = 64;

std::string to_hex(const unsigned char *bytes, size_t size) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string text;
  text.reserve(2 * size);
  for (size_t i = 0; i < size; ++i) {
    text += digits[bytes[i] >> 4];
    text += digits[bytes[i] & 0xF];
  }
  return text;
}

bool is_hex_digest(const std::string &text) {
  if (text.size() != kDigestHexLength) return false;
  for (char c : text) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::string lowercase(std::string text) {
  for (char &c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace

Expected<std::string> sha256_of_file(int fd, const std::string &path) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!context || EVP_DigestInit_ex(context.get(), EVP_sha256(), nullptr) != 1)
    return Error(BP_OUT_OF_MEMORY, "cannot start a SHA-256 of plugin '" + path + "'");
  std::vector<unsigned char> chunk(1 << 16);
  for (off_t offset = 0;;) {
    const ssize_t got = ::pread(fd, chunk.data(), chunk.size(), offset);
    if (got < 0) {
      if (errno == EINTR) continue;
      return Error(BP_PLUGIN_LOAD, "cannot read plugin '" + path + "': " + std::strerror(errno));
    }
    if (got == 0) break;
    EVP_DigestUpdate(context.get(), chunk.data(), static_cast<size_t>(got));
    offset += got;
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_DigestFinal_ex(context.get(), digest, &size);
  return to_hex(digest, size);
}

Expected<PluginPins> parse_plugin_pins(std::string_view json_text) {
  nlohmann::json parsed = nlohmann::json::parse(json_text, nullptr, false);
  if (parsed.is_discarded()) parsed = nullptr;  // refused below as not an object
  return plugin_pins_from_json(parsed);
}

Expected<PluginPins> plugin_pins_from_json(const nlohmann::json &object) {
  const auto hint = [] {
    return std::string("give an object from plugin file name to SHA-256 in hex, e.g. "
                       "{\"libbackplane_cpu.so\": \"<64 hex digits>\"}; sha256sum prints it");
  };
  if (!object.is_object()) return Error(BP_CONFIG, "plugin pins are not a JSON object").hint(hint());
  PluginPins pins;
  for (const auto &[name, value] : object.items()) {
    if (!is_plugin_file_name(name)) {
      return Error(BP_CONFIG, "plugin pin '" + name + "' does not name a plugin file (libbackplane_<name>.so)")
          .with("plugin_file", name)
          .hint(hint());
    }
    if (!value.is_string() || !is_hex_digest(value.get<std::string>())) {
      return Error(BP_CONFIG, "plugin pin for '" + name + "' is not a SHA-256 in hex (64 hex digits): " +
                                  value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))
          .with("plugin_file", name)
          .hint(hint());
    }
    pins[name] = lowercase(value.get<std::string>());
  }
  return pins;
}

Status add_plugin_pin(PluginPins &pins, const std::string &file, const std::string &sha256,
                      std::string_view pins_source, std::string_view source) {
  const auto [existing, inserted] = pins.emplace(file, sha256);
  if (inserted || existing->second == sha256) return {};
  return Error(BP_CONFIG, file + " is pinned to " + sha256 + " by " + std::string(source) + " but to " +
                              existing->second + " by " + std::string(pins_source))
      .with("plugin_file", file)
      .hint("pin each plugin file to one SHA-256");
}

}  // namespace backplane
