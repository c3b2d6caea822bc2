// Span metrics (docs/semantics.md, section 3 "Spans"): which rows measure a sequence's spans,
// their measures per cell from every layer's caches, and the sweep CSV's columns of them.
#include "kvsim/replay/span_metrics.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "span_aggregate.hpp"

namespace kvsim {
namespace {

constexpr int32_t kNeverEvicted = std::numeric_limits<int32_t>::max();

// The positions of `span` that have come by row t: [start, came_end).
int64_t came_end(const kvtrace::Span& span, int64_t t) { return std::min(span.end, t + 1); }

// Held shares and full / held mass of one span at one row, from the caches' last held steps
// (its positions' part of them) and the masses the layers measured there.
struct RowShares {
  int64_t came = 0, all = 0, any = 0;
};
RowShares row_shares(const int32_t* all_until, const int32_t* any_until, const kvtrace::Span& span, int64_t t) {
  RowShares shares;
  shares.came = std::max<int64_t>(0, came_end(span, t) - span.start);
  for (int64_t i = 0; i < shares.came; ++i) {
    shares.all += all_until[i] >= t;
    shares.any += any_until[i] >= t;
  }
  return shares;
}

double share(int64_t part, int64_t whole) { return static_cast<double>(part) / static_cast<double>(whole); }

}  // namespace

SpanRows span_rows(const kvtrace::SequenceMeta& sequence, int64_t span_step) {
  SpanRows rows;
  rows.spans = sequence.spans;
  if (rows.spans.empty()) return rows;
  const int64_t prompt = std::min(sequence.prompt_len, sequence.n_tokens);
  const auto question = std::find_if(rows.spans.begin(), rows.spans.end(),
                                     [](const kvtrace::Span& span) { return span.kind == "question"; });
  if (span_step >= 0)
    rows.step = span_step;
  else if (question != rows.spans.end())
    rows.step = question->start;
  else if (sequence.question_len >= 1 && sequence.question_len < prompt)
    rows.step = prompt - sequence.question_len;
  else if (prompt < sequence.n_tokens)
    rows.step = prompt;
  for (const kvtrace::Span& span : rows.spans)
    if (span.kind == "answer")
      for (int64_t t = span.start; t < span.end; ++t) rows.answer.push_back(t);
  std::sort(rows.answer.begin(), rows.answer.end());
  rows.answer.erase(std::unique(rows.answer.begin(), rows.answer.end()), rows.answer.end());
  if (rows.answer.empty())
    for (int64_t t = prompt; t < sequence.n_tokens; ++t) rows.answer.push_back(t);
  return rows;
}

SpanAggregator::SpanAggregator(const ReplayPlan& plan) : plan_(plan) {
  entries_.resize(plan.cells.size() * plan.sequences.size());
  for (size_t c = 0; c < plan.cells.size(); ++c)
    for (size_t s = 0; s < plan.sequences.size(); ++s) {
      if (plan.cells[c].choice->info->engine == Engine::bound || plan.sequences[s].spans.spans.empty()) continue;
      auto entry = std::make_unique<Entry>();
      size_t positions = 0;
      for (const kvtrace::Span& span : plan.sequences[s].spans.spans) positions += static_cast<size_t>(span.end - span.start);
      entry->all_held_until.assign(positions, kNeverEvicted);
      entry->any_held_until.assign(positions, -1);
      entry->mass.resize(plan.layers.size());
      entry->heads.assign(plan.layers.size(), 0);
      entries_[c * plan.sequences.size() + s] = std::move(entry);
    }
}

bool SpanAggregator::measures(size_t cell, size_t sequence) const {
  return entries_[cell * plan_.sequences.size() + sequence] != nullptr;
}

void SpanAggregator::add(size_t cell, size_t sequence, size_t layer, SpanLayer&& measured) {
  Entry& entry = *entries_.at(cell * plan_.sequences.size() + sequence);
  if (measured.all_held_until.size() != entry.all_held_until.size()) throw std::logic_error("span positions differ");
  const std::lock_guard<std::mutex> hold(entry.lock);
  for (size_t i = 0; i < entry.all_held_until.size(); ++i) {
    entry.all_held_until[i] = std::min(entry.all_held_until[i], measured.all_held_until[i]);
    entry.any_held_until[i] = std::max(entry.any_held_until[i], measured.any_held_until[i]);
  }
  entry.mass[layer] = std::move(measured.mass);
  entry.heads[layer] = measured.heads;
}

SpanResult SpanAggregator::measure(const Entry& entry, const SequencePlan& sequence, size_t k, size_t offset) const {
  const SpanRows& rows = sequence.spans;
  SpanResult out;
  out.seq = sequence.seq;
  out.span = rows.spans[k];
  out.step = rows.step;
  const int32_t* all_until = entry.all_held_until.data() + offset;
  const int32_t* any_until = entry.any_held_until.data() + offset;
  SpanLayer::Mass mass;  // over the layers, in order
  int64_t heads = 0;
  for (size_t l = 0; l < entry.mass.size(); ++l) {
    if (entry.mass[l].empty()) continue;  // a layer not replayed
    const SpanLayer::Mass& layer = entry.mass[l][k];
    mass.step += layer.step, mass.step_held += layer.step_held;
    mass.answer += layer.answer, mass.answer_held += layer.answer_held;
    heads += entry.heads[l];
  }
  if (rows.step >= 0) {
    const RowShares at = row_shares(all_until, any_until, out.span, rows.step);
    if (at.came > 0 && heads > 0)
      out.at_step = {share(at.all, at.came), share(at.any, at.came), share(at.came - at.any, at.came),
                     mass.step / static_cast<double>(heads), mass.step_held / static_cast<double>(heads)};
  }
  double held_all = 0, held_any = 0, gone = 0;
  for (int64_t t : rows.answer) {
    const RowShares at = row_shares(all_until, any_until, out.span, t);
    if (at.came == 0) continue;
    held_all += share(at.all, at.came), held_any += share(at.any, at.came), gone += share(at.came - at.any, at.came);
    ++out.answer_rows;
  }
  if (out.answer_rows > 0 && heads > 0) {
    const auto n = static_cast<double>(out.answer_rows);
    const double samples = n * static_cast<double>(heads);
    out.answer = {held_all / n, held_any / n, gone / n, mass.answer / samples, mass.answer_held / samples};
  }
  return out;
}

std::vector<SpanResult> SpanAggregator::finish(size_t cell) const {
  std::vector<SpanResult> out;
  for (size_t s = 0; s < plan_.sequences.size(); ++s) {
    const Entry* entry = entries_[cell * plan_.sequences.size() + s].get();
    if (!entry) continue;
    size_t offset = 0;
    const std::vector<kvtrace::Span>& spans = plan_.sequences[s].spans.spans;
    for (size_t k = 0; k < spans.size(); ++k) {
      out.push_back(measure(*entry, plan_.sequences[s], k, offset));
      offset += static_cast<size_t>(spans[k].end - spans[k].start);
    }
  }
  return out;
}

double span_column_value(const std::vector<SpanColumn>& columns, const std::string& name) {
  const auto found =
      std::find_if(columns.begin(), columns.end(), [&](const SpanColumn& column) { return column.name == name; });
  return found == columns.end() ? NAN : found->value;
}

void add_span_kind(std::vector<std::string>& kinds, const std::string& kind) {
  if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) kinds.push_back(kind);
}

