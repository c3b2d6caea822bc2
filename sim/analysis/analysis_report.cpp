// Reports of kvsim analyze: human tables, CSV and JSON of a TraceAnalysis.
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kvsim/core/json_text.hpp"
#include "kvsim/analysis/analysis.hpp"
#include "kvsim/replay/report.hpp"
#include "kvsim/core/text_util.hpp"

namespace kvsim {
namespace {

using text::fixed;
using text::number;
using text::or_null;
using text::right;

// Token text for a table: control characters escaped, at most 14 characters shown; a
// marker such as llama2.c's BOS piece "\n<s>\n" as the marker alone, <s>.
std::string token_label(const std::vector<std::string>& text, int32_t position) {
  if (static_cast<size_t>(position) >= text.size()) return "";
  std::string piece = text[static_cast<size_t>(position)];
  if (const std::string bare = text::trim(piece); bare.size() > 2 && bare.front() == '<' && bare.back() == '>')
    piece = bare;
  std::string out;
  for (char c : piece) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (static_cast<unsigned char>(c) < 0x20)
      out += "?";
    else
      out += c;
  }
  if (out.size() > 14) out = out.substr(0, 13) + "~";
  return " '" + out + "'";
}

std::string top_k_text(const AnalysisOptions& options) { return "top-" + options.top_k.text; }

nlohmann::json stat_json(const StatRow& row, const AnalysisOptions& options) {
  nlohmann::json lags = nlohmann::json::array();
  for (size_t l = 0; l < row.spearman.size(); ++l)
    lags.push_back({{"lag", options.lags[l]},
                    {"spearman", or_null(row.spearman[l])},
                    {"topk_recall", or_null(row.topk_recall[l])}});
  nlohmann::json out = {{"count", row.count},
                        {"persistence", or_null(row.persistence)},
                        {"persistence_defined", row.persistence_defined},
                        {"ever_pivotal", or_null(row.ever_pivotal)},
                        {"repeat_share", or_null(row.repeat_share)},
                        {"lags", lags}};
  if (row.layer >= 0) out["layer"] = row.layer;
  if (row.head >= 0) out["head"] = row.head;
  return out;
}

// The cross-layer table: Spearman of head-averaged importance between adjacent layers.
void write_cross_layer(std::ostringstream& out, const TraceAnalysis& a) {
  out << "\nCross-layer Spearman of head-averaged importance between adjacent layers (mean over sequences;\n"
         "layers counted from 0; the blog's table claims 0.85-0.91 for L1-L2 .. L4-L5)\n"
         "layers  accumulated  normalised\n";
  for (const CrossLayerPair& pair : a.cross_layer)
    out << right(std::to_string(pair.layer_a) + "-" + std::to_string(pair.layer_b), 6) << "  "
        << fixed(pair.spearman, 11, 4) << "  " << fixed(pair.spearman_normalised, 10, 4) << "\n";
  out << "accumulated: sum over steps of a_t[i]; normalised: mean over steps of (t+1) a_t[i], which removes\n"
         "the head start early positions get from being visible in more steps\n";
}

// Repetitive attention in the first sequence: which old positions (from the first half,
// 0..t*) draw attention above 1/(t+1) at the sampled later steps, counted over heads and
// steps. Nothing without sampled steps.
void write_repetitive_attention(std::ostringstream& out, const TraceAnalysis& a,
                                const std::vector<std::vector<std::string>>& token_text) {
  if (a.items.empty() || a.items.front().heads.empty() || a.items.front().heads.front().repeats.empty()) return;
  const int seq = a.items.front().seq;
  const std::vector<RepeatStep>& steps = a.items.front().heads.front().repeats;
  const int32_t oldest = static_cast<int32_t>(a.items.front().n_tokens / 2);  // t*: the first half
  const size_t pairs = static_cast<size_t>(a.n_heads) * steps.size();
  out << "\nRepetitive attention in sequence " << seq << " at sampled steps t =";
  for (const RepeatStep& step : steps) out << " " << step.step;
  out << ": |S_t| (positions above 1/(t+1)), the share of them in the first half (positions <= t* = " << oldest
      << "), and the first-half positions above 1/(t+1) in the most (head, step) pairs (of " << pairs
      << "); --json lists every sequence, head and step\n";
  const std::vector<std::string> empty;
  const std::vector<std::string>& text =
      static_cast<size_t>(seq) < token_text.size() ? token_text[static_cast<size_t>(seq)] : empty;
  out << "layer  |S_t|  old share  most repeated old positions\n";
  for (const LayerAnalysis& item : a.items) {
    if (item.seq != seq) continue;
    std::map<int32_t, int> count_of;
    double size_sum = 0, old_sum = 0;
    for (const HeadAnalysis& head : item.heads)
      for (const RepeatStep& step : head.repeats) {
        size_sum += static_cast<double>(step.positions.size());
        for (int32_t i : step.positions)
          if (i <= oldest) ++count_of[i], ++old_sum;
      }
    std::vector<std::pair<int32_t, int>> ranked(count_of.begin(), count_of.end());
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
    out << right(std::to_string(item.layer), 5) << "  " << fixed(size_sum / static_cast<double>(pairs), 5, 1) << "  "
        << fixed(size_sum > 0 ? old_sum / size_sum : NAN, 9, 3) << " ";
    if (ranked.empty()) out << " none";
    for (size_t r = 0; r < ranked.size() && r < 5; ++r)
      out << (r ? ", " : " ") << ranked[r].first << token_label(text, ranked[r].first) << " " << ranked[r].second;
    out << "\n";
  }
}

}  // namespace

