// backplane-probe: loads one plugin file in a process of its own and runs
// what a host runs when it loads a plugin (its constructors, bp_plugin_entry,
// configure, device_count, kind_info, device_info, destroy, its destructors),
// writing a report line before each step (probe_report.hpp). A host that
// probes (BACKPLANE_PROBE=1, BP_HOST_PROBE) runs this first, so a plugin that
// crashes, exits or hangs while loading is refused instead of taking the host
// with it. What the plugin declares is checked by the host's own load
// afterwards; this only runs the plugin's code.
//
//   backplane-probe [--report-fd N] [--plugin-fd N] [--options-json JSON] [--] PLUGIN
//
// By hand (or under gdb), `backplane-probe libbackplane_x.so` writes the
// report on stdout. Exit status: 0 once everything returned, 2 for bad
// usage; any other end is the plugin's doing.
#include <dlfcn.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "backplane/plugin.h"
#include "probe_report.hpp"

// The sink behind the services' report_error, as the host has one of its own.
struct bp_error_sink {
  int32_t code = BP_OK;
  std::string message;
};

namespace {
namespace report = backplane::probe_report;

constexpr int kExitUsage = 2;

int report_fd = STDOUT_FILENO;

// One write per line, unbuffered: when the plugin takes the process down
// right after, what was said is already in the pipe.
void say(std::string_view word, std::string_view text = {}) {
  const std::string out = report::line(word, text);
  size_t written = 0;
  while (written < out.size()) {
    const ssize_t n = ::write(report_fd, out.data() + written, out.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::fprintf(stderr, "backplane-probe: cannot write the report: %s\n", std::strerror(errno));
      std::_Exit(EXIT_FAILURE);
    }
    written += static_cast<size_t>(n);
  }
}

void step(std::string_view stage, std::string_view kind = {}) {
  say(report::kStep, kind.empty() ? std::string(stage) : std::string(stage) + " " + std::string(kind));
}

void report_error(bp_error_sink *sink, int32_t code, const char *message) {
  if (!sink) return;
  sink->code = code;
  sink->message = message ? message : "";
}

// Plugin log lines go to stderr, whose last lines the host keeps when the
// probe fails; debug lines are left out so they cannot crowd out the rest.
void plugin_log(void *, int32_t level, const char *category, const char *message) {
  static constexpr const char *names[] = {"error", "warn", "info"};
  if (level < BP_LOG_ERROR || level > BP_LOG_INFO) return;
  std::fprintf(stderr, "%s: %s: %s\n", category ? category : "plugin", names[level], message ? message : "");
}

// A string the plugin handed over, read no further than the host reads it.
std::string bounded(const char *text, size_t max_bytes) {
  if (!text) return "(null)";
  const size_t length = ::strnlen(text, max_bytes + 1);
  return length > max_bytes ? std::string(text, max_bytes) + "..." : std::string(text, length);
}

std::string failure(const char *function, int32_t code, const bp_error_sink &sink) {
  return std::string(function) + " failed with code " + std::to_string(code) +
         (sink.message.empty() ? "" : ": " + sink.message);
}

struct Arguments {
  std::string plugin;        // the file, as the host names it
  int plugin_fd = -1;        // when set, the file is loaded through this descriptor
  std::string options_json = "{}";  // what bp_plugin_entry and configure get
};

[[noreturn]] void usage(const std::string &problem) {
  std::fprintf(stderr,
               "backplane-probe: %s\n"
               "usage: backplane-probe [--report-fd N] [--plugin-fd N] [--options-json JSON] [--] PLUGIN\n",
               problem.c_str());
  std::exit(kExitUsage);
}

int descriptor_number(const char *text) {
  char *end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < 0 || value > 1 << 20)
    usage(std::string("not a file descriptor: '") + text + "'");
  return static_cast<int>(value);
}

