#pragma once
// What `kvsim sweep --plot` draws: one measure of each cell (--plot-metric, named as the
// sweep CSV's column, or retention, p5, min, output-error, occupancy for short) against the
// budget, one line per policy (docs/guide.md, "Plots").
#include <string>
#include <vector>

#include "kvsim/plot/plot.hpp"
#include "kvsim/replay/replay.hpp"

namespace kvsim::cli {

// The CSV column names of --plot-metric's comma list (the short names resolved); an unknown
// name is one line and exit 2. Span columns are checked against the results (sweep_plot).
std::vector<std::string> parse_plot_metrics(const std::string& text);

// The plot of `metric` (a name parse_plot_metrics returned). Throws InputError when no cell
// has a value for it (output error without v, a span kind the trace lacks).
LinePlot sweep_plot(const ReplayResults& results, const std::string& model, const std::string& metric);

}  // namespace kvsim::cli
