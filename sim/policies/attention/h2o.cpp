// h2o: Heavy-Hitter Oracle (Zhang et al.). A token's score is the sum of â it received over
// the steps it has been cached, its own step included; the floor(B/2) most recent cached
// tokens are protected (heavy:recent = 1:1); evict the lowest score among the rest.
#include <algorithm>
#include <limits>

#include "kvsim/core/policy.hpp"
#include "../select.hpp"

namespace kvsim {
namespace {

constexpr double kProtected = std::numeric_limits<double>::infinity();

class H2O final : public Policy {
 public:
  void reset(const GroupContext& group) override {
    score_.assign(static_cast<size_t>(group.n_tokens), 0.0);
    size_ = 0;
    protected_recent_ = group.budget / 2;
  }
  bool adopt(const Policy& other) override {  // protected_recent_ stays this budget's
    const auto& from = static_cast<const H2O&>(other);
    score_ = from.score_;
    size_ = from.size_;
    return true;
  }
  void observe(int64_t, std::span<const int32_t>, std::span<const float> attention) override {
    score_[size_++] = 0.0;  // the new token
    double* score = score_.data();
    const size_t size = size_;
    for (size_t j = 0; j < size; ++j) score[j] += attention[j];
  }
  void evict(int64_t, std::span<const int32_t> cache, int64_t excess, bool, std::vector<int32_t>& victims) override {
    if (excess <= 0) return;
    const auto open = static_cast<int64_t>(cache.size()) - std::min<int64_t>(protected_recent_, cache.size());
    std::span<const int32_t> candidates = cache.first(static_cast<size_t>(open));
    evict_lowest(candidates, std::span<const double>(score_.data(), candidates.size()), excess, victims, &erased_);
    forget(cache, erased_);
  }
  bool scores(int64_t, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    const auto open = cache.size() - std::min<size_t>(static_cast<size_t>(protected_recent_), cache.size());
    scores.assign(score_.begin(), score_.begin() + static_cast<std::ptrdiff_t>(cache.size()));
    std::fill(scores.begin() + static_cast<std::ptrdiff_t>(open), scores.end(), kProtected);
    return true;
  }
  void forget(std::span<const int32_t>, std::span<const size_t> indices) override {
    erase_indices(score_.data(), size_, indices);
    size_ -= indices.size();
  }

 private:
  std::vector<double> score_;  // in cache order (select.hpp)
  size_t size_ = 0;
  std::vector<size_t> erased_;
  int64_t protected_recent_ = 0;
};

}  // namespace

PolicyInfo h2o_policy() {
  PolicyInfo info;
  info.name = "h2o";
  info.summary = "H2O: accumulated attention, floor(B/2) most recent protected, evict lowest";
  info.make = [](const Params&) { return std::make_unique<H2O>(); };
  return info;
}

}  // namespace kvsim
