// kvsim's side of the plot module (kvsim-plot.so, sim/plot/plot.cpp): Qt and the ~70
// libraries it pulls in take longer to load and relocate than a small sweep's whole replay,
// so they are loaded on the first plot instead of at every start. The module sits
// beside the kvsim binary in the build tree and in KVSIM_PLOT_MODULE_DIR (relative to the
// binary's directory) when installed.
#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <string>

#include "kvsim/plot/plot.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

namespace fs = std::filesystem;

struct PlotModule {
  void (*line_plot)(const LinePlot&, PlotFormat, std::string&) = nullptr;
  void (*heatmap)(const Heatmap&, PlotFormat, std::string&) = nullptr;
  std::string error;  // why it could not be loaded
};

const PlotModule& plot_module() {
  static PlotModule module;
  static std::once_flag loaded;
  std::call_once(loaded, [] {
    std::error_code error;
    const fs::path binary_dir = fs::canonical("/proc/self/exe", error).parent_path();
    for (const fs::path& dir : {binary_dir, binary_dir / KVSIM_PLOT_MODULE_DIR}) {
      const fs::path path = dir / "kvsim-plot.so";
      if (!fs::exists(path, error)) continue;
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!handle) {
        module.error = dlerror();
        return;
      }
      module.line_plot = reinterpret_cast<decltype(module.line_plot)>(dlsym(handle, "kvsim_draw_line_plot"));
      module.heatmap = reinterpret_cast<decltype(module.heatmap)>(dlsym(handle, "kvsim_draw_heatmap"));
      if (!module.line_plot || !module.heatmap) module.error = path.string() + " lacks the plot entry points";
      return;
    }
    module.error = "kvsim-plot.so is neither beside " + (binary_dir / "kvsim").string() + " nor in " +
                   (binary_dir / KVSIM_PLOT_MODULE_DIR).lexically_normal().string();
  });
  return module;
}

const PlotModule& loaded_or_throw() {
  const PlotModule& module = plot_module();
  if (!module.error.empty()) throw kvtrace::InputError("", "", "cannot load the plot module: " + module.error);
  return module;
}

}  // namespace

std::string draw_line_plot(const LinePlot& plot, PlotFormat format) {
  std::string image;
  loaded_or_throw().line_plot(plot, format, image);
  return image;
}

std::string draw_heatmap(const Heatmap& map, PlotFormat format) {
  std::string image;
  loaded_or_throw().heatmap(map, format, image);
  return image;
}

}  // namespace kvsim
