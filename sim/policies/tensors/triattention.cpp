// triattention: TriAttention (WeianMao/triattention at c3744ee, triattention/methods/
// pruning_utils.py: invert_rope lines 51-83, to_complex_pairs 86-98, build_geometric_offsets
// 245-253, compute_frequency_statistics_from_means 256-274, score_keys_for_round 277-309;
// triattention/methods/triattention.py: _compute_layer_head_scores 566-667, normalisation
// 258-262, per-(layer, kv head) max 526-535; defaults scripts/cli.py 298-312). Each RoPE pair
// f (frequency w_f) of a head is a complex number. A query head's centre is qbar_f = the mean
// of its un-rotated queries and A_f = the mean of |q_f|: kvsim takes them from the trace's own
// queries of steps 0..t (the authors calibrate them offline on another text). At step t each
// cached key, un-rotated by its position p (inverse RoPE), scores
//   mean over offsets o = 1, 2, 4, ..., <= horizon of
//     sum_f |qbar_f||k_f| cos((t + 1 - p + o) w_f + phi_f) + sum_f (A_f - |qbar_f|) |k_f|,
// phi_f = arg(qbar_f conj(k_f)); each head's scores are z-normalised over the cache, and the
// group's score is the max over its heads. Evict the lowest. docs/semantics.md, section 4.
#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../rope.hpp"
#include "kvsim/policies/scoring.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

using Complex = std::complex<double>;

std::string keys_rope_problem(const kvtrace::RopeMeta& rope) { return rope_problem(rope, "the keys and queries"); }

class TriAttention final : public ScoringPolicy {
 public:
  explicit TriAttention(const Params& params)
      : horizon_(params.integer("horizon")),
        max_offsets_(params.text("offsets") == "max"),
        normalize_(params.text("normalize") == "on"),
        mlr_(params.text("mlr") == "on"),
        trig_(params.text("trig") == "on") {}

  bool adopt(const Policy& other) override {
    ScoringPolicy::adopt(other);
    const auto& from = static_cast<const TriAttention&>(other);
    centre_ = from.centre_;
    magnitude_ = from.magnitude_;
    count_ = from.count_;
    return true;
  }

 private:
  void on_reset(const GroupContext& group) override {
    tensors_ = group.tensors;
    if (const std::string problem = keys_rope_problem(tensors_->rope); !problem.empty())
      throw kvtrace::InputError("", "", "policy triattention " + problem);
    const kvtrace::RopeMeta& rope = tensors_->rope;
    if (rope.rotary_dims > 0 && rope.rotary_dims != tensors_->head_dim)
      throw kvtrace::InputError("", "",
                                "policy triattention needs RoPE on the whole head (rotary_dims " +
                                    std::to_string(rope.rotary_dims) + ", head_dim " +
                                    std::to_string(tensors_->head_dim) + ")");
    rope_ = Rope(rope, tensors_->head_dim);
    offsets_.clear();
    for (int64_t o = 1; o <= horizon_; o *= 2) offsets_.push_back(static_cast<double>(o));
    turn_.resize(rope_.pair.size() * offsets_.size());
    for (size_t f = 0; f < rope_.pair.size(); ++f)
      for (size_t o = 0; o < offsets_.size(); ++o)
        turn_[f * offsets_.size() + o] = std::polar(1.0, offsets_[o] * rope_.frequency[f]);
    heads_ = tensors_->queries.size();
    centre_.assign(heads_ * rope_.pair.size(), Complex());
    magnitude_.assign(heads_ * rope_.pair.size(), 0.0);
    count_ = 0;
  }

  // Pair f of the vector x at position p, un-rotated: (x_a + i x_b) e^{-i p w_f}.
  Complex unrotated(std::span<const float> x, int64_t p, size_t f) const {
    const auto [a, b] = rope_.pair[f];
    return Complex(x[a], x[b]) * std::polar(1.0, -static_cast<double>(p) * rope_.frequency[f]);
  }

  // Each query head's query at `step`, un-rotated, joins the calibration sums.
  void on_observe(int64_t step, std::span<const int32_t>, std::span<const float>) override {
    for (size_t h = 0; h < heads_; ++h) {
      const std::span<const float> q = tensors_->query(h, step);
      for (size_t f = 0; f < rope_.pair.size(); ++f) {
        const Complex z = unrotated(q, step, f);
        centre_[h * rope_.pair.size() + f] += z;
        magnitude_[h * rope_.pair.size() + f] += std::abs(z);
      }
    }
    ++count_;
  }

