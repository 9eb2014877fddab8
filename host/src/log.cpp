// BACKPLANE_LOG parsing and the log sink (stderr unless an application or a
// test installs its own with bp_log_set_sink). Process-wide; the default
// level is warn.
#include "log.hpp"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "backplane/backplane.h"

namespace backplane {
namespace {

struct LogSettings {
  bp_log_level default_level = BP_LOG_WARN;
  std::map<std::string, bp_log_level, std::less<>> per_category;
};

bool parse_level(std::string_view text, bp_log_level *level) {
  static constexpr std::pair<std::string_view, bp_log_level> levels[] = {
      {"error", BP_LOG_ERROR}, {"warn", BP_LOG_WARN}, {"info", BP_LOG_INFO}, {"debug", BP_LOG_DEBUG}};
  for (const auto &[name, value] : levels) {
    if (text == name) {
      *level = value;
      return true;
    }
  }
  return false;
}

// "warn", "loader:debug", "info,loader:debug"; nullopt when any item is bad.
std::optional<LogSettings> parse_settings(std::string_view spec) {
  LogSettings settings;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    if (item.empty()) continue;
    const size_t colon = item.find(':');
    bp_log_level level;
    if (colon == std::string_view::npos) {
      if (!parse_level(item, &level)) return std::nullopt;
      settings.default_level = level;
    } else {
      const std::string_view category = item.substr(0, colon);
      if (category.empty() || !parse_level(item.substr(colon + 1), &level)) return std::nullopt;
      settings.per_category.insert_or_assign(std::string(category), level);
    }
  }
  return settings;
}

// Settings and sink under `mutex`, held only to read or replace them.
// Sinks run under `output` instead, which keeps lines from interleaving and
// lets bp_log_set_sink wait for a sink call in progress on another thread
// (after it returns, the old sink is not called again). A sink may call
// bp_log_configure and bp_log_set_sink itself: neither needs `output` on
// the sink's own thread.
struct LogState {
  std::mutex mutex;
  LogSettings settings;
  bp_log_sink sink = nullptr;
  void *sink_context = nullptr;
  std::mutex output;

  LogState() {
    if (const char *spec = std::getenv("BACKPLANE_LOG")) {
      if (std::optional<LogSettings> parsed = parse_settings(spec)) settings = std::move(*parsed);
    }
  }
};

// Set while this thread runs a sink (and so holds LogState::output).
thread_local bool in_sink = false;

LogState &state() {
  static LogState instance;
  return instance;
}

const char *level_name(bp_log_level level) {
  switch (level) {
    case BP_LOG_ERROR: return "error";
    case BP_LOG_WARN: return "warn";
    case BP_LOG_INFO: return "info";
    case BP_LOG_DEBUG: return "debug";
    case BP_LOG_LEVEL_MAX_ENUM: break;
  }
  return "?";
}

bool enabled_locked(const LogSettings &settings, bp_log_level level, std::string_view category) {
  auto found = settings.per_category.find(category);
  const bp_log_level limit = found == settings.per_category.end() ? settings.default_level : found->second;
  return level <= limit;
}

}  // namespace

bool log_enabled(bp_log_level level, std::string_view category) {
  LogState &current = state();
  std::lock_guard lock(current.mutex);
  return enabled_locked(current.settings, level, category);
}

void log(bp_log_level level, std::string_view category, std::string_view message) {
  LogState &current = state();
  {
    std::lock_guard lock(current.mutex);
    if (!enabled_locked(current.settings, level, category)) return;
  }
  auto to_stderr = [&] {
    std::fprintf(stderr, "backplane %s %.*s: %.*s\n", level_name(level), static_cast<int>(category.size()),
                 category.data(), static_cast<int>(message.size()), message.data());
  };
  // A line logged while this thread runs a sink (the sink called into the
  // library) goes to stderr: calling the sink again could recurse forever.
  if (in_sink) {
    to_stderr();
    return;
  }
  std::lock_guard output(current.output);
  bp_log_sink sink = nullptr;
  void *context = nullptr;
  {
    std::lock_guard lock(current.mutex);
    sink = current.sink;
    context = current.sink_context;
  }
  if (!sink) {
    to_stderr();
    return;
  }
  const std::string category_text(category), message_text(message);
  struct InSink {
    InSink() { in_sink = true; }
    ~InSink() { in_sink = false; }
  } running;
  sink(context, level, category_text.c_str(), message_text.c_str());
}

}  // namespace backplane

extern "C" {

void bp_log_set_sink(bp_log_sink sink, void *context) {
  backplane::LogState &current = backplane::state();
  // Waits for a sink running on another thread; a sink that replaces
  // itself already holds `output`.
  std::unique_lock output(current.output, std::defer_lock);
  if (!backplane::in_sink) output.lock();
  std::lock_guard lock(current.mutex);
  current.sink = sink;
  current.sink_context = context;
}

bool bp_log_configure(const char *spec) {
  if (!spec) return false;
  try {
    std::optional<backplane::LogSettings> parsed = backplane::parse_settings(spec);
    if (!parsed) return false;
    backplane::LogState &current = backplane::state();
    std::lock_guard lock(current.mutex);
    current.settings = std::move(*parsed);
    return true;
  } catch (...) {
    return false;
  }
}

}  // extern "C"
