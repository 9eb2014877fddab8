// Size expressions of the fleet file ("8B..64MiB x4"); see bp_parse_sizes.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "error.hpp"

namespace backplane {

// The sizes in bytes, or BP_CONFIG naming what does not parse.
Expected<std::vector<uint64_t>> parse_sizes(std::string_view text);

}  // namespace backplane
