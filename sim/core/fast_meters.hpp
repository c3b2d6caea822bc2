#pragma once
// The accelerated meters (meters.hpp): retention from the masses the simulation found anyway,
// and output error from sums over the shorter of the cache and its complement, from o_t's
// checkpoints for runs of consecutive positions, or a block of steps at a time (OutputBatch).
// Each gives what its reference (reference_meters.hpp) gives, to rounding.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "meters.hpp"
#include "output_batch.hpp"
#include "step_rows.hpp"
#include "value_sums.hpp"

namespace kvsim {

// Retention: each head's mass over its cache (MeterStep::mass) or, with a quantized cache, the
// mass the true row and the model's renormalised row share.
class FastRetention final : public Meter {
 public:
  explicit FastRetention(const MeterSetup& setup) : setup_(setup) {}

  void record(const MeterStep& step, Record& out) override {
    const CacheGroup& group = *setup_.group;
    for (size_t k = 0; k < group.heads.size(); ++k) {
      const int head = group.heads[k];
      const double retained =
          setup_.quantized ? shared_mass(step.rows->row(head), step.model->row(head), step.mass[k], step.positions(k))
                           : step.mass[k];
      out.result.retention[out.at(k, step.t)] = static_cast<float>(retained);
    }
  }

 private:
  // sum over cached i of min(a[i], b[i] / model_mass): the attention mass the true row and
  // the model's renormalised row share.
  static double shared_mass(const float* truth, const float* model, double model_mass, std::span<const int32_t> cache) {
    const double inverse = 1.0 / model_mass;
    double shared = 0;
    for (int32_t position : cache) shared += std::min<double>(truth[position], model[position] * inverse);
    return shared;
  }

  MeterSetup setup_;
};

// What the accelerated output errors share: each head's partial (the unnormalised output over
// its positions) and the error of a partial against o_t.
class OutputErrorSums : public Meter {
 protected:
  explicit OutputErrorSums(const MeterSetup& setup)
      : setup_(setup), group_(*setup.group), d_(static_cast<size_t>(group_.head_dim)), partials_(group_.heads.size()) {}

  // Head k's output error at step t against o_t, from its partial (overwritten): the sum of
  // row[i] v_i over the cached positions or, with `complement` (full precision only), over
  // those evicted so far.
  void record_error(const StepRows& rows, int64_t t, size_t k, double mass, bool complement, Record& out) {
    double* partial = partials_[k].data();
    const double* full = rows.full_output(setup_.group_index, k, t);
    if (complement)
      for (size_t c = 0; c < d_; ++c) partial[c] = full[c] - partial[c];
    double difference = 0, norm = 0;
    for (size_t c = 0; c < d_; ++c) {
      const double approx = partial[c] / mass;
      difference += (full[c] - approx) * (full[c] - approx);
      norm += full[c] * full[c];
    }
    out.result.output_error[out.at(k, t)] = relative_error(difference, norm);
  }

  // Head k's partial with the values a quantized cache stores.
  void stored_partial(StepRows& model, size_t k, const StoredValues& stored, std::span<const int32_t> positions) {
    const int64_t t = model.t();
    const float* row = model.row(group_.heads[k]);
    std::vector<double>& partial = partials_[k];
    partial.assign(d_, 0.0);
    for (int32_t position : positions) {
      const double weight = row[position];
      const float* v = stored.row(position, t).data();
      for (size_t c = 0; c < d_; ++c) partial[c] += weight * v[c];
    }
  }

  bool stores_values() const { return stored_values(setup_, 0) != nullptr; }

  const MeterSetup setup_;
  const CacheGroup& group_;
  const size_t d_;
  std::vector<std::vector<double>> partials_;  // per head: its output over the positions, unnormalised
};

// A bound's output error: each head's own positions, one head at a time.
class BoundOutputError final : public OutputErrorSums {
 public:
  explicit BoundOutputError(const MeterSetup& setup) : OutputErrorSums(setup) {}

  void record(const MeterStep& step, Record& out) override {
    for (size_t k = 0; k < group_.heads.size(); ++k) {
      if (const StoredValues* stored = stored_values(setup_, k)) {
        stored_partial(*step.model, k, *stored, step.positions(k));
      } else {
        partials_[k].resize(d_);
        weighted_value_sum(step.model->row(group_.heads[k]), step.positions(k), group_.values[k], d_,
                           partials_[k].data());
      }
      record_error(*step.rows, step.t, k, step.mass[k], false, out);
    }
  }
};

// Output error of a cache all the group's heads share. The sums run over the shorter of the
// cache and the evicted positions (o_t is the sum over both, so the cached part is o_t minus
// the evicted part), from o_t's checkpoints when the cache is runs of consecutive positions,
// and with AVX2 a block of steps at a time (OutputBatch) when the heads sharing values come
// in fours.
class CacheOutputError final : public OutputErrorSums {
 public:
  CacheOutputError(const MeterSetup& setup, bool interleave) : OutputErrorSums(setup) {
    batched_ = kBatchedOutputs && interleave && !setup.quantized && d_ % 4 == 0;
    for_each_values_run(group_.values, [&](size_t first, size_t last) { batched_ = batched_ && last - first == 4; });
  }

