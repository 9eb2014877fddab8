// `backplane devices`: every device the loaded plugins enumerate.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "table.hpp"

namespace backplane::cli {
namespace {

std::vector<std::string> flag_names(uint32_t flags) {
  std::vector<std::string> names;
  if (flags & BP_DEVICE_HOST_ADDRESSABLE) names.emplace_back("host-addressable");
  return names;
}

}  // namespace

int run_devices(const GlobalOptions &options, const std::string &fleet_file, bool json) {
  std::optional<Host> host = fleet_file.empty() ? open_host(options) : open_fleet(options, fleet_file);
  if (!host) return kExitFailure;
  note_refused(*host);

  std::vector<DeviceInfo> devices;
  for (const Device &device : host->devices()) {
    Result<DeviceInfo> info = device.info();
    if (!info) {
      print_error(info.error());
      return kExitFailure;
    }
    devices.push_back(std::move(*info));
  }

  if (json) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const DeviceInfo &device : devices) {
      nlohmann::ordered_json properties = nlohmann::ordered_json::object();
      for (const auto &[key, value] : device.properties) properties[key] = value;
      out.push_back({{"name", device.name},
                     {"kind", device.kind},
                     {"index", device.index},
                     {"plugin", device.plugin},
                     {"flags", flag_names(device.flags)},
                     {"memory_bytes", device.memory_bytes},
                     {"description", device.description},
                     {"properties", std::move(properties)},
                     {"layers", device.layers},
                     {"over", device.over.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(device.over)},
                     {"base", device.base},
                     {"chain", device.chain}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }

  if (devices.empty()) {
    // Say where to look rather than leaving an empty table.
    std::printf("no devices (see `backplane plugins` for what was loaded and refused)\n");
    return kExitOk;
  }
  Table table({{"name"}, {"kind"}, {"plugin"}, {"flags"}, {"memory", Align::right}, {"description"}});
  std::vector<const DeviceInfo *> layered;
  for (const DeviceInfo &device : devices) {
    if (!device.layers.empty()) {
      layered.push_back(&device);  // listed below, with its chain
      continue;
    }
    std::string flags;
    for (const std::string &flag : flag_names(device.flags)) flags += (flags.empty() ? "" : ",") + flag;
    table.add_row({device.name, device.kind, device.plugin, flags.empty() ? "-" : flags,
                   device.memory_bytes ? format_bytes(device.memory_bytes) : "-", device.description});
  }
  table.print(stdout);
  // Layered devices run on their base: the chain says what sees each call.
  if (!layered.empty()) {
    Table chains({{"layered device"}, {"over"}, {"chain (outermost first)"}, {"runs on"}});
    for (const DeviceInfo *device : layered)
      chains.add_row({device->name, device->over, device->chain, device->base + " (" + device->plugin + ")"});
    std::printf("\n");
    chains.print(stdout);
  }
  // Then each device's own facts (platform, driver, extensions, ...), one per line.
  for (const DeviceInfo &device : devices) {
    if (device.properties.empty() || !device.layers.empty()) continue;  // a layered device's are its base's
    std::printf("\n%s:\n", device.name.c_str());
    for (const auto &[key, value] : device.properties) std::printf("  %-22s %s\n", key.c_str(), value.c_str());
  }
  return kExitOk;
}

}  // namespace backplane::cli
