// Logging by level and category, configured by BACKPLANE_LOG
// ("warn", "debug", "loader:debug,dispatch:info"), written to stderr.
#pragma once

#include <string_view>

#include "backplane/plugin.h"

namespace backplane {

bool log_enabled(bp_log_level level, std::string_view category);
void log(bp_log_level level, std::string_view category, std::string_view message);

}  // namespace backplane
