#pragma once
// Span metrics (docs/semantics.md, section 3 "Spans"): what a replay cell keeps of each span
// of a sequence (a named token range of the trace: context, evidence, question, ...), at the
// question's first row and over the answer's rows: the share of its positions every cache of
// every layer holds, any holds, none holds (gone: the model cannot see them any more), and the
// attention mass the rows put on it, in full and on what the caches hold.
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kvtrace/schema.hpp"

namespace kvsim {

// A span's measures at one row, or their means over rows; NaN where no row counts (no
// position of the span has come by then).
struct SpanMeasures {
  double held_all = NAN, held_any = NAN, gone = NAN, mass = NAN, mass_held = NAN;
};

// The measures' names, in the order of SpanMeasures' members and of the columns.
inline constexpr std::array<const char*, 5> kSpanMeasureNames = {"held_all", "held_any", "gone", "mass", "mass_held"};
inline constexpr std::array<double SpanMeasures::*, 5> kSpanMeasures = {
    &SpanMeasures::held_all, &SpanMeasures::held_any, &SpanMeasures::gone, &SpanMeasures::mass,
    &SpanMeasures::mass_held};

// One span of one replayed sequence in one cell.
struct SpanResult {
  int seq = 0;
  kvtrace::Span span;
  int64_t step = -1;         // the row `at_step` measures (-1: the sequence has none)
  SpanMeasures at_step;      // at that row
  SpanMeasures answer;       // means over the answer's rows
  int64_t answer_rows = 0;   // the rows `answer` counts
};

// The rows a sequence's spans are measured at: `step` (the question's first row, or the one
// --span-step names; -1: none) and the answer's rows, ascending.
struct SpanRows {
  std::vector<kvtrace::Span> spans;  // the sequence's, in the file's order
  int64_t step = -1;
  std::vector<int64_t> answer;
};
// `sequence`'s rows (docs/semantics.md, section 3): span_step >= 0 names the step; else the
// first "question" span's start, else the prompt's question (question_len >= 1), else the
// first row after the prompt. The answer: the rows of its "answer" spans, else every row
// after the prompt.
SpanRows span_rows(const kvtrace::SequenceMeta& sequence, int64_t span_step);

// The sweep CSV's span columns of a cell: per span kind, in order of first appearance among
// the cell's spans, span_<kind>_<measure> at the step, then span_<kind>_answer_<measure>:
// the mean over the cell's spans of that kind (their NaNs left out; NaN when all are).
struct SpanColumn {
  std::string name;
  double value = NAN;
};
std::vector<std::string> span_column_names(const std::vector<std::string>& kinds);
std::vector<SpanColumn> span_columns(const std::vector<SpanResult>& spans, const std::vector<std::string>& kinds);
// The value of column `name` among `columns` (NaN when none has that name).
double span_column_value(const std::vector<SpanColumn>& columns, const std::string& name);
// Appends `kind` to `kinds` unless it is there: the kinds in order of first appearance.
void add_span_kind(std::vector<std::string>& kinds, const std::string& kind);

}  // namespace kvsim
