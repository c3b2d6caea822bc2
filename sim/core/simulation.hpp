#pragma once
// One simulation of the replay engine (internal to sim/core/engine.cpp): one policy at one
// budget on one cache group, stepped through the group's rows. It holds the cache
// (cache_state.hpp), shows the policy each step (observation.hpp), records each recorded step
// with its meters (meters.hpp), and shares budgets with the simulations of the same policy at
// smaller budgets.
#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "cache_state.hpp"
#include "fast_meters.hpp"
#include "future.hpp"
#include "meters.hpp"
#include "observation.hpp"
#include "reference_meters.hpp"
#include "schedule.hpp"
#include "step_rows.hpp"
#include "threshold_eviction.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/core/row_ranking.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {

// The model's full rows of a group's heads at the current step (GroupContext::full_rows).
class GroupFullRows final : public FullRows {
 public:
  explicit GroupFullRows(const std::vector<int>& heads) : heads_(heads) {}
  void at(const StepRows& rows) { rows_ = &rows; }
  int n_heads() const override { return static_cast<int>(heads_.size()); }
  std::span<const float> row(int head) const override {
    return {rows_->row(heads_[static_cast<size_t>(head)]), static_cast<size_t>(rows_->t() + 1)};
  }

 private:
  const std::vector<int>& heads_;
  const StepRows* rows_ = nullptr;
};

// The meters a simulation records with: the reference implementations, or the accelerated
// ones (EngineOptions::reference).
inline std::vector<std::unique_ptr<Meter>> make_meters(const MeterSetup& setup, const EngineOptions& options) {
  std::vector<std::unique_ptr<Meter>> meters;
  meters.push_back(std::make_unique<OccupancyMeter>());
  if (options.reference) {
    meters.push_back(std::make_unique<ReferenceRetention>(setup));
    if (options.output_error) meters.push_back(std::make_unique<ReferenceOutputError>(setup));
    return meters;
  }
  meters.push_back(std::make_unique<FastRetention>(setup));
  // The accelerated output error sums the true values; a merging policy's cache holds others.
  if (options.output_error && setup.merging) meters.push_back(std::make_unique<ReferenceOutputError>(setup));
  if (options.output_error && setup.merging) return meters;
  if (options.output_error && setup.bound) meters.push_back(std::make_unique<BoundOutputError>(setup));
  if (options.output_error && !setup.bound)
    meters.push_back(std::make_unique<CacheOutputError>(setup, options.interleave));
  return meters;
}

class Simulation {
 public:
  Simulation(const SimulationSpec& spec, const CacheGroup& group, int64_t n_tokens, const EngineOptions& options,
             const FutureAttention* future, const QuantizedView* quantized)
      : spec_(checked_budget(spec)),
        group_(group),
        options_(options),
        policy_(spec.policy->make(spec.params)),
        bound_(dynamic_cast<BoundPolicy*>(policy_.get())),
        schedule_(options, n_tokens),
        quantized_(quantized),
        cache_(spec, *policy_, options, n_tokens),
        observation_(spec, group, options, cache_capacity(spec, n_tokens)),
        full_rows_(group.heads),
        meters_(make_meters({&group, spec.group, quantized, bound_ != nullptr, merging(spec, quantized)}, options)) {
    GroupContext context;
    context.n_tokens = n_tokens;
    context.budget = spec.budget;
    context.n_heads = static_cast<int>(group.heads.size());
    context.seed = group.seed;
    context.future = future;
    if (spec.policy->needs_full_rows) context.full_rows = &full_rows_;
    if (spec.policy->needs_tensors()) context.tensors = &checked_tensors(*spec.policy, group);
    context.layer = spec.layer;
    context.sequence_state = spec.sequence_state;
    policy_->reset(context);
    if (!spec.pinned.empty()) pin(n_tokens);
    if (!spec.compressed_away) {
      if (options.threshold.on()) ThresholdEviction::check(*spec.policy, options);
      if (options.paging.on()) require_scores("--page");
      if (options.head_floor >= 0 || spec.policy->head_floor >= 0) require_kv_head_scores();
    }
    start_record(n_tokens, context.n_heads);
    if (bound_) {
      bound_caches_.resize(group.heads.size());
      bound_mass_.resize(group.heads.size());
    }
  }

