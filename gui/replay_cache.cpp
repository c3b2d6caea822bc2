#include "replay_cache.hpp"

#include <algorithm>

namespace kvgui {

std::string ReplayKey::text() const {
  return std::to_string(seq) + "|" + std::to_string(layer) + "|" + std::to_string(first_head) + "+" +
         std::to_string(n_heads) + "|" + label + "|" + std::to_string(static_cast<int>(mode)) + "|" + engine + "|" +
         std::to_string(budget);
}

ReplayCache::Records ReplayCache::find(const ReplayKey& key) {
  const auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  it->second.used = ++clock_;
  return it->second.records;
}

namespace {

size_t bytes_of(const std::vector<kvsim::GroupRecord>& records) {
  size_t bytes = 0;
  for (const kvsim::GroupRecord& record : records) {
    const kvsim::SimulationResult& r = record.result;
    bytes += sizeof(record) + record.heads.size() * sizeof(int) + r.retention.size() * sizeof(float) +
             r.output_error.size() * sizeof(float) + r.occupancy.size() * sizeof(int32_t) +
             r.eviction_step.size() * sizeof(int32_t);
  }
  return bytes;
}

}  // namespace

void ReplayCache::insert(const ReplayKey& key, Records records) {
  if (const auto it = entries_.find(key); it != entries_.end()) erase(it);
  const size_t bytes = records ? bytes_of(*records) : 0;
  entries_[key] = Entry{std::move(records), ++clock_, bytes};
  bytes_ += bytes;
  while (entries_.size() > 1 && (entries_.size() > capacity_ || bytes_ > max_bytes_))
    erase(leastRecentlyUsed(entries_));
}

void ReplayCache::erase(Entries::iterator it) {
  bytes_ -= it->second.bytes;
  entries_.erase(it);
}

void ReplayCache::clear() {
  entries_.clear();
  bytes_ = 0;
}

void ReplayCache::forget(const std::string& label) {
  for (auto it = entries_.begin(); it != entries_.end();)
    if (it->first.label == label)
      erase(it++);
    else
      ++it;
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
