// Fleet files, stage 3 and the commit (fleet_meaning.cpp); what the C entry
// points of fleets (fleet_api.cpp) call.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "error.hpp"
#include "file_digest.hpp"
#include "fleet_problems.hpp"

namespace backplane {

struct FleetSource {
  std::string name;            // the file as the user wrote it, or "<text>"
  std::filesystem::path base;  // where relative paths start
  std::optional<std::string> text;
};

// Reads the fleet file at `path`; relative paths in it start at its folder.
FleetSource read_source(const char *path, Problems &problems);

// plugin_dirs resolve against the fleet's folder; a missing one is a problem.
std::vector<std::filesystem::path> plugin_directories(const nlohmann::json &document, const std::filesystem::path &base,
                                                      Problems &problems);

// Adds the fleet's "plugin_pins" to `pins` (those `pins_source` gave); a
// file pinned to two digests is a problem at /plugin_pins/<file>.
void add_fleet_pins(const nlohmann::json &document, PluginPins &pins, std::string_view pins_source,
                    Problems &problems);

// Loads the plugin directories (when asked), checks the document's meaning
// and commits it into `host` only when no problem was found.
Status load_into(bp_host &host, const nlohmann::json &document, const std::filesystem::path &base, Problems &problems,
                 bool load_plugin_dirs);

}  // namespace backplane
