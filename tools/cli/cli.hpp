// What every subcommand of the `backplane` tool shares: the global options,
// the exit codes, opening a host from them, and printing host errors.
#pragma once

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
  bool only_plugin_dirs = false;         // skip BACKPLANE_PLUGIN_PATH and the install dir
};

// Creates the host the options describe. On failure prints the error and
// returns nothing; the caller exits with kExitFailure.
std::optional<Host> open_host(const GlobalOptions &options);

// `error: <message>` and, when the error carries one, `hint: <hint>`, on stderr.
void print_error(const Error &error);
void print_error(const bp_error *error);
// For listings: when plugin files were refused, one line on stderr saying
// how many and where to see why, so an empty or short listing explains itself.
void note_refused(const Host &host);
// A usage problem the parser could not see (e.g. bad --plugin-options); stderr.
void print_usage_error(const std::string &message);

int run_plugins(const GlobalOptions &options, bool json);
int run_devices(const GlobalOptions &options, bool json);
int run_caps(const GlobalOptions &options, bool json);
// `fleet_file` empty: the default fleet.
int run_run(const GlobalOptions &options, const std::string &fleet_file);

}  // namespace backplane::cli
