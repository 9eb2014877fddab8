// BACKPLANE_LOG parsing and the stderr sink. The setting is read once per
// process; the default level is warn.
#include "log.hpp"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

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

LogSettings read_settings() {
  LogSettings settings;
  const char *value = std::getenv("BACKPLANE_LOG");
  if (!value) return settings;
  std::string_view rest(value);
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    size_t colon = item.find(':');
    bp_log_level level;
    if (colon == std::string_view::npos) {
      if (parse_level(item, &level)) settings.default_level = level;
    } else if (parse_level(item.substr(colon + 1), &level)) {
      settings.per_category.emplace(std::string(item.substr(0, colon)), level);
    }
  }
  return settings;
}

const LogSettings &settings() {
  static const LogSettings instance = read_settings();
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

}  // namespace

bool log_enabled(bp_log_level level, std::string_view category) {
  const LogSettings &current = settings();
  auto found = current.per_category.find(category);
  bp_log_level limit = found == current.per_category.end() ? current.default_level : found->second;
  return level <= limit;
}

void log(bp_log_level level, std::string_view category, std::string_view message) {
  if (!log_enabled(level, category)) return;
  static std::mutex stderr_mutex;  // keeps lines from interleaving
  std::lock_guard lock(stderr_mutex);
  std::fprintf(stderr, "backplane %s %.*s: %.*s\n", level_name(level), static_cast<int>(category.size()),
               category.data(), static_cast<int>(message.size()), message.data());
}

}  // namespace backplane
