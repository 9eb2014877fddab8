// Opening a host from the global options and printing host errors and
// refusals, shared by every subcommand; timing calls, shared by `run`,
// `run --sweep` and `bench`.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli.hpp"

namespace backplane::cli {

HostOptions host_options(const GlobalOptions &options) {
  HostOptions host_options;
  host_options.plugin_dirs = options.plugin_dirs;
  host_options.plugin_options_json = options.plugin_options_json;
  host_options.plugin_pins_json = options.plugin_pins_json;
  if (options.only_plugin_dirs) host_options.flags |= BP_HOST_IGNORE_ENV_PATH | BP_HOST_IGNORE_INSTALL_PATH;
  if (options.probe) host_options.flags |= BP_HOST_PROBE;
  return host_options;
}

std::optional<Host> open_host(const GlobalOptions &options) {
  Result<Host> host = Host::create(host_options(options));
  if (!host) {
    print_error(host.error());
    return std::nullopt;
  }
  return std::move(host).value();
}

void print_error(const bp_error *error) {
  std::fprintf(stderr, "error: %s\n", bp_error_message(error));
  // The hint is a plain string field; absent or empty means there is none.
  const char *hint = bp_error_field(error, "hint");
  if (hint && *hint) std::fprintf(stderr, "hint: %s\n", hint);
}

void print_error(const Error &error) { print_error(error.get()); }

namespace {

// One line per alternative a refusal lists: a loaded kind that runs the
// request, or a refused plugin file that declares it.
std::vector<std::string> alternative_lines(const Error &error) {
  std::vector<std::string> lines;
  nlohmann::json alternatives = nlohmann::json::parse(error.field("alternatives"), nullptr, false);
  if (!alternatives.is_array()) return lines;
  for (const nlohmann::json &alternative : alternatives) {
    const std::string kind = alternative.value("device_kind", "?");
    if (alternative.contains("plugin"))
      lines.push_back(kind + " devices (plugin " + alternative.value("plugin", "?") + ")");
    else
      lines.push_back(kind + " devices: declared by '" + alternative.value("file", "?") +
                      "', which failed to load: " + alternative.value("reason", "?"));
  }
  return lines;
}

}  // namespace

void print_refusal(std::FILE *out, const Error &error) {
  std::fprintf(out, "refused: %s\n", std::string(error.message()).c_str());
  std::fprintf(out, "  code: %s\n", std::string(error.code_name()).c_str());
  const std::vector<std::string> alternatives = alternative_lines(error);
  if (alternatives.empty())
    std::fprintf(out,
                 "  alternatives: none (no other loaded device kind runs it, and no refused plugin declares it)\n");
  else
    std::fprintf(out, "  alternatives:\n");
  for (const std::string &line : alternatives) std::fprintf(out, "    %s\n", line.c_str());
  if (const std::string hint = error.field("hint"); !hint.empty()) std::fprintf(out, "  hint: %s\n", hint.c_str());
}

void note_refused(const Host &host) {
  const size_t refused = host.refused().size();
  if (refused)
    std::fprintf(stderr, "note: %zu plugin file%s refused; `backplane plugins` says why\n", refused,
                 refused == 1 ? " was" : "s were");
}

void print_usage_error(const std::string &message) {
  std::fprintf(stderr, "error: %s\nRun with --help for more information.\n", message.c_str());
}

Result<std::vector<double>> time_calls(uint32_t warmup, uint32_t iterations, const std::function<Status()> &call,
                                       const std::function<Status(uint32_t)> &prepare) {
  for (uint32_t i = 0; i < warmup; ++i)
    if (Status status = call(); !status) return status.error();
  std::vector<double> micros;
  for (uint32_t i = 0; i < iterations; ++i) {
    if (Status prepared = prepare ? prepare(i) : Status(); !prepared) return prepared.error();
    const auto start = std::chrono::steady_clock::now();
    Status status = call();
    const auto stop = std::chrono::steady_clock::now();
    if (!status) return status.error();
    micros.push_back(std::chrono::duration<double, std::micro>(stop - start).count());
  }
  return micros;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

}  // namespace backplane::cli
