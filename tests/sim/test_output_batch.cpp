// Output error a block of steps at a time (sim/core/output_batch.hpp) gives the per-step sums
// bit for bit: the kernel by hand, and the engine's batched path against its per-step path
// and the direct definition.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "../../sim/core/output_batch.hpp"
#include "../../sim/core/value_sums.hpp"
#include "hand_cases.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/attention_source.hpp"

namespace {

using hand::random_rows;
uint32_t next(uint32_t& state) { return hand::next_random(state); }

std::vector<float> random_values(size_t count, uint32_t state) {
  std::vector<float> values(count);
  for (float& v : values) v = static_cast<float>(next(state) >> 8) / static_cast<float>(1u << 24) - 0.5f;
  return values;
}

}  // namespace

#if defined(__AVX2__) && defined(__FMA__)
namespace {

// 16 heads on the 4 kv heads `values` (4 each): their 4 cache groups, then the layer-wide
// group of all 16.
std::vector<kvsim::CacheGroup> four_kv_groups_and_the_layer(const std::vector<std::vector<float>>& values, int d) {
  std::vector<kvsim::CacheGroup> groups(5);
  for (int g = 0; g < 5; ++g) {
    for (int h = g < 4 ? 4 * g : 0; h < (g < 4 ? 4 * g + 4 : 16); ++h) {
      groups[static_cast<size_t>(g)].heads.push_back(h);
      groups[static_cast<size_t>(g)].values.push_back(values[static_cast<size_t>(h / 4)].data());
    }
    groups[static_cast<size_t>(g)].head_dim = d;
    groups[static_cast<size_t>(g)].seed = kvsim::cache_group_seed(0, 0, g);
  }
  return groups;
}

}  // namespace

TEST(OutputBatch, ProductByHand) {
  // One head's weights 1, 2, 0.5 (0 for the other three) at positions 2, 0, 1 of values
  // v_i[c] = 10 i + c: out[c] = 1 (20 + c) + 2 c + 0.5 (10 + c) = 25 + 3.5 c; head_dim 24
  // (blocks of 12, 8 and 4 channels).
  const size_t d = 24;
  std::vector<float> values(3 * d);
  for (size_t i = 0; i < 3; ++i)
    for (size_t c = 0; c < d; ++c) values[i * d + c] = static_cast<float>(10 * i + c);
  const std::vector<int32_t> positions = {2, 0, 1};
  std::vector<double> weights(4 * positions.size(), 0.0);
  weights[0] = 1, weights[4] = 2, weights[8] = 0.5;  // head 0
  std::vector<double> out(4 * d, 0.0), packed;
  const double* weight_rows[1] = {weights.data()};
  double* out_rows[1] = {out.data()};
  kvsim::batched_value_sums(weight_rows, positions, values.data(), d, out_rows, packed);
  for (size_t c = 0; c < d; ++c) {
    EXPECT_EQ(out[c], 25 + 3.5 * static_cast<double>(c)) << "channel " << c;
    for (size_t k = 1; k < 4; ++k) EXPECT_EQ(out[k * d + c], 0.0);
  }
}

TEST(OutputBatch, ProductEqualsThePerStepSums) {
  // Three steps of four heads over 300 positions (tiles of 128 and a tail), some weights 0 (a
  // position a step does not hold): each step's sums equal shared_weighted_value_sums over
  // the positions it holds, bit for bit, for head_dim 20, 24, 28 and 32 (with AVX-512, blocks of 16).
  for (size_t d : {20, 24, 28, 32}) {
    const size_t n = 300, steps = 3;
    const auto values = random_values(n * d, 11);
    std::vector<int32_t> positions(n);
    for (size_t j = 0; j < n; ++j) positions[j] = static_cast<int32_t>((j * 7) % n);
    std::vector<std::vector<float>> rows(steps * 4, std::vector<float>(n));
    uint32_t state = 5;
    for (auto& row : rows)
      for (float& a : row) a = static_cast<float>(next(state) >> 8) / static_cast<float>(1u << 24);
    std::vector<std::vector<double>> weights(steps), out(steps, std::vector<double>(4 * d, 0.0));
    std::vector<std::vector<int32_t>> held(steps);
    for (size_t s = 0; s < steps; ++s)
      for (size_t j = 0; j < n; ++j) {
        const bool holds = (j + s) % 5 != 0;
        if (holds) held[s].push_back(positions[j]);
        for (size_t k = 0; k < 4; ++k)
          weights[s].push_back(holds ? rows[s * 4 + k][static_cast<size_t>(positions[j])] : 0.0);
      }
    std::vector<double> packed, tile_weights(steps * 4 * kvsim::kBatchTile);
    for (size_t begin = 0; begin < n; begin += kvsim::kBatchTile) {
      const size_t count = std::min(kvsim::kBatchTile, n - begin);
      std::vector<const double*> weight_rows;
      std::vector<double*> out_rows;
      for (size_t s = 0; s < steps; ++s) {
        weight_rows.push_back(weights[s].data() + 4 * begin);
        out_rows.push_back(out[s].data());
      }
      kvsim::batched_value_sums(weight_rows, std::span<const int32_t>(positions.data() + begin, count), values.data(),
                                d, out_rows, packed);
    }
    for (size_t s = 0; s < steps; ++s) {
      const float* step_rows[4] = {rows[s * 4].data(), rows[s * 4 + 1].data(), rows[s * 4 + 2].data(),
                                   rows[s * 4 + 3].data()};
      std::vector<double> direct(4 * d);
      double* direct_rows[4] = {direct.data(), direct.data() + d, direct.data() + 2 * d, direct.data() + 3 * d};
      std::vector<double> scratch;
      kvsim::shared_weighted_value_sums(step_rows, 4, held[s], values.data(), d, direct_rows, scratch);
      EXPECT_EQ(out[s], direct) << "head_dim " << d << " step " << s;
    }
  }
}

