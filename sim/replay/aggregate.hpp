#pragma once
// A sweep's summaries, gathered as the engine hands over each block of a simulation's
// recorded steps, so a sweep never holds every step's values: per record its moments
// (summed in the order of its steps), per cell and per (cell, layer) the tails of the
// percentiles (TailQuantile: exact, whatever order the blocks come in). A cell's moments
// merge its records in work-item order at the end, so no number depends on scheduling.
// Retention keeps its lower tail (p5, min), output error its upper (p95, max).
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "kvsim/core/engine.hpp"
#include "kvsim/core/summary.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvsim/replay/layout.hpp"

namespace kvsim {

struct RecordSums {
  Moments retention, output_error;
  Moments question_retention, answer_retention;  // with a question: retention split at its end
  int64_t occupancy_sum = 0, occupancy_peak = 0;
};

class SweepAggregator {
 public:
  // What each cell will get, known before the run.
  struct Expected {
    std::vector<int64_t> values;       // per layer: values per metric (0: the layer is not replayed)
    std::vector<int64_t> layer_items;  // per layer: the work items that bring them
    int64_t items = 0;                 // the work items that bring any of the cell's values
    int64_t sequences = 0;             // the replayed sequences,
    int64_t layers = 0;                // each with this many replayed layers (the model's union)
  };
  SweepAggregator(const std::vector<Expected>& cells, bool output_error);
  // One block of a record of cell c at layer l. Thread-safe for different records.
  void add(size_t cell, int layer, RecordSums& sums, const StepBlock& block);
  // The same for a record's whole result, block by block as the engine would hand it over.
  void add(size_t cell, int layer, RecordSums& sums, const SimulationResult& result);
  // The layouts' occupancy of cell c on one layer of sequence `sequence` (an index into the
  // plan's sequences). Thread-safe; the sums are integers, so the order does not matter.
  void add_layout(size_t cell, int layer, size_t sequence, LayerHeld&& held);
  // A work item has brought all it has of these cells and layers: a (cell, layer) whose
  // items have all come gets its percentiles, and its tails are freed.
  void item_done(const std::vector<size_t>& cells, const std::vector<int>& layers);
  // Cell c's summaries (and its per-layer ones) from its records' sums in work-item order.
  void finish(size_t cell, const std::vector<const GroupRecord*>& records, const std::vector<const RecordSums*>& sums,
              CellResult& out);

 private:
  struct Tails {
    std::unique_ptr<TailQuantile> retention_p5, error_p95;
    double retention_p5_value = NAN, error_p95_value = NAN;
  };
  // A sequence's model union, while its layers come.
  struct SequenceHeld {
    std::unique_ptr<LayerHeld> layers;
    int64_t left = 0;
  };
  struct Cell {
    std::mutex lock;
    Tails all;
    std::vector<Tails> layers;
    LayoutSums layout;                      // over every layer and sequence
    std::vector<LayoutSums> layer_layouts;  // per layer
    HeldSums model_union;
    std::vector<SequenceHeld> sequences;
    std::vector<int64_t> items_left;
    int64_t all_items_left = 0;
  };
  Tails make_tails(int64_t values) const;
  static void finish_layouts(const Cell& cell, CellResult& out);
  static void close(Tails& tails);
  bool output_error_;
  std::vector<std::unique_ptr<Cell>> cells_;
};

}  // namespace kvsim
