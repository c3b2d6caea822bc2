#pragma once
// A cell's span metrics in the replay JSON (internal to sim/replay; report.cpp writes it).
#include <nlohmann/json.hpp>

#include "kvsim/replay/replay.hpp"

namespace kvsim {

// cells[i].spans: one object per span of each replayed sequence (CellResult::spans).
nlohmann::json spans_json(const CellResult& cell);

}  // namespace kvsim
