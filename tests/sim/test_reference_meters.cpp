// The accelerated meters (sim/core/fast_meters.hpp: the masses found from prefix sums, four
// lanes, quads and the evicted positions; output error from the complement, o_t's
// checkpoints and batches of steps) against their reference implementations
// (sim/core/reference_meters.hpp, EngineOptions::reference), for every registered policy in
// every mode of the engine. The caches are the same either way, so occupancy and the eviction
// steps must be equal; retention and output error add in other orders, so they agree to
// rounding, within 1e-6 relative (the values are floats: a few of their ulps).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hand_cases.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/attention_source.hpp"
#include "kvtrace/error.hpp"

namespace {

constexpr int kHeads = 8, kKvHeads = 2, kHeadDim = 16;

uint32_t next(uint32_t& state) { return hand::next_random(state); }

std::vector<hand::Rows> random_rows(int n, uint32_t state) { return hand::random_rows(kHeads, n, state); }

// A quantized cache's values: each rounded to a multiple of 1/16.
class RoundedValues final : public kvsim::StoredValues {
 public:
  explicit RoundedValues(const std::vector<float>& values) {
    for (float v : values) rounded_.push_back(std::round(v * 16.0f) / 16.0f);
  }
  std::span<const float> row(int64_t position, int64_t /*step*/) const override {
    return {rounded_.data() + position * kHeadDim, static_cast<size_t>(kHeadDim)};
  }

 private:
  std::vector<float> rounded_;
};

// One way of running the engine.
struct EngineRun {
  std::string name;
  std::function<void(kvsim::EngineOptions&)> set;
  int quantized = 0;  // 0: full precision; 1: a quantized view with stored values; 2: without
  bool sink = false;
};

// The per-step values of one run, per simulation (gathered from the sink's blocks with one).
struct Values {
  std::vector<std::vector<float>> retention, output_error;
  std::vector<std::vector<int32_t>> occupancy, eviction_step;
};

class Trace {
 public:
  explicit Trace(int n) : n_(n), truth_(random_rows(n, 77)), model_(random_rows(n, 78)) {
    for (int v = 0; v < kKvHeads; ++v) {
      uint32_t state = 300 + static_cast<uint32_t>(v);
      std::vector<float> values(static_cast<size_t>(n * kHeadDim));
      for (float& x : values) x = static_cast<float>(next(state) >> 8) / static_cast<float>(1u << 24) - 0.5f;
      values_.push_back(std::move(values));
    }
    for (const auto& v : values_) stored_.push_back(std::make_unique<RoundedValues>(v));
    for (int h = 0; h < kHeads; ++h) queries_.push_back(values_[static_cast<size_t>(h / (kHeads / kKvHeads))]);
    groups_ = kvsim::layer_cache_groups(kHeads, kKvHeads, 0, 0, values_, kHeadDim);
    kvtrace::RopeMeta rope;  // policies that read keys or queries: any stored floats will do
    rope.theta = 10000;
    rope.pairing = "half";
    kvsim::attach_group_tensors(groups_, kHeads, kKvHeads, {values_, values_, queries_, kHeadDim, rope});
  }

  Values run(const std::vector<kvsim::SimulationSpec>& specs, const EngineRun& run, bool reference) const {
    kvsim::EngineOptions options;
    options.output_error = true;
    options.reference = reference;
    run.set(options);
    Values out;
    const size_t n = specs.size();
    kvsim::StepSink sink = [&](const kvsim::StepBlock& block) {
      for (int64_t i = 0; i < block.count; ++i) {
        for (int k = 0; k < block.n_heads; ++k) {
          const size_t at = static_cast<size_t>(k) * block.stride + static_cast<size_t>(i);
          out.retention[block.simulation].push_back(block.retention[at]);
          out.output_error[block.simulation].push_back(block.output_error[at]);
        }
        out.occupancy[block.simulation].push_back(block.occupancy[i]);
      }
    };
    if (run.sink) {
      options.sink = &sink;
      out.retention.resize(n), out.output_error.resize(n), out.occupancy.resize(n), out.eviction_step.resize(n);
    }
    kvtrace::PackedAttentionSource source(n_, hand::pack(truth_)), model(n_, hand::pack(model_));
    std::vector<kvsim::QuantizedView> views;
    if (run.quantized > 0) {
      kvsim::QuantizedView view{&model, {}};
      if (run.quantized == 1)
        for (const auto& group : groups_) {
          view.values.emplace_back();
          for (int head : group.heads) view.values.back().push_back(stored_[static_cast<size_t>(head / 4)].get());
        }
      views.push_back(std::move(view));
    }
    std::vector<kvsim::SimulationSpec> quantized_specs = specs;
    for (auto& spec : quantized_specs) spec.quant = run.quantized > 0 ? 0 : -1;
    const kvsim::Lane lane{&source, groups_, quantized_specs, views};
    const auto results = std::move(kvsim::run_lockstep(std::span<const kvsim::Lane>(&lane, 1), options).front());
    if (run.sink) return out;
    for (const auto& result : results) {
      out.retention.push_back(result.retention);
      out.output_error.push_back(result.output_error);
      out.occupancy.push_back(result.occupancy);
      out.eviction_step.push_back(result.eviction_step);
    }
    return out;
  }

  int n() const { return n_; }

