#pragma once
// The meters' reference implementations (meters.hpp): the definitions of docs/semantics.md,
// section 3, as plain loops over the positions, in double, one head at a time. The engine
// runs them with EngineOptions::reference; tests check the accelerated meters against them.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "meters.hpp"

namespace kvsim {

// Retention of each head: the true row's mass over its cache. With a quantized cache, the
// mass the true row and the model's row renormalised over the cache share:
// sum over cached i of min(a_t[i], b_t[i] / sum over cached j of b_t[j]).
class ReferenceRetention final : public Meter {
 public:
  explicit ReferenceRetention(const MeterSetup& setup) : setup_(setup) {}

  void record(const MeterStep& step, Record& out) override {
    const CacheGroup& group = *setup_.group;
    for (size_t k = 0; k < group.heads.size(); ++k) {
      const float* truth = step.rows->row(group.heads[k]);
      const float* model = step.model->row(group.heads[k]);
      double mass = 0;
      for (int32_t i : step.positions(k)) mass += model[i];
      double retained = mass;
      if (setup_.quantized) {
        retained = 0;
        for (int32_t i : step.positions(k)) retained += std::min<double>(truth[i], model[i] / mass);
      }
      out.result.retention[out.at(k, step.t)] = static_cast<float>(retained);
    }
  }

 private:
  MeterSetup setup_;
};

// Output error of each head: o_t = sum over i <= t of a_t[i] v_i (the true row and values)
// against the model's output over its cache, sum over cached i of b_t[i] v'_i divided by
// sum over cached i of b_t[i] (v': the values the cache stores: quantized, or merged by a
// merging policy), as |o_t - approx| / |o_t|.
class ReferenceOutputError final : public Meter {
 public:
  explicit ReferenceOutputError(const MeterSetup& setup) : setup_(setup) {}

  void record(const MeterStep& step, Record& out) override {
    const CacheGroup& group = *setup_.group;
    const auto d = static_cast<size_t>(group.head_dim);
    for (size_t k = 0; k < group.heads.size(); ++k) {
      const float* truth = step.rows->row(group.heads[k]);
      const float* model = step.model->row(group.heads[k]);
      const StoredValues* stored = stored_values(setup_, k);
      auto value = [&](int64_t i) { return group.values[k] + static_cast<size_t>(i) * d; };
      auto cached_value = [&](int64_t i) { return stored ? stored->row(i, step.t).data() : value(i); };
      std::vector<double> output(d, 0.0), approx(d, 0.0);
      for (int64_t i = 0; i <= step.t; ++i)
        for (size_t c = 0; c < d; ++c) output[c] += static_cast<double>(truth[i]) * value(i)[c];
      double mass = 0;
      for (int32_t i : step.positions(k)) {
        mass += model[i];
        const std::span<const double> merged =
            setup_.merging ? setup_.merging->merged_value(k, i) : std::span<const double>();
        for (size_t c = 0; c < d; ++c)
          approx[c] += static_cast<double>(model[i]) * (merged.empty() ? cached_value(i)[c] : merged[c]);
      }
      double difference = 0, norm = 0;
      for (size_t c = 0; c < d; ++c) {
        difference += (output[c] - approx[c] / mass) * (output[c] - approx[c] / mass);
        norm += output[c] * output[c];
      }
      out.result.output_error[out.at(k, step.t)] = relative_error(difference, norm);
    }
  }

 private:
  MeterSetup setup_;
};

}  // namespace kvsim