Arguments parse(int argc, char **argv) {
  Arguments arguments;
  bool options_ended = false;  // after "--", every word is the plugin file
  for (int i = 1; i < argc; ++i) {
    const std::string_view word = argv[i];
    if (!options_ended && word == "--") {
      options_ended = true;
      continue;
    }
    if (options_ended) {
      if (!arguments.plugin.empty()) usage("one plugin file at a time");
      arguments.plugin = word;
      continue;
    }
    const bool takes_value = word == "--report-fd" || word == "--plugin-fd" || word == "--options-json";
    if (takes_value && i + 1 >= argc) usage(std::string(word) + " needs a value");
    if (word == "--report-fd") {
      report_fd = descriptor_number(argv[++i]);
    } else if (word == "--plugin-fd") {
      arguments.plugin_fd = descriptor_number(argv[++i]);
    } else if (word == "--options-json") {
      arguments.options_json = argv[++i];
    } else if (word.starts_with("-")) {
      usage("unknown option '" + std::string(word) + "'");
    } else if (arguments.plugin.empty()) {
      arguments.plugin = word;
    } else {
      usage("one plugin file at a time");
    }
  }
  if (arguments.plugin.empty()) usage("no plugin file given");
  return arguments;
}

// The kinds' devices, as the host enumerates them. Returns false where the
// host would refuse the plugin before going on (the reason is noted).
bool enumerate(bp_plugin_state *state, const bp_plugin_functions &functions, const bp_plugin_descriptor &descriptor,
               const nlohmann::json &options) {
  if (!functions.device_count || !functions.device_info) {
    say(report::kNote, "device_count or device_info is NULL");
    return false;
  }
  if (descriptor.device_kind_count > report::kMaxKinds || (descriptor.device_kind_count && !descriptor.device_kinds)) {
    say(report::kNote, "the descriptor's device kinds are unreadable");
    return false;
  }
  for (uint32_t k = 0; k < descriptor.device_kind_count; ++k) {
    const std::string kind = bounded(descriptor.device_kinds[k], report::kMaxNameBytes);
    bp_error_sink sink;
    if (functions.configure && options.contains(kind)) {
      step(report::kStageConfigure, kind);
      const std::string text = options[kind].dump();
      if (const int32_t code = functions.configure(state, k, text.c_str(), &sink); code != BP_OK) {
        say(report::kNote, failure("configure", code, sink));
        return false;
      }
    }
    step(report::kStageDeviceCount, kind);
    uint32_t count = 0;
    if (const int32_t code = functions.device_count(state, k, &count, &sink); code != BP_OK) {
      say(report::kNote, failure("device_count", code, sink));
      return false;
    }
    say(report::kKind, kind + " " + std::to_string(count));
    if (count > report::kMaxDevicesPerKind) {
      say(report::kNote, "more devices than a host accepts");
      return false;
    }
    if (functions.kind_info) {
      step(report::kStageKindInfo, kind);
      bp_plugin_kind_info info{};
      info.struct_size = sizeof info;
      if (const int32_t code = functions.kind_info(state, k, &info, &sink); code != BP_OK) {
        say(report::kNote, failure("kind_info", code, sink));
        return false;
      }
    }
    if (count > 0) step(report::kStageDeviceInfo, kind);
    for (uint32_t index = 0; index < count; ++index) {
      bp_plugin_device_info info{};
      info.struct_size = sizeof info;
      if (const int32_t code = functions.device_info(state, k, index, &info, &sink); code != BP_OK) {
        say(report::kNote, failure("device_info", code, sink));
        return false;
      }
    }
  }
  return true;
}