  // `rows`: the true rows; `model`: the rows the simulated model computes (the quantized
  // view's, or the true ones); `full`: the rows policies that need_full_rows read, when they
  // are not `model`'s (the closed loop: the model's softmax before the cache restricted it).
  void step(StepRows& rows, StepRows& model, const StepRows* full = nullptr) {
    const int64_t t = rows.t();
    if (dormant() || t <= last_step_) return;  // a follower not needed yet, or taken over at t
    last_step_ = t;
    if (bound_) return bound_step(rows, model);
    cache_.add(t);
    observation_.measure(model, cache_.positions(), cache_.evicted(), spec_.group);
    if (t >= record_.first_step) record(rows, model);
    if (!spec_.compressed_away) observe(t, model, full);
    if (schedule_.at(t) == Schedule::Action::keep) return;  // e.g. inside the prompt, processed at once
    wake_followers(rows, t);
    if (!deferred_) evict(t);  // else the engine evicts for the layer's heads at once (evict_chosen)
  }

  // Head-adaptive budgets: step() observes and leaves the eviction to the engine, which asks
  // every head's scores and then calls evict_chosen (or evict_now when a policy gives none).
  void defer_eviction() { deferred_ = !spec_.compressed_away; }
  bool scores(int64_t t, std::vector<double>& out) const { return policy_->scores(t, cache_.positions(), out); }
  // A NaN among the scores the engine or the policy ranks at step t: one line for the user.
  [[noreturn]] void refuse_nan_score(int64_t t) const { cache_.refuse_nan_score(t); }

  // The couplings rank what may go (CacheState::open_positions): the cache less its pinned
  // positions (--protect), which stay and count toward the budget (pinned_held).
  bool open_scores(int64_t t, std::vector<double>& out) const {
    if (!scores(t, out)) return false;
    cache_.drop_pinned(out);
    return true;
  }
  std::span<const int32_t> open_cache() { return cache_.open_positions(); }
  int64_t pinned_held() const { return cache_.pinned_held(); }
  void evict_open(int64_t t, std::span<const size_t> keep) { record_evictions(t, cache_.evict_open(t, keep)); }

  bool may_evict(int64_t t) const { return schedule_.at(t) != Schedule::Action::keep && t == last_step_; }
  void evict_now(int64_t t) { evict(t); }
  // Evicts the positions of the cache not at `keep` (indices into it, ascending).
  void evict_chosen(int64_t t, std::span<const size_t> keep) { record_evictions(t, cache_.evict_chosen(t, keep)); }

  // Budget sharing. Simulations of one policy with the same parameters, cache group and view
  // but smaller budgets keep exactly the same cache as this one until the first step at which
  // they must evict: until then they follow it, dormant, and then take over its state.
  // A policy that ignores the budget (full, scissorhands-official) follows to the end.
  // Under a threshold, or for a policy that reads B without being capped by it
  // (PolicyInfo::reads_budget), the budget caps nothing but may set the rule: none follows.
  bool follow(Simulation& leader) {
    if (options_.threshold.on() || spec_.policy->reads_budget) return false;
    if (spec_.policy->budgeted && !policy_->adopt(*leader.policy_)) return false;
    leader_ = &leader;
    leader.followers_.push_back(this);
    return true;
  }
  bool dormant() const { return leader_ != nullptr; }

  // After the last step, before any result is taken: a follower that never had to evict
  // has the leader's results as its own.
  void settle() {
    if (!dormant()) return;
    take_results(*leader_);
    leader_ = nullptr;
  }
  SimulationResult take() { return std::move(record_.result); }

  // With a sink: hands it the recorded steps of the block [first, first + count) of steps
  // (a follower still dormant recorded what its leader did).
  void send_block(int64_t first, int64_t count, size_t lane, size_t index) const {
    const int64_t from = std::max(first, record_.first_step), to = first + count;
    if (from >= to) return;
    const SimulationResult& recorded = dormant() ? leader_->record_.result : record_.result;
    StepBlock block;
    block.lane = lane;
    block.simulation = index;
    block.first = from - record_.first_step;
    block.question_steps = record_.result.question_steps;
    block.count = to - from;
    block.n_heads = record_.result.n_heads;
    block.stride = record_.window;
    block.retention = recorded.retention.data() + record_.slot(from);
    block.output_error = options_.output_error ? recorded.output_error.data() + record_.slot(from) : nullptr;
    block.occupancy = recorded.occupancy.data() + record_.slot(from);
    (*options_.sink)(block);
  }
  std::span<const int32_t> cache() const { return cache_.positions(); }

 private:
  static const SimulationSpec& checked_budget(const SimulationSpec& spec) {
    if (spec.budget < 1) throw kvtrace::InputError("", "", "budget must be at least 1 token");
    return spec;
  }
  // The most positions the cache holds at once.
  static size_t cache_capacity(const SimulationSpec& spec, int64_t n_tokens) {
    return static_cast<size_t>(spec.policy->budgeted ? std::min(n_tokens, spec.budget + 1) : n_tokens);
  }

