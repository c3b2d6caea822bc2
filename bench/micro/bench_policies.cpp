// One policy's step: kvsim::replay_rows over rows held in memory (no file, no row
// computation), one GQA group of 4 query heads sharing a kv head (Llama-3.1-8B's ratio), at
// a budget of 20% of the sequence. An iteration replays the whole sequence; time/step is the
// time of one step of the group: append the token, the retention of the 4 heads over the
// cache, the observed row, the policy's observe and evict. `full` never evicts, so its cache
// (and its retention sum) covers the whole row; `recent` and `streaming` take their mass from
// the row's prefix sums (O(t) per head; a sweep shares them between its cells).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kvsim/replay/replay.hpp"
#include "kvtrace/attention_source.hpp"

namespace {

constexpr int kHeads = 4;
constexpr int kHeadDim = 64;

// Packed causal rows of kHeads query heads over one key head: random q/k plus a sink at
// position 0 and a few heavy positions, so the rows are peaked as real ones are.
const std::vector<std::vector<float>>& packed_rows(int64_t n) {
  static std::map<int64_t, std::vector<std::vector<float>>> cache;
  auto found = cache.find(n);
  if (found != cache.end()) return found->second;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto size = static_cast<size_t>(n) * kHeadDim;
  std::vector<float> keys(size);
  for (auto& x : keys) x = normal(rng);
  std::vector<float> direction(kHeadDim);
  for (auto& x : direction) x = normal(rng);
  auto heavy = [&](int64_t i) { return i == 0 || i % 97 == 13; };
  for (int64_t i = 0; i < n; ++i)
    if (heavy(i))
      for (int c = 0; c < kHeadDim; ++c)
        keys[static_cast<size_t>(i) * kHeadDim + c] += 2.0f * direction[static_cast<size_t>(c)];
  std::vector<std::vector<float>> queries(kHeads, std::vector<float>(size));
  for (auto& q : queries)
    for (int64_t t = 0; t < n; ++t)
      for (int c = 0; c < kHeadDim; ++c)
        q[static_cast<size_t>(t) * kHeadDim + c] = normal(rng) + 1.5f * direction[static_cast<size_t>(c)];
  kvtrace::SoftmaxOptions options;
  options.scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
  kvtrace::QKAttentionSource source(n, kHeadDim, {queries.begin(), queries.end()}, {keys}, std::vector<int>(kHeads, 0),
                                    options);
  std::vector<std::vector<float>> packed(kHeads, std::vector<float>(static_cast<size_t>(n * (n + 1) / 2)));
  kvtrace::RowBlock block;
  for (int64_t first = 0; first < n; first += kvtrace::kRowBlockSize) {
    const int64_t count = std::min(kvtrace::kRowBlockSize, n - first);
    source.rows(first, count, block);
    for (int h = 0; h < kHeads; ++h)
      for (int64_t t = first; t < first + count; ++t)
        std::copy(block.row(h, t), block.row(h, t) + t + 1, packed[static_cast<size_t>(h)].data() + t * (t + 1) / 2);
  }
  return cache.emplace(n, std::move(packed)).first->second;
}

void BM_PolicyStep(benchmark::State& state, const std::string& policy_name) {
  const int64_t n = state.range(0);
  const int64_t budget = std::max<int64_t>(1, n * state.range(1) / 100);
  const auto& packed = packed_rows(n);
  const kvsim::PolicyChoice policy = kvsim::choose_policy(policy_name);
  const kvsim::EngineOptions options;
  for (auto _ : state) {
    state.PauseTiming();
    kvtrace::PackedAttentionSource source(n, packed);  // a copy of the rows, outside the timing
    state.ResumeTiming();
    auto records = kvsim::replay_rows(source, 1, policy, budget, options);
    benchmark::DoNotOptimize(records.data());
  }
  state.counters["time/step"] = benchmark::Counter(
      static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetLabel(policy_name + ", B=" + std::to_string(budget));
}

const int kRegistered = [] {
  for (const char* name : {"full", "scissorhands", "h2o", "streaming", "tova", "recent", "snapkv", "oracle"})
    benchmark::RegisterBenchmark((std::string("BM_PolicyStep/") + name).c_str(), BM_PolicyStep, std::string(name))
        ->ArgNames({"tokens", "budget%"})
        ->Args({1024, 20})
        ->Args({4096, 20})
        ->Unit(benchmark::kMillisecond);
  return 0;
}();

}  // namespace
