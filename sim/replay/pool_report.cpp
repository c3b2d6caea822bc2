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

namespace {

// One line per sequence under a heading; `group` names each sequence's pool or context.
std::string sequence_table(const CellResult& cell, const std::string& heading, const std::string& column,
                           int (*group)(const SequenceSummary&)) {
  using text::fixed;
  using text::left;
  std::ostringstream out;
  out << heading << "\n" << "seq   " << column << "      B  ret.mean  ret.min  occ.mean  occ.peak\n";
  for (const SequenceSummary& sequence : cell.sequences)
    out << left(std::to_string(sequence.seq), 6) << left(std::to_string(group(sequence)), column.size())
        << fixed(sequence.budget_tokens_mean, 7, 1) << fixed(sequence.retention.mean, 10, 4)
        << fixed(sequence.retention.min, 9, 4) << fixed(sequence.occupancy_mean, 10, 1)
        << fixed(static_cast<double>(sequence.occupancy_peak), 10, 0) << "\n";
  return out.str();
}

}  // namespace

std::string pool_table(const CellResult& cell) {
  return sequence_table(cell,
                        "per sequence: the caches of a pool's sequences share the sum of their budgets B per layer "
                        "and kv head",
                        "pool", [](const SequenceSummary& s) { return s.pool; });
}

std::string shared_context_text(const ReplayResults& results) {
  std::string text;
  for (const ReplayResults::SharedContext& context : results.shared_contexts) {
    text += "context group " + std::to_string(context.group) + ": sequences ";
    for (size_t i = 0; i < context.sequences.size(); ++i)
      text += (i ? ", " : "") + std::to_string(context.sequences[i]);
    text += " answer from one compression of the context, made in sequence " +
            std::to_string(context.sequences.front()) + "'s replay\n";
  }
  return text;
}

std::string shared_context_table(const CellResult& cell) {
  return sequence_table(cell, "per question: `from` is the sequence whose replay compressed the shared context",
                        "from", [](const SequenceSummary& s) { return s.compressed_by; });
}

}  // namespace kvsim
