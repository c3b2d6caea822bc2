// The plots' files, on kvsim's side of the plot module: drawn images are written as every
// output is (kvtrace/atomic_file.hpp), so the temporary files are kvsim's own and removed
// on SIGINT, SIGTERM and SIGHUP with the others.
#include <algorithm>
#include <cctype>
#include <string>

#include "kvsim/plot/plot.hpp"

namespace kvsim {

PlotFormat plot_format(const std::string& path) {
  std::string tail = path.size() >= 4 ? path.substr(path.size() - 4) : "";
  std::transform(tail.begin(), tail.end(), tail.begin(), [](unsigned char c) { return std::tolower(c); });
  return tail == ".svg" ? PlotFormat::svg : PlotFormat::png;
}

void write_plot_files(const std::vector<kvtrace::FileContents>& plots) {
  kvtrace::write_files_atomically(plots, kvtrace::OutputKind::seekable, "cannot write the plot");
}

void render_line_plot(const LinePlot& plot, const std::string& path) {
  write_plot_files({{path, draw_line_plot(plot, plot_format(path))}});
}

void render_heatmap(const Heatmap& map, const std::string& path) {
  write_plot_files({{path, draw_heatmap(map, plot_format(path))}});
}

}  // namespace kvsim
