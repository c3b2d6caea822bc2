#pragma once
// Charts rendered off screen with Qt Charts (no display needed) into memory, then written
// atomically as PNG or SVG by the file's extension, checked like any output (Qt's image
// writers do not report a failed flush or close, so they never write a file themselves).
// Built only when Qt6 is found (KVSIM_HAVE_PLOT).
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "kvtrace/atomic_file.hpp"

namespace kvsim {

// A reference line (an upper bound such as oracle, the full cache's level) is drawn black and
// dashed, or in the colour of series `colour_of` (its index) when that is set.
struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;
  bool dashed = false;
  int colour_of = -1;
};

// The figure: inches at dpi pixels per inch (PNG; SVG gives the same pixel size), fonts in
// points. The defaults are --plot-size 8x5, --dpi 150, --font-size 10 (docs/guide.md).
struct PlotLayout {
  double width_in = 8, height_in = 5;
  int dpi = 150;
  double font_pt = 10;
};

// How series i of a line plot is drawn: colour, marker and line style, each cycling with its
// own period (10 colours, 7 markers, 4 line styles), so every triple differs for i < 140.
enum class PlotMarker { circle, square, diamond, triangle_up, triangle_down, pentagon, cross };
enum class PlotDash { solid, dot, dash_dot, dash_dot_dot, dash };  // dash: reference lines only
struct PlotStyle {
  unsigned rgb = 0;  // 0xRRGGBB
  PlotMarker marker = PlotMarker::circle;
  PlotDash dash = PlotDash::solid;
};
PlotStyle series_style(const std::vector<PlotSeries>& series, size_t i);

struct LinePlot {
  std::string title, subtitle, x_label, y_label;
  std::vector<PlotSeries> series;
  double y_min = 0, y_max = 1;  // y_min == y_max: fit the data (from 0 when y_from_zero)
  bool y_from_zero = false;
  bool y_integer = false;  // y counts something: whole-number ticks only
  bool x_log = false;
  bool x_integer = false;  // x takes a few whole values (layers): one labelled tick per whole number
  double x_cap = INFINITY;  // the axis never goes past this (100 for percentages)
  double x_floor = -INFINITY;  // nor below this
  PlotLayout layout;
};

struct Heatmap {
  std::string title, subtitle, x_label, y_label, value_label;
  int rows = 0, columns = 0;
  std::vector<double> values;  // [row][column], NaN for no value
  double min = 0, max = 1;
  std::vector<std::string> row_labels, column_labels;  // empty: 0, 1, 2, ...
  PlotLayout layout;  // dpi and fonts; a heatmap's size follows its cells
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
