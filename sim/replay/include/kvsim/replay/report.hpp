#pragma once
// Replay results as people and programs read them: human tables, CSV, JSON and the survival
// table. Shared by the CLI, the Python module and the GUI so every front end prints the
// same numbers.
#include <string>
#include <vector>

#include "kvsim/replay/replay.hpp"
#include "kvsim/replay/sweep_table.hpp"

namespace kvsim {

inline constexpr const char* kTeacherForcedNote =
    "teacher-forced replay: rows come from the full-cache run, so the drift a compressed model "
    "would accumulate is not modelled (kvsim eval measures it)";

// Human text fits 100 columns: every line longer than `width` is broken at spaces, its
// continuation lines indented as it was. (Tables are laid out to fit; this wraps the prose.)
// `hang`: spaces added to the indentation of continuation lines.
std::string wrap_text(const std::string& text, size_t width = 100, size_t hang = 0);

// Retention vs budget, one column per policy (the miss-ratio curve of this field), then p5
// retention and mean occupancy tables.
std::string sweep_table(const ReplayResults& results);
// ", pages of P (mean score)" in page mode, else "": what the summaries add after the mode.
std::string paging_text(const Paging& paging);
// ", one keep-set per layer (mean score)" or ", one keep-set for the model (max score)" with
// shared keep-sets, else "".
std::string share_text(const ReplayResults& results);
// One cell in detail: per layer and overall mean/p5/min retention, output error, occupancy.
std::string replay_table(const CellResult& cell, bool output_error);
// ", question 32, compress every 16": the protocol beyond the mode ("" when none).
std::string protocol_text(const ReplayResults& results);
// ", pools of 8 (the last of 3)" or ", one pool of 3" with pools (ReplayResults::pool), else "".
// (pool_report.cpp)
std::string pool_text(const ReplayResults& results);
// With pools: one line per sequence, its own B, retention mean and min, occupancy mean and
// peak. (pool_report.cpp)
std::string pool_table(const CellResult& cell);
// With shared contexts (ReplayResults::shared_contexts): a line per context, "context group 0:
// sequences 0, 1, 2 answer from one compression of the context, made in sequence 0's replay", and a line
// per sequence as pool_table's, naming the sequence that compressed its context.
// (pool_report.cpp)
std::string shared_context_text(const ReplayResults& results);
std::string shared_context_table(const CellResult& cell);

// A cell's span metrics (CellResult::spans), a line per span of each sequence: its shares
// held and gone and its masses at the step row and over the answer rows ("" without spans).
// (span_report.cpp)
std::string span_table(const CellResult& cell);

// The sweep CSV (one row per policy, budget and quant): kvsim/replay/sweep_table.hpp.
// Per layer rows plus an "all" row for each cell.
std::string layers_csv(const ReplayResults& results);
std::string results_json(const ReplayResults& results, const std::string& trace, const std::string& model);
// Per token, group and policy: the step it was evicted (-1: kept to the end). Needs records.
std::string survival_csv(const ReplayResults& results, const std::vector<std::vector<std::string>>& token_text);

}  // namespace kvsim
