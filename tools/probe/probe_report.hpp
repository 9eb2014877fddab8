// The report backplane-probe writes and the host reads (host/src/probe.cpp):
// one line per event, "<word> <text>". The helper writes each line with one
// write() the moment it happens, so when the plugin takes the process down
// the last "step" line says where it was.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace backplane::probe_report {

// "step <stage> [<kind>]": the helper is about to run that stage.
inline constexpr std::string_view kStep = "step";
// "plugin <name> <version>" and "kind <name> <device count>": what it found.
inline constexpr std::string_view kPlugin = "plugin";
inline constexpr std::string_view kKind = "kind";
// "note <text>": the helper stopped early for a reason the in-process load
// reports in full (the file does not load, the entry refused, ...).
inline constexpr std::string_view kNote = "note";
// "error <text>": the helper itself could not do its work.
inline constexpr std::string_view kError = "error";
// Everything returned; what comes after is the process's exit.
inline constexpr std::string_view kDone = "done";

// The stages, in order, as "step" names them.
inline constexpr std::string_view kStageLoad = "load";              // dlopen: the constructors run
inline constexpr std::string_view kStageEntry = "entry";            // bp_plugin_entry
inline constexpr std::string_view kStageDescriptor = "descriptor";  // reading what the entry returned
inline constexpr std::string_view kStageConfigure = "configure";    // per kind with options
inline constexpr std::string_view kStageDeviceCount = "device_count";
inline constexpr std::string_view kStageKindInfo = "kind_info";
inline constexpr std::string_view kStageDeviceInfo = "device_info";
inline constexpr std::string_view kStageDestroy = "destroy";
inline constexpr std::string_view kStageUnload = "unload";  // dlclose: the destructors run

// The host's own bounds on what it asks a plugin for (plugin_loader.cpp):
// past them the host refuses the plugin without calling it further.
inline constexpr size_t kMaxKinds = 64;
inline constexpr uint32_t kMaxDevicesPerKind = 4096;
inline constexpr size_t kMaxNameBytes = 64;
inline constexpr size_t kMaxTextBytes = 4096;

// One report line: `text` on one line (line breaks become spaces), ended by '\n'.
inline std::string line(std::string_view word, std::string_view text = {}) {
  std::string out(word);
  if (!text.empty()) {
    out += ' ';
    for (char c : text) out += (c == '\n' || c == '\r') ? ' ' : c;
  }
  out += '\n';
  return out;
}

// A line split into its word and the rest ("" when there is none).
struct Line {
  std::string_view word, text;
};
inline Line split(std::string_view line) {
  const size_t space = line.find(' ');
  if (space == std::string_view::npos) return {line, {}};
  return {line.substr(0, space), line.substr(space + 1)};
}

}  // namespace backplane::probe_report