std::string analysis_table(const TraceAnalysis& a, const std::vector<std::vector<std::string>>& token_text) {
  std::ostringstream out;
  const AnalysisOptions& o = a.options;
  out << "Persistence of importance across steps (the paper's hypothesis; it reports > 95%)\n"
         "  S_t = positions with a_t above 1/(t+1); t* = floor(n/2); persistence = share of the positions\n"
         "  pivotal after t* (among 0..t*) that were already pivotal by t*; ever-pivotal = |S_0->t*| /\n"
         "  (t*+1), which is also the persistence a random choice of late-pivotal positions would get\n"
         "  (the chance level); repeat = the same share between consecutive sampled later steps. Mean\n"
         "  over sequences and heads.\n\n";
  out << "layer  persistence  defined  ever-pivotal  repeat\n";
  auto summary_row = [&](const std::string& label, const StatRow& row) {
    out << label << std::string(label.size() < 5 ? 5 - label.size() : 0, ' ') << "  " << fixed(row.persistence, 11, 4)
        << "  " << right(std::to_string(row.persistence_defined) + "/" + std::to_string(row.count), 7) << "  "
        << fixed(row.ever_pivotal, 12, 4) << "  " << fixed(row.repeat_share, 6, 3) << "\n";
  };
  for (const StatRow& row : a.layer_means) summary_row(std::to_string(row.layer), row);
  summary_row("all", a.overall);
  {
    std::vector<double> persistence;
    for (const StatRow& row : a.layer_means) persistence.push_back(row.persistence);
    const std::vector<double> weights = persistence_weights(persistence);
    out << "budget weights by persistence (kvsim sweep --layer-budget persistence; over the layers shown):";
    for (size_t l = 0; l < weights.size(); ++l) out << (l ? "," : " ") << fixed(weights[l], 0, 3);
    out << "\n";
  }

  out << "\npersistence by layer and head (mean over sequences)\nlayer";
  for (int h = 0; h < a.n_heads; ++h) out << right(std::string(1, 'h').append(std::to_string(h)), 7);
  out << "\n";
  for (size_t l = 0; l < a.layers.size(); ++l) {
    out << right(std::to_string(a.layers[l]), 5);
    for (int h = 0; h < a.n_heads; ++h)
      out << fixed(a.heads[l * static_cast<size_t>(a.n_heads) + static_cast<size_t>(h)].persistence, 7, 3);
    out << "\n";
  }

  if (!a.overall.spearman.empty()) {
    auto lag_table = [&](const std::string& title, bool recall) {
      out << "\n" << title << "\nlayer";
      for (int64_t lag : o.lags) out << right("lag " + std::to_string(lag), 9);
      out << "\n";
      auto line = [&](const std::string& label, const StatRow& row) {
        out << right(label, 5);
        for (size_t l = 0; l < o.lags.size(); ++l) out << fixed(recall ? row.topk_recall[l] : row.spearman[l], 9, 4);
        out << "\n";
      };
      for (const StatRow& row : a.layer_means) line(std::to_string(row.layer), row);
      line("all", a.overall);
    };
    lag_table("Spearman rank correlation of a_t[0..t] and a_{t+lag}[0..t] (mean over start steps t with t+1 >= " +
                  std::to_string(o.min_positions) + ", then over sequences and heads)",
              false);
    lag_table(top_k_text(o) + " recall between steps t and t+lag (k of the t+1 positions, at least 1)", true);
  }

  if (!a.cross_layer.empty()) write_cross_layer(out, a);
  write_repetitive_attention(out, a, token_text);
  return wrap_text(out.str());
}

