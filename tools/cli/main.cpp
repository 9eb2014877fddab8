// `backplane`: the command-line tool over the host library. Parses the
// global options and the subcommand, then hands over to cmd_<name>.cpp.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli.hpp"

namespace cli = backplane::cli;

int main(int argc, char **argv) {
  CLI::App app{"Backplane: inspect plugins, devices and capabilities; run and check collectives.", "backplane"};
  app.footer(
      "Plugins are searched in the --plugin-dir directories, then BACKPLANE_PLUGIN_PATH (colon-separated),\n"
      "then the install directory next to libbackplane.\n"
      "Exit codes: 0 ok, 1 a refusal or a failed check, 2 bad usage.");
  // At most one subcommand; none, or a word that is not one, is reported
  // below with a message naming the subcommands.
  app.require_subcommand(0, 1);
  // Subcommands inherit this: global options may come after the subcommand.
  app.fallthrough();

  cli::GlobalOptions options;
  app.add_option("--plugin-dir", options.plugin_dirs, "Search DIR for plugins first (repeatable)")
      ->type_name("DIR")
      ->allow_extra_args(false);  // one DIR per flag, so a subcommand after it is not taken for a DIR
  std::string plugin_options;
  app.add_option("--plugin-options", plugin_options,
                 "Options per device kind, a JSON object, e.g. '{\"cpu\":{\"devices\":16}}'")
      ->type_name("JSON");
  app.add_flag("--only-plugin-dirs", options.only_plugin_dirs,
               "Search only the --plugin-dir directories (not BACKPLANE_PLUGIN_PATH, not the install directory)");

  bool json = false;
  CLI::App *plugins = app.add_subcommand("plugins", "Plugin files found: loaded, and refused with the reason");
  plugins->add_flag("--json", json, "Print JSON");
  CLI::App *devices = app.add_subcommand("devices", "Devices of the loaded plugins");
  devices->add_flag("--json", json, "Print JSON");
  CLI::App *caps = app.add_subcommand("caps", "Capability matrix: device kinds x collectives x types x ops");
  caps->add_flag("--json", json, "Print JSON");
  CLI::App *validate = app.add_subcommand("validate", "Check a fleet file without running anything");
  std::string fleet_file;
  validate->add_option("FLEET", fleet_file, "Fleet file (JSON, configs/schema.json)")->required();
  validate->add_flag("--json", json, "Print JSON");
  CLI::App *run = app.add_subcommand(
      "run", "Bring a fleet up, run its workload and check every result (nccl-tests columns)");
  run->add_option("FLEET", fleet_file, "Fleet file (default: the built-in configs/default.json, cpu:0..cpu:3)");
  run->add_flag("--json", json, "Print JSON");
  bool sweep = false;
  run->add_flag("--sweep", sweep, "Instead of a workload: every collective x type x op x mode cpu:0..cpu:3 support");
  CLI::App *explain = app.add_subcommand(
      "explain", "Would a collective run on a fleet's group, and by which plugin; or why not (runs nothing)");
  cli::ExplainRequest explain_request;
  explain->add_option("FLEET", fleet_file, "Fleet file (default: the built-in configs/default.json)");
  explain->add_option("--group", explain_request.group, "Group of the fleet")->required();
  explain->add_option("--collective", explain_request.collective, "e.g. all_reduce")->required();
  explain->add_option("--dtype", explain_request.dtype, "Element type, e.g. f32 (none for barrier)");
  explain->add_option("--op", explain_request.op, "Reduce op, e.g. sum (default sum)");
  explain->add_flag("--json", json, "Print JSON");
  CLI::App *conform = app.add_subcommand(
      "conform", "Conformance suite: check every capability a plugin file declares, and that it refuses the rest");
  std::string conform_file;
  bool conform_quick = false;
  conform->add_option("PLUGIN", conform_file, "Plugin file (libbackplane_<name>.so), loaded alone")->required();
  conform->add_flag("--json", json, "Print JSON");
  conform->add_flag("--quick", conform_quick, "Fewer groups and sizes (seconds even in sanitizer builds)");

  // Extra arguments are allowed on the top level only (set after the
  // subcommands, so they do not inherit it), to tell "unknown subcommand"
  // apart from other mistakes.
  app.allow_extras();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &error) {
    // --help is a ParseError that exits 0; every real one is bad usage.
    return app.exit(error) == 0 ? cli::kExitOk : cli::kExitUsage;
  }
  const std::vector<std::string> extras = app.remaining();
  const bool any_subcommand = app.get_subcommands().size() > 0;
  if (!any_subcommand || !extras.empty()) {
    if (!any_subcommand && !extras.empty() && extras.front().rfind('-', 0) != 0)
      cli::print_usage_error("unknown subcommand '" + extras.front() +
                             "' (known: plugins, devices, caps, validate, run, explain, conform)");
    else if (!extras.empty())
      cli::print_usage_error("unexpected argument '" + extras.front() + "'");
    else
      cli::print_usage_error("a subcommand is required: plugins, devices, caps, validate, run, explain or conform");
    return cli::kExitUsage;
  }

  if (!plugin_options.empty()) {
    nlohmann::json parsed = nlohmann::json::parse(plugin_options, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) {
      cli::print_usage_error("--plugin-options is not valid JSON: " + plugin_options);
      return cli::kExitUsage;
    }
    if (!parsed.is_object()) {
      cli::print_usage_error(
          "--plugin-options must be a JSON object keyed by device kind, e.g. '{\"cpu\":{\"devices\":16}}'");
      return cli::kExitUsage;
    }
    options.plugin_options_json = parsed.dump();
  }

  if (plugins->parsed()) return cli::run_plugins(options, json);
  if (devices->parsed()) return cli::run_devices(options, json);
  if (caps->parsed()) return cli::run_caps(options, json);
  if (validate->parsed()) return cli::run_validate(options, fleet_file, json);
  if (run->parsed()) return cli::run_run(options, fleet_file, json, sweep);
  if (explain->parsed()) return cli::run_explain(options, fleet_file, explain_request, json);
  if (conform->parsed()) return cli::run_conform(options, conform_file, json, conform_quick);
  return cli::kExitUsage;  // unreachable: one subcommand was parsed
}
