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

struct LogState {
  std::mutex mutex;
  LogSettings settings;
  bp_log_sink sink = nullptr;
  void *sink_context = nullptr;

  LogState() {
    if (const char *spec = std::getenv("BACKPLANE_LOG")) {
      if (std::optional<LogSettings> parsed = parse_settings(spec)) settings = std::move(*parsed);
    }
  }
};

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
  std::lock_guard lock(current.mutex);  // also keeps lines from interleaving
  if (!enabled_locked(current.settings, level, category)) return;
  if (current.sink) {
    const std::string category_text(category), message_text(message);
    current.sink(current.sink_context, level, category_text.c_str(), message_text.c_str());
    return;
  }
  std::fprintf(stderr, "backplane %s %.*s: %.*s\n", level_name(level), static_cast<int>(category.size()),
               category.data(), static_cast<int>(message.size()), message.data());
}

}  // namespace backplane

extern "C" {

void bp_log_set_sink(bp_log_sink sink, void *context) {
  backplane::LogState &current = backplane::state();
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
