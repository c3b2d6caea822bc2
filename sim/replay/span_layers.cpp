// One (sequence, layer)'s part of the span metrics (span_aggregate.hpp): each cell's caches'
// last held steps over the spans' positions, and the mass the step and answer rows put on each
// span, read once for every cell.
#include <algorithm>
#include <limits>
#include <stdexcept>

#include "span_aggregate.hpp"

namespace kvsim {
namespace {

constexpr int32_t kNeverEvicted = std::numeric_limits<int32_t>::max();

// Held at row t (docs/semantics.md, section 3): came by t, evicted at t or later, or never.
bool held_at(int32_t eviction_step, int64_t t) { return eviction_step < 0 || eviction_step >= t; }

// Each cell's record of each query head (every head must have one).
std::vector<std::vector<const GroupRecord*>> records_by_head(const std::vector<std::vector<const GroupRecord*>>& cells,
                                                             int heads) {
  std::vector<std::vector<const GroupRecord*>> by_head(cells.size(), std::vector<const GroupRecord*>(heads));
  for (size_t c = 0; c < cells.size(); ++c) {
    for (const GroupRecord* record : cells[c])
      for (int h : record->heads) by_head[c].at(static_cast<size_t>(h)) = record;
    for (const GroupRecord* record : by_head[c])
      if (!record) throw std::logic_error("a query head without a cache record");
  }
  return by_head;
}

// The cells' caches' last held steps over the spans' positions.
void add_held_until(const std::vector<kvtrace::Span>& spans, const std::vector<const GroupRecord*>& records,
                    SpanLayer& layer) {
  for (const GroupRecord* record : records) {
    const std::vector<int32_t>& steps = record->result.eviction_step;
    size_t i = 0;
    for (const kvtrace::Span& span : spans)
      for (int64_t p = span.start; p < span.end; ++p, ++i) {
        const int32_t step = steps.at(static_cast<size_t>(p));
        const int32_t until = step < 0 ? kNeverEvicted : step;
        layer.all_held_until[i] = std::min(layer.all_held_until[i], until);
        layer.any_held_until[i] = std::max(layer.any_held_until[i], until);
      }
  }
}

// Row t of every head into every cell's masses.
void add_row(const SpanRows& rows, const kvtrace::RowBlock& block, int64_t t,
             const std::vector<std::vector<const GroupRecord*>>& by_head, std::vector<SpanLayer>& out) {
  const bool step = t == rows.step;
  const bool answer = std::binary_search(rows.answer.begin(), rows.answer.end(), t);
  for (int h = 0; h < block.n_heads; ++h) {
    const float* a = block.row(h, t);
    for (size_t k = 0; k < rows.spans.size(); ++k) {
      const kvtrace::Span& span = rows.spans[k];
      const int64_t end = std::min(span.end, t + 1);
      if (end <= span.start) continue;
      double full = 0;
      for (int64_t p = span.start; p < end; ++p) full += a[p];
      for (size_t c = 0; c < out.size(); ++c) {
        const int32_t* evicted = by_head[c][static_cast<size_t>(h)]->result.eviction_step.data();
        double held = 0;
        for (int64_t p = span.start; p < end; ++p)
          if (held_at(evicted[p], t)) held += a[p];
        SpanLayer::Mass& mass = out[c].mass[k];
        if (step) mass.step += full, mass.step_held += held;
        if (answer) mass.answer += full, mass.answer_held += held;
      }
    }
  }
}

}  // namespace

std::vector<SpanLayer> measure_span_layers(const SpanRows& rows,
                                           const std::vector<std::vector<const GroupRecord*>>& cells,
                                           kvtrace::AttentionSource& source) {
  const int heads = source.n_heads();
  size_t positions = 0;
  for (const kvtrace::Span& span : rows.spans) positions += static_cast<size_t>(span.end - span.start);
  std::vector<SpanLayer> out(cells.size());
  for (size_t c = 0; c < cells.size(); ++c) {
    out[c].all_held_until.assign(positions, kNeverEvicted);
    out[c].any_held_until.assign(positions, -1);
    out[c].mass.resize(rows.spans.size());
    out[c].heads = heads;
    add_held_until(rows.spans, cells[c], out[c]);
  }
  const auto by_head = records_by_head(cells, heads);
  std::vector<int64_t> wanted = rows.answer;
  if (rows.step >= 0) wanted.push_back(rows.step);
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  kvtrace::RowBlock block;
  for (size_t i = 0; i < wanted.size();) {  // runs of consecutive rows, a block at a time
    size_t j = i + 1;
    while (j < wanted.size() && wanted[j] == wanted[j - 1] + 1 && static_cast<int64_t>(j - i) < kvtrace::kRowBlockSize)
      ++j;
    source.rows(wanted[i], static_cast<int64_t>(j - i), block);
    for (size_t r = i; r < j; ++r) add_row(rows, block, wanted[r], by_head, out);
    i = j;
  }
  return out;
}

}  // namespace kvsim
