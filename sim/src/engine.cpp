#include "kvsim/engine.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kvtrace/error.hpp"
#include "kvtrace/schema.hpp"

namespace kvsim {
namespace {

using kvtrace::RowBlock;

// Remaining attention per (step, position) of one group, from a pass over the full rows:
// R_t[i] = sum over s > t of the aggregated a_s[i], summed from the last step backwards.
class PackedFuture final : public FutureAttention {
 public:
  PackedFuture(kvtrace::AttentionSource& source, const CacheGroup& group, Aggregate aggregate) {
    const int64_t n = source.n_tokens();
    remaining_.assign(static_cast<size_t>(kvtrace::packed_length(n)), 0.0);
    std::vector<double> rows(static_cast<size_t>(kvtrace::packed_length(n)), 0.0);
    RowBlock block;
    for (int64_t first = 0; first < n; first += kvtrace::kRowBlockSize) {
      const int64_t count = std::min(kvtrace::kRowBlockSize, n - first);
      source.rows(first, count, block);
      for (int64_t t = first; t < first + count; ++t) {
        double* out = rows.data() + kvtrace::packed_row_offset(t);
        for (size_t k = 0; k < group.heads.size(); ++k) {
          const float* row = block.row(group.heads[k], t);
          for (int64_t i = 0; i <= t; ++i) {
            const double value = row[i];
            out[i] = aggregate == Aggregate::max ? (k == 0 ? value : std::max(out[i], value)) : out[i] + value;
          }
        }
        if (aggregate == Aggregate::mean)
          for (int64_t i = 0; i <= t; ++i) out[i] /= static_cast<double>(group.heads.size());
      }
    }
    for (int64_t t = n - 2; t >= 0; --t) {
      const double* later = remaining_.data() + kvtrace::packed_row_offset(t + 1);
      const double* next_row = rows.data() + kvtrace::packed_row_offset(t + 1);
      double* here = remaining_.data() + kvtrace::packed_row_offset(t);
      for (int64_t i = 0; i <= t; ++i) here[i] = later[i] + next_row[i];
    }
  }
  double remaining(int64_t step, int32_t position) const override {
    return remaining_[static_cast<size_t>(kvtrace::packed_row_offset(step) + position)];
  }

 private:
  std::vector<double> remaining_;
};

// o_t = sum over i <= t of a_t[i] v_i, for every head of every group: computed once per step
// and shared by the simulations.
void full_outputs_at(const RowBlock& block, int64_t t, std::span<const CacheGroup> groups,
                     std::vector<std::vector<std::vector<double>>>& out) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const CacheGroup& group = groups[g];
    const auto d = static_cast<size_t>(group.head_dim);
    out[g].resize(group.heads.size());
    for (size_t k = 0; k < group.heads.size(); ++k) {
      std::vector<double>& o = out[g][k];
      o.assign(d, 0.0);
      const float* row = block.row(group.heads[k], t);
      for (int64_t i = 0; i <= t; ++i) {
        const float* v = group.values[k] + static_cast<size_t>(i) * d;
        for (size_t c = 0; c < d; ++c) o[c] += static_cast<double>(row[i]) * v[c];
      }
    }
  }
}

class Simulation {
 public:
  Simulation(const SimulationSpec& spec, const CacheGroup& group, int64_t n_tokens, const EngineOptions& options,
             const FutureAttention* future)
      : spec_(spec), group_(group), options_(options), policy_(spec.policy->make(spec.params)),
        bound_(dynamic_cast<BoundPolicy*>(policy_.get())) {
    if (spec.budget < 1) throw kvtrace::InputError("", "", "budget must be at least 1 token");
    GroupContext context;
    context.n_tokens = n_tokens;
    context.budget = spec.budget;
    context.n_heads = static_cast<int>(group.heads.size());
    context.seed = group.seed;
    context.future = future;
    context.layer = spec.layer;
    context.sequence_state = spec.sequence_state;
    policy_->reset(context);
    prefill_end_ = options.mode == Mode::prefill ? std::min(options.prompt_len, n_tokens) : 0;
    result_.n_heads = context.n_heads;
    result_.first_step = prefill_end_;
    result_.n_steps = n_tokens - prefill_end_;
    result_.budget = spec.budget;
    const auto cells = static_cast<size_t>(result_.n_heads) * static_cast<size_t>(result_.n_steps);
    result_.retention.assign(cells, 0.0f);
    if (options.output_error) result_.output_error.assign(cells, 0.0f);
    result_.occupancy.assign(static_cast<size_t>(result_.n_steps), 0);
    result_.eviction_step.assign(static_cast<size_t>(n_tokens), -1);
    in_cache_.assign(static_cast<size_t>(n_tokens), 0);
    mass_.resize(group.heads.size());
  }

