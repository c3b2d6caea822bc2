#pragma once
// Charts rendered off screen with Qt Charts (no display needed) into memory, then written
// atomically as PNG or SVG by the file's extension, checked like any output (Qt's image
// writers do not report a failed flush or close, so they never write a file themselves).
// Built only when Qt6 is found (KVSIM_HAVE_PLOT).
#include <string>
#include <utility>
#include <vector>

#include "kvtrace/atomic_file.hpp"

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

enum class PlotFormat { png, svg };
// The format a path's extension names: .svg (any case) is SVG, anything else PNG.
PlotFormat plot_format(const std::string& path);

// The bytes of the image file, drawn in memory (sim/plot/plot.cpp, in the plot module).
std::string draw_line_plot(const LinePlot& plot, PlotFormat format);
std::string draw_heatmap(const Heatmap& map, PlotFormat format);

// Writes drawn plots together (kvtrace::write_files_atomically): all are renamed into place
// only once every one is written in full, so a failure leaves none of them. Throws
// InputError "PATH: cannot write the plot: <the system's error>".
void write_plot_files(const std::vector<kvtrace::FileContents>& plots);

// Draws one plot in the format its path names and writes it as write_plot_files does.
void render_line_plot(const LinePlot& plot, const std::string& path);
void render_heatmap(const Heatmap& map, const std::string& path);

}  // namespace kvsim
