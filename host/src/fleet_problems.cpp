// Fleet problems: JSON pointer helpers and the "did you mean" suggestion for
// names close to a known one.
#include <algorithm>
#include <string_view>

#include "fleet_problems.hpp"

namespace backplane {
namespace {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
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
  // Close enough to be a typo, and not a rewrite of the whole name.
  const std::string *best = nullptr;
  size_t best_distance = std::max<size_t>(1, given.size() / 3) + 1;
  for (const std::string &candidate : known) {
    const size_t distance = edit_distance(given, candidate);
    if (distance < best_distance && distance < given.size()) {
      best_distance = distance;
      best = &candidate;
    }
  }
  return best ? "did you mean '" + *best + "'?" : "";
}

}  // namespace backplane
