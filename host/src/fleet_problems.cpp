// Fleet problems: JSON pointer helpers and the "did you mean" suggestion for
// names close to a known one.
#include <algorithm>
#include <string_view>

#include "fleet_problems.hpp"

namespace backplane {
namespace {

// The edit distance of a and b when it is below `limit`, else `limit`:
// rows stop as soon as every cell reached it.
size_t edit_distance_below(std::string_view a, std::string_view b, size_t limit) {
  const size_t length_difference = a.size() > b.size() ? a.size() - b.size() : b.size() - a.size();
  if (length_difference >= limit) return limit;
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    size_t row_minimum = row[0];
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
      row_minimum = std::min(row_minimum, row[j]);
    }
    if (row_minimum >= limit) return limit;
  }
  return std::min(row[b.size()], limit);
}

}  // namespace

std::string pointer_escape(const std::string &token) {
  std::string escaped;
  for (char c : token) {
    if (c == '~') escaped += "~0";
    else if (c == '/') escaped += "~1";
    else escaped += c;
  }
  return escaped;
}

nlohmann::json value_at(const nlohmann::json &document, const std::string &pointer) {
  try {
    return document.at(nlohmann::json::json_pointer(pointer));
  } catch (...) {
    return nullptr;
  }
}

std::string did_you_mean(const std::string &given, const std::vector<std::string> &known) {
  if (given.empty() || given.size() > max_suggested_name_bytes) return "";
  // Close enough to be a typo, and not a rewrite of the whole name.
  const std::string *best = nullptr;
  size_t best_distance = std::min(std::max<size_t>(1, given.size() / 3) + 1, given.size());
  for (const std::string &candidate : known) {
    if (candidate.size() > max_suggested_name_bytes) continue;
    const size_t distance = edit_distance_below(given, candidate, best_distance);
    if (distance < best_distance) {
      best_distance = distance;
      best = &candidate;
    }
  }
  return best ? "did you mean '" + *best + "'?" : "";
}

}  // namespace backplane
