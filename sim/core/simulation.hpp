#pragma once
// One simulation of the replay engine (internal to sim/core/engine.cpp): one policy at one
// budget on one cache group, stepped through the group's rows. Its cache, the metrics it
// records at every step, and budget sharing with the simulations of the same policy at
// smaller budgets.
#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "future.hpp"
#include "output_batch.hpp"
#include "schedule.hpp"
#include "step_rows.hpp"
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

class Simulation {
 public:
  Simulation(const SimulationSpec& spec, const CacheGroup& group, int64_t n_tokens, const EngineOptions& options,
             const FutureAttention* future, const QuantizedView* quantized)
      : spec_(spec),
        group_(group),
        options_(options),
        policy_(spec.policy->make(spec.params)),
        bound_(dynamic_cast<BoundPolicy*>(policy_.get())),
        schedule_(options, n_tokens),
        quantized_(quantized),
        full_rows_(group.heads) {
    if (spec.budget < 1) throw kvtrace::InputError("", "", "budget must be at least 1 token");
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
    if (options.paging.on()) require_scores("--page");
    if (options.head_floor >= 0 || spec.policy->head_floor >= 0) require_kv_head_scores();
    record_from_ = schedule_.first_recorded();
    result_.n_heads = context.n_heads;
    result_.first_step = record_from_;
    result_.n_steps = n_tokens - record_from_;
    result_.question_steps = schedule_.question_steps();
    result_.budget = spec.budget;
    // With a sink the per-step values are kept for one block of steps (slot()), else for all.
    window_ = static_cast<size_t>(options.sink ? kvtrace::kRowBlockSize : result_.n_steps);
    const auto cells = static_cast<size_t>(result_.n_heads) * window_;
    result_.retention.assign(cells, 0.0f);
    if (options.output_error) result_.output_error.assign(cells, 0.0f);
    result_.occupancy.assign(window_, 0);
    if (!options.sink) result_.eviction_step.assign(static_cast<size_t>(n_tokens), -1);
    in_cache_.assign(static_cast<size_t>(n_tokens), 0);
    mass_.resize(group.heads.size());
    if (options.output_error) partials_.resize(group.heads.size());
    retained_.resize(group.heads.size());
    // The vectors reach these sizes anyway; reserving them spares the doublings (a few per
    // vector and simulation, which add up over a sweep's thousands of simulations).
    const auto cached = static_cast<size_t>(spec.policy->budgeted ? std::min(n_tokens, spec.budget + 1) : n_tokens);
    cache_.reserve(cached);
    evicted_.reserve(static_cast<size_t>(n_tokens));
#if defined(__AVX2__) && defined(__FMA__)
    quads_ = options.interleave && spec.policy->needs_attention && group.heads.size() % 4 == 0 &&
             options.aggregate != Aggregate::max;
#endif
    if (quads_) {
      quad_sums_.resize(group.heads.size());
      evicted_sums_.resize(group.heads.size());
      quad_rows_.resize(group.heads.size() / 4);
    } else if (spec.policy->needs_attention) {
      gathered_.resize(group.heads.size());
      for (auto& gathered : gathered_) gathered.reserve(cached);
    }
    if (spec.policy->needs_attention) observed_.reserve(cached);
#if defined(__AVX2__) && defined(__FMA__)
    batched_ = options.output_error && options.interleave && !quantized && group.head_dim % 4 == 0;
    for_each_values_run(group.values, [&](size_t first, size_t last) { batched_ = batched_ && last - first == 4; });
#endif
  }

