// Aligned plain-text tables for the CLI's listings, and the number formats
// they share (byte sizes, microseconds).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace backplane::cli {

enum class Align { left, right };

struct Column {
  std::string title;
  Align align = Align::left;
  size_t width = 0;  // minimum width; grows with the cells when the table is printed whole
};

// Either collect rows and print() them at once (columns fit their widest
// cell), or print_header() and print_row() as rows arrive (columns keep the
// widths given up front; a longer cell pushes its row out of line but is
// never cut).
class Table {
 public:
  explicit Table(std::vector<Column> columns);
  void add_row(std::vector<std::string> cells);
  bool empty() const { return rows_.empty(); }
  void print(std::FILE *out);
  void print_header(std::FILE *out) const;
  void print_row(std::FILE *out, const std::vector<std::string> &cells) const;

 private:
  std::string format(const std::vector<std::string> &cells) const;
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// Columns a UTF-8 string takes on a terminal, counting code points ("·" and
// "µ" are one column each; nothing here prints wide characters).
size_t display_width(std::string_view text);

// "0 B", "1000 B", "4 KiB", "1.5 MiB".
std::string format_bytes(uint64_t bytes);
// "0.8", "12.3", "1534" (microseconds, precision that fits the magnitude).
std::string format_micros(double micros);

}  // namespace backplane::cli
