#pragma once
// Charts rendered off screen with Qt Charts (no display needed), written atomically as PNG
// or SVG by the file's extension. Built only when Qt6 is found (KVSIM_HAVE_PLOT).
#include <string>
#include <utility>
#include <vector>

namespace kvsim {

struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;
  bool dashed = false;  // bounds (oracle) are drawn dashed
};

struct LinePlot {
  std::string title, subtitle, x_label, y_label;
  std::vector<PlotSeries> series;
  double y_min = 0, y_max = 1;  // y_min == y_max: fit the data
  bool x_log = false;
  bool x_integer = false;  // x takes a few whole values (layers): one labelled tick per whole number
};

struct Heatmap {
  std::string title, subtitle, x_label, y_label, value_label;
  int rows = 0, columns = 0;
  std::vector<double> values;  // [row][column], NaN for no value
  double min = 0, max = 1;
  std::vector<std::string> row_labels, column_labels;  // empty: 0, 1, 2, ...
};

// Throws InputError naming the path when it cannot be written.
void render_line_plot(const LinePlot& plot, const std::string& path);
void render_heatmap(const Heatmap& map, const std::string& path);

}  // namespace kvsim