  // `rows`: the true rows; `model`: the rows the simulated model computes (the quantized
  // view's, or the true ones); `full`: the rows policies that need_full_rows read, when they
  // are not `model`'s (the closed loop: the model's softmax before the cache restricted it).
  void step(StepRows& rows, StepRows& model, const StepRows* full = nullptr) {
    const int64_t t = rows.t();
    if (dormant() || t <= last_step_) return;  // a follower not needed yet, or taken over at t
    last_step_ = t;
    if (bound_) return bound_step(rows, model);
    cache_.push_back(static_cast<int32_t>(t));
    in_cache_[static_cast<size_t>(t)] = 1;
    const size_t heads = group_.heads.size();
    // The model's mass over the cache: from prefix sums when the cache is one or two runs of
    // consecutive positions (recent, streaming), else summing whichever is shorter, the
    // cache or the evicted positions (subtracted from the row's total).
    // Outside quads, a policy that observes needs each head's row over the cache anyway: it
    // is gathered once here. Quads are read four heads per load (quad_kernels.hpp), and the
    // observed row reads the interleaved rows again (observe_row): a gathered copy measured
    // no faster.
    // Nothing evicted yet: the mass is the row's total (summed in four lanes, a quad's four
    // heads per load), not the end of a prefix sum (a chain of dependent adds over the row).
    const bool whole = evicted_.empty() && static_cast<int64_t>(cache_.size()) == t + 1;
    const int runs = count_runs();
    const bool by_evicted = runs == 0 && evicted_.size() < cache_.size();
    const bool observes = spec_.policy->needs_attention;
#if defined(__AVX2__) && defined(__FMA__)
    if (quads_) {
      for (size_t q = 0; q < heads / 4; ++q) {
        quad_rows_[q] = model.quad_rows(spec_.group, q);
        if (runs == 0 && !by_evicted)
          quad_sums(quad_rows_[q], cache_.data(), cache_.size(), quad_sums_.data() + 4 * q);
        else if (by_evicted)
          quad_sums(quad_rows_[q], evicted_.data(), evicted_.size(), evicted_sums_.data() + 4 * q);
      }
    }
#endif
    for (size_t k = 0; k < heads; ++k) {
      const int head = group_.heads[k];
      const float* row = model.row(head);
      const double gathered_sum = !observes ? 0.0 : quads_ ? quad_sums_[k] : gather_and_sum(row, cache_, gathered_[k]);
      if (whole) {
        mass_[k] = model.total(head);
      } else if (runs > 0) {
        double mass = 0;
        for (int r = 0; r < runs; ++r) mass += model.prefix(head, run_end_[r]) - model.prefix(head, run_begin_[r]);
        mass_[k] = mass;
      } else if (by_evicted) {
        mass_[k] = model.total(head) - (quads_ ? evicted_sums_[k] : gather_sum(row, evicted_));
      } else {
        mass_[k] = observes ? gathered_sum : gather_sum(row, cache_);
      }
      retained_[k] = quantized_ ? shared_mass(rows.row(head), model.row(head), mass_[k], cache_) : mass_[k];
    }
    if (t >= record_from_) {
      result_.occupancy[slot(t)] = static_cast<int32_t>(cache_.size());
      // Output error sums over the shorter of the cache and the evicted positions (o_t is
      // shared, so the cached part is o_t minus the evicted part), whatever the mass used.
      bool complement = !quantized_ && evicted_.size() < cache_.size();
      const std::span<const int32_t> positions = complement ? evicted_ : cache_;
      bool deferred = false;
      if (options_.output_error) {
        if (stored_values()) {
          for (size_t k = 0; k < heads; ++k) stored_partial(model, k, positions);
        } else if (runs > 0 && !quantized_ && static_cast<size_t>(2 * 64 * runs) < positions.size()) {
          // A run costs at most a checkpoint interval of positions (StepRows::range_outputs).
          run_partials(model, runs);
          complement = false;  // the runs are the cache itself
#if defined(__AVX2__) && defined(__FMA__)
        } else if (batched_) {
          // A long last run of the cache (h2o's protected recent half) is summed from o_t and
          // its checkpoints (StepRows::range_outputs), and the batch sums the cache below it.
          const size_t head = tail_run();
          const bool run =
              cache_.size() - head >= 64 && head + 64 < positions.size() && model.checkpointed(spec_.group);
          const int64_t run_begin = run ? cache_[head] : t + 1;
          if (run) {
            complement = false;
            run_partials_.resize(heads * static_cast<size_t>(group_.head_dim));
            run_out_.resize(heads);
            for (size_t k = 0; k < heads; ++k)
              run_out_[k] = run_partials_.data() + k * static_cast<size_t>(group_.head_dim);
            model.range_outputs(spec_.group, run_begin, t + 1, run_out_.data());
          }
          if (!batch_.fits(t, complement, run_begin, evicted_.size(), heads)) flush_batch(rows);
          batch_quads_.resize(heads / 4);
          for (size_t q = 0; q < heads / 4; ++q) batch_quads_[q] = model.quad_rows(spec_.group, q);
          batch_.add(t, complement, run_begin, cache_, evicted_, in_cache_, batch_quads_, mass_,
                     run ? std::span<const double>(run_partials_) : std::span<const double>());
          deferred = true;
#endif
        } else {
          shared_partials(model, positions);
        }
      }
      for (size_t k = 0; k < heads; ++k) record_head(rows, k, complement, !deferred);
      if (rows.last_of_block()) flush_batch(rows);  // its rows and o_t go with the block
    }
    if (observes) observe_row();
    if (observes || spec_.policy->needs_full_rows || spec_.policy->needs_tensors()) {
      full_rows_.at(full ? *full : model);
      policy_->observe(t, cache_, observes ? std::span<const float>(observed_) : std::span<const float>());
    }
    if (schedule_.at(t) == Schedule::Action::keep) return;  // e.g. inside the prompt, processed at once
    for (Simulation* follower : followers_)
      if (follower->dormant() && spec_.policy->budgeted &&
          static_cast<int64_t>(cache_.size()) > follower->spec_.budget) {
        flush_batch(rows);  // the follower takes the results so far
        follower->take_over(t);
      }
    if (deferred_) return;  // the engine evicts for the layer's heads at once (evict_chosen)
    evict(t);
  }

