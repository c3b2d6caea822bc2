#pragma once
// Helpers for engine tests: attention rows written by hand, and the cache a result implies.
#include <cstdint>
#include <vector>

#include "kvsim/core/engine.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/attention_source.hpp"

namespace kvtest {

// Builds packed rows from full rows given per head as rows[h][t] = {a_t[0..t]}.
inline std::vector<std::vector<float>> pack(const std::vector<std::vector<std::vector<double>>>& rows) {
  std::vector<std::vector<float>> out;
  for (const auto& head : rows) {
    std::vector<float> packed;
    for (const auto& row : head)
      for (double a : row) packed.push_back(static_cast<float>(a));
    out.push_back(std::move(packed));
  }
  return out;
}

// The positions cached after step t (after that step's eviction).
inline std::vector<int> cache_after(const kvsim::SimulationResult& result, int64_t t) {
  std::vector<int> out;
  for (int64_t i = 0; i <= t; ++i) {
    const int32_t evicted = result.eviction_step[static_cast<size_t>(i)];
    if (evicted < 0 || evicted > t) out.push_back(static_cast<int>(i));
  }
  return out;
}

inline std::vector<kvsim::GroupRecord> replay(const std::vector<std::vector<float>>& packed, int64_t n, int n_kv_heads,
                                              const std::string& policy, int64_t budget,
                                              const std::map<std::string, std::string>& params = {},
                                              kvsim::Mode mode = kvsim::Mode::stream, int64_t prompt_len = 0,
                                              const std::vector<std::vector<float>>& values = {}, int head_dim = 0) {
  kvtrace::PackedAttentionSource source(n, packed);
  kvsim::EngineOptions options;
  options.mode = mode;
  options.prompt_len = prompt_len;
  return kvsim::replay_rows(source, n_kv_heads, kvsim::choose_policy(policy, params), budget, options, values,
                            head_dim);
}

}  // namespace kvtest
