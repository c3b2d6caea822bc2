#pragma once
// Text helpers the library's reports and parsers share (internal to kvsimlib): case and
// whitespace, numbers as the tables and CSV files write them, CSV quoting, JSON nulls.
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace kvsim::text {

inline std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

inline std::string trim(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  const size_t last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

// A CSV number: "" for NaN (an empty cell), else printf's `format`.
inline std::string number(double value, const char* format = "%.10g") {
  if (std::isnan(value)) return "";
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

// A table cell: `width` wide with `decimals` decimals; NaN as a right-aligned "-".
inline std::string fixed(double value, int width, int decimals) {
  if (std::isnan(value)) return std::string(static_cast<size_t>(width - 1), ' ') + "-";
  char buffer[48];  // the number alone, then padded: a wide column (a long label) keeps it
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  const std::string number = buffer;
  return std::string(number.size() < static_cast<size_t>(width) ? static_cast<size_t>(width) - number.size() : 0, ' ') +
         number;
}

// Padded with spaces to `width`: text on the left, or on the right.
inline std::string left(const std::string& text, size_t width) {
  return text.size() >= width ? text : text + std::string(width - text.size(), ' ');
}
inline std::string right(const std::string& text, size_t width) {
  return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}

// A size as people read it: 512 B, 19.2 MB, 1.3 TB (powers of 1000).
inline std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1000.0 && unit < 4) {
    value /= 1000.0;
    ++unit;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, unit == 0 ? "%.0f %s" : "%.1f %s", value, units[unit]);
  return buffer;
}

// RFC 4180: quoted (quotes doubled) when it holds a comma, a quote or a line break.
inline std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// JSON has no NaN: null.
inline nlohmann::json or_null(double value) {
  return std::isnan(value) ? nlohmann::json(nullptr) : nlohmann::json(value);
}

}  // namespace kvsim::text
