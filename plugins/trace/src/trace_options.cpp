// The trace layer's options (trace_options.hpp), through plugin_support's
// OptionsObject, which names the key in every refusal.
#include "trace_options.hpp"

#include <unistd.h>

#include <bit>
#include <filesystem>
#include <system_error>

#include "plugin_support/options_object.hpp"

namespace backplane::trace {

std::optional<TraceOptions> parse_trace_options(const char *options_json, std::string *error) {
  using plugin_support::OptionsObject;
  const std::string_view text = options_json != nullptr && options_json[0] != '\0' ? options_json : "{}";
  std::string why;
  std::optional<OptionsObject> object = OptionsObject::parse(text, &why);
  if (!object) {
    *error = "options are not a JSON object: " + why;
    return std::nullopt;
  }
  if (!object->only_keys({"file", "ring_events", "max_bytes"}, &why)) {
    *error = why;
    return std::nullopt;
  }
  TraceOptions options;
  std::string file = "backplane-trace-" + std::to_string(getpid()) + ".json";
  if (!object->read("file", file, &why) ||
      !object->read("ring_events", kMinRingEvents, kMaxRingEvents, options.ring_events, &why) ||
      !object->read("max_bytes", kMinMaxBytes, kMaxMaxBytes, options.max_bytes, &why)) {
    *error = "option " + why;
    return std::nullopt;
  }
  if (file.empty()) {
    *error = "option \"file\" is empty: name the trace file";
    return std::nullopt;
  }
  if (file.find('\0') != std::string::npos) {
    *error = "option \"file\" holds a NUL character";
    return std::nullopt;
  }
  options.ring_events = std::bit_ceil(options.ring_events);
  // The host resolved a fleet file's relative paths; what is still relative
  // is relative to the working directory, and is made absolute so that two
  // spellings of one file share one writer.
  std::error_code failed;
  std::filesystem::path path = std::filesystem::absolute(file, failed);
  if (failed) {
    *error = "option \"file\": cannot make '" + file + "' absolute: " + failed.message();
    return std::nullopt;
  }
  path = path.lexically_normal();
  // Symbolic links of the folders that exist resolved too, where possible.
  if (std::filesystem::path resolved = std::filesystem::weakly_canonical(path, failed); !failed) path = resolved;
  options.file = path.string();
  return options;
}

}  // namespace backplane::trace
