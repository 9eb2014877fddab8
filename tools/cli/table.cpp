// Aligned plain-text tables and the number formats the CLI prints.
#include "table.hpp"

#include <algorithm>
#include <cmath>

namespace backplane::cli {

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {
  for (Column &column : columns_) column.width = std::max(column.width, display_width(column.title));
}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

void Table::print(std::FILE *out) {
  for (const auto &row : rows_)
    for (size_t c = 0; c < columns_.size(); ++c) columns_[c].width = std::max(columns_[c].width, display_width(row[c]));
  print_header(out);
  for (const auto &row : rows_) print_row(out, row);
}

void Table::print_header(std::FILE *out) const {
  std::vector<std::string> titles, rules;
  for (const Column &column : columns_) {
    titles.push_back(column.title);
    rules.emplace_back(column.width, '-');
  }
  std::fputs(format(titles).c_str(), out);
  std::fputs(format(rules).c_str(), out);
}

void Table::print_row(std::FILE *out, const std::vector<std::string> &cells) const {
  std::fputs(format(cells).c_str(), out);
}

std::string Table::format(const std::vector<std::string> &cells) const {
  std::string line;
  for (size_t c = 0; c < columns_.size(); ++c) {
    const std::string &cell = c < cells.size() ? cells[c] : std::string();
    size_t width = display_width(cell);
    size_t pad = columns_[c].width > width ? columns_[c].width - width : 0;
    if (c > 0) line += "  ";
    if (columns_[c].align == Align::right) line.append(pad, ' ');
    line += cell;
    if (columns_[c].align == Align::left) line.append(pad, ' ');
  }
  // Trailing blanks only make copied output awkward.
  line.erase(line.find_last_not_of(' ') + 1);
  line += '\n';
  return line;
}

size_t display_width(std::string_view text) {
  // Every byte that is not a UTF-8 continuation byte starts a code point.
  return static_cast<size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

std::string format_bytes(uint64_t bytes) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  // Below 1 KiB exact bytes read better ("1000 B" rather than "1.0 KiB").
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(units)) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (value == std::floor(value))
    std::snprintf(text, sizeof text, "%.0f %s", value, units[unit]);
  else
    std::snprintf(text, sizeof text, "%.1f %s", value, units[unit]);
  return text;
}

std::string format_micros(double micros) {
  char text[32];
  if (micros < 10.0)
    std::snprintf(text, sizeof text, "%.2f", micros);
  else if (micros < 1000.0)
    std::snprintf(text, sizeof text, "%.1f", micros);
  else
    std::snprintf(text, sizeof text, "%.0f", micros);
  return text;
}

}  // namespace backplane::cli
