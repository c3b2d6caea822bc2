// triattention (docs/semantics.md, section 4): a hand-worked case whose expected evictions
// follow the rule of the semantics row, and the authors' scoring (WeianMao/triattention at
// c3744ee, triattention/methods/pruning_utils.py and triattention.py) written literally.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "hand_cases.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvtrace/error.hpp"

namespace {

using hand::Case;
using hand::Vectors;

TEST(PolicyTriAttention, UnrotatedKeysAgainstTheQueryCentre) {
  // Un-rotated queries of positions 0, 1, 2: (4,0), (4,0), (-2,0); stored rotated by 0, 90,
  //   180 degrees: (4,0), (0,4), (2,0). At t2 (all three calibrate): qbar = (2,0), |qbar| = 2;
  //   A = mean |q| = 10/3; the norm term's factor A - |qbar| = 4/3.
  // Un-rotated keys (1,0), (0,1), (3,0); stored (1,0), (-1,0), (-3,0). phi = arg(qbar conj k):
  //   0, -pi/2, 0. The round starts at t + 1 = 3.
  // horizon 1 (offset 1): delta = 3 - p + 1 = 4, 3, 2 turns of pi/2:
  //   s0 = 2 x 1 x cos(2 pi) + 4/3 x 1 = 3.333; s1 = 2 x 1 x cos(3 pi/2 - pi/2) + 4/3 = -0.667;
  //   s2 = 2 x 3 x cos(pi) + 4/3 x 3 = -2: B = 2 evicts 2 at t2.
  // mlr off (factor A = 10/3): 5.333, 1.333, 4: evicts 1.
  // trig off (the norm term alone): 4/3, 4/3, 4: evicts 0 (the tie: the lower position).
  // horizon 2 (offsets 1 and 2, mean): s0 = 2 (1 + cos(5 pi/2)) / 2 + 4/3 = 2.333; s1 = 2 (cos pi
  //   + cos(3 pi/2)) / 2 + 4/3 = 0.333; s2 = 6 (cos pi + cos(3 pi/2)) / 2 + 4 = 1: evicts 1.
  // One head: z-normalising (on by default) keeps the order.
  Case c;
  c.n = 3;
  c.keys = {{{1, 0}, {-1, 0}, {-3, 0}}};
  c.queries = {{{4, 0}, {0, 4}, {2, 0}}};
  c.rope = hand::quarter_turns();
  EXPECT_EQ(c.eviction_steps("triattention", 2, {{"horizon", "1"}}), (std::vector<int32_t>{-1, -1, 2}));
  EXPECT_EQ(c.eviction_steps("triattention", 2, {{"horizon", "1"}, {"mlr", "off"}}), (std::vector<int32_t>{-1, 2, -1}));
  EXPECT_EQ(c.eviction_steps("triattention", 2, {{"horizon", "1"}, {"trig", "off"}}),
            (std::vector<int32_t>{2, -1, -1}));
  EXPECT_EQ(c.eviction_steps("triattention", 2, {{"horizon", "2"}}), (std::vector<int32_t>{-1, 2, -1}));
}

TEST(PolicyTriAttention, RefusesATraceItCannotUnrotate) {
  const kvsim::PolicyInfo& info = kvsim::find_policy("triattention");
  ASSERT_TRUE(info.rope_problem);
  EXPECT_NE(info.rope_problem(kvtrace::RopeMeta{}).find("needs the trace's RoPE attributes"), std::string::npos);
  EXPECT_EQ(info.rope_problem(hand::quarter_turns()), "");
  kvtrace::RopeMeta yarn = hand::quarter_turns();
  yarn.scaling_type = "yarn";
  EXPECT_NE(info.rope_problem(yarn).find("not yarn"), std::string::npos);
  Case c;
  c.n = 3;
  c.keys = c.queries = {{{1, 0, 0, 1}, {0, 1, 1, 0}, {1, 1, 1, 1}}};
  c.rope = hand::quarter_turns();  // rotary_dims 2 of head_dim 4
  EXPECT_THROW(c.eviction_steps("triattention", 2), kvtrace::InputError);
  EXPECT_TRUE(info.needs_keys && info.needs_queries && !info.needs_values && !info.needs_attention);
}

// ---- the authors' scoring, literally (style "half", attention scale 1, freq_scale_sq 1) ----

using Matrix = std::vector<std::vector<double>>;  // [position][dim]

// invert_rope (pruning_utils.py lines 51-83): base * cos - rotate_half(base) * sin, the
// cos/sin tables of HF's rotary (cat(freqs, freqs)) at each position.
std::vector<double> invert_rope(const std::vector<double>& x, int64_t p, const std::vector<double>& inv_freq) {
  const size_t half = x.size() / 2;
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double angle = static_cast<double>(p) * inv_freq[i % half];
    const double rotated_half = i < half ? -x[i + half] : x[i - half];
    out[i] = x[i] * std::cos(angle) - rotated_half * std::sin(angle);
  }
  return out;
}

