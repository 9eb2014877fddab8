// Fleet files, stages 0 to 2 (fleet_schema.cpp): read, parse and validate
// against the schema; what the loader and the C entry points use of them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "error.hpp"
#include "fleet_problems.hpp"

namespace backplane {

constexpr uintmax_t max_fleet_bytes = 8u << 20;  // a fleet is a few KiB; this bounds memory and time

// Reads a file with its size bounded before anything is allocated.
std::optional<std::string> read_fleet_file(const std::filesystem::path &path, Problems &problems);

// Stages 0 to 2: read, parse, schema. Returns the document or every problem.
Expected<nlohmann::json> parse_fleet(std::optional<std::string> text, Problems &problems);

}  // namespace backplane
