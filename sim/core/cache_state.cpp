#include "cache_state.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "kvtrace/error.hpp"

namespace kvsim {

CacheState::CacheState(const SimulationSpec& spec, Policy& policy, const EngineOptions& options, int64_t n_tokens)
    : spec_(spec), policy_(policy), options_(options) {
  in_cache_.assign(static_cast<size_t>(n_tokens), 0);
  // The vectors reach these sizes anyway; reserving them spares the doublings (a few per
  // vector and simulation, which add up over a sweep's thousands of simulations).
  cache_.reserve(static_cast<size_t>(spec.policy->budgeted ? std::min(n_tokens, spec.budget + 1) : n_tokens));
  evicted_.reserve(static_cast<size_t>(n_tokens));
}

void CacheState::add(int64_t t) {
  cache_.push_back(static_cast<int32_t>(t));
  in_cache_[static_cast<size_t>(t)] = 1;
}

std::span<const int32_t> CacheState::evict(int64_t t, bool compress) {
  const int64_t excess = static_cast<int64_t>(cache_.size()) - spec_.budget;
  victims_.clear();
  if (options_.paging.on()) {
    evict_pages(t, excess);
    return victims_;
  }
  try {
    policy_.evict(t, cache_, excess, compress, victims_);
  } catch (const NanScore&) {
    refuse_nan_score(t);
  }
  remove_victims(t, excess);
  return victims_;
}

// Page mode: the engine picks whole pages by the policy's scores (kvsim/core/pages.hpp) and
// tells the policy which went. Too few pages that may go leave the cache above B.
void CacheState::evict_pages(int64_t t, int64_t excess) {
  if (excess <= 0) return;
  policy_.scores(t, cache_, scores_);
  mask_pinned(scores_);
  if (std::any_of(scores_.begin(), scores_.end(), [](double s) { return std::isnan(s); })) refuse_nan_score(t);
  choose_pages(cache_, scores_, options_.paging, t, spec_.budget, page_indices_);
  if (page_indices_.empty()) return;
  for (size_t index : page_indices_) victims_.push_back(cache_[index]);
  policy_.forget(cache_, page_indices_);
  remove_victims(t, 0);
}

std::span<const int32_t> CacheState::evict_chosen(int64_t t, std::span<const size_t> keep, bool tell_policy) {
  victims_.clear();
  gone_.clear();
  size_t k = 0;
  for (size_t i = 0; i < cache_.size(); ++i) {
    if (k < keep.size() && keep[k] == i) {
      ++k;
      continue;
    }
    gone_.push_back(i);
    victims_.push_back(cache_[i]);
  }
  if (gone_.empty()) return victims_;
  if (tell_policy) policy_.forget(cache_, gone_);
  remove_victims(t, 0);
  return victims_;
}

void CacheState::take_over(const CacheState& leader) {
  cache_ = leader.cache_;  // nothing evicted yet: evicted_ stays empty
  in_cache_ = leader.in_cache_;
}

void CacheState::refuse_nan_score(int64_t t) const {
  const bool layer_wide = spec_.policy->grouping == Grouping::layer;
  throw kvtrace::InputError("", "",
                            "policy " + spec_.policy->name + " scored NaN at layer " + std::to_string(spec_.layer) +
                                (layer_wide ? ", the layer's cache" : ", kv head " + std::to_string(spec_.group)) +
                                ", step " + std::to_string(t) + ": NaN has no place in the order it evicts by");
}

bool CacheState::pinned_at(int32_t position) const {
  return !spec_.pinned.empty() && spec_.pinned[static_cast<size_t>(position)] != 0;
}

int64_t CacheState::pinned_held() const {
  if (spec_.pinned.empty()) return 0;
  return std::count_if(cache_.begin(), cache_.end(), [&](int32_t position) { return pinned_at(position); });
}

void CacheState::mask_pinned(std::vector<double>& scores) const {
  if (spec_.pinned.empty()) return;
  for (size_t j = 0; j < cache_.size(); ++j)
    if (pinned_at(cache_[j])) scores[j] = std::numeric_limits<double>::infinity();
}

std::span<const int32_t> CacheState::open_positions() {
  if (spec_.pinned.empty()) return cache_;
  open_.clear();
  for (int32_t position : cache_)
    if (!pinned_at(position)) open_.push_back(position);
  return open_;
}

void CacheState::drop_pinned(std::vector<double>& scores) const {
  if (spec_.pinned.empty()) return;
  size_t out = 0;
  for (size_t j = 0; j < cache_.size(); ++j)
    if (!pinned_at(cache_[j])) scores[out++] = scores[j];
  scores.resize(out);
}

std::span<const int32_t> CacheState::evict_open(int64_t t, std::span<const size_t> keep) {
  if (spec_.pinned.empty()) return evict_chosen(t, keep);
  kept_.clear();
  size_t open = 0, k = 0;
  for (size_t j = 0; j < cache_.size(); ++j) {
    if (pinned_at(cache_[j])) {
      kept_.push_back(j);
      continue;
    }
    if (k < keep.size() && keep[k] == open) {
      kept_.push_back(j);
      ++k;
    }
    ++open;
  }
  return evict_chosen(t, kept_);
}

void CacheState::remove_victims(int64_t t, int64_t excess) {
  for (int32_t victim : victims_) {
    if (victim < 0 || victim > t || !in_cache_[static_cast<size_t>(victim)])
      throw std::logic_error("policy " + spec_.policy->name + " evicted position " + std::to_string(victim) +
                             ", which is not cached at step " + std::to_string(t));
    if (pinned_at(victim))
      throw std::logic_error("policy " + spec_.policy->name + " evicted position " + std::to_string(victim) +
                             ", which is protected");
    in_cache_[static_cast<size_t>(victim)] = 0;
    evicted_.push_back(victim);
  }
  // With pins a policy evicts fewer when the positions it may evict run out.
  if (spec_.policy->budgeted && spec_.pinned.empty() && static_cast<int64_t>(victims_.size()) < excess)
    throw std::logic_error("policy " + spec_.policy->name + " evicted " + std::to_string(victims_.size()) +
                           " positions at step " + std::to_string(t) + ", needs " + std::to_string(excess));
  if (victims_.empty()) return;
  if (victims_.size() == 1) {  // the common case: find it by bisection (the cache is ascending)
    cache_.erase(std::lower_bound(cache_.begin(), cache_.end(), victims_[0]));
    return;
  }
  std::erase_if(cache_, [&](int32_t position) { return !in_cache_[static_cast<size_t>(position)]; });
}

}  // namespace kvsim