  // full_outputs[k]: o_t of head k of the group (when output error is on).
  void step(const RowBlock& block, int64_t t, std::span<const std::vector<double>> full_outputs) {
    if (bound_) return bound_step(block, t, full_outputs);
    cache_.push_back(static_cast<int32_t>(t));
    in_cache_[static_cast<size_t>(t)] = 1;
    const size_t heads = group_.heads.size();
    for (size_t k = 0; k < heads; ++k) {
      const float* row = block.row(group_.heads[k], t);
      double mass = 0;
      for (int32_t position : cache_) mass += row[position];
      mass_[k] = mass;
    }
    if (t >= prefill_end_) {
      result_.occupancy[static_cast<size_t>(t - prefill_end_)] = static_cast<int32_t>(cache_.size());
      for (size_t k = 0; k < heads; ++k) record_head(block, t, full_outputs, k, cache_);
    }
    if (spec_.policy->needs_attention) {
      observe_row(block, t);
      policy_->observe(t, cache_, observed_);
    }
    const bool compress = options_.mode == Mode::prefill && t + 1 == prefill_end_;
    if (t + 1 < prefill_end_) return;  // the prompt is processed at once: no eviction inside it
    const int64_t excess = static_cast<int64_t>(cache_.size()) - spec_.budget;
    victims_.clear();
    policy_->evict(t, cache_, excess, compress, victims_);
    remove_victims(t, excess);
  }

  SimulationResult take() { return std::move(result_); }

 private:
  void observe_row(const RowBlock& block, int64_t t) {
    const size_t heads = group_.heads.size();
    observed_.assign(cache_.size(), 0.0f);
    for (size_t j = 0; j < cache_.size(); ++j) {
      double combined = 0;
      for (size_t k = 0; k < heads; ++k) {
        const double value = block.row(group_.heads[k], t)[cache_[j]] / mass_[k];
        combined = options_.aggregate == Aggregate::max ? (k == 0 ? value : std::max(combined, value)) : combined + value;
      }
      if (options_.aggregate == Aggregate::mean) combined /= static_cast<double>(heads);
      observed_[j] = static_cast<float>(combined);
    }
  }

  // Retention (the mass kept, mass_[k]) and output error of head k with `positions` cached.
  void record_head(const RowBlock& block, int64_t t, std::span<const std::vector<double>> full_outputs, size_t k,
                   std::span<const int32_t> positions) {
    const auto step = static_cast<size_t>(t - prefill_end_);
    const auto steps = static_cast<size_t>(result_.n_steps);
    result_.retention[k * steps + step] = static_cast<float>(mass_[k]);
    if (!options_.output_error) return;
    const float* row = block.row(group_.heads[k], t);
    const auto d = static_cast<size_t>(group_.head_dim);
    partial_.assign(d, 0.0);
    for (int32_t position : positions) {
      const double weight = row[position];
      const float* v = group_.values[k] + static_cast<size_t>(position) * d;
      for (size_t c = 0; c < d; ++c) partial_[c] += weight * v[c];
    }
    const std::vector<double>& full = full_outputs[k];
    double difference = 0, norm = 0;
    for (size_t c = 0; c < d; ++c) {
      const double approx = partial_[c] / mass_[k];
      difference += (full[c] - approx) * (full[c] - approx);
      norm += full[c] * full[c];
    }
    result_.output_error[k * steps + step] =
        norm > 0 ? static_cast<float>(std::sqrt(difference / norm)) : (difference > 0 ? 1.0f : 0.0f);
  }

  // Bounds keep no cache: each head gets its own best cache at every recorded step.
  void bound_step(const RowBlock& block, int64_t t, std::span<const std::vector<double>> full_outputs) {
    if (t < prefill_end_) return;
    for (size_t k = 0; k < group_.heads.size(); ++k) {
      const float* row = block.row(group_.heads[k], t);
      bound_->best_cache(t, std::span<const float>(row, static_cast<size_t>(t + 1)), spec_.budget, bound_cache_);
      double mass = 0;
      for (int32_t position : bound_cache_) mass += row[position];
      mass_[k] = mass;
      record_head(block, t, full_outputs, k, bound_cache_);
    }
    result_.occupancy[static_cast<size_t>(t - prefill_end_)] =
        static_cast<int32_t>(std::min<int64_t>(t + 1, spec_.budget + 1));
  }

