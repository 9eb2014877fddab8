// A validate layer's life: its options read and its files opened at
// create, the calls it recorded written at flush and destroy.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "plugin_support/host_link.hpp"
#include "plugin_support/options_object.hpp"
#include "validate.hpp"

namespace backplane::validate {
namespace {

using plugin_support::fail;
using plugin_support::log;

constexpr const char *kNanCheck = "nan_check";
constexpr const char *kFingerprints = "fingerprints";
constexpr const char *kExpect = "expect_fingerprints";
// An expected file larger than this is refused rather than read: a million
// calls a device take about 80 MiB.
constexpr std::size_t kLargestExpectedFile = std::size_t{1} << 30;

// The key under which instances share a file: its absolute, normal path.
std::string file_key(const std::string &path) {
  std::error_code failed;
  const std::filesystem::path absolute = std::filesystem::absolute(path, failed);
  return failed ? path : absolute.lexically_normal().string();
}

// The whole file, or false with *error.
bool read_file(const std::string &path, std::string &out, std::string *error) {
  std::FILE *file = std::fopen(path.c_str(), "rbe");
  if (file == nullptr) {
    *error = "cannot read \"" + path + "\": " + std::strerror(errno);
    return false;
  }
  char block[65536];
  bool ok = true;
  for (;;) {
    const std::size_t got = std::fread(block, 1, sizeof block, file);
    out.append(block, got);
    if (out.size() > kLargestExpectedFile) {
      *error = "\"" + path + "\" is larger than 1 GiB";
      ok = false;
      break;
    }
    if (got < sizeof block) {
      if (std::ferror(file)) {
        *error = "cannot read \"" + path + "\": " + std::strerror(errno);
        ok = false;
      }
      break;
    }
  }
  std::fclose(file);
  return ok;
}

// The expected calls of `path`: those another instance of the state read
// already, else the file parsed. The caller holds files_mutex.
std::shared_ptr<const ExpectedCalls> expected_calls(bp_plugin_state &state, const std::string &path,
                                                    std::string *error) {
  const std::string key = file_key(path);
  if (auto known = state.expected[key].lock()) return known;
  if (!state.writing[key].expired()) {
    *error = "\"" + path + "\" is the file that the option \"fingerprints\" of another validate layer of this host "
             "is writing now; name the file of an earlier run";
    return nullptr;
  }
  std::string text, reason;
  if (!read_file(path, text, error)) return nullptr;
  auto parsed = ExpectedCalls::parse(text, &reason);
  if (!parsed) {
    *error = "\"" + path + "\" " + reason;
    return nullptr;
  }
  state.expected[key] = parsed;
  return parsed;
}

// The file of `path` that the state's instances write, opened (emptied)
// by the first of them. The caller holds files_mutex.
std::shared_ptr<FingerprintFile> fingerprint_file(bp_plugin_state &state, const std::string &path,
                                                  std::string *error) {
  const std::string key = file_key(path);
  if (auto open = state.writing[key].lock()) return open;
  auto opened = FingerprintFile::open(path, error);
  if (opened) state.writing[key] = opened;
  return opened;
}

// Writes the calls in the ring; the caller holds ring_mutex.
bool write_ring(bp_layer_instance &instance, bool sync, std::string *error) {
  const bool written = instance.fingerprints->write({instance.ring.get(), instance.ring_used}, sync, error);
  instance.ring_used = 0;  // even when writing failed: the error is the file's now, reported at every write
  return written;
}

}  // namespace

std::int32_t create_instance(bp_plugin_state &state, const bp_layer_create_args &args, bp_layer_instance **out,
                             bp_error_sink *sink) {
  const bp_host_services *services = state.services;
  const char *device = args.device_name != nullptr ? args.device_name : "?";
  if (args.layer_kind != 0)
    return fail(services, sink, BP_INVALID_ARGUMENT,
                "validate: layer kind index %u does not exist (the plugin has one, 0 = validate)",
                static_cast<unsigned>(args.layer_kind));
  std::string error;
  const char *text = args.options_json != nullptr && args.options_json[0] != '\0' ? args.options_json : "{}";
  auto options = plugin_support::OptionsObject::parse(text, &error);
  if (!options) return fail(services, sink, BP_CONFIG, "validate on '%s': options: %s", device, error.c_str());
  // The host checked the keys against the declared ones; this stays true
  // for a host that did not.
  if (!options->only_keys({kNanCheck, kFingerprints, kExpect}, &error))
    return fail(services, sink, BP_CONFIG, "validate on '%s': option %s", device, error.c_str());

  auto instance = std::make_unique<bp_layer_instance>();
  instance->device_name = device;
  std::string fingerprints_path, expect_path;
  if (!options->read(kNanCheck, instance->nan_check, &error) ||
      !options->read(kFingerprints, fingerprints_path, &error) || !options->read(kExpect, expect_path, &error))
    return fail(services, sink, BP_CONFIG, "validate on '%s': option %s", device, error.c_str());
  for (const char *key : {kFingerprints, kExpect}) {
    if (options->has(key) && (key == kFingerprints ? fingerprints_path : expect_path).empty())
      return fail(services, sink, BP_CONFIG, "validate on '%s': option \"%s\" must be a file name, not \"\"", device,
                  key);
  }

  {
    std::lock_guard lock(state.files_mutex);
    // The expected file first: a layer may compare with the file of the
    // last run and write this run's in its place.
    if (!expect_path.empty()) {
      instance->expected = expected_calls(state, expect_path, &error);
      if (!instance->expected)
        return fail(services, sink, BP_CONFIG, "validate on '%s': option \"%s\": %s", device, kExpect,
                    error.c_str());
    }
    if (!fingerprints_path.empty()) {
      instance->fingerprints = fingerprint_file(state, fingerprints_path, &error);
      if (!instance->fingerprints)
        return fail(services, sink, BP_CONFIG, "validate on '%s': option \"%s\": %s", device, kFingerprints,
                    error.c_str());
      instance->ring = std::make_unique<CallRecord[]>(kRingCalls);
    }
  }
  log(services, BP_LOG_DEBUG, kName, "validate on '%s': nan_check %s, fingerprints %s, expect_fingerprints %s%s",
      device, instance->nan_check ? "on" : "off", fingerprints_path.empty() ? "off" : fingerprints_path.c_str(),
      expect_path.empty() ? "off" : expect_path.c_str(),
      instance->expected ? (" (" + std::to_string(instance->expected->size()) + " calls recorded)").c_str() : "");
  *out = instance.release();
  return BP_OK;
}

void record_call(bp_plugin_state &state, bp_layer_instance &instance, const bp_layer_call &call,
                 const CallShape &shape, std::uint64_t print) {
  std::lock_guard lock(instance.ring_mutex);
  if (instance.ring_used == kRingCalls) {
    std::string error;
    if (!write_ring(instance, false, &error) && !instance.warned_write) {
      instance.warned_write = true;
      log(state.services, BP_LOG_WARN, kName, "validate on '%s': %s; the calls after it are not recorded",
          instance.device_name.c_str(), error.c_str());
    }
  }
  const std::string_view group = call.group_name != nullptr ? call.group_name : "";
  auto name = instance.group_names.find(group);
  if (name == instance.group_names.end()) name = instance.group_names.emplace(group).first;
  instance.ring[instance.ring_used++] = CallRecord{&*name, call.call_serial, call.rank, shape, print};
}

std::int32_t flush_instance(bp_plugin_state &state, bp_layer_instance &instance, bp_error_sink *sink) {
  if (!instance.fingerprints) return BP_OK;
  std::lock_guard lock(instance.ring_mutex);
  std::string error;
  if (write_ring(instance, true, &error)) return BP_OK;
  return fail(state.services, sink, BP_CONFIG, "validate on '%s': option \"%s\": %s", instance.device_name.c_str(),
              kFingerprints, error.c_str());
}

void destroy_instance(bp_plugin_state &state, bp_layer_instance *instance) {
  std::unique_ptr<bp_layer_instance> owned(instance);
  if (!owned->fingerprints) return;
  std::lock_guard lock(owned->ring_mutex);
  std::string error;
  if (!write_ring(*owned, true, &error))
    log(state.services, BP_LOG_ERROR, kName, "validate on '%s': option \"%s\": %s", owned->device_name.c_str(),
        kFingerprints, error.c_str());
}

}  // namespace backplane::validate
