// A replay in pools as people read it (report.hpp): each sequence's retention and occupancy.
#include <sstream>

#include "kvsim/core/text_util.hpp"
#include "kvsim/replay/report.hpp"

namespace kvsim {

std::string pool_text(const ReplayResults& results) {
  if (results.pool <= 0) return "";
  const int64_t pool = results.pool, last = results.sequences % pool;
  if (results.sequences <= pool) return ", one pool of " + std::to_string(results.sequences);
  std::string text = ", pools of " + std::to_string(pool);
  if (last != 0) text += " (the last of " + std::to_string(last) + ")";
  return text;
}

std::string pool_table(const CellResult& cell) {
  using text::fixed;
  using text::left;
  std::ostringstream out;
  out << "per sequence: the caches of a pool's sequences share the sum of their budgets B per layer and kv head\n"
      << "seq   pool      B  ret.mean  ret.min  occ.mean  occ.peak\n";
  for (const SequenceSummary& sequence : cell.sequences)
    out << left(std::to_string(sequence.seq), 6) << left(std::to_string(sequence.pool), 4)
        << fixed(sequence.budget_tokens_mean, 7, 1) << fixed(sequence.retention.mean, 10, 4)
        << fixed(sequence.retention.min, 9, 4) << fixed(sequence.occupancy_mean, 10, 1)
        << fixed(static_cast<double>(sequence.occupancy_peak), 10, 0) << "\n";
  return out.str();
}

}  // namespace kvsim
