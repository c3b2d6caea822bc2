// Reports of the attention need (kvsim/analysis/attention_need.hpp): the per-layer table
// kvsim analyze and kvsim sweep print, and its JSON.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kvsim/analysis/attention_need.hpp"
#include "kvsim/core/json_text.hpp"
#include "kvsim/core/text_util.hpp"

namespace kvsim {

using text::fixed;
using text::or_null;
using text::right;

std::string need_table(const TraceNeed& need, const std::string& steps) {
  std::ostringstream out;
  out << "Attention need: the fewest positions whose attention sums to at least p, per query head and step\n"
      << "(" << steps << "; over " << need.sequences.size() << " sequences x " << need.n_heads
      << " heads; the full rows, the same for every policy)\n"
      << "layer     p     mean   p95   max\n";
  for (const LayerNeed& layer : need.per_layer)
    for (size_t m = 0; m < need.masses.size(); ++m) {
      const Summary& s = layer.needs[m];
      out << right(m == 0 ? std::to_string(layer.layer) : "", 5) << right(need_mass_text(need.masses[m]), 6)
          << fixed(s.mean, 9, 1) << fixed(s.p95, 6, 0) << fixed(s.max, 6, 0) << "\n";
    }
  out << "budget to hold the peak (B + 1 >= the largest need of any layer, head and step, per sequence):\n";
  for (size_t m = 0; m < need.masses.size(); ++m) {
    const int64_t peak = *std::max_element(need.peak[m].begin(), need.peak[m].end());
    out << "  p = " << need_mass_text(need.masses[m]) << ": peak " << peak << " positions, budget "
        << need_budget(need, m).text << "\n";
  }
  return out.str();
}

std::string need_json(const TraceNeed& need) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerNeed& layer : need.per_layer) {
    nlohmann::json masses = nlohmann::json::array();
    for (size_t m = 0; m < need.masses.size(); ++m) {
      const Summary& s = layer.needs[m];
      masses.push_back({{"p", need.masses[m]},
                        {"count", s.count},
                        {"mean", or_null(s.mean)},
                        {"p95", or_null(s.p95)},
                        {"max", or_null(s.max)}});
    }
    layers.push_back({{"layer", layer.layer}, {"need", masses}});
  }
  nlohmann::json budgets = nlohmann::json::array();
  for (size_t m = 0; m < need.masses.size(); ++m)
    budgets.push_back({{"p", need.masses[m]}, {"budget", need_budget(need, m).text}, {"peak", need.peak[m]}});
  return json_text(
      nlohmann::json{{"sequences", need.sequences}, {"tokens", need.tokens}, {"layers", layers}, {"budgets", budgets}},
      -1);
}

}  // namespace kvsim
