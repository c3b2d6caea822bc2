#pragma once
// The overview's cells made so far (overview_values.hpp), by what they depend on (the trace,
// sequence, metric, and for retention the policy, budget B, engine options and layer
// schedule: Session::cellsKey), each made a layer at a time. Used on the UI thread only; the
// least recently shown or made go beyond kCapacity keys.
#include <QString>
#include <cstdint>
#include <map>
#include <vector>

#include "overview_values.hpp"

namespace kvgui {

class CellCache {
 public:
  // What the cells of one key are so far.
  struct Entry {
    OverviewCells cells;  // [layer * n_heads + head], NaN where not made
    std::vector<bool> layer_done;
    uint64_t used = 0;  // when last shown or made (clock_)
    bool complete() const;
    bool layerDone(int layer) const;
  };
  // A round ahead (2 x kAheadSteps keys) never evicts its own, and the rest of the range
  // stops at half of it.
  static constexpr size_t kCapacity = 1024;

  const Entry* find(const QString& key) const;  // null when nothing of it was made
  const Entry* use(const QString& key);         // the same, marked as shown now
  // Keeps what a job made of the keys of `made`: `layers` of a trace of n_layers x n_heads.
  void merge(const std::map<QString, OverviewCells>& made, const std::vector<int>& layers, int n_layers, int n_heads);
  void clear() { entries_.clear(); }
  size_t size() const { return entries_.size(); }

 private:
  std::map<QString, Entry> entries_;
  uint64_t clock_ = 0;
};

}  // namespace kvgui
