// kvsim's side of the plot module (kvsim-plot.so, src/plot/plot.cpp): Qt and the ~70
// libraries it pulls in take ~7 ms to load and relocate, more than a small sweep's whole
// replay, so they are loaded on the first plot instead of at every start. The module sits
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
  void (*line_plot)(const LinePlot&, const std::string&) = nullptr;
  void (*heatmap)(const Heatmap&, const std::string&) = nullptr;
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
      module.line_plot = reinterpret_cast<decltype(module.line_plot)>(dlsym(handle, "kvsim_render_line_plot"));
      module.heatmap = reinterpret_cast<decltype(module.heatmap)>(dlsym(handle, "kvsim_render_heatmap"));
      if (!module.line_plot || !module.heatmap) module.error = path.string() + " lacks the plot entry points";
      return;
    }
    module.error = "kvsim-plot.so is neither beside " + (binary_dir / "kvsim").string() + " nor in " +
                   (binary_dir / KVSIM_PLOT_MODULE_DIR).lexically_normal().string();
  });
  return module;
}

const PlotModule& loaded_or_throw(const std::string& path) {
  const PlotModule& module = plot_module();
  if (!module.error.empty()) throw kvtrace::InputError(path, "", "cannot load the plot module: " + module.error);
  return module;
}

}  // namespace

void render_line_plot(const LinePlot& plot, const std::string& path) { loaded_or_throw(path).line_plot(plot, path); }
void render_heatmap(const Heatmap& map, const std::string& path) { loaded_or_throw(path).heatmap(map, path); }

}  // namespace kvsim
