// configure(): the cpu kind's options, a small JSON object of integers such
// as {"devices": 16, "threads": 2, "parallel_threshold_bytes": 262144,
// "async_threshold_bytes": 0}.
// Keys not listed are refused, so a typo never silently falls back to a
// default.
#include <optional>
#include <string>
#include <string_view>

#include "plugin_state.hpp"
#include "plugin_support/options_object.hpp"

namespace backplane::cpu {
namespace {

// Keys left out take their defaults; 0 (threads) and nullopt (thresholds)
// stand for "the default of this machine", filled in by configure.
struct Options {
  std::uint32_t devices = kDefaultDeviceCount;
  std::uint32_t threads = 0;
  std::optional<std::size_t> parallel_threshold_bytes;
  std::optional<std::size_t> streaming_threshold_bytes;
  std::optional<std::size_t> async_threshold_bytes;
};

std::optional<Options> parse_options(std::string_view text, std::string *error) {
  const std::optional<plugin_support::OptionsObject> object = plugin_support::OptionsObject::parse(text, error);
  if (!object ||
      !object->only_keys({"devices", "threads", "parallel_threshold_bytes", "streaming_threshold_bytes",
                          "async_threshold_bytes"},
                         error)) {
    return std::nullopt;
  }
  Options options;
  std::uint64_t devices = options.devices, threads = 0, parallel = 0, streaming = 0, async = 0;
  if (!object->read("devices", 1, kMaxDeviceCount, devices, error) ||
      !object->read("threads", 1, kMaxThreads, threads, error) ||
      !object->read("parallel_threshold_bytes", 0, kMaxThresholdBytes, parallel, error) ||
      !object->read("streaming_threshold_bytes", 0, kMaxThresholdBytes, streaming, error) ||
      !object->read("async_threshold_bytes", 0, kMaxThresholdBytes, async, error)) {
    return std::nullopt;
  }
  options.devices = static_cast<std::uint32_t>(devices);
  options.threads = static_cast<std::uint32_t>(threads);
  if (object->has("parallel_threshold_bytes")) options.parallel_threshold_bytes = static_cast<std::size_t>(parallel);
  if (object->has("streaming_threshold_bytes")) {
    options.streaming_threshold_bytes = static_cast<std::size_t>(streaming);
  }
  if (object->has("async_threshold_bytes")) options.async_threshold_bytes = static_cast<std::size_t>(async);
  return options;
}

}  // namespace

std::int32_t Backend::configure(bp_plugin_state &state, const char *options_json, bp_error_sink *sink) {

  std::string error;
  const std::optional<Options> options = parse_options(options_json, &error);
  if (!options) return fail(state.services, sink, BP_CONFIG, "cpu options: %s", error.c_str());

  std::lock_guard<std::mutex> lock(state.mutex);
  const std::uint32_t threads = options->threads != 0 ? options->threads : state.available_cpus;
  if (state.live_objects != 0 && options->devices != state.device_count) {
    return fail(state.services, sink, BP_CONFIG,
                "cpu options: cannot change the device count from %u to %u while %zu buffers or "
                "groups of cpu devices exist; configure before creating any",
                static_cast<unsigned>(state.device_count), static_cast<unsigned>(options->devices),
                state.live_objects);
  }
  // Groups hold on to the pool, so it is only replaced while none exists.
  if (state.live_objects != 0 && threads != state.threads) {
    return fail(state.services, sink, BP_CONFIG,
                "cpu options: cannot change threads from %u to %u while %zu buffers or groups of cpu "
                "devices exist; configure before creating any",
                static_cast<unsigned>(state.threads), static_cast<unsigned>(threads), state.live_objects);
  }
  if (threads != state.threads) state.pool.reset();  // the next group starts one of the new size
  state.device_count = options->devices;
  state.threads = threads;
  // Thresholds apply to groups created from now on.
  state.parallel_threshold_bytes = options->parallel_threshold_bytes.value_or(kDefaultParallelThresholdBytes);
  state.streaming_threshold_bytes = options->streaming_threshold_bytes.value_or(
      default_streaming_threshold(state.last_level_cache_bytes));
  state.async_threshold_bytes = options->async_threshold_bytes.value_or(kDefaultAsyncThresholdBytes);
  log(state.services, BP_LOG_DEBUG,
      "configured %u logical cpu devices, %u threads, parallel above %zu bytes, streaming above %zu bytes, "
      "_async calls apart from the caller from %zu bytes",
      static_cast<unsigned>(options->devices), static_cast<unsigned>(threads), state.parallel_threshold_bytes,
      state.streaming_threshold_bytes, state.async_threshold_bytes);
  return BP_OK;
}

}  // namespace backplane::cpu
