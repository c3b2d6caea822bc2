#pragma once
// Hand-written attention traces and the harness of the hand-worked policy and engine tests
// (hand::Case: every family's). Every expected value in those tests was derived by hand
// from docs/semantics.md (sections 2-4), not from kvsim's sources.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "../support/rows.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvsim/policies/scoring.hpp"
#include "kvsim/replay/replay.hpp"

namespace hand {

// A scoring policy for the engine tests: the score of a cached position is its entry in the
// group's last observed row; evict() drops the lowest (ties: the lower position).
class LastRow final : public kvsim::ScoringPolicy {
  void on_observe(int64_t, std::span<const int32_t>, std::span<const float> attention) override {
    last_.assign(attention.begin(), attention.end());
  }
  Ranked rank(int64_t, std::span<const int32_t>, std::vector<double>&) const override {
    return candidates(0, std::span<const float>(last_));
  }

  std::vector<float> last_;
};

inline kvsim::PolicyInfo last_row_policy() {
  kvsim::PolicyInfo info;
  info.name = "last-row";
  kvsim::set_make<LastRow>(info);
  return info;
}

// One head's full causal rows: rows[t] = a_t[0..t] (each sums to 1).
using Rows = std::vector<std::vector<double>>;

// A linear congruential generator: the same pseudo-random numbers on every build.
inline uint32_t next_random(uint32_t& state) { return state = state * 1664525u + 1013904223u; }

// Softmax rows of pseudo-random logits (in [0, 4)) for n_heads heads, n tokens.
inline std::vector<Rows> random_rows(int n_heads, int n, uint32_t state) {
  std::vector<Rows> heads(static_cast<size_t>(n_heads));
  for (auto& rows : heads)
    for (int t = 0; t < n; ++t) {
      std::vector<double> row;
      double sum = 0;
      for (int i = 0; i <= t; ++i) {
        row.push_back(std::exp(4.0 * static_cast<double>(next_random(state) >> 8) / static_cast<double>(1u << 24)));
        sum += row.back();
      }
      for (double& a : row) a /= sum;
      rows.push_back(std::move(row));
    }
  return heads;
}
using Caches = std::vector<std::vector<int>>;

// Trace A, 6 tokens (recent, streaming, full, output error).
inline const Rows kA = {
    {1.0},
    {0.7, 0.3},
    {0.5, 0.1, 0.4},
    {0.4, 0.05, 0.15, 0.4},
    {0.3, 0.1, 0.2, 0.1, 0.3},
    {0.25, 0.05, 0.3, 0.1, 0.1, 0.2},
};
// Values for trace A (head_dim 2): v_0..v_5.
inline const std::vector<std::vector<double>> kValuesA = {{1, 0}, {0, 1}, {1, 1}, {2, -1}, {-1, 2}, {0.5, 0.5}};

// Trace C, 8 tokens: a sink (0), an early heavy hitter (2), a late one (5), weak tokens 1, 3, 4.
// Chosen so that no renormalised entry lies within 1e-3 of a Scissorhands threshold except the
// exact binary cases of steps 0 and 1 (1 vs 1, 0.5 vs 0.5: "below" is strict, so not below).
inline const Rows kC = {
    {1.0},
    {0.5, 0.5},
    {0.3, 0.2, 0.5},
    {0.3, 0.1, 0.4, 0.2},
    {0.24, 0.05, 0.36, 0.05, 0.3},
    {0.2, 0.05, 0.3, 0.05, 0.1, 0.3},
    {0.15, 0.05, 0.25, 0.05, 0.05, 0.35, 0.1},
    {0.12, 0.02, 0.25, 0.03, 0.05, 0.3, 0.08, 0.15},
};
inline const std::vector<std::vector<double>> kValuesC = {{1, 0},  {0, 1},     {1, 1},  {2, -1},
                                                          {-1, 2}, {0.5, 0.5}, {1, -1}, {0, 2}};

// Trace T, 4 tokens, binary fractions only, so that ties are exact in any float arithmetic.
inline const Rows kT = {
    {1.0},
    {0.25, 0.75},
    {0.125, 0.625, 0.25},
    {0.25, 0.25, 0.25, 0.25},
};

inline std::vector<std::vector<float>> pack(const std::vector<Rows>& heads) { return kvtest::pack(heads); }

inline std::vector<float> flat_values(const std::vector<std::vector<double>>& v) {
  std::vector<float> out;
  for (const auto& row : v)
    for (double x : row) out.push_back(static_cast<float>(x));
  return out;
}

using Vectors = std::vector<std::vector<double>>;  // one row per position

// The one harness of the hand-worked policy tests, for every family (baselines, attention,
// tensors, bounds): one layer of one sequence, the rows of each query head, and where the
// policy reads them the stored keys, values and queries.
struct Case {
  std::vector<Rows> rows;  // per query head; empty: uniform rows (they only drive the steps)
  int64_t n = 0;           // tokens, where rows is empty
  int n_kv_heads = 1;
  std::vector<Vectors> keys;     // per kv head (policies that read keys)
  std::vector<Vectors> values;   // per kv head: the output error, and policies that read values
  std::vector<Vectors> queries;  // per query head (policies that read queries)
  kvtrace::RopeMeta rope;
  kvsim::Mode mode = kvsim::Mode::stream;
  int64_t prompt_len = 0;