  // Head-adaptive budgets: step() observes and leaves the eviction to the engine, which asks
  // every head's scores and then calls evict_chosen (or evict_now when a policy gives none).
  void defer_eviction() { deferred_ = true; }
  bool scores(int64_t t, std::vector<double>& out) const { return policy_->scores(t, cache_, out); }
  // A NaN among the scores the engine or the policy ranks at step t: one line for the user.
  [[noreturn]] void refuse_nan_score(int64_t t) const {
    const bool layer_wide = spec_.policy->grouping == Grouping::layer;
    throw kvtrace::InputError("", "",
                              "policy " + spec_.policy->name + " scored NaN at layer " + std::to_string(spec_.layer) +
                                  (layer_wide ? ", the layer's cache" : ", kv head " + std::to_string(spec_.group)) +
                                  ", step " + std::to_string(t) + ": NaN has no place in the order it evicts by");
  }

  bool may_evict(int64_t t) const { return schedule_.at(t) != Schedule::Action::keep && t == last_step_; }
  void evict_now(int64_t t) { evict(t); }
  // Evicts the positions of the cache not at `keep` (indices into it, ascending).
  void evict_chosen(int64_t t, std::span<const size_t> keep) {
    victims_.clear();
    gone_.clear();
    size_t k = 0;
    for (size_t i = 0; i < cache_.size(); ++i) {
      if (k < keep.size() && keep[k] == i) {
        ++k;
        continue;
      }
      gone_.push_back(i);
      victims_.push_back(cache_[i]);
    }
    if (gone_.empty()) return;
    policy_->forget(cache_, gone_);
    remove_victims(t, 0);
  }

