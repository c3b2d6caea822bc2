#pragma once
// What a policy observes of a step (internal to sim/core): each head's model row summed over
// the cache (its mass), and the group's observed row, each head's row over the cache divided
// by its mass, combined over the heads (EngineOptions::aggregate). The masses are found the
// fastest way the cache allows; the accelerated meters read them too (MeterStep::mass).
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "meters.hpp"
#include "quad_kernels.hpp"
#include "step_rows.hpp"
#include "kvsim/core/engine.hpp"

namespace kvsim {

// When the cache is one run of consecutive positions, or a short first run and a second one
// up to the newest position: those runs (half-open); else none.
inline Runs cache_runs(std::span<const int32_t> cache) {
  Runs runs;
  const auto size = static_cast<int64_t>(cache.size());
  if (cache.back() - cache.front() + 1 == size) {
    runs.count = 1;
    runs.begin[0] = cache.front(), runs.end[0] = cache.back() + 1;
    return runs;
  }
  constexpr int64_t kFirstRunLimit = 16;
  int64_t gap = 0;  // last index of the first run
  while (gap + 1 < size && gap < kFirstRunLimit &&
         cache[static_cast<size_t>(gap) + 1] == cache[static_cast<size_t>(gap)] + 1)
    ++gap;
  const int64_t rest = size - gap - 1;
  if (gap >= kFirstRunLimit || cache.back() - cache[static_cast<size_t>(gap) + 1] + 1 != rest) return runs;
  runs.count = 2;
  runs.begin[0] = cache.front(), runs.end[0] = cache[static_cast<size_t>(gap)] + 1;
  runs.begin[1] = cache[static_cast<size_t>(gap) + 1], runs.end[1] = cache.back() + 1;
  return runs;
}

class Observation {
 public:
  // cached: how long the cache may grow (to reserve for).
  Observation(const SimulationSpec& spec, const CacheGroup& group, const EngineOptions& options, size_t cached)
      : group_(group),
        observes_(spec.policy->needs_attention),
        aggregate_(options.aggregate),
        mass_(group.heads.size()) {
    // Groups of 4k heads read four heads per load (quad_kernels.hpp) from interleaved rows
    // instead of gathering each head's row over the cache; with the mean or sum aggregate.
    quads_ = kQuadKernels && options.interleave && observes_ && group.heads.size() % 4 == 0 &&
             options.aggregate != Aggregate::max;
    if (quads_) {
      quad_sums_.resize(group.heads.size());
      evicted_sums_.resize(group.heads.size());
      quad_rows_.resize(group.heads.size() / 4);
    } else if (observes_) {
      gathered_.resize(group.heads.size());
      for (auto& gathered : gathered_) gathered.reserve(cached);
    }
    if (observes_) observed_.reserve(cached);
  }

  // Each head's mass over `cache` at the model's step: from prefix sums when the cache is one
  // or two runs of consecutive positions (recent, streaming), else summing whichever is
  // shorter, the cache or the evicted positions (subtracted from the row's total). Nothing
  // evicted yet: the row's total (summed in four lanes, a quad's four heads per load), not
  // the end of a prefix sum (a chain of dependent adds over the row). Outside quads, a policy
  // that observes needs each head's row over the cache anyway: it is gathered once here.
  // Quads are read four heads per load, and the observed row reads the interleaved rows again
  // (observed_row): a gathered copy measured no faster.
  void measure(StepRows& model, std::span<const int32_t> cache, std::span<const int32_t> evicted, int group_index) {
    const int64_t t = model.t();
    const size_t heads = group_.heads.size();
    const bool whole = evicted.empty() && static_cast<int64_t>(cache.size()) == t + 1;
    runs_ = cache_runs(cache);
    const int runs = runs_.count;
    const bool by_evicted = runs == 0 && evicted.size() < cache.size();
    if (quads_) {
      for (size_t q = 0; q < heads / 4; ++q) {
        quad_rows_[q] = model.quad_rows(group_index, q);
        if (runs == 0 && !by_evicted)
          quad_sums(quad_rows_[q], cache.data(), cache.size(), quad_sums_.data() + 4 * q);
        else if (by_evicted)
          quad_sums(quad_rows_[q], evicted.data(), evicted.size(), evicted_sums_.data() + 4 * q);
      }
    }
    for (size_t k = 0; k < heads; ++k) {
      const int head = group_.heads[k];
      const float* row = model.row(head);
      const double gathered_sum = !observes_ ? 0.0 : quads_ ? quad_sums_[k] : gather_and_sum(row, cache, gathered_[k]);
      if (whole) {
        mass_[k] = model.total(head);
      } else if (runs > 0) {
        double mass = 0;
        for (int r = 0; r < runs; ++r) mass += model.prefix(head, runs_.end[r]) - model.prefix(head, runs_.begin[r]);
        mass_[k] = mass;
      } else if (by_evicted) {
        mass_[k] = model.total(head) - (quads_ ? evicted_sums_[k] : gather_sum(row, evicted));
      } else {
        mass_[k] = observes_ ? gathered_sum : gather_sum(row, cache);
      }
    }
  }

  std::span<const double> mass() const { return mass_; }
  const Runs& runs() const { return runs_; }

  // The group's observed row over `cache` (the one measured): each head's model row over the
  // cache renormalised by its mass, combined over the heads. Empty for a policy that does not
  // observe attention.
  std::span<const float> observed_row(std::span<const int32_t> cache) {
    if (!observes_) return {};
    const size_t heads = group_.heads.size();
    const size_t size = cache.size();
    observed_.resize(size);
    if (aggregate_ == Aggregate::max) {
      for (size_t j = 0; j < size; ++j) {
        double combined = 0;
        for (size_t k = 0; k < heads; ++k) combined = std::max(combined, gathered_[k][j] / mass_[k]);
        observed_[j] = static_cast<float>(combined);
      }
      return observed_;
    }
    // mean (or sum) of the heads' renormalised rows: a_k[i] / mass_k, weighted, summed over
    // the heads in order as a chain of float fused multiply-adds (combine_rows).
    const double share = aggregate_ == Aggregate::mean ? 1.0 / static_cast<double>(heads) : 1.0;
    weights_.resize(heads);
    for (size_t k = 0; k < heads; ++k) weights_[k] = static_cast<float>(share / mass_[k]);
    if (quads_)
      combine_quads(size, quad_rows_, weights_.data(), cache.data(), observed_.data());
    else
      combine_rows(gathered_, weights_.data(), size, observed_.data());
    return observed_;
  }

 private:
  const CacheGroup& group_;
  bool observes_;  // the policy needs attention (PolicyInfo::needs_attention)
  Aggregate aggregate_;
  std::vector<double> mass_;  // per head of the group: the model's row summed over the cache
  Runs runs_;
  std::vector<std::vector<float>> gathered_;  // per head: the model row at the cached positions
  std::vector<float> observed_;
  std::vector<float> weights_;  // per head: its share of the observed row over its mass
  bool quads_ = false;
  std::vector<const float*> quad_rows_;           // this step's interleaved rows, per quad
  std::vector<double> quad_sums_, evicted_sums_;  // per head: the sum of its cached, and evicted, entries
};

}  // namespace kvsim
