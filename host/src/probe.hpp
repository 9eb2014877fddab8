// Probing: a host that probes loads each plugin file first in a process of
// its own (backplane-probe, tools/probe), so that a plugin whose constructor
// crashes, whose entry hangs or calls exit() is refused, with what happened
// and its last output, instead of taking the host down. Files that passed
// are remembered in the cache folder by their identity, so a second start
// pays nothing for them.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>

#include "error.hpp"

namespace backplane {

inline constexpr std::chrono::milliseconds kDefaultProbeTimeout{5000};

struct ProbeOptions {
  bool enabled = false;
  std::chrono::milliseconds timeout = kDefaultProbeTimeout;
  // backplane-probe, where it was looked for; helper_found says whether it is
  // there (without it every file is refused: probing was asked for).
  std::filesystem::path helper;
  bool helper_found = false;
  std::filesystem::path cache_directory;  // empty: nothing is remembered
};

// The probe settings of a host: on when `requested` (BP_HOST_PROBE, or a
// fleet's "probe": true through host.probe = probe_options(true)) or when
// BACKPLANE_PROBE=1; the timeout from BACKPLANE_PROBE_TIMEOUT_MS; the helper
// from BACKPLANE_PROBE_HELPER, else beside the host library; the cache in
// BACKPLANE_CACHE_DIR, else $XDG_CACHE_HOME/backplane, else
// ~/.cache/backplane. Every variable is read with secure_getenv. Logs what it
// ignores, and a warning when probing is on but the helper is missing.
ProbeOptions probe_options(bool requested);

// Loads the plugin file open at `fd` (`path` names it in messages) in the
// helper, with the options bp_plugin_entry will get, and waits for it at
// most options.timeout. OK when it ran to the end (or the cache says this
// very file did before); else a refusal: PLUGIN_LOAD when the process died
// before the system loader returned (the plugin's constructors), PLUGIN_INIT
// after, naming the signal, exit status or timeout, where it was, and the
// last lines it wrote.
Status probe_plugin_file(const std::string &path, int fd, const std::string &plugin_options_json,
                         const ProbeOptions &options);

}  // namespace backplane
