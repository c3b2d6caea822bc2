#pragma once
// A cell's summaries from its groups' per-step results, in the fixed order the records come
// (sequence, layer, group, head, step), so the numbers never depend on scheduling.
#include <vector>

#include "kvsim/replay/replay.hpp"

namespace kvsim {

void aggregate_cell(CellResult& cell, std::vector<const GroupRecord*>& records, int n_layers, bool output_error);

}  // namespace kvsim
