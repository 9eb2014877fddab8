// Fleets for the CLI: opening a fleet's host (a file, or the built-in
// default fleet), printing a fleet's problems, and suggesting close names.
#include <algorithm>
#include <numeric>

#include "cli.hpp"
#include "default_fleet.h"

namespace backplane::cli {
namespace {

constexpr const char *kDefaultFleetLabel = "built-in default fleet";

void print_problem(std::FILE *out, const bp_error *problem, const std::string &file) {
  // A fleet loaded from text calls itself "<text>"; the caller's name for
  // it reads better.
  const char *named = bp_error_field(problem, "file");
  std::string where = named && *named && std::string_view(named) != "<text>" ? named : file;
  const char *pointer = bp_error_field(problem, "pointer");
  if (pointer && *pointer) where += std::string(":") + pointer;
  const char *reason = bp_error_field(problem, "reason");
  std::fprintf(out, "%s: %s\n", where.c_str(), reason && *reason ? reason : bp_error_message(problem));
  const char *hint = bp_error_field(problem, "hint");
  if (hint && *hint) std::fprintf(out, "  hint: %s\n", hint);
}

size_t edit_distance(const std::string &a, const std::string &b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), size_t{0});
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::optional<Host> open_fleet(const GlobalOptions &options, const std::string &fleet_file,
                              std::optional<Error> *failure) {
  if (fleet_file.empty()) {
    Result<Host> host = Host::create(host_options(options));
    if (!host) {
      print_error(host.error());
      if (failure) *failure = host.error();
      return std::nullopt;
    }
    if (Status loaded = host->load_fleet_text(kDefaultFleetJson); !loaded) {
      print_problems(stderr, loaded.error(), kDefaultFleetLabel);
      if (failure) *failure = loaded.error();
      return std::nullopt;
    }
    return std::move(host).value();
  }
  Result<Host> host = Host::create_from_fleet_file(fleet_file, host_options(options));
  if (!host) {
    print_problems(stderr, host.error(), fleet_file);
    if (failure) *failure = host.error();
    return std::nullopt;
  }
  // Under mpirun every process runs the command; process 0 alone prints
  // what it finds (the others still check their ranks, and say on stderr
  // what fails there).
  if (Result<bp_transport_facts> transport = host->transport();
      transport && transport->process_count > 1 && transport->process_index != 0)
    if (!std::freopen("/dev/null", "w", stdout)) std::fclose(stdout);
  return std::move(host).value();
}

std::string fleet_label(const std::string &fleet_file) {
  return fleet_file.empty() ? std::string(kDefaultFleetLabel) + " (configs/default.json)" : fleet_file;
}

void print_problems(std::FILE *out, const Error &error, const std::string &file) {
  const std::vector<const bp_error *> problems = error.problems();
  if (problems.empty()) print_problem(out, error.get(), file);
  for (const bp_error *problem : problems) print_problem(out, problem, file);
}

std::string GroupDescription::device_text() const {
  std::string text;
  for (const std::string &device : devices) text += (text.empty() ? "" : ", ") + device;
  if (processes > 1)
    text += " (this process's; " + std::to_string(global_ranks) + " ranks across " + std::to_string(processes) +
            " processes)";
  return text;
}

std::string GroupDescription::plugin_text() const {
  std::string text;
  for (const PluginInfo &plugin : plugins)
    text += (text.empty() ? "" : ", ") + plugin.name + (plugin.version.empty() ? "" : " " + plugin.version);
  return text;
}

Result<GroupDescription> describe_group(const Host &host, const GroupView &group) {
  GroupDescription description;
  const std::vector<PluginInfo> loaded = host.plugins();
  for (size_t r = 0; r < group.size(); ++r) {
    Result<DeviceInfo> info = group.device(r).info();
    if (!info) return info.error();
    Result<DeviceInfo> base = group.device(r).base().info();
    if (!base) return base.error();
    description.devices.push_back(info->name);
    description.chains.push_back(info->chain);
    description.bases.push_back(base->name);
    description.layered = description.layered || !info->layers.empty();
    auto listed = [&](const PluginInfo &plugin) { return plugin.name == base->plugin; };
    if (std::any_of(description.plugins.begin(), description.plugins.end(), listed)) continue;
    auto found = std::find_if(loaded.begin(), loaded.end(), listed);
    description.plugins.push_back(found != loaded.end() ? *found : PluginInfo{base->plugin, "", "", "", 0, 0, {}, {}, {}, ""});
  }
  if (Result<bp_group_span_info> span = group.span(); span && span->process_count > 1) {
    description.processes = span->process_count;
    description.global_ranks = span->global_size;
  }
  return description;
}

std::string closest_name(const std::string &given, const std::vector<std::string> &known) {
  std::string lowered = given;
  std::transform(lowered.begin(), lowered.end(), lowered.begin(),
                 [](unsigned char c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c); });
  // Close enough: a third of the name may differ, and at least one character.
  const size_t limit = std::max<size_t>(1, given.size() / 3);
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string &name : known) {
    const size_t distance = edit_distance(lowered, name);
    if (distance < best_distance) {
      best = name;
      best_distance = distance;
    }
  }
  return best;
}

}  // namespace backplane::cli
