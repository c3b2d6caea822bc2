#pragma once
// A sequence's spans (docs/semantics.md, section 1) as the views show them: grouped by kind,
// each kind with its colour, and the share of a kind's tokens that a cache group holds at
// each recorded step ("Span share held", section 3), drawn by the step chart.
#include <QColor>
#include <QString>
#include <cstdint>
#include <vector>

#include "kvtrace/schema.hpp"

namespace kvsim {
struct SimulationResult;
}

namespace kvgui {

// The spans of one kind, the kinds in the order of their first span in the file.
struct SpanKind {
  QString kind;
  std::vector<kvtrace::Span> spans;  // in the file's order
  std::vector<int64_t> positions;    // the union of the spans' positions, ascending
  bool covers(int64_t position) const;
};
std::vector<SpanKind> spanKinds(const std::vector<kvtrace::Span>& spans);

// A kind's colour, for its lines: fixed for the kinds kvsim writes (system, context, evidence,
// needle, question, answer), from a palette by the kind's name for any other word; and the
// light tone of it that shades the kind's tokens.
QColor spanColour(const QString& kind);
QColor spanShade(const QString& kind);

// One kind's share held at the recorded steps t = first_step + s: of its positions p <= t,
// those held at t (eviction_step[p] < 0 or >= t, as occupancy counts them); NaN while none of
// them has come.
struct SpanShare {
  QString kind;
  int64_t positions = 0;  // the kind's tokens
  int64_t first_step = 0;
  std::vector<double> share;  // [s]
};
// Per kind of `kinds`, over the recorded steps of `result`; none when it keeps no eviction
// steps.
std::vector<SpanShare> spanShares(const std::vector<SpanKind>& kinds, const kvsim::SimulationResult& result);

}  // namespace kvgui
