#include "kvsim/index_list.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sstream>

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

std::vector<int> parse_index_list(const std::string& what, const std::string& text, int limit) {
  if (text.empty()) refuse(what, "no index given");
  std::vector<int> out;
  size_t begin = 0;
  while (true) {
    const size_t comma = text.find(',', begin);
    const std::string item = text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (item.empty()) refuse(what, "empty item in '" + text + "' (a doubled, leading or trailing comma)");
    const size_t dash = item.find('-');
    if (dash == std::string::npos) {
      out.push_back(parse_index(what, item, text, limit));
    } else {
      const int first = parse_index(what, item.substr(0, dash), text, limit);
      const int last = parse_index(what, item.substr(dash + 1), text, limit);
      if (last < first) refuse(what, "range '" + item + "' runs backwards");
      if (static_cast<long long>(out.size()) + (last - first) > (1 << 24)) refuse(what, "'" + text + "' is too long a list");
      for (int i = first; i <= last; ++i) out.push_back(i);
    }
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  std::vector<int> sorted = out;
  std::sort(sorted.begin(), sorted.end());
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  if (twice != sorted.end()) refuse(what, "index " + std::to_string(*twice) + " is given twice in '" + text + "'");
  return out;
}

bool index_selected(const std::string& set, int index) {
  if (set == "all") return true;
  const std::vector<int> indices = parse_index_list("index set", set);
  return std::find(indices.begin(), indices.end(), index) != indices.end();
}

}  // namespace kvsim