  // Budget sharing. Simulations of one policy with the same parameters, cache group and view
  // but smaller budgets keep exactly the same cache as this one until the first step at which
  // they must evict: until then they follow it, dormant, and then take over its state.
  // A policy that ignores the budget (full, scissorhands-official) follows to the end.
  bool follow(Simulation& leader) {
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
  SimulationResult take() { return std::move(result_); }

  // With a sink: hands it the recorded steps of the block [first, first + count) of steps
  // (a follower still dormant recorded what its leader did).
  void send_block(int64_t first, int64_t count, size_t lane, size_t index) const {
    const int64_t from = std::max(first, record_from_), to = first + count;
    if (from >= to) return;
    const SimulationResult& recorded = dormant() ? leader_->result_ : result_;
    StepBlock block;
    block.lane = lane;
    block.simulation = index;
    block.first = from - record_from_;
    block.question_steps = result_.question_steps;
    block.count = to - from;
    block.n_heads = result_.n_heads;
    block.stride = window_;
    block.retention = recorded.retention.data() + slot(from);
    block.output_error = options_.output_error ? recorded.output_error.data() + slot(from) : nullptr;
    block.occupancy = recorded.occupancy.data() + slot(from);
    (*options_.sink)(block);
  }
  std::span<const int32_t> cache() const { return cache_; }

 private:
  // The caller (replay, eval) refuses a trace without what the policy needs, with a line for
  // the user; reaching here without it is a bug.
  static const GroupTensors& checked_tensors(const PolicyInfo& policy, const CacheGroup& group) {
    const GroupTensors& tensors = group.tensors;
    if ((policy.needs_keys && tensors.keys.empty()) || (policy.needs_values && tensors.values.empty()) ||
        (policy.needs_queries && tensors.queries.size() != group.heads.size()) || tensors.head_dim < 1)
      throw std::logic_error("policy " + policy.name + ": the cache group lacks the tensors it needs");
    return tensors;
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

  void evict(int64_t t) {
    const bool compress = schedule_.at(t) == Schedule::Action::compress;
    const int64_t excess = static_cast<int64_t>(cache_.size()) - spec_.budget;
    victims_.clear();
    if (options_.paging.on()) return evict_pages(t, excess);
    try {
      policy_->evict(t, cache_, excess, compress, victims_);
    } catch (const NanScore&) {
      refuse_nan_score(t);
    }
    remove_victims(t, excess);
  }

  // Page mode: the engine picks whole pages by the policy's scores (kvsim/core/pages.hpp)
  // and tells the policy which went. Too few pages that may go leave the cache above B.
  void evict_pages(int64_t t, int64_t excess) {
    if (excess <= 0) return;
    policy_->scores(t, cache_, scores_);
    if (std::any_of(scores_.begin(), scores_.end(), [](double s) { return std::isnan(s); })) refuse_nan_score(t);
    choose_pages(cache_, scores_, options_.paging, t, spec_.budget, page_indices_);
    if (page_indices_.empty()) return;
    for (size_t index : page_indices_) victims_.push_back(cache_[index]);
    policy_->forget(cache_, page_indices_);
    remove_victims(t, 0);
  }

  // Step t of the leader has run up to its eviction, and this simulation must evict at t.
  void take_over(int64_t t) {
    const Simulation& leader = *leader_;
    cache_ = leader.cache_;  // nothing evicted yet: evicted_ stays empty
    in_cache_ = leader.in_cache_;
    take_results(leader);
    policy_->adopt(*leader.policy_);
    leader_ = nullptr;
    last_step_ = t;
    evict(t);
  }

  void take_results(const Simulation& leader) {  // all but the budget
    const int64_t budget = result_.budget;
    result_ = leader.result_;
    result_.budget = budget;
  }

  // The group's observed row: each head's model row over the cache (gathered_) renormalised
  // by its mass (mass_), combined over the heads.
  void observe_row() {
    const size_t heads = group_.heads.size();
    const size_t size = cache_.size();
    observed_.resize(size);
    if (options_.aggregate == Aggregate::max) {
      for (size_t j = 0; j < size; ++j) {
        double combined = 0;
        for (size_t k = 0; k < heads; ++k) combined = std::max(combined, gathered_[k][j] / mass_[k]);
        observed_[j] = static_cast<float>(combined);
      }
      return;
    }
    // mean (or sum) of the heads' renormalised rows: a_k[i] / mass_k, weighted, summed over
    // the heads in order as a chain of float fused multiply-adds (std::fma: the same bits
    // on every build, with or without FMA instructions).
    const double share = options_.aggregate == Aggregate::mean ? 1.0 / static_cast<double>(heads) : 1.0;
    weights_.resize(heads);
    for (size_t k = 0; k < heads; ++k) weights_[k] = static_cast<float>(share / mass_[k]);
#if defined(__AVX2__) && defined(__FMA__)
    if (quads_) {
      combine_quads(size, quad_rows_, weights_.data(), cache_.data(), observed_.data());
      return;
    }
#endif
    size_t j = 0;
#if defined(__AVX2__) && defined(__FMA__)
    for (; j + 8 <= size; j += 8) {
      __m256 combined = _mm256_setzero_ps();
      for (size_t k = 0; k < heads; ++k)
        combined = _mm256_fmadd_ps(_mm256_loadu_ps(gathered_[k].data() + j), _mm256_set1_ps(weights_[k]), combined);
      _mm256_storeu_ps(observed_.data() + j, combined);
    }
#endif
    for (; j < size; ++j) {
      float combined = 0;
      for (size_t k = 0; k < heads; ++k) combined = std::fma(gathered_[k][j], weights_[k], combined);
      observed_[j] = combined;
    }
  }

  // sum over cached i of min(a[i], b[i] / model_mass): the attention mass the true row and
  // the model's renormalised row share.
  static double shared_mass(const float* truth, const float* model, double model_mass, std::span<const int32_t> cache) {
    const double inverse = 1.0 / model_mass;
    double shared = 0;
    for (int32_t position : cache) shared += std::min<double>(truth[position], model[position] * inverse);
    return shared;
  }

  // Retention (retained_[k]) and output error of head k: o_t against the output of the
  // model's row renormalised over the cache (mass_[k]) with the values the model reads. The
  // caller has put into partials_[k] the sum of row[i] v_i over the cached positions or, with
  // `complement` (full precision only), over those evicted so far, whichever was shorter.
  // Without `error`, the output error waits for the batch (flush_batch).
  void record_head(StepRows& rows, size_t k, bool complement, bool error = true) {
    const int64_t t = rows.t();
    result_.retention[value_at(k, t)] = static_cast<float>(retained_[k]);
    if (options_.output_error && error) record_error(rows, t, k, partials_[k].data(), mass_[k], complement);
  }

  // Head k's output error at step t of the current block, from its partial (overwritten).
  void record_error(const StepRows& rows, int64_t t, size_t k, double* partial, double mass, bool complement) {
    const auto d = static_cast<size_t>(group_.head_dim);
    const double* full = rows.full_output(group_index(), k, t);
    if (complement)
      for (size_t c = 0; c < d; ++c) partial[c] = full[c] - partial[c];
    double difference = 0, norm = 0;
    for (size_t c = 0; c < d; ++c) {
      const double approx = partial[c] / mass;
      difference += (full[c] - approx) * (full[c] - approx);
      norm += full[c] * full[c];
    }
    result_.output_error[value_at(k, t)] =
        norm > 0 ? static_cast<float>(std::sqrt(difference / norm)) : (difference > 0 ? 1.0f : 0.0f);
  }

  // Head k's partial with the values a quantized cache stores.
  void stored_partial(StepRows& model, size_t k, std::span<const int32_t> positions) {
    const int64_t t = model.t();
    const float* row = model.row(group_.heads[k]);
    const auto d = static_cast<size_t>(group_.head_dim);
    const StoredValues* stored = quantized_->values[static_cast<size_t>(spec_.group)][k];
    std::vector<double>& partial = partials_[k];
    partial.assign(d, 0.0);
    for (int32_t position : positions) {
      const double weight = row[position];
      const float* v = stored->row(position, t).data();
      for (size_t c = 0; c < d; ++c) partial[c] += weight * v[c];
    }
  }

  bool stored_values() const { return quantized_ && !quantized_->values.empty(); }

  // The output errors of the steps batch_ holds (output_batch.hpp).
  void flush_batch(const StepRows& rows) {
#if defined(__AVX2__) && defined(__FMA__)
    const auto d = static_cast<size_t>(group_.head_dim);
    batch_.flush(evicted_, group_.values, d, [&](int64_t t, size_t k, double* const* sums, const double* mass) {
      const double* full[4];
      for (size_t h = 0; h < 4; ++h) full[h] = rows.full_output(group_index(), k + h, t);
      float errors[4];
      relative_errors(full, sums, mass, d, batch_.complement(), errors);
      for (size_t h = 0; h < 4; ++h) result_.output_error[value_at(k + h, t)] = errors[h];
    });
#else
    (void)rows;  // without AVX2 nothing is batched (batched_ stays false)
#endif
  }

  // record_head's partials when the cache is runs of consecutive positions (recent,
  // streaming): each run's sum from the checkpoints of o_t's pass (StepRows::range_output).
  void run_partials(StepRows& model, int runs) {
    const auto d = static_cast<size_t>(group_.head_dim);
    const size_t heads = group_.heads.size();
    run_sums_.resize(heads);
    run_out_.resize(heads);
    for (size_t k = 0; k < heads; ++k) {
      partials_[k].assign(d, 0.0);
      run_sums_[k].resize(d);
      run_out_[k] = run_sums_[k].data();
    }
    for (int r = 0; r < runs; ++r) {
      model.range_outputs(spec_.group, run_begin_[r], run_end_[r], run_out_.data());
      for (size_t k = 0; k < heads; ++k)
        for (size_t c = 0; c < d; ++c) partials_[k][c] += run_sums_[k][c];
    }
  }

  // Each head's sum of row[i] * v_i over `positions` (record_head's partial), for every head of
  // the group at once: the heads of one kv head share the positions and the values, so each
  // v_i is read once for them (shared_weighted_value_sums).
  void shared_partials(StepRows& model, std::span<const int32_t> positions) {
    const auto d = static_cast<size_t>(group_.head_dim);
    for_each_values_run(group_.values, [&](size_t first, size_t last) {
      shared_rows_.clear();
      shared_out_.clear();
      for (size_t h = first; h < last; ++h) {
        partials_[h].resize(d);
        shared_rows_.push_back(model.row(group_.heads[h]));
        shared_out_.push_back(partials_[h].data());
      }
      shared_weighted_value_sums(shared_rows_.data(), last - first, positions, group_.values[first], d,
                                 shared_out_.data(), shared_weights_);
    });
  }

  // Bounds keep no cache: each head gets its own best cache (chosen on the true row) at
  // every recorded step.
  void bound_step(StepRows& rows, StepRows& model) {
    const int64_t t = rows.t();
    if (t < record_from_) return;
    const int64_t budget = schedule_.capacity(t, spec_.budget);
    const bool need_positions = options_.output_error || quantized_;
    for (size_t k = 0; k < group_.heads.size(); ++k) {
      const int head = group_.heads[k];
      bound_cache_.clear();
      const std::span<const float> row(rows.row(head), static_cast<size_t>(t + 1));
      mass_[k] = bound_->bound(t, k, row, bound_->ranks() ? &rows.ranking(head) : nullptr, budget,
                               need_positions ? &bound_cache_ : nullptr);
      retained_[k] = mass_[k];
      if (quantized_) {
        mass_[k] = gather_sum(model.row(head), bound_cache_);
        retained_[k] = shared_mass(rows.row(head), model.row(head), mass_[k], bound_cache_);
      }
      if (options_.output_error) {
        if (stored_values()) {
          stored_partial(model, k, bound_cache_);
        } else {
          partials_[k].resize(static_cast<size_t>(group_.head_dim));
          weighted_value_sum(model.row(head), bound_cache_, group_.values[k], static_cast<size_t>(group_.head_dim),
                             partials_[k].data());
        }
      }
      record_head(rows, k, false);
    }
    result_.occupancy[slot(t)] =
        static_cast<int32_t>(spec_.policy->selects ? t + 1 : std::min<int64_t>(t + 1, budget + 1));
  }

  int group_index() const { return spec_.group; }

  // Where step t's values go: its recorded step, or with a sink its place in the block.
  size_t slot(int64_t t) const {
    return static_cast<size_t>(options_.sink ? t % kvtrace::kRowBlockSize : t - record_from_);
  }
  // Where head k's values of step t go in result_ (a batch records steps after they ran).
  size_t value_at(size_t k, int64_t t) const { return k * window_ + slot(t); }

  // Where the cache's last run of consecutive positions (the one ending at t) begins: an index
  // into cache_, found by bisection (the suffix from j is a run iff cache_[j] = t - (size - 1 - j)).
  size_t tail_run() const {
    const int64_t last = static_cast<int64_t>(cache_.size()) - 1;
    int64_t lo = 0, hi = last;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (cache_[static_cast<size_t>(mid)] == cache_.back() - (last - mid))
        hi = mid;
      else
        lo = mid + 1;
    }
    return static_cast<size_t>(lo);
  }

  // When the cache is one run of consecutive positions, or a short first run and a second one
  // up to the newest position, fills run_begin_/run_end_ (half-open) and returns the count;
  // else 0.
  int count_runs() {
    const auto size = static_cast<int64_t>(cache_.size());
    if (cache_.back() - cache_.front() + 1 == size) {
      run_begin_[0] = cache_.front(), run_end_[0] = cache_.back() + 1;
      return 1;
    }
    constexpr int64_t kFirstRunLimit = 16;
    int64_t gap = 0;  // last index of the first run
    while (gap + 1 < size && gap < kFirstRunLimit &&
           cache_[static_cast<size_t>(gap) + 1] == cache_[static_cast<size_t>(gap)] + 1)
      ++gap;
    const int64_t rest = size - gap - 1;
    if (gap >= kFirstRunLimit || cache_.back() - cache_[static_cast<size_t>(gap) + 1] + 1 != rest) return 0;
    run_begin_[0] = cache_.front(), run_end_[0] = cache_[static_cast<size_t>(gap)] + 1;
    run_begin_[1] = cache_[static_cast<size_t>(gap) + 1], run_end_[1] = cache_.back() + 1;
    return 2;
  }

  void remove_victims(int64_t t, int64_t excess) {
    for (int32_t victim : victims_) {
      if (victim < 0 || victim > t || !in_cache_[static_cast<size_t>(victim)])
        throw std::logic_error("policy " + spec_.policy->name + " evicted position " + std::to_string(victim) +
                               ", which is not cached at step " + std::to_string(t));
      in_cache_[static_cast<size_t>(victim)] = 0;
      if (!options_.sink) result_.eviction_step[static_cast<size_t>(victim)] = static_cast<int32_t>(t);
      evicted_.push_back(victim);
    }
    if (spec_.policy->budgeted && static_cast<int64_t>(victims_.size()) < excess)
      throw std::logic_error("policy " + spec_.policy->name + " evicted " + std::to_string(victims_.size()) +
                             " positions at step " + std::to_string(t) + ", needs " + std::to_string(excess));
    result_.evictions += static_cast<int64_t>(victims_.size());
    if (victims_.empty()) return;
    if (victims_.size() == 1) {  // the common case: find it by bisection (the cache is ascending)
      cache_.erase(std::lower_bound(cache_.begin(), cache_.end(), victims_[0]));
      return;
    }
    std::erase_if(cache_, [&](int32_t position) { return !in_cache_[static_cast<size_t>(position)]; });
  }

  const SimulationSpec& spec_;
  const CacheGroup& group_;
  const EngineOptions& options_;
  std::unique_ptr<Policy> policy_;
  BoundPolicy* bound_;
  Schedule schedule_;
  int64_t record_from_ = 0;  // the first recorded step (schedule_)
  SimulationResult result_;
  size_t window_ = 0;               // steps the per-step values hold
  std::vector<int32_t> cache_;      // ascending positions
  std::vector<int32_t> evicted_;    // in the order they went
  std::vector<uint8_t> in_cache_;   // by position
  const QuantizedView* quantized_;  // null at full precision
  GroupFullRows full_rows_;
  std::vector<double> mass_;                  // per head of the group: the model's row summed over the cache
  std::vector<double> retained_;              // per head: the retention recorded at this step
  std::vector<std::vector<float>> gathered_;  // per head: the model row at the cached positions
  std::vector<float> observed_;
  std::vector<float> weights_;  // per head: its share of the observed row over its mass
  // Groups of 4k heads read four heads per load (quad_kernels.hpp) from interleaved rows
  // instead of gathering into gathered_; needs AVX2 and FMA, and the mean or sum aggregate.
  bool quads_ = false;
  std::vector<const float*> quad_rows_;           // this step's interleaved rows, per quad
  std::vector<double> quad_sums_, evicted_sums_;  // per head: the sum of its cached, and evicted, entries
  int64_t run_begin_[2] = {0, 0}, run_end_[2] = {0, 0};
  std::vector<int32_t> victims_, bound_cache_;
  std::vector<double> scores_;        // page mode: the policy's scores at this step
  std::vector<size_t> page_indices_;  // page mode: the victims' indices in cache_
  int64_t last_step_ = -1;
  bool deferred_ = false;         // head-adaptive budgets: the engine evicts
  std::vector<size_t> gone_;      // evict_chosen's indices
  Simulation* leader_ = nullptr;  // while dormant (budget sharing)
  std::vector<Simulation*> followers_;
  std::vector<std::vector<double>> partials_;  // per head: its output over the cache, unnormalised
  std::vector<std::vector<double>> run_sums_;  // run_partials' scratch: per head, one run's sum
  std::vector<double*> run_out_;
  std::vector<double> run_partials_;  // a batched step's run sums: [head][channel]
  std::vector<const float*> shared_rows_;
  std::vector<double*> shared_out_;
  std::vector<double> shared_weights_;
  bool batched_ = false;  // output error's sums a block of steps at a time: AVX2, kv heads of 4
#if defined(__AVX2__) && defined(__FMA__)
  OutputBatch batch_;
#endif
  std::vector<const float*> batch_quads_;
};

}  // namespace kvsim
