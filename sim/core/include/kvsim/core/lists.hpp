#pragma once
// Comma lists as users write them: sequences, layers, lags ("0,2,5", "5-35", "0-3,8"),
// policy names, budgets, weights. The one parser of every such list, so every option and
// parameter refuses the same mistakes: an empty list, an empty item (a leading, trailing or
// doubled comma) and, where order carries no meaning, an item given twice.
#include <string>
#include <vector>

namespace kvsim {

// The items of a comma list, in order. Throws InputError naming `what` for an empty list or
// an empty item.
std::vector<std::string> split_list(const std::string& what, const std::string& text);
// split_list, also refusing an item given twice.
std::vector<std::string> parse_name_list(const std::string& what, const std::string& text);

// The indices in the order written, ranges expanded. Throws InputError naming `what` for
// what split_list refuses, something that is not an index, a reversed range, an index below
// `minimum` or above `limit`, or an index given twice.
std::vector<int> parse_index_list(const std::string& what, const std::string& text, int limit = 1 << 30,
                                  int minimum = 0);

// `chosen` (indices of 0..count-1, each once), or every index when it is empty. Throws
// InputError naming `file` for an index out of range or given twice ("sequence 3 ...").
std::vector<int> chosen_or_all(const std::vector<int>& chosen, int count, const std::string& what,
                               const std::string& file);

// A set of indices that may also be "all": true when `index` is in it. `set` must have
// passed parse_index_list (or be "all").
bool index_selected(const std::string& set, int index);

// Of `known` (option or policy names), the index of the one nearest to `given` as people
// mistype names: the fewest insertions, deletions, substitutions and swaps of two neighbours,
// case ignored, and only when at most a third of `given` is off (at least 1, at most 3
// edits). The first of equally near ones; known.size() when none is near.
size_t nearest_name(const std::string& given, const std::vector<std::string>& known);

}  // namespace kvsim
