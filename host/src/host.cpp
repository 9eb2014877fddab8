// The host's life cycle, its listings, buffers and groups.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <system_error>

#include <boost/dll/runtime_symbol_info.hpp>

#include "extensions.hpp"
#include "file_digest.hpp"
#include "host.hpp"
#include "log.hpp"
#include "names.hpp"

namespace backplane {

void rebuild_capability_listing(bp_host &host) {
  host.capability_listing.clear();
  for (const auto &kind : host.kinds) {
    const CapabilitySet &set = kind->capabilities;
    for (uint32_t collective = 0; collective < BP_COLLECTIVE_COUNT; ++collective) {
      if (!set.declares(collective)) continue;
      auto add = [&](uint32_t dtype, uint32_t dtypes, uint32_t ops) {
        bp_capability_info info{};
        info.struct_size = sizeof info;
        info.device_kind = kind->name.c_str();
        info.plugin = kind->plugin->name.c_str();
        info.collective = collective;
        info.dtypes = dtypes;
        info.reduce_ops = ops;
        info.flags = set.flags(collective, dtype);
        info.max_bytes = set.max_bytes(collective, dtype);
        host.capability_listing.push_back(info);
      };
      if (collective == BP_BARRIER) {
        add(0, 0, 0);
        continue;
      }
      for (uint32_t dtype = 0; dtype < BP_DTYPE_COUNT; ++dtype) {
        if (!(set.dtypes(collective) & (1u << dtype))) continue;
        add(dtype, 1u << dtype, collective_reduces(collective) ? set.reduce_ops(collective, dtype) : 0);
      }
    }
  }
}

std::filesystem::path host_library_directory() {
  std::error_code error;
  std::filesystem::path library = boost::dll::this_line_location(error);
  return error ? std::filesystem::path() : library.parent_path();
}

Expected<CheckedHostOptions> check_host_options(const bp_host_options *given) {
  CheckedHostOptions checked;
  bp_host_options &options = checked.options;
  if (!given) return checked;
  if (given->struct_size < BP_HOST_OPTIONS_SIZE_V1_0) {
    return Error(BP_INVALID_ARGUMENT, "bp_host_options.struct_size is " + std::to_string(given->struct_size) +
                                          ", less than its 1.0 size " + std::to_string(BP_HOST_OPTIONS_SIZE_V1_0))
        .hint("set struct_size = sizeof(bp_host_options)");
  }
  std::memcpy(&options, given, std::min(given->struct_size, sizeof options));
  skip_unknown_extensions(options.next, "bp_host_options");
  if (options.plugin_dir_count > 0 && !options.plugin_dirs)
    return Error(BP_INVALID_ARGUMENT, "bp_host_options.plugin_dirs is NULL with a count of " +
                                          std::to_string(options.plugin_dir_count));
  for (size_t i = 0; i < options.plugin_dir_count; ++i) {
    if (!options.plugin_dirs[i])
      return Error(BP_INVALID_ARGUMENT, "bp_host_options.plugin_dirs[" + std::to_string(i) + "] is NULL (of " +
                                            std::to_string(options.plugin_dir_count) + ")")
          .hint("pass plugin_dir_count directory names, none of them NULL");
  }
  if (options.plugin_options_json && *options.plugin_options_json) {
    nlohmann::json parsed = nlohmann::json::parse(options.plugin_options_json, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object()) {
      return Error(BP_CONFIG, "plugin options are not a JSON object")
          .with("plugin_options", options.plugin_options_json)
          .hint("give an object keyed by device kind, e.g. {\"cpu\": {\"devices\": 8}}");
    }
    for (const auto &[kind, value] : parsed.items()) {
      if (!value.is_object()) {
        return Error(BP_CONFIG, "plugin options for device kind '" + kind + "' are not a JSON object")
            .with("device_kind", kind)
            .hint("give an object keyed by device kind, e.g. {\"cpu\": {\"devices\": 8}}");
      }
    }
    checked.plugin_options = std::move(parsed);
  }
  if (options.plugin_pins_json) {
    Expected<PluginPins> pins = parse_plugin_pins(options.plugin_pins_json);
    if (!pins) return pins.take_error().with("pointer", "/plugin_pins_json");
    checked.plugin_pins = std::move(*pins);
  }
  return checked;
}

Expected<bp_host *> create_host(const bp_host_options *given) {
  Expected<CheckedHostOptions> checked = check_host_options(given);
  if (!checked) return checked.take_error();
  const bp_host_options &options = checked->options;
  auto host = std::make_unique<bp_host>();
  host->plugin_options = std::move(checked->plugin_options);
  host->plugin_pins = std::move(checked->plugin_pins);
  host->probe = probe_options((options.flags & BP_HOST_PROBE) != 0);
  load_search_path(*host, options);
  return host.release();
}

void retain_host(bp_host *host) noexcept { host->references.fetch_add(1, std::memory_order_relaxed); }

void release_host(bp_host *host) noexcept {
  if (!host || host->references.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  try {
    delete host;
  } catch (...) {
    log(BP_LOG_ERROR, "host", "an exception escaped while destroying a host");
  }
}

}  // namespace backplane

bp_host::~bp_host() {
  // Devices and kinds point into plugins; release them before the plugins
  // destroy their state and their libraries unload.
  workloads.clear();
  groups.clear();
  transport.reset();
  // Layered devices first, outermost first: each layer writes what it holds
  // (trace files) while the devices under it are still there.
  while (!devices.empty()) devices.pop_back();
  layer_kinds.clear();
  kinds.clear();
  plugins.clear();
}

nlohmann::json bp_device::describe() const {
  nlohmann::json described = {{"name", name}, {"kind", kind->name}, {"layers", layer_names}};
  if (base != this) described["base"] = base->name;
  return described;
}
