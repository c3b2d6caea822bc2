#pragma once
// Span metrics gathered from the work items (internal to sim/replay): what each cell's caches
// of one (sequence, layer) held of the sequence's spans and the attention its rows put on
// them (measure_span_layers, from the item's rows while they are open), combined per (cell,
// sequence) once its every layer has come (SpanAggregator).
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "kvsim/replay/replay.hpp"
#include "kvsim/replay/span_metrics.hpp"
#include "kvtrace/attention_source.hpp"
#include "replay_plan.hpp"

namespace kvsim {

// One cell on one layer of one sequence. Per position of the sequence's spans (each span's
// positions in turn, spans in the file's order): the last step any of the layer's caches held
// it and the last step all of them did (kNeverEvicted: to the end). Per span: the attention
// its positions drew at the step row and over the answer rows, summed over the layer's query
// heads, in full and on the positions each head's cache held.
struct SpanLayer {
  struct Mass {
    double step = 0, step_held = 0, answer = 0, answer_held = 0;
  };
  std::vector<int32_t> all_held_until, any_held_until;
  std::vector<Mass> mass;
  int heads = 0;
};

// For each cell, its records of one (sequence, layer) (caches, not a bound's), measured over
// `source`'s rows (every query head of the layer, in order).
std::vector<SpanLayer> measure_span_layers(const SpanRows& rows,
                                           const std::vector<std::vector<const GroupRecord*>>& cells,
                                           kvtrace::AttentionSource& source);

class SpanAggregator {
 public:
  explicit SpanAggregator(const ReplayPlan& plan);
  // Whether cell c measures the spans of replayed sequence s (an index into plan.sequences):
  // the sequence has spans and the cell's policy keeps a cache.
  bool measures(size_t cell, size_t sequence) const;
  // Thread-safe; layer: an index into plan.layers.
  void add(size_t cell, size_t sequence, size_t layer, SpanLayer&& measured);
  // Cell c's spans, sequence by sequence; the masses summed in layer order.
  std::vector<SpanResult> finish(size_t cell) const;

 private:
  struct Entry {
    std::mutex lock;
    std::vector<int32_t> all_held_until, any_held_until;
    std::vector<std::vector<SpanLayer::Mass>> mass;  // per layer
    std::vector<int> heads;                          // per layer
  };
  SpanResult measure(const Entry& entry, const SequencePlan& sequence, size_t span, size_t offset) const;
  const ReplayPlan& plan_;
  std::vector<std::unique_ptr<Entry>> entries_;  // [cell * sequences + sequence], null: not measured
};

}  // namespace kvsim
