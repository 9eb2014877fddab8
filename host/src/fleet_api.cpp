// The C entry points of fleet files (backplane.h): loading a fleet into a
// host or creating a host from one, its workload, and size expressions.
#include <algorithm>
#include <memory>
#include <shared_mutex>

#include "c_api_guard.hpp"
#include "fleet_meaning.hpp"
#include "fleet_schema.hpp"
#include "host.hpp"
#include "sizes.hpp"

using namespace backplane;
namespace fs = std::filesystem;

extern "C" {

bp_error *bp_host_load_fleet_file(bp_host *host, const char *path) {
  return guarded([&]() -> Status {
    if (!host) return Error(BP_INVALID_ARGUMENT, "bp_host_load_fleet_file: host is NULL");
    if (!path) return Error(BP_INVALID_ARGUMENT, "bp_host_load_fleet_file: path is NULL");
    Problems problems(path);
    FleetSource source = read_source(path, problems);
    Expected<nlohmann::json> document = parse_fleet(std::move(source.text), problems);
    if (!document) return document.take_error();
    return load_into(*host, *document, source.base, problems, true);
  });
}

bp_error *bp_host_load_fleet_text(bp_host *host, const char *json, size_t length) {
  return guarded([&]() -> Status {
    if (!host) return Error(BP_INVALID_ARGUMENT, "bp_host_load_fleet_text: host is NULL");
    if (!json && length > 0) return Error(BP_INVALID_ARGUMENT, "bp_host_load_fleet_text: json is NULL");
    Problems problems("<text>");
    std::optional<std::string> text;
    if (length > max_fleet_bytes) {
      problems.add(BP_CONFIG, "", nullptr, "the fleet text is " + std::to_string(length) + " bytes, over the limit of " +
                                               std::to_string(max_fleet_bytes) + " bytes (8 MiB)");
    } else {
      text = std::string(json ? json : "", length);
    }
    Expected<nlohmann::json> document = parse_fleet(std::move(text), problems);
    if (!document) return document.take_error();
    return load_into(*host, *document, fs::current_path(), problems, true);
  });
}

bp_error *bp_host_create_from_fleet_file(const char *path, const bp_host_options *given, bp_host **out) {
  return guarded([&]() -> Status {
    if (!path) return Error(BP_INVALID_ARGUMENT, "bp_host_create_from_fleet_file: path is NULL");
    if (!out) return Error(BP_INVALID_ARGUMENT, "bp_host_create_from_fleet_file: out is NULL");
    // What bp_host_create would refuse is refused before the fleet is read.
    Expected<CheckedHostOptions> checked = check_host_options(given);
    if (!checked) return checked.take_error();
    Problems problems(path);
    FleetSource source = read_source(path, problems);
    Expected<nlohmann::json> document = parse_fleet(std::move(source.text), problems);
    if (!document) return document.take_error();

    // The fleet's directories come first in the search order, and its
    // devices' options reach their plugins before enumeration.
    std::vector<fs::path> directories = plugin_directories(*document, source.base, problems);
    nlohmann::json &plugin_options = checked->plugin_options;
    bp_host_options &options = checked->options;
    const nlohmann::json &devices = document->value("devices", nlohmann::json::array());
    for (size_t i = 0; i < devices.size(); ++i) {
      if (!devices[i].contains("options") || !devices[i].contains("kind")) continue;
      const std::string kind = devices[i]["kind"].get<std::string>();
      if (plugin_options.contains(kind) && plugin_options[kind] != devices[i]["options"]) {
        problems.add(BP_CONFIG, "/devices/" + std::to_string(i) + "/options", devices[i]["options"],
                     "options for device kind '" + kind + "' differ from options given for it elsewhere (" +
                         plugin_options[kind].dump() + ")",
                     "give one set of options per device kind");
        continue;
      }
      plugin_options[kind] = devices[i]["options"];
    }
    // The fleet's pins join those of the options, and "probe": true turns
    // probing on, before any plugin file is looked at.
    add_fleet_pins(*document, checked->plugin_pins, "the host options", problems);
    if (document->value("probe", false)) options.flags |= BP_HOST_PROBE;
    if (!problems.empty()) return std::move(problems).to_error();
    std::vector<std::string> directory_texts;
    for (const fs::path &directory : directories) directory_texts.push_back(directory.string());
    for (size_t i = 0; i < options.plugin_dir_count; ++i) directory_texts.emplace_back(options.plugin_dirs[i]);
    std::vector<const char *> directory_pointers;
    for (const std::string &directory : directory_texts) directory_pointers.push_back(directory.c_str());
    const std::string options_text = plugin_options.dump();
    const std::string pins_text = nlohmann::json(checked->plugin_pins).dump();
    options.struct_size = sizeof options;
    options.plugin_dirs = directory_pointers.data();
    options.plugin_dir_count = directory_pointers.size();
    options.plugin_options_json = options_text.c_str();
    options.plugin_pins_json = pins_text.c_str();
    Expected<bp_host *> created = create_host(&options);
    if (!created) return created.take_error();
    std::unique_ptr<bp_host> host(*created);
    if (Status status = load_into(*host, *document, source.base, problems, false); !status) return status;
    *out = host.release();
    return {};
  });
}

size_t bp_host_workload_count(const bp_host *host) {
  if (!host) return 0;
  std::shared_lock lock(host->mutex);
  return host->workloads.size();
}

bp_error *bp_host_workload(const bp_host *host, size_t index, bp_workload_info *out) {
  return guarded([&]() -> Status {
    if (!host || !out) return Error(BP_INVALID_ARGUMENT, "bp_host_workload: host and out must not be NULL");
    std::shared_lock lock(host->mutex);
    if (index >= host->workloads.size())
      return Error(BP_INVALID_ARGUMENT, "bp_host_workload: index " + std::to_string(index) + " is past the " +
                                            std::to_string(host->workloads.size()) + " workload entries");
    return write_out("bp_host_workload", out, host->workloads[index].info, BP_WORKLOAD_INFO_SIZE_V1_0);
  });
}

bp_error *bp_parse_sizes(const char *text, uint64_t *sizes, size_t capacity, size_t *count) {
  return guarded([&]() -> Status {
    if (!text || !count || (!sizes && capacity > 0))
      return Error(BP_INVALID_ARGUMENT, "bp_parse_sizes: text, count (and sizes when capacity > 0) must not be NULL");
    Expected<std::vector<uint64_t>> parsed = parse_sizes(text);
    if (!parsed) return parsed.take_error();
    *count = parsed->size();
    std::copy_n(parsed->begin(), std::min(capacity, parsed->size()), sizes);
    return {};
  });
}

}  // extern "C"