std::string analysis_csv(const TraceAnalysis& a) {
  std::ostringstream out;
  out << "layer,head,count,persistence,persistence_defined,ever_pivotal,repeat_share";
  for (int64_t lag : a.options.lags)
    if (!a.overall.spearman.empty()) out << ",spearman_lag" << lag;
  for (int64_t lag : a.options.lags)
    if (!a.overall.spearman.empty()) out << ",topk_recall_lag" << lag;
  out << "\n";
  auto line = [&](const StatRow& row) {
    out << (row.layer < 0 ? std::string("all") : std::to_string(row.layer)) << ","
        << (row.head < 0 ? std::string("mean") : std::to_string(row.head)) << "," << row.count << ","
        << number(row.persistence) << "," << row.persistence_defined << "," << number(row.ever_pivotal) << ","
        << number(row.repeat_share);
    for (double v : row.spearman) out << "," << number(v);
    for (double v : row.topk_recall) out << "," << number(v);
    out << "\n";
  };
  for (const StatRow& row : a.heads) line(row);
  for (const StatRow& row : a.layer_means) line(row);
  line(a.overall);
  return out.str();
}

std::string analysis_json(const TraceAnalysis& a, const std::string& trace, const std::string& model) {
  const AnalysisOptions& o = a.options;
  nlohmann::json per_head = nlohmann::json::array(), per_layer = nlohmann::json::array();
  for (const StatRow& row : a.heads) per_head.push_back(stat_json(row, o));
  for (const StatRow& row : a.layer_means) per_layer.push_back(stat_json(row, o));
  nlohmann::json per_sequence = nlohmann::json::array();
  for (const LayerAnalysis& item : a.items)
    for (const HeadAnalysis& head : item.heads) {
      nlohmann::json lags = nlohmann::json::array(), repeats = nlohmann::json::array();
      for (const LagStat& lag : head.lags)
        lags.push_back({{"lag", lag.lag},
                        {"spearman", or_null(lag.spearman)},
                        {"topk_recall", or_null(lag.topk_recall)},
                        {"pairs", lag.pairs},
                        {"undefined", lag.undefined}});
      for (const RepeatStep& step : head.repeats)
        repeats.push_back({{"step", step.step}, {"positions", step.positions}});
      per_sequence.push_back({{"seq", item.seq},
                              {"layer", item.layer},
                              {"head", head.head},
                              {"n_tokens", item.n_tokens},
                              {"early", head.early},
                              {"late", head.late},
                              {"persistent", head.persistent},
                              {"persistence", or_null(head.persistence)},
                              {"ever_pivotal", or_null(head.ever_pivotal)},
                              {"repeat_share", or_null(head.repeat_share)},
                              {"lags", lags},
                              {"repeats", repeats}});
    }
  nlohmann::json cross = nlohmann::json::array();
  for (const CrossLayerPair& pair : a.cross_layer) {
    nlohmann::json seqs = nlohmann::json::array(), norm = nlohmann::json::array();
    for (double v : pair.per_sequence) seqs.push_back(or_null(v));
    for (double v : pair.per_sequence_normalised) norm.push_back(or_null(v));
    cross.push_back({{"layers", {pair.layer_a, pair.layer_b}},
                     {"spearman", or_null(pair.spearman)},
                     {"spearman_normalised", or_null(pair.spearman_normalised)},
                     {"per_sequence", seqs},
                     {"per_sequence_normalised", norm}});
  }
  nlohmann::json options = {{"lags", o.lags},
                            {"top_k", o.top_k.text},
                            {"min_positions", o.min_positions},
                            {"max_start_steps", o.max_start_steps},
                            {"repeat_samples", o.repeat_samples}};
  nlohmann::json definitions = {
      {"pivotal", "S_t = positions i <= t with a_t[i] > 1/(t+1)"},
      {"persistence", "t* = floor(n/2); |S_{t*+1->n-1} & S_{0->t*}| / |S_{t*+1->n-1} & {0..t*}|; null when 0/0"},
      {"ever_pivotal", "|S_{0->t*}| / (t*+1)"},
      {"spearman", "Pearson on average ranks of a_t[0..t] and a_{t+lag}[0..t], mean over start steps t"},
      {"topk_recall", "|top-k(a_t[0..t]) & top-k(a_{t+lag}[0..t])| / k, k = top_k of t+1, mean over start steps t"},
      {"cross_layer",
       "Spearman over positions of the head-averaged accumulated attention sum_t a_t[i] of layers l "
       "and l+1 (normalised: mean over t >= i of (t+1) a_t[i]), mean over sequences"},
      {"repeat_share", "mean over consecutive sampled steps of |S_s & S_prev| / |S_s & {0..prev}|"}};
  nlohmann::json out = {{"trace", trace},
                        {"model", model},
                        {"sequences", a.sequences},
                        {"layers", a.layers},
                        {"heads", a.n_heads},
                        {"options", options},
                        {"definitions", definitions},
                        {"overall", stat_json(a.overall, o)},
                        {"per_layer", per_layer},
                        {"per_head", per_head},
                        {"per_sequence", per_sequence},
                        {"cross_layer", cross}};
  return json_text(std::move(out), 1);
}

}  // namespace kvsim
