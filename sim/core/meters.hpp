#pragma once
// What a simulation records at each recorded step (docs/semantics.md, section 3), one meter
// per metric: retention, output error and occupancy. Each metric has one reference
// implementation (reference_meters.hpp), plain loops that read top to bottom; retention and
// output error also have accelerated ones (fast_meters.hpp), which give the same values (bit
// for bit, or to rounding where they add in another order), chosen once when the simulation
// is made (EngineOptions::reference). Adding a metric is adding a meter.
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "step_rows.hpp"
#include "kvsim/core/engine.hpp"
#include "kvtrace/attention_source.hpp"

namespace kvsim {

// A simulation's results. The per-step vectors hold every recorded step or, with a sink, one
// row block of steps (the sink takes each block as it ends).
struct Record {
  SimulationResult result;
  int64_t first_step = 0;  // the first recorded step
  size_t window = 0;       // the steps the per-step vectors hold
  bool sink = false;
  // Where step t's values go: its recorded step, or with a sink its place in the block.
  size_t slot(int64_t t) const { return static_cast<size_t>(sink ? t % kvtrace::kRowBlockSize : t - first_step); }
  // Where head k's value of step t goes (a batch records steps after they ran).
  size_t at(size_t k, int64_t t) const { return k * window + slot(t); }
};

// The cache as one or two runs of consecutive positions, [begin, end) each (count 0: neither;
// cache_runs says when).
struct Runs {
  int count = 0;
  int64_t begin[2] = {0, 0}, end[2] = {0, 0};
};

// What the meters read at a recorded step t.
struct MeterStep {
  int64_t t = 0;
  StepRows* rows = nullptr;        // the true rows: a_t, and o_t for output error
  StepRows* model = nullptr;       // the rows the simulated model computes: a quantized view's, or the true ones
  std::span<const int32_t> cache;  // the positions every head attends (ascending)
  std::span<const std::vector<int32_t>> per_head;  // a bound's: each head's own positions instead
  std::span<const int32_t> evicted;                // the positions evicted so far, in the order they went
  std::span<const uint8_t> in_cache;               // by position
  const Runs* runs = nullptr;                      // the cache's runs (per_head: none)
  // Per head: the model's row summed over its positions, as the simulation found it (the
  // observed row's normaliser; what the accelerated meters divide by).
  std::span<const double> mass;
  int64_t occupancy = 0;  // the positions attended

  std::span<const int32_t> positions(size_t k) const {
    return per_head.empty() ? cache : std::span<const int32_t>(per_head[k]);
  }
};

class Meter {
 public:
  virtual ~Meter() = default;
  virtual void record(const MeterStep& step, Record& out) = 0;
  // Records the steps the meter holds back (a batch): at the end of each row block, and
  // before a follower takes over the results (Simulation::follow). `evicted`: as at the last
  // step recorded.
  virtual void flush(const StepRows& /*rows*/, std::span<const int32_t> /*evicted*/, Record& /*out*/) {}
};

// Occupancy: the positions attended. One implementation: there is nothing to accelerate.
class OccupancyMeter final : public Meter {
 public:
  void record(const MeterStep& step, Record& out) override {
    out.result.occupancy[out.slot(step.t)] = static_cast<int32_t>(step.occupancy);
  }
};

// What the meters of one simulation are made for.
struct MeterSetup {
  const CacheGroup* group = nullptr;
  int group_index = 0;                       // in the lane (StepRows::full_output, quad_rows)
  const QuantizedView* quantized = nullptr;  // null at full precision
  bool bound = false;                        // the positions are per head (MeterStep::per_head)
  const Policy* merging = nullptr;           // a merging policy (PolicyInfo::merges): its values
};

// The values a quantized cache stores for head k of the group, or null (the true values).
inline const StoredValues* stored_values(const MeterSetup& setup, size_t k) {
  if (!setup.quantized || setup.quantized->values.empty()) return nullptr;
  return setup.quantized->values[static_cast<size_t>(setup.group_index)][k];
}

// The relative L2 error |o - approx| / |o| (1 where o = 0 and approx is not, 0 where both are).
inline float relative_error(double difference, double norm) {
  return norm > 0 ? static_cast<float>(std::sqrt(difference / norm)) : (difference > 0 ? 1.0f : 0.0f);
}

}  // namespace kvsim
