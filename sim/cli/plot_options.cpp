#include "plot_options.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "kvtrace/atomic_file.hpp"
#include "kvtrace/error.hpp"

namespace kvsim::cli {

void add_plot_options(po::options_description& options, PlotCliOptions& v) {
  options.add_options()("plot-size", po::value(&v.size)->default_value(v.size),
                        "the plot's size in inches, WxH (a paper's column is about 3.5 wide, its page 7)")(
      "dpi", po::value(&v.dpi)->default_value(v.dpi), "pixels per inch of a PNG plot (SVG: its pixel size)")(
      "font-size", po::value(&v.font_size)->default_value(v.font_size, "10"),
      "the plot's text size in points (titles a little larger, tick labels and legend a little smaller)");
}

PlotLayout plot_layout(const PlotCliOptions& v) {
  PlotLayout layout;
  double w = 0, h = 0;
  char x = 0, extra = 0;
  if (std::sscanf(v.size.c_str(), "%lf%c%lf%c", &w, &x, &h, &extra) != 3 || (x != 'x' && x != 'X') ||
      !std::isfinite(w) || !std::isfinite(h) || w < 1 || h < 1 || w > 40 || h > 40)
    bad_option("plot-size", "'" + v.size + "' is not WxH in inches, each from 1 to 40 (e.g. 3.5x2.6)");
  if (v.dpi < 50 || v.dpi > 1200) bad_option("dpi", std::to_string(v.dpi) + " is not from 50 to 1200");
  if (!std::isfinite(v.font_size) || v.font_size < 4 || v.font_size > 40)
    bad_option("font-size", "not from 4 to 40 points");
  // A PNG of at most 100 megapixels (16000 x 6000 at most): larger ones Qt cannot allocate.
  if (w * v.dpi * h * v.dpi > 1e8) bad_option("plot-size", "with --dpi " + std::to_string(v.dpi) + " exceeds 100 megapixels");
  layout.width_in = w;
  layout.height_in = h;
  layout.dpi = v.dpi;
  layout.font_pt = v.font_size;
  return layout;
}

std::vector<std::string> plot_files(const std::string& option, const std::string& name,
                                    const std::vector<std::string>& stems) {
  namespace fs = std::filesystem;
  if (name.empty()) return {};
#ifndef KVSIM_HAVE_PLOT
  bad_option(option, "this kvsim was built without Qt6, so it cannot render plots");
#endif
  std::string extension = fs::path(name).extension().string();
  for (char& c : extension) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (extension == ".png" || extension == ".svg") {
    if (stems.size() != 1)
      bad_option(option, "'" + name + "' names one image, but this draws " + std::to_string(stems.size()) +
                             " plots; give a directory name without an extension");
    kvtrace::check_output_path(name, kvtrace::OutputKind::seekable);
    return {name};
  }
  if (!extension.empty())
    bad_option(option, "'" + name + "' must end in .png or .svg (one image) or have no extension (a directory)");
  std::error_code error;
  fs::create_directories(name, error);
  if (error || !fs::is_directory(name)) throw kvtrace::InputError(name, "", "cannot create the plot directory");
  std::vector<std::string> files;
  for (const std::string& stem : stems) {
    files.push_back((fs::path(name) / (stem + ".png")).string());
    kvtrace::check_output_path(files.back(), kvtrace::OutputKind::seekable);
  }
  return files;
}

}  // namespace kvsim::cli