TEST(OutputBatch, Avx512ProductEqualsAvx2) {
  // Where the CPU has AVX-512, head dims that are multiples of 16 take 16-channel blocks of
  // 512-bit vectors: every sum must equal the AVX2 blocks' bit for bit (the same chain of
  // fused multiply-adds per head and channel), over tiles with 0 weights and a tail, five
  // steps: two pairs (the 512-bit kernel takes two steps per pass) and one alone.
  if (!kvsim::cpu_has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512: only the AVX2 path runs here";
  for (size_t d : {16, 64, 128}) {
    const size_t n = 200, steps = 5;
    const auto values = random_values(n * d, 17);
    std::vector<int32_t> positions(n);
    for (size_t j = 0; j < n; ++j) positions[j] = static_cast<int32_t>((j * 13) % n);
    std::vector<std::vector<double>> weights(steps, std::vector<double>(4 * n));
    uint32_t state = 9;
    for (auto& row : weights)
      for (size_t i = 0; i < row.size(); ++i)
        row[i] = i % 7 == 0 ? 0.0 : static_cast<double>(next(state) >> 8) / static_cast<double>(1u << 24);
    std::vector<std::vector<double>> wide(steps, std::vector<double>(4 * d, 0.0)), narrow = wide;
    std::vector<double> packed;
    for (size_t begin = 0; begin < n; begin += kvsim::kBatchTile) {
      const size_t count = std::min(kvsim::kBatchTile, n - begin);
      std::vector<const double*> weight_rows;
      std::vector<double*> wide_rows, narrow_rows;
      for (size_t s = 0; s < steps; ++s) {
        weight_rows.push_back(weights[s].data() + 4 * begin);
        wide_rows.push_back(wide[s].data());
        narrow_rows.push_back(narrow[s].data());
      }
      const std::span<const int32_t> tile(positions.data() + begin, count);
      kvsim::batched_value_sums(weight_rows, tile, values.data(), d, wide_rows, packed, true);
      kvsim::batched_value_sums(weight_rows, tile, values.data(), d, narrow_rows, packed, false);
    }
    for (size_t s = 0; s < steps; ++s) EXPECT_EQ(wide[s], narrow[s]) << "head_dim " << d << " step " << s;
  }
}

TEST(OutputBatch, SharedHeadsEqualOneHeadAtATime) {
  // o_t's pass sums the rows sharing values at once: four heads (with AVX-512, where the CPU
  // has it, in blocks of 32 channels, then 16), or eight (two steps of four heads; 16
  // channels at a time where d allows). Each row's sums must equal weighted_value_sum's for
  // that row alone, bit for bit, with both paths, from zero and continuing from earlier sums.
  for (size_t count : {4, 8})
    for (size_t d : {16, 20, 48, 128}) {
      const size_t n = 150;
      const auto values = random_values(n * d, 23);
      std::vector<std::vector<float>> rows(count, std::vector<float>(n));
      uint32_t state = 31;
      for (auto& row : rows)
        for (float& a : row) a = static_cast<float>(next(state) >> 8) / static_cast<float>(1u << 24);
      std::vector<int32_t> positions;
      for (size_t j = 0; j < n; j += 1 + j % 3) positions.push_back(static_cast<int32_t>(j));
      std::vector<const float*> row_pointers;
      for (const auto& row : rows) row_pointers.push_back(row.data());
      for (bool accumulate : {false, true})
        for (bool wide : {false, true}) {
          std::vector<double> start(count * d);
          const auto seeds = random_values(count * d, 41);
          for (size_t i = 0; i < start.size(); ++i) start[i] = accumulate ? seeds[i] : 0.0;
          std::vector<double> together = start, alone = start, scratch;
          std::vector<double*> together_rows;
          for (size_t k = 0; k < count; ++k) together_rows.push_back(together.data() + k * d);
          kvsim::shared_weighted_value_sums(row_pointers.data(), count, positions, values.data(), d,
                                            together_rows.data(), scratch, accumulate, wide);
          for (size_t k = 0; k < count; ++k)
            kvsim::weighted_value_sum(rows[k].data(), positions, values.data(), d, alone.data() + k * d, accumulate);
          EXPECT_EQ(together, alone) << count << " rows, head_dim " << d << (accumulate ? ", continued" : "")
                                     << (wide ? ", wide" : "");
        }
    }
}

TEST(OutputBatch, FourErrorsAtOnceEqualOneAtATime) {
  // relative_errors puts four heads in the lanes of a vector: each must equal the scalar
  // definition |o - p / m| / |o| computed alone, with and without the complement.
  const size_t d = 16;
  const auto numbers = random_values(8 * d, 3);
  std::vector<std::vector<double>> full(4), sums(4);
  for (size_t k = 0; k < 4; ++k)
    for (size_t c = 0; c < d; ++c) {
      full[k].push_back(numbers[k * d + c]);
      sums[k].push_back(numbers[(4 + k) * d + c]);
    }
  full[3].assign(d, 0.0);  // |o| = 0: 1 when the approximation is not 0
  const double mass[4] = {0.9, 0.5, 0.25, 1.0};
  for (bool complement : {false, true}) {
    auto copy = sums;
    const double* full_rows[4] = {full[0].data(), full[1].data(), full[2].data(), full[3].data()};
    double* sum_rows[4] = {copy[0].data(), copy[1].data(), copy[2].data(), copy[3].data()};
    float errors[4];
    kvsim::relative_errors(full_rows, sum_rows, mass, d, complement, errors);
    for (size_t k = 0; k < 4; ++k) {
      double difference = 0, norm = 0;
      for (size_t c = 0; c < d; ++c) {
        const double partial = complement ? full[k][c] - sums[k][c] : sums[k][c];
        const double x = full[k][c] - partial / mass[k];
        difference = std::fma(x, x, difference);
        norm = std::fma(full[k][c], full[k][c], norm);
      }
      const float expected =
          norm > 0 ? static_cast<float>(std::sqrt(difference / norm)) : (difference > 0 ? 1.0f : 0.0f);
      EXPECT_EQ(errors[k], expected) << "head " << k << (complement ? " complement" : "");
    }
  }
}
#endif

TEST(OutputBatch, BatchedStepsEqualThePerStepPath) {
  // 16 heads on 4 kv heads (groups of 4, and the layer-wide group of all 16), 300 tokens
  // (row blocks of 64, batches cut by their size and by the switch from cached to evicted
  // sums), head_dim 20 and 28, every budgeted policy at budgets where the cache is shorter
  // than its complement, longer, and both in turn: the output errors equal those of the
  // per-step path (interleave off) within 1e-6 relative (bit for bit but where a long last run
  // of the cache, h2o's recent half, is summed from o_t's checkpoints: to rounding), the
  // retention bit for bit, and the direct computation within 1e-6.
  const int n = 300, n_heads = 16;
  const auto heads = random_rows(n_heads, n, 77);
  for (int d : {20, 28}) {
    std::vector<std::vector<float>> values;
    for (int v = 0; v < 4; ++v) values.push_back(random_values(static_cast<size_t>(n * d), 100 + v));
    std::vector<kvsim::CacheGroup> groups = four_kv_groups_and_the_layer(values, d);
    // Policies that read keys or queries read the values: any stored floats will do here
    // (and any RoPE for those that un-rotate them).
    std::vector<std::vector<float>> queries;
    for (int h = 0; h < n_heads; ++h) queries.push_back(values[static_cast<size_t>(h / 4)]);
    kvtrace::RopeMeta rope;
    rope.theta = 10000;
    rope.pairing = "half";
    kvsim::attach_group_tensors(groups, n_heads, 4, {values, values, queries, d, rope});
    for (const kvsim::PolicyInfo& info : kvsim::policies()) {
      if (!info.budgeted || info.engine == kvsim::Engine::bound) continue;
      SCOPED_TRACE(info.name + " head_dim " + std::to_string(d));
      std::map<std::string, std::string> params;
      for (const auto& param : info.params)
        if (param.name == "sinks") params["sinks"] = "4";
      const kvsim::PolicyChoice policy = kvsim::choose_policy(info.name, params);
      std::vector<kvsim::SimulationSpec> specs;
      const auto [first, last] = kvsim::policy_groups(*policy.info, 4);
      for (int64_t budget : {40, 150, 250})
        for (int g = first; g < last; ++g) {
          std::shared_ptr<void> state;
          if (policy.info->make_sequence_state) state = policy.info->make_sequence_state(policy.params, 1, n);
          specs.push_back(kvsim::simulation_spec(policy, budget, g, 0, state));
        }
      kvsim::EngineOptions options;
      options.output_error = true;
      kvtrace::PackedAttentionSource source_a(n, hand::pack(heads)), source_b(n, hand::pack(heads));
      const auto batched = kvsim::run_engine(source_a, groups, specs, options);
      options.interleave = false;
      const auto per_step = kvsim::run_engine(source_b, groups, specs, options);
      ASSERT_EQ(batched.size(), per_step.size());
      for (size_t s = 0; s < specs.size(); ++s) {
        ASSERT_EQ(batched[s].output_error.size(), per_step[s].output_error.size());
        for (size_t i = 0; i < batched[s].output_error.size(); ++i) {
          const double a = batched[s].output_error[i], b = per_step[s].output_error[i];
          ASSERT_NEAR(a, b, 1e-6 * std::max(std::abs(a), std::abs(b))) << "simulation " << s << " value " << i;
        }
        EXPECT_EQ(batched[s].retention, per_step[s].retention) << "simulation " << s;
      }
      // The direct definition, for the first head of each budget's first simulation, every
      // 13th step. A merged cache's error reads its merged values, not the stored ones
      // (test_merging_policies.cpp works those by hand).
      if (policy.info->merges) continue;
      for (size_t s = 0; s < specs.size(); s += static_cast<size_t>(last - first)) {
        const auto& group = groups[static_cast<size_t>(specs[s].group)];
        std::vector<std::vector<double>> v(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(d)));
        for (int i = 0; i < n; ++i)
          for (int c = 0; c < d; ++c)
            v[static_cast<size_t>(i)][static_cast<size_t>(c)] =
                group.values[0][static_cast<size_t>(i) * static_cast<size_t>(d) + static_cast<size_t>(c)];
        for (int64_t t = 0; t < n; t += 13) {
          const double expected =
              hand::direct_error(heads[static_cast<size_t>(group.heads[0])], v, t, hand::attended(batched[s], t));
          EXPECT_NEAR(hand::output_error(batched[s], 0, t), expected, 1e-6 * std::max(1.0, expected))
              << "simulation " << s << " step " << t;
        }
      }
    }
  }
}

