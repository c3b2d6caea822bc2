#pragma once
// Lists of indices as users write them (sequences, layers, heads): "3", "0,2,5", "5-35",
// "0-3,8". The one parser for every such list, so every option refuses the same mistakes.
#include <string>
#include <vector>

namespace kvsim {

// The indices in the order written, ranges expanded. Throws InputError naming `what` for an
// empty list, an empty item (a trailing or doubled comma), something that is not an index,
// a reversed range, an index above `limit`, or an index given twice.
std::vector<int> parse_index_list(const std::string& what, const std::string& text, int limit = 1 << 30);

// A set of indices that may also be "all": true when `index` is in it. `set` must have
// passed parse_index_list (or be "all").
bool index_selected(const std::string& set, int index);

}  // namespace kvsim
