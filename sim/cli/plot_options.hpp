#pragma once
// What every verb that draws shares: --plot-size, --dpi and --font-size, and one rule for
// what a --plot name means (docs/guide.md, "Plots"): a name ending in .png or .svg is one
// image file; a name without an extension is a directory (made if missing) that gets one
// PNG per plot; a verb that draws several plots refuses an image file name, and any other
// extension is refused.
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "kvsim/plot/plot.hpp"

namespace kvsim::cli {

struct PlotCliOptions {
  std::string size = "8x5";  // inches, W x H
  int dpi = 150;
  double font_size = 10;  // points
};

void add_plot_options(po::options_description& options, PlotCliOptions& values);
// The layout the options give; a bad value is one line and exit 2.
PlotLayout plot_layout(const PlotCliOptions& values);

// The files --`option` NAME names for a verb drawing plots called `stems` (one file each,
// "retention", "cross-layer", ...), checked as outputs; a directory is made here. Empty
// NAME: none. Refuses (one line, exit 2) when this kvsim cannot draw (no Qt6), when NAME
// ends in .png or .svg but there are several plots, and when it has another extension.
std::vector<std::string> plot_files(const std::string& option, const std::string& name,
                                    const std::vector<std::string>& stems);

}  // namespace kvsim::cli
