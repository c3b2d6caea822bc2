#include "aggregate.hpp"

#include <algorithm>
#include <cmath>
#include <span>
#include <stdexcept>

namespace kvsim {
namespace {
double held_peak(const HeldSums& held) { return held.steps ? static_cast<double>(held.peak) : NAN; }
}  // namespace

SweepAggregator::SweepAggregator(const std::vector<Expected>& cells, bool output_error) : output_error_(output_error) {
  for (const Expected& expected : cells) {
    auto cell = std::make_unique<Cell>();
    int64_t total = 0;
    for (int64_t values : expected.values) {
      cell->layers.push_back(make_tails(values));
      total += values;
    }
    cell->all = make_tails(total);
    cell->items_left = expected.layer_items;
    cell->all_items_left = expected.items;
    cell->layer_layouts.resize(expected.values.size());
    cell->sequences.resize(static_cast<size_t>(expected.sequences));
    for (SequenceHeld& sequence : cell->sequences) sequence.left = expected.layers;
    cells_.push_back(std::move(cell));
  }
}

SweepAggregator::Tails SweepAggregator::make_tails(int64_t values) const {
  Tails tails;
  if (values == 0) return tails;
  tails.retention_p5 = std::make_unique<TailQuantile>(values, 0.05);
  if (output_error_) tails.error_p95 = std::make_unique<TailQuantile>(values, 0.95);
  return tails;
}

void SweepAggregator::close(Tails& tails) {
  if (tails.retention_p5) tails.retention_p5_value = tails.retention_p5->value();
  if (tails.error_p95) tails.error_p95_value = tails.error_p95->value();
  tails.retention_p5.reset();
  tails.error_p95.reset();
}

void SweepAggregator::add(size_t cell, int layer, RecordSums& sums, const StepBlock& block) {
  const auto count = static_cast<size_t>(block.count);
  // With a question, its rows are the block's first `asked` steps, the answer's the rest.
  const auto asked = static_cast<size_t>(std::clamp<int64_t>(block.question_steps - block.first, 0, block.count));
  for (int k = 0; k < block.n_heads; ++k) {
    const std::span<const float> retention(block.retention + static_cast<size_t>(k) * block.stride, count);
    sums.retention.add(retention);
    if (block.question_steps > 0) {
      sums.question_retention.add(retention.first(asked));
      sums.answer_retention.add(retention.subspan(asked));
    }
    if (block.output_error)
      sums.output_error.add(std::span<const float>(block.output_error + static_cast<size_t>(k) * block.stride, count));
  }
  for (size_t i = 0; i < count; ++i) {
    sums.occupancy_sum += block.occupancy[i];
    sums.occupancy_peak = std::max<int64_t>(sums.occupancy_peak, block.occupancy[i]);
  }
  Cell& c = *cells_[cell];
  const std::lock_guard<std::mutex> hold(c.lock);
  for (Tails* tails : {&c.all, &c.layers[static_cast<size_t>(layer)]})
    for (int k = 0; k < block.n_heads; ++k) {
      const size_t at = static_cast<size_t>(k) * block.stride;
      if (tails->retention_p5) tails->retention_p5->add(std::span<const float>(block.retention + at, count));
      if (tails->error_p95 && block.output_error)
        tails->error_p95->add(std::span<const float>(block.output_error + at, count));
    }
}

void SweepAggregator::add(size_t cell, int layer, RecordSums& sums, const SimulationResult& result) {
  const int64_t end = result.first_step + result.n_steps;  // in steps of the sequence
  for (int64_t from = result.first_step; from < end;) {
    const int64_t to = std::min(end, (from / kvtrace::kRowBlockSize + 1) * kvtrace::kRowBlockSize);
    const auto at = static_cast<size_t>(from - result.first_step);
    StepBlock block;
    block.first = from - result.first_step;
    block.count = to - from;
    block.n_heads = result.n_heads;
    block.stride = static_cast<size_t>(result.n_steps);
    block.retention = result.retention.data() + at;
    block.output_error = result.output_error.empty() ? nullptr : result.output_error.data() + at;
    block.occupancy = result.occupancy.data() + at;
    block.question_steps = result.question_steps;
    add(cell, layer, sums, block);
    from = to;
  }
}

void SweepAggregator::add_layout(size_t c, int layer, size_t sequence, LayerHeld&& held) {
  const LayoutSums sums = layout_sums(held);
  Cell& cell = *cells_[c];
  const std::lock_guard<std::mutex> hold(cell.lock);
  for (LayoutSums* to : {&cell.layout, &cell.layer_layouts[static_cast<size_t>(layer)]}) {
    to->dense.add(sums.dense);
    to->layer_union.add(sums.layer_union);
  }
  SequenceHeld& model = cell.sequences.at(sequence);
  if (model.layers)
    model.layers->merge(held);
  else
    model.layers = std::make_unique<LayerHeld>(std::move(held));
  if (--model.left > 0) return;
  cell.model_union.add(model.layers->held_by_union(), model.layers->first_step());
  model.layers.reset();
}

void SweepAggregator::item_done(const std::vector<size_t>& cells, const std::vector<int>& layers) {
  for (size_t c : cells) {
    Cell& cell = *cells_[c];
    const std::lock_guard<std::mutex> hold(cell.lock);
    for (int l : layers)
      if (--cell.items_left[static_cast<size_t>(l)] == 0) close(cell.layers[static_cast<size_t>(l)]);
    if (--cell.all_items_left == 0) close(cell.all);
  }
}

void SweepAggregator::finish(size_t c, const std::vector<const GroupRecord*>& records,
                             const std::vector<const RecordSums*>& sums, CellResult& out) {
  Cell& cell = *cells_[c];
  const size_t n_layers = cell.layers.size();
  Moments retention, errors, question_retention, answer_retention;
  std::vector<Moments> layer_retention(n_layers), layer_errors(n_layers), layer_question(n_layers),
      layer_answer(n_layers);
  std::vector<int64_t> layer_occupancy(n_layers, 0), layer_steps(n_layers, 0);
  int64_t occupancy_sum = 0, occupancy_steps = 0;
  for (size_t r = 0; r < records.size(); ++r) {
    const auto l = static_cast<size_t>(records[r]->layer);
    const RecordSums& s = *sums[r];
    retention.add(s.retention);
    errors.add(s.output_error);
    question_retention.add(s.question_retention);
    answer_retention.add(s.answer_retention);
    layer_retention[l].add(s.retention);
    layer_errors[l].add(s.output_error);
    layer_question[l].add(s.question_retention);
    layer_answer[l].add(s.answer_retention);
    occupancy_sum += s.occupancy_sum;
    layer_occupancy[l] += s.occupancy_sum;
    out.occupancy_peak = std::max(out.occupancy_peak, s.occupancy_peak);
    occupancy_steps += records[r]->result.n_steps;
    layer_steps[l] += records[r]->result.n_steps;
    out.evictions += records[r]->result.evictions;
  }
  if (cell.all_items_left != 0) throw std::logic_error("a cell is finished before its work items");
  out.retention = summary_of(retention, cell.all.retention_p5_value, NAN);
  out.output_error = summary_of(errors, NAN, cell.all.error_p95_value);
  out.question_retention = summary_of(question_retention, NAN, NAN);
  out.answer_retention = summary_of(answer_retention, NAN, NAN);
  out.occupancy_mean =
      occupancy_steps ? static_cast<double>(occupancy_sum) / static_cast<double>(occupancy_steps) : NAN;
  finish_layouts(cell, out);
  for (size_t l = 0; l < n_layers; ++l) {
    if (layer_steps[l] == 0) continue;
    LayerSummary summary;
    summary.layer = static_cast<int>(l);
    summary.retention = summary_of(layer_retention[l], cell.layers[l].retention_p5_value, NAN);
    summary.output_error = summary_of(layer_errors[l], NAN, cell.layers[l].error_p95_value);
    summary.question_retention = summary_of(layer_question[l], NAN, NAN);
    summary.answer_retention = summary_of(layer_answer[l], NAN, NAN);
    summary.occupancy_mean = static_cast<double>(layer_occupancy[l]) / static_cast<double>(layer_steps[l]);
    const LayoutSums& layout = cell.layer_layouts[l];
    summary.occupancy_dense_mean = layout.dense.mean();
    summary.occupancy_dense_peak = held_peak(layout.dense);
    summary.occupancy_layer_union_mean = layout.layer_union.mean();
    summary.occupancy_layer_union_peak = held_peak(layout.layer_union);
    out.layers.push_back(summary);
  }
}

void SweepAggregator::finish_layouts(const Cell& cell, CellResult& out) {
  for (const SequenceHeld& sequence : cell.sequences)
    if (sequence.layers) throw std::logic_error("a cell is finished before its sequences' layers");
  out.occupancy_dense_mean = cell.layout.dense.mean();
  out.occupancy_dense_peak = held_peak(cell.layout.dense);
  out.occupancy_layer_union_mean = cell.layout.layer_union.mean();
  out.occupancy_layer_union_peak = held_peak(cell.layout.layer_union);
  out.occupancy_model_union_mean = cell.model_union.mean();
  out.occupancy_model_union_peak = held_peak(cell.model_union);
}

}  // namespace kvsim
