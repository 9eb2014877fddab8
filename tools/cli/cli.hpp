// What every subcommand of the `backplane` tool shares: the global options,
// the exit codes, opening a host from them, and printing host errors; and
// what `run`, `run --sweep` and `bench` share: timing calls.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backplane/backplane.hpp"

namespace backplane::cli {

// Exit codes, the same for every subcommand (DESIGN.md, "The CLI").
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // a refusal or a failed check
inline constexpr int kExitUsage = 2;    // bad usage

struct GlobalOptions {
  std::vector<std::string> plugin_dirs;  // searched first, in order
  std::string plugin_options_json;       // validated JSON object, or empty
  std::string plugin_pins_json;          // as given (the host checks it), or empty
  bool only_plugin_dirs = false;         // skip BACKPLANE_PLUGIN_PATH and the install dir
  bool probe = false;                    // load each plugin in a probe process first (BP_HOST_PROBE)
};

// The host options the global options stand for.
HostOptions host_options(const GlobalOptions &options);
// Creates the host the options describe. On failure prints the error and
// returns nothing; the caller exits with kExitFailure.
std::optional<Host> open_host(const GlobalOptions &options);

// `error: <message>` and, when the error carries one, `hint: <hint>`, on stderr.
void print_error(const Error &error);
void print_error(const bp_error *error);
// A refusal (bp_group_check's answer) in full: `refused: <message>`, its
// code, the alternatives it lists, and its hint.
void print_refusal(std::FILE *out, const Error &error);
// For listings: when plugin files were refused, one line on stderr saying
// how many and where to see why, so an empty or short listing explains itself.
void note_refused(const Host &host);
// A usage problem the parser could not see (e.g. bad --plugin-options); stderr.
void print_usage_error(const std::string &message);

// ---- timing (cli_common.cpp) ----
// `warmup` calls of `call`, then `iterations` more, each timed in
// microseconds on the steady clock and preceded, untimed, by `prepare(i)`
// where one is given. The first failure of either stops it and is returned.
Result<std::vector<double>> time_calls(uint32_t warmup, uint32_t iterations, const std::function<Status()> &call,
                                       const std::function<Status(uint32_t)> &prepare = {});
// The middle value (the mean of the middle two for an even count); 0 for none.
double median(std::vector<double> values);

// ---- fleets (fleet.cpp) ----
// The host of a fleet: created from `fleet_file` with the options, or, when
// it is empty, created from the options with the built-in default fleet
// (configs/default.json) loaded into it. On failure prints every problem on
// stderr (print_problems) and returns nothing; the caller exits with
// kExitFailure. `failure`, when given, gets the error as well (for --json).
// A fleet whose transport spans several processes (mpirun) leaves standard
// output to process 0: the others' is closed.
std::optional<Host> open_fleet(const GlobalOptions &options, const std::string &fleet_file,
                               std::optional<Error> *failure = nullptr);
// How the fleet is named in output: the file, or "built-in default fleet".
std::string fleet_label(const std::string &fleet_file);
// Every problem of a fleet error, one `FILE:POINTER: reason` line each (the
// error itself when it gathers none), and `  hint: ...` where there is one.
// `file` stands in where a problem names no file.
void print_problems(std::FILE *out, const Error &error, const std::string &file);
// A group's devices by name, and the plugins that run them (those of its
// ranks' base devices, distinct, in rank order).
struct GroupDescription {
  std::vector<std::string> devices;  // "cpu:0", ...
  // Per rank, "trace → validate → cpu:0" for a layered device, else its
  // name; and its base device, where dispatch runs it.
  std::vector<std::string> chains, bases;
  bool layered = false;
  std::vector<PluginInfo> plugins;
  // A group across processes: how many, and the ranks of all of them.
  uint32_t processes = 1;
  uint64_t global_ranks = 0;
  std::string device_text() const;  // "cpu:0, cpu:1", "cpu:0, cpu:1 (this process's; 4 ranks across 2 processes)"
  std::string plugin_text() const;  // "cpu 0.1.0"
};
Result<GroupDescription> describe_group(const Host &host, const GroupView &group);
// The name in `known` closest to `given` by edit distance, or "" when none
// is close enough to suggest.
std::string closest_name(const std::string &given, const std::vector<std::string> &known);

// open_transports: open each transport to show what it runs on (--transports).
int run_plugins(const GlobalOptions &options, bool json, bool open_transports);
// `fleet_file` empty: the loaded plugins' devices only.
int run_devices(const GlobalOptions &options, const std::string &fleet_file, bool json);
int run_caps(const GlobalOptions &options, bool json);
int run_validate(const GlobalOptions &options, const std::string &fleet_file, bool json);
// `fleet_file` empty: the built-in default fleet. `sweep`: run_sweep instead.
int run_run(const GlobalOptions &options, const std::string &fleet_file, bool json, bool sweep);
// Every supported collective x type x op x mode on cpu:0..3 (cmd_sweep.cpp).
int run_sweep(const GlobalOptions &options);

// What `backplane explain` is asked about: names as typed, checked there.
struct ExplainRequest {
  std::string group, collective, dtype, op;  // dtype, op: empty when not given
};
// `fleet_file` empty: the built-in default fleet.
int run_explain(const GlobalOptions &options, const std::string &fleet_file, const ExplainRequest &request,
                bool json);
// What `backplane bench` is asked, as typed (cmd_bench.cpp checks it).
// Flags and defaults are nccl-tests' (all_reduce_perf and its siblings).
struct BenchOptions {
  std::string collective;                            // "all_reduce", ..., or "all"
  std::string min_bytes = "32M", max_bytes = "32M";  // -b, -e
  std::string step_bytes = "1M";                     // -i: added when -f is 1
  uint64_t step_factor = 1;                          // -f: multiplied when above 1
  uint32_t devices = 4;                              // -g: cpu:0..N-1
  bool devices_given = false;                        // -g on the command line
  std::string fleet_file, group;                     // --fleet, --group: instead of -g
  std::string dtype = "float", op = "sum";           // -d, -o
  uint32_t root = 0;                                 // -r
  uint32_t iterations = 20, warmup = 5;              // -n, -w
  uint32_t rounds = 1;                               // --rounds: timings per size and mode, the median reported
  uint32_t check = 1;                                // -c: 0 = no check
  bool json = false;
};
int run_bench(const GlobalOptions &options, const BenchOptions &bench);

// cmd_conform.cpp: the conformance suite over one plugin file.
int run_conform(const GlobalOptions &options, const std::string &plugin_file, bool json, bool quick);

}  // namespace backplane::cli
