// `backplane validate FLEET.json`: brings a fleet's host up without running
// anything and prints every problem as FILE:POINTER: reason, or that it is fine.
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli.hpp"

namespace backplane::cli {
namespace {

// Devices the fleet names: every entry's count (1 when not given). The host
// lists what its plugins enumerate, which can be more than the fleet uses.
size_t fleet_device_count(const std::string &fleet_file) {
  std::ifstream in(fleet_file);
  nlohmann::json fleet = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  size_t devices = 0;
  if (fleet.is_object() && fleet.contains("devices") && fleet["devices"].is_array())
    for (const nlohmann::json &entry : fleet["devices"])
      devices += entry.is_object() ? entry.value("count", size_t{1}) : 0;
  return devices;
}

std::string counted(size_t n, const char *one, const char *many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

nlohmann::ordered_json as_json(const bp_error *error) {
  return nlohmann::ordered_json::parse(bp_error_json(error), nullptr, /*allow_exceptions=*/false);
}

}  // namespace

int run_validate(const GlobalOptions &options, const std::string &fleet_file, bool json) {
  Result<Host> host = Host::create_from_fleet_file(fleet_file, host_options(options));
  size_t devices = 0, groups = 0, entries = 0;
  if (host) {
    devices = fleet_device_count(fleet_file);
    groups = host->groups().size();
    entries = host->workload_count();
  }

  if (json) {
    nlohmann::ordered_json out = {{"file", fleet_file}, {"valid", host.has_value()}};
    nlohmann::ordered_json problems = nlohmann::ordered_json::array();
    if (!host) {
      const std::vector<const bp_error *> listed = host.error().problems();
      if (listed.empty()) problems.push_back(as_json(host.error().get()));
      for (const bp_error *problem : listed) problems.push_back(as_json(problem));
    } else {
      out["devices"] = devices;
      out["groups"] = groups;
      out["workload_entries"] = entries;
    }
    out["problems"] = std::move(problems);
    std::printf("%s\n", out.dump(2).c_str());
    return host ? kExitOk : kExitFailure;
  }

  if (!host) {
    print_problems(stdout, host.error(), fleet_file);
    return kExitFailure;
  }
  std::printf("%s: ok (%s, %s, %s)\n", fleet_file.c_str(), counted(devices, "device", "devices").c_str(),
              counted(groups, "group", "groups").c_str(),
              counted(entries, "workload entry", "workload entries").c_str());
  return kExitOk;
}

}  // namespace backplane::cli
