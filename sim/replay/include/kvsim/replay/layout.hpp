#pragma once
// Occupancy by cache layout (docs/semantics.md, section 3): the positions a serving engine's
// cache holds when it stores the kv heads of a layer, or every layer of a sequence, in one
// slot per position. A position is held by a layer's paged cache while any of the layer's kv
// heads holds it, by the model's while any layer does; a dense cache holds, per layer, as many
// positions as its fullest kv head. The sweep's aggregation and kvsim eval's replay count them.
#include <cstdint>
#include <span>
#include <vector>

#include "kvsim/core/engine.hpp"

namespace kvsim {

// Positions held at each recorded step, summed and at their peak. A compression before the
// first recorded step (prefill mode) held every position before it: `before` of them, which
// count in the peak (a serving engine must hold them), not in the mean.
struct HeldSums {
  int64_t sum = 0, peak = 0, steps = 0;
  void add(std::span<const int32_t> held, int64_t before);
  void add(const HeldSums& other);
  double mean() const;  // sum / steps; NaN without a step
};

// One cell on one layer of one sequence: its records' occupancy step by step (the dense
// layout's fullest head) and, for a cache, the last step each position was held by any of
// them (the paged layer's union).
class LayerHeld {
 public:
  // holds_cache: the records are caches (Engine::cache, cross_layer); a bound keeps none,
  // and its unions are taken as its fullest head (the heads' choices nested).
  explicit LayerHeld(bool holds_cache) : holds_cache_(holds_cache) {}
  // A record's occupancy over recorded steps [first, first + occupancy.size()).
  void add_occupancy(int64_t first, std::span<const int32_t> occupancy);
  // A record's steps and eviction steps (its occupancy comes from add_occupancy).
  void add_record(const SimulationResult& result);
  // Another layer of the same sequence: the model's union.
  void merge(const LayerHeld& other);

  std::span<const int32_t> dense() const { return dense_; }
  std::vector<int32_t> held_by_union() const;  // per recorded step
  int64_t first_step() const { return first_step_; }

 private:
  int64_t first_step_ = 0, n_tokens_ = 0;
  bool holds_cache_;
  std::vector<int32_t> dense_;      // [recorded step]
  std::vector<int32_t> last_held_;  // [position]: the last step any record held it
};

// What the layouts held of one cell on one layer of one sequence.
struct LayoutSums {
  HeldSums dense, layer_union;
};
LayoutSums layout_sums(const LayerHeld& held);

}  // namespace kvsim