TEST(OutputBatch, PoliciesRunTogetherGiveWhatEachGivesAlone) {
  // The groups holding a head share its o_t (computed once per head and step, two steps per
  // pass over V where the row block allows) and the checkpoints that runs (recent,
  // streaming, h2o's recent half) are summed from, which they use once the shorter side
  // holds more than 128 positions per run: 700 tokens. Policies of the layer-wide group and
  // of the kv groups run together must give what each gives alone, bit for bit (head_dim 32:
  // the 512-bit kernels where the CPU has them; 20: the others).
  const int n = 700, n_heads = 16;
  const auto heads = random_rows(n_heads, n, 91);
  for (int d : {20, 32}) {
    SCOPED_TRACE("head_dim " + std::to_string(d));
    std::vector<std::vector<float>> values;
    for (int v = 0; v < 4; ++v) values.push_back(random_values(static_cast<size_t>(n * d), 200 + v));
    std::vector<kvsim::CacheGroup> groups = four_kv_groups_and_the_layer(values, d);
    std::vector<kvsim::SimulationSpec> together;
    std::vector<std::vector<kvsim::SimulationSpec>> alone;
    for (const char* name : {"tova", "recent", "streaming", "h2o"}) {
      const kvsim::PolicyChoice policy = kvsim::choose_policy(name);
      alone.emplace_back();
      const auto [first, last] = kvsim::policy_groups(*policy.info, 4);
      for (int64_t budget : {150, 350})
        for (int g = first; g < last; ++g)
          alone.back().push_back(kvsim::simulation_spec(policy, budget, g, 0, nullptr));
      together.insert(together.end(), alone.back().begin(), alone.back().end());
    }
    kvsim::EngineOptions options;
    options.output_error = true;
    kvtrace::PackedAttentionSource source(n, hand::pack(heads));
    const auto all = kvsim::run_engine(source, groups, together, options);
    size_t at = 0;
    for (const auto& specs : alone) {
      kvtrace::PackedAttentionSource own(n, hand::pack(heads));
      const auto each = kvsim::run_engine(own, groups, specs, options);
      for (size_t s = 0; s < specs.size(); ++s, ++at) {
        EXPECT_EQ(all[at].output_error, each[s].output_error) << "simulation " << at;
        EXPECT_EQ(all[at].retention, each[s].retention) << "simulation " << at;
      }
    }
  }
}