// Runs the plugin from dlopen to dlclose. Where the host would stop (the
// file does not load, the entry refuses, the descriptor is unusable), so
// does this, with a note: the host's own load then says why, in full.
void probe(const Arguments &arguments, const nlohmann::json &options) {
  const std::string load_path =
      arguments.plugin_fd >= 0 ? "/proc/self/fd/" + std::to_string(arguments.plugin_fd) : arguments.plugin;
  step(report::kStageLoad);
  void *library = ::dlopen(load_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    say(report::kNote, std::string("the system loader refuses the file: ") + ::dlerror());
    return;
  }
  auto *entry = reinterpret_cast<bp_plugin_entry_fn>(::dlsym(library, BP_PLUGIN_ENTRY_SYMBOL));
  if (!entry) {
    say(report::kNote, "no " BP_PLUGIN_ENTRY_SYMBOL);
    return;
  }

  // The probe builds no device: a layer's services have nothing to describe.
  static const bp_host_services services{
      sizeof services, nullptr, report_error, plugin_log, nullptr,
      [](const struct bp_device *, bp_layer_device_facts *) -> int32_t { return BP_INVALID_ARGUMENT; },
      [](const struct bp_buffer *, bp_layer_buffer_facts *) -> int32_t { return BP_INVALID_ARGUMENT; },
      [](const struct bp_buffer *, size_t, void *, size_t, bp_error_sink *) -> int32_t { return BP_INVALID_ARGUMENT; }};
  bp_error_sink sink;
  bp_plugin_entry_args args{};
  args.struct_size = sizeof args;
  args.host_abi_major = BP_PLUGIN_ABI_MAJOR;
  args.host_abi_minor = BP_PLUGIN_ABI_MINOR;
  args.services = &services;
  args.sink = &sink;
  args.options_json = arguments.options_json.c_str();
  step(report::kStageEntry);
  if (const int32_t code = entry(&args); code != BP_OK) {
    say(report::kNote, failure(BP_PLUGIN_ENTRY_SYMBOL, code, sink));
    return;  // no state to destroy; the host keeps such a library mapped, so this does too
  }

  step(report::kStageDescriptor);
  const bp_plugin_descriptor *raw = args.descriptor;
  if (!raw || raw->struct_size < BP_PLUGIN_DESCRIPTOR_SIZE_V1_0 || raw->abi_major != BP_PLUGIN_ABI_MAJOR) {
    say(report::kNote, "no descriptor of this ABI major");
    return;
  }
  bp_plugin_descriptor descriptor{};
  std::memcpy(&descriptor, raw, std::min(raw->struct_size, sizeof descriptor));
  if (!descriptor.functions || descriptor.functions->struct_size < BP_PLUGIN_FUNCTIONS_SIZE_V1_0) {
    say(report::kNote, "no function table");
    return;
  }
  bp_plugin_functions functions{};
  std::memcpy(&functions, descriptor.functions, std::min(descriptor.functions->struct_size, sizeof functions));
  say(report::kPlugin, bounded(descriptor.name, report::kMaxNameBytes) + " " +
                           bounded(descriptor.version, report::kMaxTextBytes));

  enumerate(args.state, functions, descriptor, options);
  if (!functions.destroy) {
    say(report::kNote, "destroy is NULL");
    return;
  }
  step(report::kStageDestroy);
  functions.destroy(args.state);
  step(report::kStageUnload);
  ::dlclose(library);
}

}  // namespace

int main(int argc, char **argv) {
  // A crash is an expected outcome here, not one to keep a core file of
  // (the host probes at every start until the plugin is fixed).
  const struct rlimit no_core {0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  // A probe never outlives its host: a plugin that hangs dies with it.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);

  const Arguments arguments = parse(argc, argv);
  nlohmann::json options = nlohmann::json::parse(arguments.options_json, nullptr, /*allow_exceptions=*/false);
  if (!options.is_object()) options = nlohmann::json::object();  // the host passes an object, or nothing
  try {
    probe(arguments, options);
  } catch (const std::exception &exception) {
    // The host catches what escapes a plugin and refuses it; so can this.
    say(report::kNote, std::string("a C++ exception escaped the plugin: ") + exception.what());
  } catch (...) {
    say(report::kNote, "an exception escaped the plugin");
  }
  say(report::kDone);
  return EXIT_SUCCESS;
}
