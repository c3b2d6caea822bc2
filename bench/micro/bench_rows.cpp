// Row computation: the work every replay does once per (layer, step, head) before any policy.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kvtrace/attention_source.hpp"

namespace {

std::vector<float> gaussian(size_t count, uint64_t seed, float sigma = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> out(count);
  for (auto& x : out) x = normal(rng);
  return out;
}

// QKAttentionSource::rows for the last block of kRowBlockSize steps of a sequence of
// `width` tokens (rows of width - 64 .. width - 1 entries), one head: q.k GEMM + softmax.
void BM_QKRowsBlock(benchmark::State& state) {
  const int64_t width = state.range(0);
  const int head_dim = static_cast<int>(state.range(1));
  const auto size = static_cast<size_t>(width) * static_cast<size_t>(head_dim);
  kvtrace::SoftmaxOptions options;
  options.scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  kvtrace::QKAttentionSource source(width, head_dim, {gaussian(size, 1)}, {gaussian(size, 2)}, {0}, options);
  kvtrace::RowBlock block;
  const int64_t count = kvtrace::kRowBlockSize;
  const int64_t first = width - count;
  for (auto _ : state) {
    source.rows(first, count, block);
    benchmark::DoNotOptimize(block.data.data());
    benchmark::ClobberMemory();
  }
  // Entries produced per block: rows first..width-1 hold t + 1 entries each.
  const int64_t entries = count * first + count * (count + 1) / 2;
  state.counters["rows/s"] =
      benchmark::Counter(static_cast<double>(count), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["entries/s"] =
      benchmark::Counter(static_cast<double>(entries), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["time/row"] = benchmark::Counter(
      static_cast<double>(count), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_QKRowsBlock)
    ->ArgNames({"width", "head_dim"})
    ->Args({256, 48})
    ->Args({256, 128})
    ->Args({1024, 64})
    ->Args({1024, 128})
    ->Args({4096, 64})
    ->Args({4096, 128})
    ->Unit(benchmark::kMicrosecond);

// causal_softmax_row over t + 1 entries, in place: from the second call on it is the softmax
// of a row of probabilities, the same operations at the same cost as on logits.
void BM_CausalSoftmaxRow(benchmark::State& state) {
  const int64_t t = state.range(0) - 1;
  std::vector<float> row = gaussian(static_cast<size_t>(t + 1), 3, 3.0f);
  const kvtrace::SoftmaxOptions options;
  for (auto _ : state) {
    kvtrace::causal_softmax_row(row.data(), t, options);
    benchmark::DoNotOptimize(row.data());
    benchmark::ClobberMemory();
  }
  state.counters["entries/s"] =
      benchmark::Counter(static_cast<double>(t + 1), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_CausalSoftmaxRow)->ArgName("width")->Arg(256)->Arg(1024)->Arg(4096);

}  // namespace
