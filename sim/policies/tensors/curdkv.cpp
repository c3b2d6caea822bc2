// curdkv: kvpress's CURPress (CurDKV, Sengupta et al., 2025), NVIDIA/kvpress at 8bb29b9,
// kvpress/presses/cur_press.py, `score`, lines 34-67. Over the m cache entries in order,
// k2_j = |k_j|^2 and v2_j = |v_j|^2; with `local` on, each is divided by its sum over its window
// of `window` (16) entries (entries [0, w), [w, 2w), ...; the last window partial); the score is
// k2 * v2 (`leverage` kv_product; or key, value, kv_avg = (k2 + v2) / 2), divided by its sum
// over the cache, and the first `sinks` (4) entries score 1. Evict the lowest, recomputed at
// every eviction. docs/semantics.md, section 4.
#include <algorithm>
#include <cmath>

#include "kvsim/policies/scoring.hpp"

namespace kvsim {
namespace {

enum class Leverage { key, value, kv_avg, kv_product };

Leverage leverage_of(const std::string& text) {
  if (text == "key") return Leverage::key;
  if (text == "value") return Leverage::value;
  if (text == "kv_avg") return Leverage::kv_avg;
  return Leverage::kv_product;
}

class CurDKV final : public ScoringPolicy {
 public:
  explicit CurDKV(const Params& params)
      : sinks_(params.integer("sinks")),
        window_(params.text("local") == "on" ? params.integer("window") : 0),
        leverage_(leverage_of(params.text("leverage"))) {}

 private:
  void on_reset(const GroupContext& group) override { tensors_ = group.tensors; }  // adopt: no state

  Ranked rank(int64_t, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    const size_t m = cache.size();
    squares(cache, true, k2_);
    squares(cache, false, v2_);
    scores.resize(m);
    double total = 0;
    for (size_t j = 0; j < m; ++j) {
      switch (leverage_) {
        case Leverage::key:
          scores[j] = k2_[j];
          break;
        case Leverage::value:
          scores[j] = v2_[j];
          break;
        case Leverage::kv_avg:
          scores[j] = (k2_[j] + v2_[j]) / 2;
          break;
        case Leverage::kv_product:
          scores[j] = k2_[j] * v2_[j];
          break;
      }
      total += scores[j];
    }
    for (size_t j = 0; j < m; ++j) scores[j] = j < static_cast<size_t>(sinks_) ? 1.0 : scores[j] / total;
    return candidates(0, scores);
  }

  // out[j] = |x_j|^2 of the cache's keys (or values), each divided by its window's sum when
  // the local approximation is on (a window of zero sum gives NaN, which is refused).
  void squares(std::span<const int32_t> cache, bool keys, std::vector<double>& out) const {
    const size_t m = cache.size();
    out.resize(m);
    for (size_t j = 0; j < m; ++j) {
      double sum = 0;
      for (float x : keys ? tensors_->key(0, cache[j]) : tensors_->value(0, cache[j]))
        sum += static_cast<double>(x) * x;
      out[j] = sum;
    }
    if (window_ == 0) return;
    const auto w = static_cast<size_t>(window_);
    for (size_t first = 0; first < m; first += w) {
      const size_t last = std::min(m, first + w);
      double sum = 0;
      for (size_t j = first; j < last; ++j) sum += out[j];
      for (size_t j = first; j < last; ++j) out[j] /= sum;
    }
  }

  int64_t sinks_, window_;
  Leverage leverage_;
  const GroupTensors* tensors_ = nullptr;
  mutable std::vector<double> k2_, v2_;  // rank()'s scratch
};

}  // namespace

PolicyInfo curdkv_policy() {
  PolicyInfo info;
  info.name = "curdkv";
  info.summary = "CURPress (CurDKV): key and value leverage, |k|^2 |v|^2 normalised per window of 16";
  info.params = {
      {"sinks", ParamType::integer, "4", "first cache entries scored 1 (kept)", 0, 1e9, {}},
      {"leverage",
       ParamType::choice,
       "kv_product",
       "the score: key (k2), value (v2), kv_avg ((k2 + v2) / 2) or kv_product (k2 v2)",
       0,
       0,
       {"key", "value", "kv_avg", "kv_product"}},
      {"local", ParamType::choice, "on", "off: no per-window normalisation", 0, 0, {"on", "off"}},
      {"window", ParamType::integer, "16", "entries per window of the local normalisation", 1, 1e9, {}},
  };
  info.needs_attention = false;
  info.needs_keys = true;
  info.needs_values = true;
  set_make<CurDKV>(info);
  return info;
}

}  // namespace kvsim