  void record(const MeterStep& step, Record& out) override {
    const size_t heads = group_.heads.size();
    bool complement = !setup_.quantized && step.evicted.size() < step.cache.size();
    const std::span<const int32_t> positions = complement ? step.evicted : step.cache;
    if (stores_values()) {
      for (size_t k = 0; k < heads; ++k) stored_partial(*step.model, k, *stored_values(setup_, k), positions);
    } else if (step.runs->count > 0 && !setup_.quantized &&
               static_cast<size_t>(2 * 64 * step.runs->count) < positions.size()) {
      // A run costs at most a checkpoint interval of positions (StepRows::range_outputs).
      run_partials(*step.model, *step.runs);
      complement = false;  // the runs are the cache itself
    } else if (batched_) {
      return add_to_batch(step, complement, positions, out);
    } else {
      shared_partials(*step.model, positions);
    }
    for (size_t k = 0; k < heads; ++k) record_error(*step.rows, step.t, k, step.mass[k], complement, out);
  }

  // The output errors of the steps batch_ holds.
  void flush(const StepRows& rows, std::span<const int32_t> evicted, Record& out) override {
    batch_.flush(evicted, group_.values, d_, [&](int64_t t, size_t k, double* const* sums, const double* mass) {
      const double* full[4];
      for (size_t h = 0; h < 4; ++h) full[h] = rows.full_output(setup_.group_index, k + h, t);
      float errors[4];
      relative_errors(full, sums, mass, d_, batch_.complement(), errors);
      for (size_t h = 0; h < 4; ++h) out.result.output_error[out.at(k + h, t)] = errors[h];
    });
  }

 private:
  // The step joins the batch. A long last run of the cache (h2o's protected recent half) is
  // summed from o_t and its checkpoints (StepRows::range_outputs), and the batch sums the
  // cache below it.
  void add_to_batch(const MeterStep& step, bool complement, std::span<const int32_t> positions, Record& out) {
    StepRows& model = *step.model;
    const int64_t t = step.t;
    const size_t heads = group_.heads.size();
    const size_t head = tail_run(step.cache);
    const bool run =
        step.cache.size() - head >= 64 && head + 64 < positions.size() && model.checkpointed(setup_.group_index);
    const int64_t run_begin = run ? step.cache[head] : t + 1;
    if (run) {
      complement = false;
      run_partials_.resize(heads * d_);
      run_out_.resize(heads);
      for (size_t k = 0; k < heads; ++k) run_out_[k] = run_partials_.data() + k * d_;
      model.range_outputs(setup_.group_index, run_begin, t + 1, run_out_.data());
    }
    if (!batch_.fits(t, complement, run_begin, step.evicted.size(), heads)) flush(*step.rows, step.evicted, out);
    batch_quads_.resize(heads / 4);
    for (size_t q = 0; q < heads / 4; ++q) batch_quads_[q] = model.quad_rows(setup_.group_index, q);
    batch_.add(t, complement, run_begin, step.cache, step.evicted, step.in_cache, batch_quads_, step.mass,
               run ? std::span<const double>(run_partials_) : std::span<const double>());
  }

  // The partials when the cache is runs of consecutive positions (recent, streaming): each
  // run's sum from the checkpoints of o_t's pass (StepRows::range_output).
  void run_partials(StepRows& model, const Runs& runs) {
    const size_t heads = group_.heads.size();
    run_sums_.resize(heads);
    run_out_.resize(heads);
    for (size_t k = 0; k < heads; ++k) {
      partials_[k].assign(d_, 0.0);
      run_sums_[k].resize(d_);
      run_out_[k] = run_sums_[k].data();
    }
    for (int r = 0; r < runs.count; ++r) {
      model.range_outputs(setup_.group_index, runs.begin[r], runs.end[r], run_out_.data());
      for (size_t k = 0; k < heads; ++k)
        for (size_t c = 0; c < d_; ++c) partials_[k][c] += run_sums_[k][c];
    }
  }

  // Each head's sum of row[i] * v_i over `positions`, for every head of the group at once:
  // the heads of one kv head share the positions and the values, so each v_i is read once
  // for them (shared_weighted_value_sums).
  void shared_partials(StepRows& model, std::span<const int32_t> positions) {
    for_each_values_run(group_.values, [&](size_t first, size_t last) {
      shared_rows_.clear();
      shared_out_.clear();
      for (size_t h = first; h < last; ++h) {
        partials_[h].resize(d_);
        shared_rows_.push_back(model.row(group_.heads[h]));
        shared_out_.push_back(partials_[h].data());
      }
      shared_weighted_value_sums(shared_rows_.data(), last - first, positions, group_.values[first], d_,
                                 shared_out_.data(), shared_weights_);
    });
  }

  // Where the cache's last run of consecutive positions (the one ending at t) begins: an
  // index into it, found by bisection (the suffix from j is a run iff cache[j] = t - (size -
  // 1 - j)).
  static size_t tail_run(std::span<const int32_t> cache) {
    const int64_t last = static_cast<int64_t>(cache.size()) - 1;
    int64_t lo = 0, hi = last;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (cache[static_cast<size_t>(mid)] == cache.back() - (last - mid))
        hi = mid;
      else
        lo = mid + 1;
    }
    return static_cast<size_t>(lo);
  }

  bool batched_ = false;  // a block of steps at a time: AVX2, kv heads of 4
  OutputBatch batch_;
  std::vector<const float*> batch_quads_;
  std::vector<std::vector<double>> run_sums_;  // run_partials' scratch: per head, one run's sum
  std::vector<double*> run_out_;
  std::vector<double> run_partials_;  // a batched step's run sums: [head][channel]
  std::vector<const float*> shared_rows_;
  std::vector<double*> shared_out_;
  std::vector<double> shared_weights_;
};

}  // namespace kvsim
