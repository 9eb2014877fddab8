// Plugin pins: the SHA-256 of a plugin file's bytes (OpenSSL's libcrypto),
// and the pins an application or a fleet gives, checked before any of a
// file's code runs.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "error.hpp"

namespace backplane {

// The SHA-256 of everything `fd` holds, read with pread from offset 0 (the
// descriptor's own offset is left alone), as 64 lowercase hex digits.
Expected<std::string> sha256_of_file(int fd, const std::string &path);

// Plugin file name ("libbackplane_cpu.so") -> 64 lowercase hex digits.
using PluginPins = std::map<std::string, std::string, std::less<>>;

// Parses {"libbackplane_cpu.so": "<64 hex digits>", ...}: a JSON object
// whose keys are plugin file names and whose values are SHA-256 digests in
// hex (either case). Anything else is BP_CONFIG naming the entry.
Expected<PluginPins> parse_plugin_pins(std::string_view json_text);
// The same for an object already parsed (a fleet's "plugin_pins").
Expected<PluginPins> plugin_pins_from_json(const nlohmann::json &object);

// Adds the pin `file` -> `sha256` to `pins`; a file pinned to another
// digest there is refused with BP_CONFIG, `pins_source` and `source` saying
// who pinned which ("the host options", "the fleet").
Status add_plugin_pin(PluginPins &pins, const std::string &file, const std::string &sha256,
                      std::string_view pins_source, std::string_view source);

}  // namespace backplane