 private:
  int n_;
  std::vector<hand::Rows> truth_, model_;
  std::vector<std::vector<float>> values_, queries_;
  std::vector<std::unique_ptr<RoundedValues>> stored_;
  std::vector<kvsim::CacheGroup> groups_;
};

// One simulation of `policy` per budget and group of its.
std::vector<kvsim::SimulationSpec> specs_for(const kvsim::PolicyChoice& policy, const std::vector<int64_t>& budgets,
                                             int64_t n) {
  std::vector<kvsim::SimulationSpec> specs;
  const auto [first, last] = kvsim::policy_groups(*policy.info, kKvHeads);
  for (int64_t budget : budgets)
    for (int g = first; g < last; ++g) {
      std::shared_ptr<void> state;
      if (policy.info->make_sequence_state) state = policy.info->make_sequence_state(policy.params, 1, n);
      specs.push_back(kvsim::simulation_spec(policy, budget, g, 0, state));
    }
  return specs;
}

void expect_close(const std::vector<float>& fast, const std::vector<float>& reference, const std::string& what) {
  ASSERT_EQ(fast.size(), reference.size()) << what;
  for (size_t i = 0; i < fast.size(); ++i) {
    const double a = fast[i], b = reference[i];
    ASSERT_NEAR(a, b, 1e-6 * std::max(std::abs(a), std::abs(b))) << what << " value " << i;
  }
}

const std::vector<EngineRun>& runs() {
  static const std::vector<EngineRun> all = {
      {"stream", [](kvsim::EngineOptions&) {}},
      {"prefill", [](kvsim::EngineOptions& o) { o.mode = kvsim::Mode::prefill, o.prompt_len = 50; }},
      {"one head at a time", [](kvsim::EngineOptions& o) { o.interleave = false; }},
      {"aggregate max", [](kvsim::EngineOptions& o) { o.aggregate = kvsim::Aggregate::max; }},
      {"aggregate sum", [](kvsim::EngineOptions& o) { o.aggregate = kvsim::Aggregate::sum; }},
      {"sink", [](kvsim::EngineOptions&) {}, 0, true},
      {"prefill, sink", [](kvsim::EngineOptions& o) { o.mode = kvsim::Mode::prefill, o.prompt_len = 70; }, 0, true},
      {"quantized", [](kvsim::EngineOptions&) {}, 1},
      {"quantized rows, true values", [](kvsim::EngineOptions&) {}, 2},
      {"quantized, one head at a time", [](kvsim::EngineOptions& o) { o.interleave = false; }, 1},
      {"pages", [](kvsim::EngineOptions& o) { o.paging.page = 8; }},
      {"pages, prefill",
       [](kvsim::EngineOptions& o) { o.paging.page = 4, o.mode = kvsim::Mode::prefill, o.prompt_len = 60; }},
      {"head-adaptive", [](kvsim::EngineOptions& o) { o.head_floor = 0.3; }},
      {"head-adaptive, max", [](kvsim::EngineOptions& o) { o.head_floor = 0.5, o.aggregate = kvsim::Aggregate::max; }},
  };
  return all;
}

// Runs every registered policy (at its defaults, streaming's sinks at 4) at `budgets` both
// ways in each of `runs`, and compares. Returns how many policies each run took (page mode and
// head-adaptive budgets refuse some).
std::map<std::string, int> compare_every_policy(const Trace& trace, const std::vector<int64_t>& budgets,
                                                const std::vector<EngineRun>& runs) {
  std::map<std::string, int> ran;
  for (const kvsim::PolicyInfo& info : kvsim::policies()) {
    std::map<std::string, std::string> params;
    for (const auto& param : info.params)
      if (param.name == "sinks") params["sinks"] = "4";
    const kvsim::PolicyChoice policy = kvsim::choose_policy(info.name, params);
    const auto specs = specs_for(policy, budgets, trace.n());
    for (const EngineRun& run : runs) {
      SCOPED_TRACE(info.name + ", " + run.name);
      Values fast;
      try {
        fast = trace.run(specs, run, false);
      } catch (const kvtrace::InputError&) {  // a policy without scores in page mode, ...
        EXPECT_THROW(trace.run(specs, run, true), kvtrace::InputError);
        continue;
      }
      ++ran[run.name];
      const Values reference = trace.run(specs, run, true);
      EXPECT_EQ(fast.retention.size(), reference.retention.size());
      for (size_t s = 0; s < specs.size() && s < reference.retention.size(); ++s) {
        const std::string what = "simulation " + std::to_string(s);
        EXPECT_EQ(fast.occupancy[s], reference.occupancy[s]) << what;
        EXPECT_EQ(fast.eviction_step[s], reference.eviction_step[s]) << what;
        expect_close(fast.retention[s], reference.retention[s], what + " retention");
        expect_close(fast.output_error[s], reference.output_error[s], what + " output error");
      }
    }
  }
  return ran;
}

}  // namespace

TEST(ReferenceMeters, AcceleratedMetersAgreeForEveryPolicyAndMode) {
  // 140 tokens: three row blocks (batches cut at a block's end, o_t kept per block); budgets
  // where the cache is shorter than its complement and longer.
  const Trace trace(140);
  const auto ran = compare_every_policy(trace, {24, 90}, runs());
  for (const EngineRun& run : runs()) EXPECT_GE(ran.count(run.name) ? ran.at(run.name) : 0, 3) << run.name;
}

TEST(ReferenceMeters, LongCachesFromCheckpoints) {
  // 420 tokens, budgets 150 and 250: caches and complements long enough that runs of
  // consecutive positions (recent, streaming; h2o's recent half in a batch) are summed from
  // o_t's checkpoints.
  const Trace trace(420);
  const std::vector<EngineRun> long_runs(runs().begin(), runs().begin() + 3);  // stream, prefill, one at a time
  compare_every_policy(trace, {150, 250}, long_runs);
}
