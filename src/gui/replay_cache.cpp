#include "replay_cache.hpp"

#include <algorithm>

namespace kvgui {

ReplayCache::Records ReplayCache::find(const ReplayKey& key) {
  const auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  it->second.used = ++clock_;
  return it->second.records;
}

void ReplayCache::insert(const ReplayKey& key, Records records) {
  entries_[key] = Entry{std::move(records), ++clock_};
  keepMostRecent(entries_, capacity_);
}

void ReplayCache::forget(const std::string& label) {
  std::erase_if(entries_, [&](const auto& entry) { return entry.first.label == label; });
}

std::vector<int64_t> neighbourBudgets(const kvsim::Budget& budget, int64_t n_tokens, int steps) {
  const int64_t shown = budget.resolve(n_tokens);
  std::vector<int64_t> budgets;
  for (int step = 1; step <= steps; ++step)
    for (int sign : {1, -1}) {
      kvsim::Budget next;
      if (budget.fraction) {
        // The slider moves in whole percents.
        const int64_t percent = budget.numerator * 100 / budget.denominator + sign * step;
        if (percent < 1 || percent > 100) continue;
        next = kvsim::Budget::parse(std::to_string(percent) + "%");
      } else {
        const int64_t tokens = budget.tokens + sign * step;
        if (tokens < 1 || tokens > n_tokens) continue;
        next = kvsim::Budget::parse(std::to_string(tokens));
      }
      const int64_t b = next.resolve(n_tokens);
      if (b != shown && std::find(budgets.begin(), budgets.end(), b) == budgets.end()) budgets.push_back(b);
    }
  return budgets;
}

}  // namespace kvgui
