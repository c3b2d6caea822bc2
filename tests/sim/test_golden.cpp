// The golden case (tests/data/replay-small.json): 1 layer,
// 2 heads, 10 tokens, stream mode; retention and cache after every step for several
// policies, computed by an implementation of docs/semantics.md independent of kvsim.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "../support/rows.hpp"

namespace {

nlohmann::json golden() {
  std::ifstream in(KVSIM_TEST_DATA "/replay-small.json");
  return nlohmann::json::parse(in);
}

std::vector<std::vector<float>> golden_rows(const nlohmann::json& data) {
  std::vector<std::vector<float>> packed;
  for (const auto& head : data["attn"]) {
    std::vector<float> rows;
    for (double a : head) rows.push_back(static_cast<float>(a));
    packed.push_back(std::move(rows));
  }
  return packed;
}

}  // namespace

TEST(Golden, EveryCaseMatchesRetentionAndCache) {
  const nlohmann::json data = golden();
  const int64_t n = data["n_tokens"];
  const auto packed = golden_rows(data);
  int checked = 0;
  for (const auto& c : data["cases"]) {
    std::map<std::string, std::string> params;
    for (const auto& [key, value] : c["params"].items()) params[key] = value.dump();
    const std::string policy = c["policy"];
    const int64_t budget = c["budget"];
    const auto records = kvtest::replay(packed, n, /*n_kv_heads=*/2, policy, budget, params);
    SCOPED_TRACE(policy + " B=" + std::to_string(budget) + " " + c["params"].dump());
    for (int h = 0; h < 2; ++h) {
      // Head h's record: its own group, or the one layer-wide group (TOVA).
      const kvsim::GroupRecord& record = records.size() == 1 ? records[0] : records[static_cast<size_t>(h)];
      const int k = records.size() == 1 ? h : 0;
      for (int64_t t = 0; t < n; ++t) {
        const double expected = c["retention"][h][t];
        EXPECT_NEAR(record.result.retention[static_cast<size_t>(k * n + t)], expected, 1.5e-6)
            << "head " << h << " step " << t;
        if (c.contains("cache_after")) {
          const std::vector<int> cache = c["cache_after"][h][t];
          EXPECT_EQ(kvtest::cache_after(record.result, t), cache) << "head " << h << " step " << t;
        }
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, 9);
}
