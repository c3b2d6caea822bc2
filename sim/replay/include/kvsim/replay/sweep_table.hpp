#pragma once
// A sweep's results as one table: a row per cell (policy x budget x quantization), with the
// columns sweep_columns() lists, in the order the sweep CSV has them. The CSV writer and its
// reader (the planner's --sweep, sweep --resume), Python's sweep() and plan(sweep=...) all
// take the column names and values from this one list.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kvsim/replay/replay.hpp"

namespace kvsim {

// The grid `kvsim sweep` and kvsim.sweep() run when none is given.
inline constexpr const char* kDefaultSweepPolicies = "scissorhands,h2o,streaming,tova,recent,oracle";
inline constexpr const char* kDefaultSweepBudgets = "10%,20%,30%,40%,50%,60%,70%,80%,90%";

struct SweepRow {
  std::string policy, params, budget, quant, mode;
  double bits_per_element = 0, budget_tokens_mean = 0, budget_share_mean = 0;
  double retention_mean = 0, retention_p5 = 0, retention_min = 0;
  double output_error_mean = 0, output_error_p95 = 0, output_error_max = 0;  // NaN without values
  double occupancy_mean = 0;
  int64_t occupancy_peak = 0, evictions = 0, samples = 0;
  // With a question (written only then, after the others): retention over its rows, and
  // over the answer's. NaN when absent.
  double question_retention_mean = NAN, question_retention_min = NAN;
  double answer_retention_mean = NAN, answer_retention_min = NAN;
  int64_t page = 0;  // P of page mode (--page), 0 for single positions
  // Positions held by each cache layout (CellResult's). NaN when a file lacks them.
  double occupancy_dense_mean = NAN, occupancy_dense_peak = NAN;
  double occupancy_layer_union_mean = NAN, occupancy_layer_union_peak = NAN;
  double occupancy_model_union_mean = NAN, occupancy_model_union_peak = NAN;
  // The cell's span columns (span_metrics.hpp), by name: written after every other column,
  // as the table's span kinds ask for them; not read back.
  std::vector<SpanColumn> spans;
};

// One column: its name and the member holding it (one of the three is set).
struct SweepColumn {
  const char* name;
  std::string SweepRow::*text = nullptr;
  double SweepRow::*real = nullptr;
  int64_t SweepRow::*integer = nullptr;
  enum class Only { no, question, page } only = Only::no;  // written only by some sweeps
};
const std::vector<SweepColumn>& sweep_columns();
const SweepColumn* find_sweep_column(const std::string& name);  // null when there is none

// Which of the columns only some sweeps have a table writes, after the ones all have: a
// question's (ReplayResults::question), then page mode's page (so token-mode files keep the
// columns they always had).
struct SweepExtras {
  bool question = false, paged = false;
  std::vector<std::string> span_kinds;  // ReplayResults::span_kinds: their columns come last
};
SweepExtras sweep_extras(const ReplayResults& results);
bool written(const SweepColumn& column, SweepExtras extras);

SweepRow sweep_row(const CellResult& cell, Mode mode, int64_t page = 0);
// The cell a sweep row stands for, as far as the row tells (summaries without their p95 and
// max of retention; no per-layer results or records): what sweep --resume continues from.
CellResult cell_of_sweep_row(const SweepRow& row);

// The sweep CSV: a header of the column names, then one line per row (RFC 4180 quoting,
// numbers as %.10g, NaN as an empty field), with the columns `extras` names.
std::string sweep_csv_header(SweepExtras extras = {});
std::string sweep_csv_line(const SweepRow& row, SweepExtras extras = {});
std::string sweep_csv(const ReplayResults& results);

// A sweep CSV read back: columns are found by name, in any order; those it lacks are left at
// their defaults (and not listed in `columns`); other columns are ignored. `required` must
// be there. Empty numeric fields read as NaN. Every problem is an InputError naming `file`
// and the line.
struct SweepCsv {
  std::vector<SweepRow> rows;
  std::vector<std::string> columns;  // the known columns the file has
};
SweepCsv read_sweep_csv(const std::string& text, const std::string& file, const std::vector<std::string>& required);

}  // namespace kvsim
