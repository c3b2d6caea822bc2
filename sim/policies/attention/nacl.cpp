// nacl: NACL (Chen et al., ACL 2024) as KVCache-Factory writes it (Zefan-Cai/KVCache-Factory
// at c97f9d7, pyramidkv/nacl.py, select_nacl_tokens L109-189, proxy rows L15-48 and L51-76,
// sampling L87-106). Proxy-token eviction: a token's score is the sum of â over the last P
// observed rows (the proxy tokens, `suffix` mode) and the P newest positions are kept (P
// shrinks to B when B <= P); of the other candidates the top ones are kept. Random eviction:
// of the budget left after the proxies, `random` (R) places go to candidates outside the top,
// drawn without replacement with weights softmax(score / T) (T = 0: uniform). Over a cache of
// m with excess e and c candidates: keep c - e of them, min(R, c - e) by the draw and the rest
// by score; the candidates neither kept are evicted. The draws come from the cache group's
// own seeded stream (as random's), in the exponential-race form of sampling without
// replacement: candidate i draws u_i and ranks by ln(-ln u_i) - score_i / T, the lowest kept.
// Defaults are the authors' (random_budget 0, random_temperature 1); P is 32, the window of
// every KVCache-Factory method, since select_nacl_proxy_indices has no default.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include "kvsim/policies/scoring.hpp"
#include "../select.hpp"

namespace kvsim {

PolicyInfo snapkv_policy();

namespace {

// The proxy scores are snapkv's with a kernel of 1 (no pooling) and a window of P: the sum of
// the last P rows, the P newest kept. Not a ScoringPolicy itself: with R > 0 its victims are
// drawn, not the lowest scores.
class Nacl final : public Policy {
 public:
  explicit Nacl(const Params& params)
      : random_(params.integer("random")),
        temperature_(params.real("temperature")),
        seed_(static_cast<uint64_t>(params.integer("seed"))) {
    const PolicyInfo snapkv = snapkv_policy();
    proxy_ =
        snapkv.make(resolve_params(snapkv, {{"window", std::to_string(params.integer("proxy"))}, {"kernel", "1"}}));
  }

  void reset(const GroupContext& group) override {
    state_ = seed_ ^ (group.seed * 0x9e3779b97f4a7c15ull);
    proxy_->reset(group);
  }
  bool adopt(const Policy& other) override {
    const auto& from = static_cast<const Nacl&>(other);
    state_ = from.state_;
    return proxy_->adopt(*from.proxy_);
  }
  bool pin(std::span<const uint8_t> pinned) override {
    pinned_ = pinned;
    return proxy_->pin(pinned);
  }
  void observe(int64_t step, std::span<const int32_t> cache, std::span<const float> attention) override {
    proxy_->observe(step, cache, attention);
  }

  void evict(int64_t step, std::span<const int32_t> cache, int64_t excess, bool compress,
             std::vector<int32_t>& victims) override {
    if (excess <= 0) return;
    proxy_->scores(step, cache, scores_);
    candidates_.clear();  // (score, index) of the candidates: outside the proxies, not pinned
    for (size_t j = 0; j < cache.size(); ++j) {
      if (std::isnan(scores_[j])) throw NanScore();
      if (scores_[j] != std::numeric_limits<double>::infinity() &&
          (pinned_.empty() || pinned_[static_cast<size_t>(cache[j])] == 0))
        candidates_.emplace_back(scores_[j], j);
    }
    const auto count = static_cast<int64_t>(candidates_.size());
    const int64_t drawn = std::min(random_, std::max<int64_t>(0, count - excess));
    if (drawn == 0) return proxy_->evict(step, cache, excess, compress, victims);  // the lowest scores
    // The top count - excess - drawn are kept; the rest, ranked by (score, position), go to the draw.
    std::sort(candidates_.begin(), candidates_.end());
    candidates_.resize(static_cast<size_t>(excess + drawn));
    std::sort(candidates_.begin(), candidates_.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    const double top = std::max_element(candidates_.begin(), candidates_.end())->first;
    for (auto& [score, index] : candidates_) {  // in cache order: one draw each
      const double race = std::log(-std::log(uniform()));
      score = temperature_ > 0 ? race - (score - top) / temperature_ : race;
    }
    // The excess latest in the race are evicted (ties: the lower position).
    std::stable_sort(candidates_.begin(), candidates_.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    indices_.clear();
    for (int64_t k = 0; k < excess; ++k) indices_.push_back(candidates_[static_cast<size_t>(k)].second);
    std::sort(indices_.begin(), indices_.end());
    for (size_t index : indices_) victims.push_back(cache[index]);
    proxy_->forget(cache, indices_);
  }

 private:
  uint64_t next() {  // splitmix64, as random's
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }  // in (0, 1)

  int64_t random_;
  double temperature_;
  uint64_t seed_, state_ = 0;
  std::unique_ptr<Policy> proxy_;
  std::span<const uint8_t> pinned_;
  std::vector<double> scores_;
  std::vector<std::pair<double, size_t>> candidates_;
  std::vector<size_t> indices_;
};

}  // namespace

PolicyInfo nacl_policy() {
  PolicyInfo info;
  info.name = "nacl";
  info.summary = "NACL: proxy-token eviction (sum of the last 32 rows, keep them) plus random eviction";
  info.params = {
      {"proxy",
       ParamType::integer,
       "32",
       "proxy tokens P: the last P rows score, the P newest positions kept",
       1,
       1e9,
       {}},
      {"random",
       ParamType::integer,
       "0",
       "random budget R: places drawn among the candidates outside the top",
       0,
       1e9,
       {}},
      {"temperature", ParamType::real, "1", "softmax temperature of the draw's weights (0: uniform)", 0, 1e9, {}},
      {"seed", ParamType::integer, "0", "random seed", 0, 9.2e18, {}},
  };
  info.make = [](const Params& params) { return std::make_unique<Nacl>(params); };
  return info;
}

}  // namespace kvsim