  Ranked rank(int64_t step, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    head_scores(step, cache);
    const size_t m = cache.size();
    scores.assign(m, -std::numeric_limits<double>::infinity());
    for (size_t h = 0; h < heads_; ++h) {
      double* row = per_head_.data() + h * m;
      if (normalize_) {  // (s - mean) / max(std, 1e-6), the population std
        double mean = 0, squares = 0;
        for (size_t j = 0; j < m; ++j) mean += row[j];
        mean /= static_cast<double>(m);
        for (size_t j = 0; j < m; ++j) squares += (row[j] - mean) * (row[j] - mean);
        const double std = std::max(std::sqrt(squares / static_cast<double>(m)), 1e-6);
        for (size_t j = 0; j < m; ++j) row[j] = (row[j] - mean) / std;
      }
      for (size_t j = 0; j < m; ++j) scores[j] = std::max(scores[j], row[j]);
    }
    return candidates(0, scores);
  }

  // per_head_[h * m + j]: head h's score of cache[j] at `step` (the round starts at t + 1).
  // amp cos(x + phi) = Re(qbar conj(k) e^{ix}); the offsets' turns e^{i o w_f} are turn_.
  void head_scores(int64_t step, std::span<const int32_t> cache) const {
    const size_t m = cache.size(), pairs = rope_.pair.size(), offsets = offsets_.size();
    const double n = static_cast<double>(count_);
    per_head_.assign(heads_ * m, 0.0);
    base_.resize(offsets);
    for (size_t h = 0; h < heads_; ++h) {
      const size_t kv = h * tensors_->keys.size() / heads_;
      for (size_t j = 0; j < m; ++j) {
        const std::span<const float> k = tensors_->key(kv, cache[j]);
        const double delta = static_cast<double>(step + 1 - cache[j]);
        std::fill(base_.begin(), base_.end(), 0.0);
        double extra = 0;
        for (size_t f = 0; f < pairs; ++f) {
          const Complex centre = centre_[h * pairs + f] / n, key = unrotated(k, cache[j], f);
          const double spread = magnitude_[h * pairs + f] / n - (mlr_ ? std::abs(centre) : 0.0);
          extra += spread * std::abs(key);
          if (!trig_) continue;
          const Complex phase = centre * std::conj(key) * std::polar(1.0, delta * rope_.frequency[f]);
          const Complex* turn = turn_.data() + f * offsets;
          for (size_t o = 0; o < offsets; ++o)
            base_[o] += phase.real() * turn[o].real() - phase.imag() * turn[o].imag();
        }
        double total = 0, top = -std::numeric_limits<double>::infinity();
        for (double b : base_) {
          total += b + extra;
          top = std::max(top, b + extra);
        }
        per_head_[h * m + j] = max_offsets_ ? top : total / static_cast<double>(offsets);
      }
    }
  }

  int64_t horizon_;
  bool max_offsets_, normalize_, mlr_, trig_;
  const GroupTensors* tensors_ = nullptr;
  size_t heads_ = 0;
  Rope rope_;
  std::vector<double> offsets_;
  std::vector<Complex> turn_;      // per pair and offset: e^{i o w_f}
  std::vector<Complex> centre_;    // per head and pair: the sum of the un-rotated queries
  std::vector<double> magnitude_;  // per head and pair: the sum of their moduli
  int64_t count_ = 0;
  mutable std::vector<double> per_head_, base_;  // scratch of rank()
};

}  // namespace

PolicyInfo triattention_policy() {
  PolicyInfo info;
  info.name = "triattention";
  info.summary = "TriAttention: un-rotated keys against the queries' centre over future offsets (trig series)";
  info.params = {
      {"horizon", ParamType::integer, "65536", "offsets 1, 2, 4, ... up to this many positions ahead", 1, 1e9, {}},
      {"offsets", ParamType::choice, "mean", "mean or max of the score over the offsets", 0, 0, {"mean", "max"}},
      {"normalize", ParamType::choice, "on", "z-normalise each head's scores over the cache", 0, 0, {"on", "off"}},
      {"mlr",
       ParamType::choice,
       "on",
       "off: the norm term uses mean |q_f|, not mean |q_f| - |mean q_f|",
       0,
       0,
       {"on", "off"}},
      {"trig", ParamType::choice, "on", "off: the norm term alone, no position-dependent series", 0, 0, {"on", "off"}},
  };
  info.needs_attention = false;
  info.needs_keys = true;
  info.needs_queries = true;
  info.rope_problem = keys_rope_problem;
  set_make<TriAttention>(info);
  return info;
}

}  // namespace kvsim
