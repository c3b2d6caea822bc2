#pragma once
// The order in which scored positions pooled over several caches are kept (internal to
// sim/core: head-adaptive budgets in head_budget.cpp, pools in pool.cpp): higher score first
// (NaN as the lowest, though the engine refuses it first), then the higher position, then the
// earlier cache.
#include <cmath>
#include <cstdint>
#include <limits>

namespace kvsim {

struct KeepEntry {
  double score;
  int32_t position;
  uint32_t cache;  // which of the pooled caches
  uint32_t index;  // into that cache
};

inline bool keep_before(const KeepEntry& a, const KeepEntry& b) {
  if (a.score != b.score) return a.score > b.score;
  if (a.position != b.position) return a.position > b.position;
  return a.cache < b.cache;
}

// A score as keep_before compares it: NaN as the lowest.
inline double keep_score(double score) { return std::isnan(score) ? -std::numeric_limits<double>::infinity() : score; }

}  // namespace kvsim