  void remove_victims(int64_t t, int64_t excess) {
    for (int32_t victim : victims_) {
      if (victim < 0 || victim > t || !in_cache_[static_cast<size_t>(victim)])
        throw std::logic_error("policy " + spec_.policy->name + " evicted position " + std::to_string(victim) +
                               ", which is not cached at step " + std::to_string(t));
      in_cache_[static_cast<size_t>(victim)] = 0;
      result_.eviction_step[static_cast<size_t>(victim)] = static_cast<int32_t>(t);
    }
    if (spec_.policy->budgeted && static_cast<int64_t>(victims_.size()) < excess)
      throw std::logic_error("policy " + spec_.policy->name + " evicted " + std::to_string(victims_.size()) +
                             " positions at step " + std::to_string(t) + ", needs " + std::to_string(excess));
    result_.evictions += static_cast<int64_t>(victims_.size());
    if (victims_.empty()) return;
    std::erase_if(cache_, [&](int32_t position) { return !in_cache_[static_cast<size_t>(position)]; });
  }

  const SimulationSpec& spec_;
  const CacheGroup& group_;
  const EngineOptions& options_;
  std::unique_ptr<Policy> policy_;
  BoundPolicy* bound_;
  int64_t prefill_end_ = 0;
  SimulationResult result_;
  std::vector<int32_t> cache_;     // ascending positions
  std::vector<uint8_t> in_cache_;  // by position
  std::vector<double> mass_;       // per head of the group: retained mass at this step
  std::vector<float> observed_;
  std::vector<int32_t> victims_, bound_cache_;
  std::vector<double> partial_;
};

}  // namespace

std::vector<std::vector<SimulationResult>> run_lockstep(std::span<const Lane> lanes, const EngineOptions& options) {
  if (lanes.empty()) return {};
  const int64_t n = lanes.front().source->n_tokens();
  struct LaneState {
    std::vector<std::unique_ptr<PackedFuture>> futures;
    std::vector<Simulation> running;
    std::vector<std::vector<std::vector<double>>> full_outputs;  // [group][head]: o_t
    kvtrace::RowBlock block;
  };
  std::vector<LaneState> states(lanes.size());
  for (size_t l = 0; l < lanes.size(); ++l) {
    const Lane& lane = lanes[l];
    LaneState& state = states[l];
    if (lane.source->n_tokens() != n) throw std::logic_error("lockstep lanes must have the same length");
    if (options.output_error)
      for (const auto& group : lane.groups)
        if (group.values.size() != group.heads.size()) throw std::logic_error("output error needs the values of every head");
    state.futures.resize(lane.groups.size());
    for (const auto& spec : lane.simulations)
      if (spec.policy->needs_future && !state.futures[static_cast<size_t>(spec.group)])
        state.futures[static_cast<size_t>(spec.group)] =
            std::make_unique<PackedFuture>(*lane.source, lane.groups[static_cast<size_t>(spec.group)], options.aggregate);
    state.running.reserve(lane.simulations.size());
    for (const auto& spec : lane.simulations)
      state.running.emplace_back(spec, lane.groups[static_cast<size_t>(spec.group)], n, options,
                                 state.futures[static_cast<size_t>(spec.group)].get());
    state.full_outputs.resize(lane.groups.size());
  }

  for (int64_t first = 0; first < n; first += kvtrace::kRowBlockSize) {
    const int64_t count = std::min(kvtrace::kRowBlockSize, n - first);
    for (size_t l = 0; l < lanes.size(); ++l) lanes[l].source->rows(first, count, states[l].block);
    for (int64_t t = first; t < first + count; ++t) {
      for (size_t l = 0; l < lanes.size(); ++l) {
        const Lane& lane = lanes[l];
        LaneState& state = states[l];
        if (options.output_error) full_outputs_at(state.block, t, lane.groups, state.full_outputs);
        for (size_t s = 0; s < state.running.size(); ++s)
          state.running[s].step(state.block, t, state.full_outputs[static_cast<size_t>(lane.simulations[s].group)]);
      }
    }
  }
  std::vector<std::vector<SimulationResult>> results(lanes.size());
  for (size_t l = 0; l < lanes.size(); ++l)
    for (auto& simulation : states[l].running) results[l].push_back(simulation.take());
  return results;
}

std::vector<SimulationResult> run_engine(kvtrace::AttentionSource& source, std::span<const CacheGroup> groups,
                                         std::span<const SimulationSpec> simulations, const EngineOptions& options) {
  const Lane lane{&source, groups, simulations};
  return std::move(run_lockstep(std::span<const Lane>(&lane, 1), options).front());
}

}  // namespace kvsim
