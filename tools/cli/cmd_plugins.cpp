// `backplane plugins`: which plugin files were loaded, and which were found
// but refused, with the loader's reason (and, with --probe, what a plugin
// that crashed or hung in its probe process wrote last).
#include <optional>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "table.hpp"

namespace backplane::cli {
namespace {

std::string join(const std::vector<std::string> &items, const char *separator) {
  std::string joined;
  for (const std::string &item : items) joined += (joined.empty() ? "" : separator) + item;
  return joined;
}

std::string field_or(const bp_error *error, const char *key, const char *fallback) {
  const char *value = bp_error_field(error, key);
  return value ? value : fallback;
}

// What plugins refused by a probe (--probe) wrote last before they crashed,
// exited or hung: often the line that says why.
void print_probe_output(const std::vector<const bp_error *> &refused) {
  for (const bp_error *error : refused) {
    const char *tail = bp_error_field(error, "output_tail");
    if (!tail) continue;
    const nlohmann::json lines = nlohmann::json::parse(tail, nullptr, /*allow_exceptions=*/false);
    if (!lines.is_array() || lines.empty()) continue;
    std::printf("\nlast output of %s in its probe:\n", field_or(error, "file", "?").c_str());
    for (const nlohmann::json &line : lines)
      if (line.is_string()) std::printf("  %s\n", line.get<std::string>().c_str());
  }
}

// A transport says what runs under it only once open: the library and its
// version, the thread level granted, the process's place. Opening one is
// what a fleet with a "transport" does (MPI initialised; a world of one
// without mpirun).
struct TransportLine {
  std::string name, plugin;
  std::optional<bp_transport_facts> facts;
  std::optional<Error> refusal;
};

std::vector<TransportLine> transport_lines(Host &host, const std::vector<PluginInfo> &plugins, bool open) {
  std::vector<TransportLine> lines;
  for (const PluginInfo &plugin : plugins) {
    if (plugin.transport.empty()) continue;
    TransportLine line{plugin.transport, plugin.name, std::nullopt, std::nullopt};
    if (!open) {
      lines.push_back(std::move(line));
      continue;
    }
    if (Status opened = host.open_transport(plugin.transport); !opened) {
      line.refusal = opened.error();
    } else if (Result<bp_transport_facts> facts = host.transport(); facts) {
      line.facts = *facts;
    }
    lines.push_back(std::move(line));
    break;  // a host opens one transport
  }
  return lines;
}

}  // namespace

int run_plugins(const GlobalOptions &options, bool json, bool open_transports) {
  std::optional<Host> host = open_host(options);
  if (!host) return kExitFailure;
  const std::vector<PluginInfo> plugins = host->plugins();
  const std::vector<const bp_error *> refused = host->refused();
  const std::vector<TransportLine> transports = transport_lines(*host, plugins, open_transports);

  if (json) {
    nlohmann::ordered_json out = {{"loaded", nlohmann::ordered_json::array()},
                                  {"refused", nlohmann::ordered_json::array()}};
    for (const PluginInfo &plugin : plugins) {
      // Only kinds the plugin said something about (why one has no device).
      nlohmann::ordered_json kind_status = nlohmann::ordered_json::object();
      for (size_t k = 0; k < plugin.device_kinds.size(); ++k)
        if (!plugin.kind_status[k].empty()) kind_status[plugin.device_kinds[k]] = plugin.kind_status[k];
      out["loaded"].push_back({{"name", plugin.name},
                               {"version", plugin.version},
                               {"abi", std::to_string(plugin.abi_major) + "." + std::to_string(plugin.abi_minor)},
                               {"file", plugin.file},
                               {"sha256", plugin.sha256},
                               {"device_kinds", plugin.device_kinds},
                               {"layer_kinds", plugin.layer_kinds},
                               {"transport", plugin.transport.empty() ? nlohmann::ordered_json(nullptr)
                                                                      : nlohmann::ordered_json(plugin.transport)},
                               {"kind_status", std::move(kind_status)}});
    }
    out["transports"] = nlohmann::ordered_json::array();
    for (const TransportLine &line : transports) {
      nlohmann::ordered_json entry = {{"name", line.name}, {"plugin", line.plugin}};
      if (line.facts) {
        entry["library"] = line.facts->library;
        entry["details"] = line.facts->details;
        entry["process_index"] = line.facts->process_index;
        entry["process_count"] = line.facts->process_count;
      } else if (line.refusal) {
        entry["error"] = nlohmann::ordered_json::parse(line.refusal->json(), nullptr, false);
      }
      out["transports"].push_back(std::move(entry));
    }
    out["layer_kinds"] = nlohmann::ordered_json::array();
    for (const LayerKindInfo &kind : host->layer_kinds()) {
      nlohmann::ordered_json layer_options = nlohmann::ordered_json::object();
      for (const auto &[name, description] : kind.options) layer_options[name] = description;
      out["layer_kinds"].push_back({{"name", kind.name},
                                    {"plugin", kind.plugin},
                                    {"description", kind.description},
                                    {"stackable", kind.stackable},
                                    {"wraps", kind.device_kinds.empty() ? nlohmann::ordered_json("every device kind")
                                                                        : nlohmann::ordered_json(kind.device_kinds)},
                                    {"options", std::move(layer_options)}});
    }
    // The host's own structured error, embedded as is, so a script sees
    // every field the host recorded (code, message, file, hint, ...).
    for (const bp_error *error : refused) {
      nlohmann::ordered_json entry =
          nlohmann::ordered_json::parse(bp_error_json(error), nullptr, /*allow_exceptions=*/false);
      if (entry.is_discarded())  // a host bug, but the listing must still say what was refused
        entry = {{"code", bp_code_name(bp_error_code(error))},
                 {"message", bp_error_message(error)},
                 {"file", field_or(error, "file", "")}};
      out["refused"].push_back(std::move(entry));
    }
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }

  if (plugins.empty()) {
    std::printf("no plugins loaded\n");
  } else {
    Table table({{"name"}, {"version"}, {"abi"}, {"kinds"}, {"layers"}, {"transport"}, {"file"}});
    for (const PluginInfo &plugin : plugins)
      table.add_row({plugin.name, plugin.version,
                     std::to_string(plugin.abi_major) + "." + std::to_string(plugin.abi_minor),
                     plugin.device_kinds.empty() ? "-" : join(plugin.device_kinds, ","),
                     plugin.layer_kinds.empty() ? "-" : join(plugin.layer_kinds, ","),
                     plugin.transport.empty() ? "-" : plugin.transport, plugin.file});
    std::printf("loaded:\n");
    table.print(stdout);
    for (const PluginInfo &plugin : plugins)
      for (size_t k = 0; k < plugin.device_kinds.size(); ++k)
        if (!plugin.kind_status[k].empty())
          std::printf("  %s: %s\n", plugin.device_kinds[k].c_str(), plugin.kind_status[k].c_str());
  }
  // The nesting rules, checked when a layered device is built.
  if (const std::vector<LayerKindInfo> kinds = host->layer_kinds(); !kinds.empty()) {
    Table table({{"layer kind"}, {"plugin"}, {"stackable"}, {"wraps"}, {"options"}, {"what it does"}});
    for (const LayerKindInfo &kind : kinds) {
      std::vector<std::string> option_names;
      for (const auto &[name, description] : kind.options) option_names.push_back(name);
      table.add_row({kind.name, kind.plugin, kind.stackable ? "yes" : "no (once a chain)",
                     kind.device_kinds.empty() ? "every kind" : join(kind.device_kinds, ","),
                     option_names.empty() ? "-" : join(option_names, ","), kind.description});
    }
    std::printf("\nlayer kinds (a chain holds at most %d layers):\n", BP_LAYER_CHAIN_MAX);
    table.print(stdout);
  }
  for (const TransportLine &line : transports) {
    std::printf("\ntransport %s (plugin %s):\n", line.name.c_str(), line.plugin.c_str());
    if (line.facts) {
      std::printf("  library: %s\n  %s\n  this process: %u of %u\n", line.facts->library, line.facts->details,
                  line.facts->process_index, line.facts->process_count);
    } else if (line.refusal) {
      std::printf("  cannot open: %s: %s\n", std::string(line.refusal->code_name()).c_str(),
                  std::string(line.refusal->message()).c_str());
    } else {
      std::printf("  not opened: backplane plugins --transports opens it and shows its library and thread level\n");
    }
  }
  if (!refused.empty()) {
    Table table({{"file"}, {"code"}, {"message"}});
    for (const bp_error *error : refused)
      table.add_row({field_or(error, "file", "?"), bp_code_name(bp_error_code(error)), bp_error_message(error)});
    std::printf("\nrefused:\n");
    table.print(stdout);
    print_probe_output(refused);
  }
  // Listing refused files is what this command is for, so they are not a
  // failure of the command itself.
  return kExitOk;
}

}  // namespace backplane::cli