  // One record per cache group the policy runs on.
  std::vector<kvsim::GroupRecord> replay(const std::string& policy, int64_t budget,
                                         const std::map<std::string, std::string>& params = {}) const {
    std::vector<Rows> heads = rows;
    if (heads.empty()) {
      heads.resize(std::max<size_t>(1, queries.size()));
      for (auto& head : heads)
        for (int64_t t = 0; t < n; ++t) head.push_back(std::vector<double>(t + 1, 1.0 / static_cast<double>(t + 1)));
    }
    const auto tokens = static_cast<int64_t>(heads.front().size());
    std::vector<std::vector<float>> k = flat(keys), v = flat(values), q = flat(queries);
    const kvsim::PolicyChoice choice = kvsim::choose_policy(policy, params);
    if (!choice.info->needs_tensors())  // the rows' replay, as kvsim.replay_rows runs it
      return kvtest::replay(pack(heads), tokens, n_kv_heads, policy, budget, params, mode, prompt_len, v, head_dim());
    const int n_heads = static_cast<int>(heads.size());
    kvtrace::PackedAttentionSource source(tokens, pack(heads));
    std::vector<kvsim::CacheGroup> groups = kvsim::layer_cache_groups(n_heads, n_kv_heads, 0, 0);
    kvsim::attach_group_tensors(groups, n_heads, n_kv_heads, {k, v, q, head_dim(), rope});
    std::vector<kvsim::SimulationSpec> specs;
    std::vector<kvsim::GroupRecord> records;
    const kvsim::GroupRange range = kvsim::policy_groups(*choice.info, n_kv_heads);
    for (int g = range.first; g < range.last; ++g) {
      specs.push_back(kvsim::simulation_spec(choice, budget, g, 0, nullptr));
      records.emplace_back().group = g;
      records.back().heads = groups[static_cast<size_t>(g)].heads;
    }
    kvsim::EngineOptions options;
    options.mode = mode;
    options.prompt_len = prompt_len;
    std::vector<kvsim::SimulationResult> results = kvsim::run_engine(source, groups, specs, options);
    for (size_t r = 0; r < results.size(); ++r) records[r].result = std::move(results[r]);
    return records;
  }
  // The first cache group's eviction steps.
  std::vector<int32_t> eviction_steps(const std::string& policy, int64_t budget,
                                      const std::map<std::string, std::string>& params = {}) const {
    return replay(policy, budget, params).at(0).result.eviction_step;
  }