  // A merging policy's values, for output error. Quantization would store the merged values
  // quantized, which kvsim does not model: refused, one line.
  const Policy* merging(const SimulationSpec& spec, const QuantizedView* quantized) const {
    if (!spec.policy->merges) return nullptr;
    if (quantized)
      throw kvtrace::InputError("", "",
                                "policy " + spec.policy->name +
                                    " merges evicted values into kept ones; --quant does not model merged values");
    return policy_.get();
  }

  // The caller (replay, eval) refuses a trace without what the policy needs, with a line for
  // the user; reaching here without it is a bug.
  static const GroupTensors& checked_tensors(const PolicyInfo& policy, const CacheGroup& group) {
    const GroupTensors& tensors = group.tensors;
    if ((policy.needs_keys && tensors.keys.empty()) || (policy.needs_values && tensors.values.empty()) ||
        (policy.needs_queries && tensors.queries.size() != group.heads.size()) || tensors.head_dim < 1)
      throw std::logic_error("policy " + policy.name + ": the cache group lacks the tensors it needs");
    return tensors;
  }

  // --protect: the policy passes over the pinned positions (Policy::pin), or the run is refused.
  void pin(int64_t n_tokens) {
    if (static_cast<int64_t>(spec_.pinned.size()) != n_tokens)
      throw std::logic_error("the pinned positions are not one per token");
    if (!policy_->pin(spec_.pinned))
      throw kvtrace::InputError("", "",
                                "policy " + spec_.policy->name +
                                    " cannot pass over protected positions; --protect needs a policy that chooses "
                                    "its victims among the cached ones");
  }

  // Page mode and head-adaptive budgets rank the policy's scores in the engine (one set per
  // cached position, Policy::scores): a policy without them is refused, in the same words.
  void require_scores(const std::string& option) {
    if (!spec_.policy->scoring)
      throw kvtrace::InputError(
          "", "",
          "policy " + spec_.policy->name + " has no per-position scores; " + option + " needs a scoring policy");
  }
  // Head-adaptive budgets share a layer's slots among the caches of its kv heads, by scores.
  void require_kv_head_scores() {
    const std::string option = "--head-budget adaptive";
    require_scores(option);
    const PolicyInfo& info = *spec_.policy;
    if (info.grouping == Grouping::layer || spec_.sequence_state)
      throw kvtrace::InputError(
          "", "",
          "policy " + info.name + " keeps one cache per layer; " + option + " needs a cache per kv head to share");
    if (!info.budgeted || info.engine != Engine::cache)
      throw kvtrace::InputError(
          "", "", "policy " + info.name + " does not evict to a budget; " + option + " needs a budgeted policy");
  }

  // The results' shape. With a sink the per-step values are kept for one block of steps
  // (Record::slot), else for all; the eviction steps always (the layouts' occupancy).
  void start_record(int64_t n_tokens, int n_heads) {
    record_.first_step = schedule_.first_recorded();
    record_.sink = options_.sink != nullptr;
    SimulationResult& result = record_.result;
    result.n_heads = n_heads;
    result.first_step = record_.first_step;
    result.n_steps = n_tokens - record_.first_step;
    result.question_steps = schedule_.question_steps();
    result.budget = spec_.budget;
    record_.window = static_cast<size_t>(options_.sink ? kvtrace::kRowBlockSize : result.n_steps);
    const auto cells = static_cast<size_t>(n_heads) * record_.window;
    result.retention.assign(cells, 0.0f);
    if (options_.output_error) result.output_error.assign(cells, 0.0f);
    result.occupancy.assign(record_.window, 0);
    result.eviction_step.assign(static_cast<size_t>(n_tokens), -1);
  }

  // Step t's values, by every meter.
  void record(StepRows& rows, StepRows& model) {
    MeterStep step;
    step.t = rows.t();
    step.rows = &rows;
    step.model = &model;
    step.cache = cache_.positions();
    step.evicted = cache_.evicted();
    step.in_cache = cache_.in_cache();
    step.runs = &observation_.runs();
    step.mass = observation_.mass();
    step.occupancy = static_cast<int64_t>(step.cache.size());
    for (auto& meter : meters_) meter->record(step, record_);
    if (rows.last_of_block()) flush(rows);  // its rows and o_t go with the block
  }
  void flush(const StepRows& rows) {
    for (auto& meter : meters_) meter->flush(rows, cache_.evicted(), record_);
  }

  // The policy observes step t: the group's observed row, and the full rows or the tensors it reads.
  void observe(int64_t t, StepRows& model, const StepRows* full) {
    const PolicyInfo& info = *spec_.policy;
    if (!info.needs_attention && !info.needs_full_rows && !info.needs_tensors()) return;
    const std::span<const float> observed = observation_.observed_row(cache_.positions());
    full_rows_.at(full ? *full : model);
    policy_->observe(t, cache_.positions(), observed);
  }

