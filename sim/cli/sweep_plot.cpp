#include "sweep_plot.hpp"

#include <algorithm>
#include <cmath>

#include "cli_common.hpp"
#include "kvsim/replay/span_metrics.hpp"
#include "kvtrace/error.hpp"

namespace kvsim::cli {
namespace {

// A cell measure the plot can draw: its CSV column, its axis label, and what it is.
enum class Kind { share, ratio, positions };
struct Metric {
  const char* column;
  const char* label;
  Kind kind;
  double (*value)(const CellResult&);
};

constexpr Metric kMetrics[] = {
    {"retention_mean", "mean attention-mass retention", Kind::share, [](const CellResult& c) { return c.retention.mean; }},
    {"retention_p5", "5th percentile of attention-mass retention", Kind::share,
     [](const CellResult& c) { return c.retention.p5; }},
    {"retention_min", "minimum attention-mass retention", Kind::share,
     [](const CellResult& c) { return c.retention.min; }},
    {"output_error_mean", "mean relative output error", Kind::ratio,
     [](const CellResult& c) { return c.output_error.mean; }},
    {"question_retention_mean", "mean retention over the question's rows", Kind::share,
     [](const CellResult& c) { return c.question_retention.mean; }},
    {"answer_retention_mean", "mean retention over the answer's rows", Kind::share,
     [](const CellResult& c) { return c.answer_retention.mean; }},
    {"occupancy_mean", "mean positions attended per step", Kind::positions,
     [](const CellResult& c) { return c.occupancy_mean; }},
    {"occupancy_dense_mean", "mean positions held, dense layout", Kind::positions,
     [](const CellResult& c) { return c.occupancy_dense_mean; }},
    {"occupancy_dense_peak", "peak positions held, dense layout", Kind::positions,
     [](const CellResult& c) { return c.occupancy_dense_peak; }},
    {"occupancy_layer_union_mean", "mean positions held, layer union", Kind::positions,
     [](const CellResult& c) { return c.occupancy_layer_union_mean; }},
    {"occupancy_layer_union_peak", "peak positions held, layer union", Kind::positions,
     [](const CellResult& c) { return c.occupancy_layer_union_peak; }},
    {"occupancy_model_union_mean", "mean positions held, model union", Kind::positions,
     [](const CellResult& c) { return c.occupancy_model_union_mean; }},
    {"occupancy_model_union_peak", "peak positions held, model union", Kind::positions,
     [](const CellResult& c) { return c.occupancy_model_union_peak; }},
};

constexpr std::pair<const char*, const char*> kShortNames[] = {{"retention", "retention_mean"},
                                                               {"p5", "retention_p5"},
                                                               {"min", "retention_min"},
                                                               {"output-error", "output_error_mean"},
                                                               {"occupancy", "occupancy_mean"}};

const Metric* find_metric(const std::string& column) {
  for (const Metric& m : kMetrics)
    if (column == m.column) return &m;
  return nullptr;
}

// span_<kind>_<measure> or span_<kind>_answer_<measure> (span_metrics.hpp).
bool is_span_column(const std::string& name) {
  if (name.rfind("span_", 0) != 0) return false;
  for (const char* measure : kSpanMeasureNames) {
    const std::string tail = std::string("_") + measure;
    if (name.size() > 5 + tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> parse_plot_metrics(const std::string& text) {
  std::vector<std::string> out;
  for (std::string name : split_names("plot-metric", text)) {
    for (const auto& [alias, column] : kShortNames)
      if (name == alias) name = column;
    if (!find_metric(name) && !is_span_column(name))
      bad_option("plot-metric", "unknown measure '" + name +
                                    "' (retention, p5, min, output-error, occupancy, a sweep CSV column such as "
                                    "occupancy_dense_mean, or span_<kind>_<measure>)");
    if (std::find(out.begin(), out.end(), name) != out.end())
      bad_option("plot-metric", "'" + name + "' is named twice");
    out.push_back(name);
  }
  return out;
}

LinePlot sweep_plot(const ReplayResults& results, const std::string& model, const std::string& metric) {
  const Metric* known = find_metric(metric);
  const Kind kind = known ? known->kind : Kind::share;  // every span measure is a share
  LinePlot plot;
  const std::string label = known ? known->label : metric + " (share)";
  plot.title = label + " vs KV budget: " + model;
  plot.title[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(plot.title[0])));
  plot.subtitle = "over every sequence, layer, head and step; teacher-forced replay (drift not modelled)";
  const bool all_fractions =
      std::all_of(results.cells.begin(), results.cells.end(), [](const CellResult& c) { return c.budget.fraction; });
  plot.x_label = all_fractions ? "KV budget (% of sequence length)" : "KV budget (mean tokens)";
  if (all_fractions) plot.x_cap = 100;
  plot.x_floor = 0;
  plot.y_label = label;
  if (kind == Kind::share) {
    plot.y_min = 0, plot.y_max = 1;  // a share: the whole 0..1 axis
  } else {
    plot.y_min = plot.y_max = 0, plot.y_from_zero = true;
    plot.y_integer = kind == Kind::positions;
  }
  bool any = false;
  for (const auto& cell : results.cells) {
    double value = NAN;
    if (known) {
      value = known->value(cell);
    } else {
      value = span_column_value(span_columns(cell.spans, results.span_kinds), metric);
    }
    any = any || std::isfinite(value);
    if (plot.series.empty() || plot.series.back().name != cell.policy)
      plot.series.push_back({cell.policy, {}, cell.info && cell.info->upper_bound(), -1});
    const double x = all_fractions ? 100.0 * cell.budget_share_mean : cell.budget_tokens_mean;
    plot.series.back().points.emplace_back(x, value);
  }
  if (!any) bad_option("plot-metric", "no cell of this sweep has a value for '" + metric + "'");
  return plot;
}

}  // namespace kvsim::cli