// score_keys_for_round (lines 277-309) after compute_frequency_statistics_from_means (256-274):
// amp = |qbar||k|, phi = atan2 of qbar conj(k), extra = (q_abs_mean - |qbar|) |k|; the mean over
// the offsets of sum_f amp cos(delta w + phi) + sum_f extra.
double authors_score(const std::vector<double>& qr, const std::vector<double>& qi, const std::vector<double>& qabs,
                     const std::vector<double>& k_unrot, int64_t key_position, int64_t round_start,
                     const std::vector<double>& inv_freq, const std::vector<double>& offsets) {
  const size_t half = k_unrot.size() / 2;
  double total = 0;
  for (double offset : offsets) {
    double base = 0, additive = 0;
    for (size_t f = 0; f < half; ++f) {
      const double kr = k_unrot[f], ki = k_unrot[f + half];  // to_complex_pairs, lines 95-98
      const double rel_r = qr[f] * kr + qi[f] * ki, rel_i = qi[f] * kr - qr[f] * ki;
      const double phi = std::atan2(rel_i, rel_r);
      const double q_mean_abs = std::hypot(qr[f], qi[f]), k_abs = std::hypot(kr, ki);
      const double delta = static_cast<double>(round_start - key_position) + offset;
      base += q_mean_abs * k_abs * std::cos(delta * inv_freq[f] + phi);
      additive += (qabs[f] - q_mean_abs) * k_abs;
    }
    total += base + additive;
  }
  return total / static_cast<double>(offsets.size());
}

// Stream mode, B, per step: calibrate (calibrate.py lines 222-229: the mean of the un-rotated
// complex queries and of their moduli, here over steps 0..t), score every cached key per head,
// z-normalise per head (triattention.py lines 258-262), max over the group's heads (lines
// 526-535), keep the top B (ties unlikely on random data).
std::vector<int32_t> authors_loop(const Matrix& keys, const std::vector<Matrix>& queries, int64_t budget, double theta,
                                  int64_t horizon) {
  const auto n = static_cast<int64_t>(keys.size());
  const size_t d = keys[0].size(), half = d / 2;
  std::vector<double> inv_freq(half), offsets;
  for (size_t f = 0; f < half; ++f) inv_freq[f] = std::pow(theta, -static_cast<double>(2 * f) / static_cast<double>(d));
  for (int64_t value = 1; value <= horizon; value *= 2) offsets.push_back(static_cast<double>(value));  // lines 245-253
  std::vector<int32_t> evicted(static_cast<size_t>(n), -1), cache;
  for (int64_t t = 0; t < n; ++t) {
    cache.push_back(static_cast<int32_t>(t));
    if (static_cast<int64_t>(cache.size()) <= budget) continue;
    std::vector<double> combined(cache.size(), -INFINITY);
    for (const Matrix& q : queries) {
      std::vector<double> qr(half, 0), qi(half, 0), qabs(half, 0);
      for (int64_t s = 0; s <= t; ++s) {
        const std::vector<double> base = invert_rope(q[static_cast<size_t>(s)], s, inv_freq);
        for (size_t f = 0; f < half; ++f) {
          qr[f] += base[f] / static_cast<double>(t + 1);
          qi[f] += base[f + half] / static_cast<double>(t + 1);
          qabs[f] += std::hypot(base[f], base[f + half]) / static_cast<double>(t + 1);
        }
      }
      std::vector<double> head(cache.size());
      for (size_t j = 0; j < cache.size(); ++j)
        head[j] = authors_score(qr, qi, qabs, invert_rope(keys[static_cast<size_t>(cache[j])], cache[j], inv_freq),
                                cache[j], t + 1, inv_freq, offsets);
      double mean = 0, var = 0;
      for (double s : head) mean += s / static_cast<double>(head.size());
      for (double s : head) var += (s - mean) * (s - mean) / static_cast<double>(head.size());
      for (size_t j = 0; j < head.size(); ++j)
        combined[j] = std::max(combined[j], (head[j] - mean) / std::max(std::sqrt(var), 1e-6));
    }
    const auto lowest = static_cast<size_t>(std::min_element(combined.begin(), combined.end()) - combined.begin());
    evicted[static_cast<size_t>(cache[lowest])] = static_cast<int32_t>(t);
    cache.erase(cache.begin() + static_cast<std::ptrdiff_t>(lowest));
  }
  return evicted;
}

TEST(PolicyTriAttention, EqualsTheAuthorsScoringOnRandomTensors) {
  // Two query heads share one kv head (GQA), head_dim 4 in halves, theta 100; keys and queries
  // drawn at random and rounded to float, as a trace stores them.
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  int64_t evictions = 0;
  for (int trial = 0; trial < 6; ++trial) {
    const size_t n = 14;
    auto draw = [&] {
      Vectors v(n, std::vector<double>(4));
      for (auto& row : v)
        for (double& x : row) x = static_cast<float>(normal(rng) + 0.5);
      return v;
    };
    Case c;
    c.n = static_cast<int64_t>(n);
    c.keys = {draw()};
    c.queries = {draw(), draw()};
    c.rope.theta = 100;
    c.rope.rotary_dims = 4;
    c.rope.pairing = "half";
    const int64_t budget = 4 + trial % 3;
    const int64_t horizon = trial % 2 ? 64 : 65536;
    const std::vector<int32_t> expected = authors_loop(c.keys[0], c.queries, budget, 100, horizon);
    EXPECT_EQ(c.eviction_steps("triattention", budget, {{"horizon", std::to_string(horizon)}}), expected)
        << "trial " << trial;
    for (int32_t step : expected) evictions += step >= 0;
  }
  EXPECT_GT(evictions, 40);
}

}  // namespace