  // Followers that must evict at t take over now, before the leader evicts.
  void wake_followers(const StepRows& rows, int64_t t) {
    for (Simulation* follower : followers_)
      if (follower->dormant() && spec_.policy->budgeted &&
          static_cast<int64_t>(cache_.positions().size()) > follower->spec_.budget) {
        flush(rows);  // the follower takes the results so far
        follower->take_over(t);
      }
  }

  void evict(int64_t t) {
    if (spec_.compressed_away) return evict_compressed_away(t);
    if (options_.threshold.on()) return evict_chosen(t, threshold_.keep(t, *policy_, cache_, options_.threshold));
    record_evictions(t, cache_.evict(t, schedule_.at(t) == Schedule::Action::compress));
  }
  // The context's compression decided elsewhere: at the compression step, the given positions
  // go; at no other step does anything.
  void evict_compressed_away(int64_t t) {
    if (schedule_.at(t) != Schedule::Action::compress) return;
    const std::vector<int32_t>& away = *spec_.compressed_away;
    std::vector<size_t> keep;
    const std::span<const int32_t> cache = cache_.positions();
    for (size_t i = 0; i < cache.size(); ++i)
      if (!std::binary_search(away.begin(), away.end(), cache[i])) keep.push_back(i);
    record_evictions(t, cache_.evict_chosen(t, keep, false));
  }
  void record_evictions(int64_t t, std::span<const int32_t> victims) {
    record_.result.evictions += static_cast<int64_t>(victims.size());
    for (int32_t victim : victims)
        record_.result.eviction_step[static_cast<size_t>(victim)] = static_cast<int32_t>(t);
  }

  // Step t of the leader has run up to its eviction, and this simulation must evict at t.
  void take_over(int64_t t) {
    const Simulation& leader = *leader_;
    cache_.take_over(leader.cache_);
    take_results(leader);
    policy_->adopt(*leader.policy_);
    leader_ = nullptr;
    last_step_ = t;
    evict(t);
  }

  void take_results(const Simulation& leader) {  // all but the budget
    const int64_t budget = record_.result.budget;
    record_.result = leader.record_.result;
    record_.result.budget = budget;
  }

  // Bounds keep no cache: each head gets its own best cache (chosen on the true row) at
  // every recorded step.
  void bound_step(StepRows& rows, StepRows& model) {
    const int64_t t = rows.t();
    if (t < record_.first_step) return;
    const int64_t budget = schedule_.capacity(t, spec_.budget);
    const bool need_positions = options_.output_error || quantized_ || options_.reference;
    for (size_t k = 0; k < group_.heads.size(); ++k) {
      const int head = group_.heads[k];
      std::vector<int32_t>& positions = bound_caches_[k];
      positions.clear();
      const std::span<const float> row(rows.row(head), static_cast<size_t>(t + 1));
      bound_mass_[k] = bound_->bound(t, k, row, bound_->ranks() ? &rows.ranking(head) : nullptr, budget,
                                     need_positions ? &positions : nullptr);
      if (quantized_) bound_mass_[k] = gather_sum(model.row(head), positions);
    }
    MeterStep step;
    step.t = t;
    step.rows = &rows;
    step.model = &model;
    step.per_head = bound_caches_;
    step.mass = bound_mass_;
    // Pinned positions beyond the budget stay (--protect): the cache then holds them all.
    const int64_t pinned = std::count_if(spec_.pinned.begin(), spec_.pinned.begin() + (spec_.pinned.empty() ? 0 : t),
                                         [](uint8_t pin) { return pin != 0; });
    step.occupancy = spec_.policy->selects ? t + 1 : std::min<int64_t>(t, std::max(budget, pinned)) + 1;
    for (auto& meter : meters_) meter->record(step, record_);
  }

  const SimulationSpec& spec_;
  const CacheGroup& group_;
  const EngineOptions& options_;
  std::unique_ptr<Policy> policy_;
  BoundPolicy* bound_;
  Schedule schedule_;
  const QuantizedView* quantized_;  // null at full precision
  CacheState cache_;
  Observation observation_;
  GroupFullRows full_rows_;
  std::vector<std::unique_ptr<Meter>> meters_;
  Record record_;
  std::vector<std::vector<int32_t>> bound_caches_;  // a bound's: per head, the positions it chose
  std::vector<double> bound_mass_;                  // a bound's: per head, the model's mass over them
  std::vector<double> scores_;                      // require_scores'
  ThresholdEviction threshold_;                     // the threshold protocol's scratch
  int64_t last_step_ = -1;
  bool deferred_ = false;         // head-adaptive budgets: the engine evicts
  Simulation* leader_ = nullptr;  // while dormant (budget sharing)
  std::vector<Simulation*> followers_;
};

}  // namespace kvsim
