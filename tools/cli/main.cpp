// `backplane`: the command-line tool over the host library. Parses the
// global options and the subcommand, then hands over to cmd_<name>.cpp.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <new>
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
  app.add_option("--plugin-pins", options.plugin_pins_json,
                 "Pin plugin files to the SHA-256 of their content (sha256sum), a JSON object, e.g. "
                 "'{\"libbackplane_cpu.so\":\"<64 hex digits>\"}': a file of that name with other content is refused")
      ->type_name("JSON");
  app.add_flag("--only-plugin-dirs", options.only_plugin_dirs,
               "Search only the --plugin-dir directories (not BACKPLANE_PLUGIN_PATH, not the install directory)");

  bool json = false;
  CLI::App *plugins = app.add_subcommand("plugins", "Plugin files found: loaded, and refused with the reason");
  plugins->add_flag("--json", json, "Print JSON");
  plugins->add_flag("--probe", options.probe,
                    "Load each plugin file in a probe process first: one that crashes or hangs is refused");
  bool open_transports = false;
  plugins->add_flag("--transports", open_transports,
                    "Open each transport (mpi) to show its library, version and the thread level granted "
                    "(initialises MPI: a world of one without mpirun)");
  CLI::App *devices = app.add_subcommand("devices", "Devices of the loaded plugins, and of a fleet with its layered devices");
  devices->add_flag("--json", json, "Print JSON");
  std::string devices_fleet;
  devices->add_option("FLEET", devices_fleet, "Fleet file: its layered devices are listed too, with their chains");
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
  CLI::App *bench = app.add_subcommand(
      "bench", "Time a collective over a range of sizes in nccl-tests' conventions (all_reduce_perf's flags)");
  cli::BenchOptions bench_options;
  bench->add_option("COLLECTIVE", bench_options.collective,
                    "all_reduce, reduce, broadcast, all_gather, reduce_scatter, gather, scatter, all_to_all, "
                    "barrier, or all (every one but barrier the group runs)")
      ->required();
  bench->add_option("-b,--minbytes", bench_options.min_bytes, "Smallest size, e.g. 8, 64K, 32M, 1G (powers of 1024)")
      ->type_name("SIZE")
      ->capture_default_str();
  bench->add_option("-e,--maxbytes", bench_options.max_bytes, "Largest size")->type_name("SIZE")->capture_default_str();
  bench->add_option("-f,--stepfactor", bench_options.step_factor,
                    "Multiply the size by F each step (1: add -i instead)")
      ->type_name("F")
      ->capture_default_str();
  bench->add_option("-i,--stepbytes", bench_options.step_bytes, "Add this each step when -f is 1")
      ->type_name("SIZE")
      ->capture_default_str();
  CLI::Option *bench_devices = bench
                                    ->add_option("-g,--ngpus", bench_options.devices,
                                                 "Devices: a group of cpu:0..N-1 (cpu configured with max(N, 8))")
                                    ->type_name("N")
                                    ->capture_default_str();
  bench->add_option("--fleet", bench_options.fleet_file, "Instead of -g: a fleet file (configs/schema.json)")
      ->type_name("FILE");
  bench->add_option("--group", bench_options.group, "The fleet's group (needed when it has more than one)")
      ->type_name("G");
  bench->add_option("-d,--datatype", bench_options.dtype,
                    "Element type: ours (f32, bf16, i32, ...) or nccl-tests' "
                    "(float, half, bfloat16, double, int32, ...)")
      ->type_name("TYPE")
      ->capture_default_str();
  bench->add_option("-o,--op", bench_options.op, "Reduce op: sum, prod, min, max, avg")
      ->type_name("OP")
      ->capture_default_str();
  bench->add_option("-r,--root", bench_options.root, "Root rank of reduce, broadcast, gather, scatter")
      ->capture_default_str();
  bench->add_option("-n,--iters", bench_options.iterations, "Timed calls per size and mode")->capture_default_str();
  bench->add_option("-w,--warmup_iters", bench_options.warmup, "Untimed calls before them")->capture_default_str();
  bench->add_option("--rounds", bench_options.rounds,
                    "Time each size and mode this many times, taking turns with the reference (opencl: the copy "
                    "kernel), and report the round of median time")
      ->check(CLI::Range(1u, 1000u))
      ->capture_default_str();
  bench->add_option("-c,--check", bench_options.check, "Check the last call against the reference (0: do not)")
      ->capture_default_str();
  bench->add_flag("--json", bench_options.json, "Print JSON (a list of results for `all`)");
  bench->footer(
      "Defaults are nccl-tests' (-b 32M -e 32M: one size; -n 20 -w 5 -c 1 -d float -o sum -r 0), and -g 4;\n"
      "sweep with e.g. -b 8 -e 64M -f 2. -c N checks the last call for any N above 0.\n"
      "Columns: size count type redop root, then out-of-place and in-place time algbw busbw #wrong. size is\n"
      "a rank's largest buffer, counts rounded down as nccl-tests does; time is the MEDIAN of -n calls\n"
      "(nccl-tests prints a mean); algbw = size / time; busbw = algbw x 2(n-1)/n for all_reduce, (n-1)/n for\n"
      "reduce_scatter, all_gather, all_to_all, gather, scatter, 1 for reduce and broadcast.\n"
      "On cpu groups each mode adds traffic, the bytes read + written per second as the cpu plugin moves them\n"
      "(n ranks, B = count x type size: all_reduce n.B + n.B, reduce n.B + B, reduce_scatter n^2.B + n.B,\n"
      "broadcast B + n.B, all_gather n.B + n^2.B, gather/scatter n.B + n.B, all_to_all n^2.B + n^2.B; in\n"
      "place a rank's own block is not copied), and %peak, that against a memcpy probe of this run.\n"
      "Exit codes: 0 ok, 1 a wrong element, a failed call or a refusal, 2 bad usage.");

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
                             "' (known: plugins, devices, caps, validate, run, explain, bench, conform)");
    else if (!extras.empty())
      cli::print_usage_error("unexpected argument '" + extras.front() + "'");
    else
      cli::print_usage_error(
          "a subcommand is required: plugins, devices, caps, validate, run, explain, bench or conform");
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

  auto run_subcommand = [&]() -> int {
    if (plugins->parsed()) return cli::run_plugins(options, json, open_transports);
    if (devices->parsed()) return cli::run_devices(options, devices_fleet, json);
    if (caps->parsed()) return cli::run_caps(options, json);
    if (validate->parsed()) return cli::run_validate(options, fleet_file, json);
    if (run->parsed()) return cli::run_run(options, fleet_file, json, sweep);
    if (explain->parsed()) return cli::run_explain(options, fleet_file, explain_request, json);
    if (bench->parsed()) {
      bench_options.devices_given = bench_devices->count() > 0;
      return cli::run_bench(options, bench_options);
    }
    if (conform->parsed()) return cli::run_conform(options, conform_file, json, conform_quick);
    return cli::kExitUsage;  // unreachable: one subcommand was parsed
  };
  // An exception the subcommand did not expect (memory running out for a
  // reference copy, say) ends it with one line and exit code 1, not abort().
  try {
    return run_subcommand();
  } catch (const std::bad_alloc &) {
    std::fprintf(stderr, "error: out of memory\n");
  } catch (const std::exception &error) {
    std::fprintf(stderr, "error: %s\n", error.what());
  } catch (...) {
    std::fprintf(stderr, "error: an exception of unknown type\n");
  }
  return cli::kExitFailure;
}
