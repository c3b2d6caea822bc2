#pragma once
// What the plot module's drawings share (sim/plot/plot.cpp, line_plot.cpp): the offscreen
// application, fonts in points, and rendering into the bytes of a PNG or SVG file.
#include <QFont>
#include <QPainter>
#include <functional>
#include <string>

#include "kvsim/plot/plot.hpp"

namespace kvsim::plot_detail {

void ensure_application();
// The application's font at `points` points, in a painter whose unit is `unit_pt` points.
QFont font_at(double points, bool bold, double unit_pt = 1.0);
// Renders `draw`, which paints in units of 1/units_per_inch inch, into a figure of
// layout.width_in x layout.height_in inches at layout.dpi: the bytes of a PNG or SVG file.
std::string draw_image(PlotFormat format, double width_units, double height_units, double units_per_inch, int dpi,
                       const std::function<void(QPainter&)>& draw);

}  // namespace kvsim::plot_detail
