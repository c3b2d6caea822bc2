#pragma once
// Replays of the shown trace already made, by what they depend on: (sequence, layer, heads
// replayed, policy with its parameters, mode and engine options, budget B). The session and
// the step chart look here first, so a budget-slider step to a budget computed before (or
// computed ahead, as a neighbour of the shown one) is a lookup. Used on the UI thread only;
// the least recently used entries go beyond a count and a size in bytes.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kvsim/core/budget.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/replay/replay.hpp"

namespace kvgui {

struct ReplayKey {
  int seq = 0, layer = 0;
  int first_head = 0, n_heads = 0;  // the query heads replayed (replayHeads)
  std::string label;                // the policy and the parameters that differ from its defaults
  kvsim::Mode mode = kvsim::Mode::stream;
  std::string engine;  // the other engine options (engineKey: paging, protocol, head floor)
  int64_t budget = 0;  // B of the layer (the layer schedule's B_l); -1 for a policy that ignores it

  bool operator==(const ReplayKey& other) const = default;
  std::string text() const;  // every field, as one text (the scheduler's key)
  bool operator<(const ReplayKey& other) const {
    return std::tie(seq, layer, first_head, n_heads, label, mode, engine, budget) <
           std::tie(other.seq, other.layer, other.first_head, other.n_heads, other.label, other.mode, other.engine,
                    other.budget);
  }
};

// The least recently used entry of `entries` (a map whose values have `used`, a clock
// reading).
template <class Map>
typename Map::iterator leastRecentlyUsed(Map& entries) {
  return std::min_element(entries.begin(), entries.end(),
                          [](const auto& a, const auto& b) { return a.second.used < b.second.used; });
}

// Erases the least recently used entries of `entries` until at most `capacity` are left.
template <class Map>
void keepMostRecent(Map& entries, size_t capacity) {
  while (entries.size() > capacity) entries.erase(leastRecentlyUsed(entries));
}

class ReplayCache {
 public:
  using Records = std::shared_ptr<const std::vector<kvsim::GroupRecord>>;
  explicit ReplayCache(size_t capacity = 4096, size_t max_bytes = size_t{512} << 20)
      : capacity_(capacity), max_bytes_(max_bytes) {}

  Records find(const ReplayKey& key);  // null when not there
  bool contains(const ReplayKey& key) const { return entries_.count(key) != 0; }
  void insert(const ReplayKey& key, Records records);
  void clear();
  void forget(const std::string& label);  // every replay of that policy
  size_t size() const { return entries_.size(); }
  size_t capacity() const { return capacity_; }
  size_t bytes() const { return bytes_; }  // of the results held
  // Whether computing ahead may add more: the cache is under half full (what is shown and
  // computed near it then never goes for what is computed further away).
  bool hasRoomAhead() const { return 2 * size() < capacity_ && 2 * bytes_ < max_bytes_; }

 private:
  struct Entry {
    Records records;
    uint64_t used = 0;
    size_t bytes = 0;
  };
  using Entries = std::map<ReplayKey, Entry>;
  void erase(Entries::iterator it);

  size_t capacity_, max_bytes_;
  size_t bytes_ = 0;
  uint64_t clock_ = 0;
  Entries entries_;
};

// The budgets up to `steps` slider steps away from `budget` (steps of its unit: a percent, or
// a token), nearest first, resolved for n tokens, without B itself or repeats: what is
// computed ahead.
std::vector<int64_t> neighbourBudgets(const kvsim::Budget& budget, int64_t n_tokens, int steps = 2);
// How many slider steps either side of the shown budget the views compute ahead, once the
// nearest two are done (in the background, nearest first).
constexpr int kAheadSteps = 10;
// Then, in a second background job that the views and exports do not wait for, the rest of
// the slider's range up to this many steps either side (every percent of a budget in
// percents), while the cache has room (ReplayCache::hasRoomAhead).
constexpr int kRangeSteps = 100;
// Budgets of one policy per job of that range (a job ends soon after the user moves on).
constexpr size_t kRangeChunk = 8;

}  // namespace kvgui
