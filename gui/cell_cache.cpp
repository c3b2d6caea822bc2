#include "cell_cache.hpp"

#include <algorithm>
#include <cmath>

#include "replay_cache.hpp"

namespace kvgui {

bool CellCache::Entry::complete() const {
  return !layer_done.empty() && std::find(layer_done.begin(), layer_done.end(), false) == layer_done.end();
}

bool CellCache::Entry::layerDone(int layer) const {
  return layer >= 0 && layer < static_cast<int>(layer_done.size()) && layer_done[static_cast<size_t>(layer)];
}

const CellCache::Entry* CellCache::find(const QString& key) const {
  const auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

const CellCache::Entry* CellCache::use(const QString& key) {
  const auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  it->second.used = ++clock_;
  return &it->second;
}

void CellCache::merge(const std::map<QString, OverviewCells>& made, const std::vector<int>& layers, int n_layers,
                      int n_heads) {
  for (const auto& [key, cells] : made) {
    Entry& entry = entries_[key];
    entry.used = ++clock_;
    if (entry.cells.size() != static_cast<size_t>(n_layers * n_heads)) {
      entry.cells.assign(static_cast<size_t>(n_layers * n_heads), NAN);
      entry.layer_done.assign(static_cast<size_t>(n_layers), false);
    }
    for (int layer : layers) {
      entry.layer_done[static_cast<size_t>(layer)] = true;
      for (int h = 0; h < n_heads; ++h) {
        const size_t i = static_cast<size_t>(layer * n_heads + h);
        entry.cells[i] = cells[i];
      }
    }
  }
  keepMostRecent(entries_, kCapacity);
}

}  // namespace kvgui