std::vector<std::string> span_column_names(const std::vector<std::string>& kinds) {
  std::vector<std::string> names;
  for (const std::string& kind : kinds) {
    for (const char* measure : kSpanMeasureNames) names.push_back("span_" + kind + "_" + measure);
    for (const char* measure : kSpanMeasureNames) names.push_back("span_" + kind + "_answer_" + measure);
  }
  return names;
}

std::vector<SpanColumn> span_columns(const std::vector<SpanResult>& spans, const std::vector<std::string>& kinds) {
  const std::vector<std::string> names = span_column_names(kinds);
  std::vector<SpanColumn> columns;
  const size_t per_kind = 2 * kSpanMeasures.size();
  for (size_t k = 0; k < kinds.size(); ++k)
    for (size_t m = 0; m < per_kind; ++m) {
      const bool answer = m >= kSpanMeasures.size();
      double sum = 0;
      int64_t count = 0;
      for (const SpanResult& span : spans) {
        if (span.span.kind != kinds[k]) continue;
        const double value = (answer ? span.answer : span.at_step).*kSpanMeasures[m % kSpanMeasures.size()];
        if (std::isnan(value)) continue;
        sum += value;
        ++count;
      }
      columns.push_back({names[k * per_kind + m], count ? sum / static_cast<double>(count) : NAN});
    }
  return columns;
}

}  // namespace kvsim