 private:
  int head_dim() const {
    for (const auto* heads : {&keys, &values, &queries})
      if (!heads->empty() && !heads->front().empty()) return static_cast<int>(heads->front().front().size());
    return 0;
  }
  static std::vector<std::vector<float>> flat(const std::vector<Vectors>& heads) {
    std::vector<std::vector<float>> out;
    for (const Vectors& head : heads) out.push_back(flat_values(head));
    return out;
  }
};

// Replays heads (all sharing n tokens) with n_kv_heads groups.
inline std::vector<kvsim::GroupRecord> replay(const std::vector<Rows>& heads, int n_kv_heads, const std::string& policy,
                                              int64_t budget, const std::map<std::string, std::string>& params = {},
                                              kvsim::Mode mode = kvsim::Mode::stream, int64_t prompt_len = 0,
                                              const std::vector<Vectors>& values = {}) {
  Case c;
  c.rows = heads;
  c.n_kv_heads = n_kv_heads;
  c.values = values;
  c.mode = mode;
  c.prompt_len = prompt_len;
  return c.replay(policy, budget, params);
}

// One head, one group.
inline kvsim::SimulationResult replay1(const Rows& rows, const std::string& policy, int64_t budget,
                                       const std::map<std::string, std::string>& params = {},
                                       kvsim::Mode mode = kvsim::Mode::stream, int64_t prompt_len = 0) {
  auto records = replay({rows}, 1, policy, budget, params, mode, prompt_len);
  EXPECT_EQ(records.size(), 1u);
  return records.at(0).result;
}

// Retention of the k-th head of a record at (absolute) step t.
inline double retention(const kvsim::SimulationResult& r, int k, int64_t t) {
  return r.retention.at(static_cast<size_t>(k * r.n_steps + (t - r.first_step)));
}
inline double output_error(const kvsim::SimulationResult& r, int k, int64_t t) {
  return r.output_error.at(static_cast<size_t>(k * r.n_steps + (t - r.first_step)));
}

inline void expect_caches(const kvsim::SimulationResult& r, const Caches& expected) {
  ASSERT_EQ(r.eviction_step.size(), expected.size());
  for (size_t t = 0; t < expected.size(); ++t)
    EXPECT_EQ(kvtest::cache_after(r, static_cast<int64_t>(t)), expected[t]) << "cache after step " << t;
}

// expected[i] is the retention at step first_step + i.
inline void expect_retention(const kvsim::SimulationResult& r, int k, const std::vector<double>& expected,
                             double tol = 2e-6) {
  ASSERT_EQ(r.n_steps, static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(retention(r, k, r.first_step + static_cast<int64_t>(i)), expected[i], tol)
        << "head index " << k << " step " << r.first_step + static_cast<int64_t>(i);
}

inline void expect_occupancy(const kvsim::SimulationResult& r, const std::vector<int>& expected) {
  ASSERT_EQ(r.occupancy.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(r.occupancy[i], expected[i]) << "occupancy at step " << r.first_step + static_cast<int64_t>(i);
}

inline void expect_eviction_steps(const kvsim::SimulationResult& r, const std::vector<int>& expected) {
  ASSERT_EQ(r.eviction_step.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(r.eviction_step[i], expected[i]) << "position " << i;
}

// Direct computation of the relative output error of docs/semantics.md, section 3 for one head at step
// t, given the cache attended at t (before eviction): o = sum_i a_t[i] v_i over 0..t,
// õ = sum over cached i of (a_t[i] / r_t) v_i.
inline double direct_error(const Rows& rows, const std::vector<std::vector<double>>& v, int64_t t,
                           const std::vector<int>& cache) {
  const auto& a = rows[static_cast<size_t>(t)];
  const size_t d = v.front().size();
  std::vector<double> o(d, 0.0), approx(d, 0.0);
  double r = 0;
  for (int i : cache) r += a[static_cast<size_t>(i)];
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < d; ++j) o[j] += a[i] * v[i][j];
  for (int i : cache)
    for (size_t j = 0; j < d; ++j) approx[j] += a[static_cast<size_t>(i)] / r * v[static_cast<size_t>(i)][j];
  double num = 0, den = 0;
  for (size_t j = 0; j < d; ++j) {
    num += (o[j] - approx[j]) * (o[j] - approx[j]);
    den += o[j] * o[j];
  }
  return std::sqrt(num) / std::sqrt(den);
}

// The cache attended at step t: what stayed after t-1, plus t.
inline std::vector<int> attended(const kvsim::SimulationResult& r, int64_t t) {
  std::vector<int> c = t > 0 ? kvtest::cache_after(r, t - 1) : std::vector<int>{};
  c.push_back(static_cast<int>(t));
  return c;
}

// RoPE of head_dim 2, one interleaved pair, w = theta^0 / factor = pi/2: position p turns by
// p x 90 degrees, (x, y) -> (-y, x) per quarter turn; hand-worked cases un-rotate with it.
inline kvtrace::RopeMeta quarter_turns() {
  kvtrace::RopeMeta rope;
  rope.theta = 10000;
  rope.scaling_type = "linear";
  rope.scaling_factor = 2 / M_PI;
  rope.rotary_dims = 2;
  rope.pairing = "interleaved";
  return rope;
}

}  // namespace hand
