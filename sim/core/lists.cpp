#include "kvsim/core/lists.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

[[noreturn]] void refuse(const std::string& what, const std::string& problem) {
  throw kvtrace::InputError("", "", what + ": " + problem);
}

int parse_index(const std::string& what, const std::string& item, const std::string& text, int limit) {
  if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos)
    refuse(what, "'" + item + "' in '" + text + "' is not an index (a whole number from 0)");
  errno = 0;
  const long long value = std::strtoll(item.c_str(), nullptr, 10);
  if (errno == ERANGE || value > limit)
    refuse(what, "index " + item + " is above the largest allowed, " + std::to_string(limit));
  return static_cast<int>(value);
}

}  // namespace

std::vector<std::string> split_list(const std::string& what, const std::string& text) {
  if (text.empty()) refuse(what, "nothing given");
  std::vector<std::string> items;
  size_t begin = 0;
  while (true) {
    const size_t comma = text.find(',', begin);
    std::string item = text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (item.empty()) refuse(what, "empty item in '" + text + "' (a leading, trailing or doubled comma)");
    items.push_back(std::move(item));
    if (comma == std::string::npos) return items;
    begin = comma + 1;
  }
}

std::vector<std::string> parse_name_list(const std::string& what, const std::string& text) {
  std::vector<std::string> items = split_list(what, text);
  std::vector<std::string> sorted = items;
  std::sort(sorted.begin(), sorted.end());
  if (const auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end())
    refuse(what, "'" + *twice + "' is given twice in '" + text + "'");
  return items;
}

std::vector<int> parse_index_list(const std::string& what, const std::string& text, int limit, int minimum) {
  std::vector<int> out;
  for (const std::string& item : split_list(what, text)) {
    const size_t dash = item.find('-', 1);
    if (dash == std::string::npos) {
      out.push_back(parse_index(what, item, text, limit));
    } else {
      const int first = parse_index(what, item.substr(0, dash), text, limit);
      const int last = parse_index(what, item.substr(dash + 1), text, limit);
      if (last < first) refuse(what, "range '" + item + "' runs backwards");
      if (static_cast<long long>(out.size()) + (last - first) > (1 << 24))
        refuse(what, "'" + text + "' is too long a list");
      for (int i = first; i <= last; ++i) out.push_back(i);
    }
  }
  for (int index : out)
    if (index < minimum)
      refuse(what,
             std::string("'").append(std::to_string(index)).append("' is below ").append(std::to_string(minimum)));
  std::vector<int> sorted = out;
  std::sort(sorted.begin(), sorted.end());
  if (const auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end())
    refuse(what, "index " + std::to_string(*twice) + " is given twice in '" + text + "'");
  return out;
}

std::vector<int> chosen_or_all(const std::vector<int>& chosen, int count, const std::string& what,
                               const std::string& file) {
  if (chosen.empty()) {
    std::vector<int> all(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) all[static_cast<size_t>(i)] = i;
    return all;
  }
  std::vector<bool> seen(static_cast<size_t>(count), false);
  for (int index : chosen) {
    if (index < 0 || index >= count)
      throw kvtrace::InputError(
          file, "", what + " " + std::to_string(index) + " out of range (the trace has " + std::to_string(count) + ")");
    if (seen[static_cast<size_t>(index)])
      throw kvtrace::InputError(file, "", what + " " + std::to_string(index) + " given twice");
    seen[static_cast<size_t>(index)] = true;
  }
  return chosen;
}

bool index_selected(const std::string& set, int index) {
  if (set == "all") return true;
  const std::vector<int> indices = parse_index_list("index set", set);
  return std::find(indices.begin(), indices.end(), index) != indices.end();
}

// Optimal string alignment distance over lower-cased text.
static size_t edit_distance(const std::string& a, const std::string& b) {
  auto low = [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); };
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = low(a[i - 1]) == low(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && low(a[i - 1]) == low(b[j - 2]) && low(a[i - 2]) == low(b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

size_t nearest_name(const std::string& given, const std::vector<std::string>& known) {
  const size_t limit = std::clamp<size_t>(given.size() / 3, 1, 3);
  size_t best = known.size(), best_distance = limit + 1;
  for (size_t i = 0; i < known.size(); ++i)
    if (const size_t distance = edit_distance(given, known[i]); distance < best_distance) {
      best = i;
      best_distance = distance;
    }
  return best;
}

}  // namespace kvsim
