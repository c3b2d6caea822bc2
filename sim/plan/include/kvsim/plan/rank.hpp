#pragma once
// kvsim rank: a leaderboard of the policies of a sweep (docs/semantics.md, section 8). Per
// policy, the mean of a quality column over the budget shares the sweep ran (the trapezoid
// area under its quality-budget curve divided by the span) and the smallest budget meeting a
// target. The rows are the planner's (parse_sweep_csv, choose_budgets), so a sweep CSV is
// read and checked in one place.
#include <optional>
#include <string>
#include <vector>

#include "kvsim/plan/planner.hpp"

namespace kvsim {

// What to rank, as kvsim rank's options write it.
struct RankRequest {
  std::string metric = "retention_mean";  // a quality column (rank_metric_higher_is_better)
  std::optional<double> target;           // unset: kDefaultRankTarget, or kDefaultRankErrorTarget for an error
};
inline constexpr double kDefaultRankTarget = 0.95;
inline constexpr double kDefaultRankErrorTarget = 0.05;

// Whether higher values of a quality column are better (retention_*, question_retention_*,
// answer_retention_*) or lower (output_error_*); nullopt for any other column.
std::optional<bool> rank_metric_higher_is_better(const std::string& column);
// Refuses a column that is not a quality column and a target that is not finite. Throws InputError.
void check_rank_request(const RankRequest& request);

// One point of a quality-budget curve: a row of the sweep.
struct RankPoint {
  std::string budget;  // as the sweep wrote it
  double share = 0;    // budget_share_mean
  double quality = 0;  // the metric's column
};
// The mean quality over the span of shares the points cover: the trapezoid rule's area
// divided by (last share - first share). `points` ascending by share, at least two, spanning
// more than 0.
double mean_over_shares(const std::vector<RankPoint>& points);

struct RankEntry {
  std::string policy, params, quant, mode;
  bool bound = false;              // an upper bound (oracle, lookahead), ranked and marked
  std::vector<RankPoint> points;   // at the budgets the ranking compares, ascending by share
  double mean = 0;                 // mean_over_shares(points); a budget-free entry: the mean of its rows' values
  std::optional<size_t> smallest;  // the first point meeting the target
  bool reads_budget = false;       // apart: B sets its rule, but its cache may hold more (simlayerkv)
  std::string name() const;        // policy, or policy(params)
};

struct Ranking {
  std::string sweep;  // how the output names the sweep file
  std::string metric;
  bool higher_is_better = true;
  double target = kDefaultRankTarget;
  bool has_quant = false, mixed_modes = false;  // the quant and mode columns tell entries apart
  std::vector<std::string> budgets;             // the budgets compared, ascending by share
  double share_low = 0, share_high = 0;         // the span of the first entry's shares
  std::vector<RankEntry> ranked;                // best first; ties by name, quant, mode
  // Not ranked: policies that ignore the budget (full, scissorhands-official) or whose cache may
  // hold more than it (simlayerkv, duoattention), so equal budgets are not equal memory.
  std::vector<RankEntry> apart;
  std::vector<std::string> notes;
};

// Ranks a sweep's rows. Throws InputError naming `sweep` when nothing can be ranked: no
// budgeted policy, fewer than two budgets every ranked policy has, a span of 0, an empty
// (not measured) value at a compared budget, rows of different page sizes.
Ranking rank_sweep(const SweepTable& table, const std::string& sweep, const RankRequest& request);

// The leaderboard as text (100 columns), a Markdown table, a LaTeX tabular, or CSV
// (rank_text.cpp). rank_format: the one of them `format` names ("text", "markdown",
// "latex", "csv"); throws InputError for another.
std::string rank_text(const Ranking& ranking);
std::string rank_markdown(const Ranking& ranking);
std::string rank_latex(const Ranking& ranking);
std::string rank_csv(const Ranking& ranking);
std::string rank_format(const Ranking& ranking, const std::string& format);
void check_rank_format(const std::string& format);

}  // namespace kvsim
