#include "kvsim/core/data_dir.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#ifndef KVSIM_SOURCE_DATA_DIR
#define KVSIM_SOURCE_DATA_DIR "data"
#endif
#ifndef KVSIM_BUILD_DIR
#define KVSIM_BUILD_DIR ""
#endif
#ifndef KVSIM_INSTALL_DATA_DIR
#define KVSIM_INSTALL_DATA_DIR ""
#endif

namespace kvsim {
namespace {

namespace fs = std::filesystem;

bool has_cards(const fs::path& dir) {
  std::error_code error;
  return fs::is_directory(dir / "models", error) && fs::is_directory(dir / "gpus", error);
}

// The executable or shared object this function was linked into.
fs::path this_binary() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&this_binary), &info) != 0 && info.dli_fname && *info.dli_fname) {
    std::error_code error;
    fs::path path = fs::canonical(info.dli_fname, error);
    if (!error) return path;
  }
  std::error_code error;
  fs::path path = fs::canonical("/proc/self/exe", error);
  return error ? fs::path() : path;
}

// `dir` canonical.
bool inside(const fs::path& path, const fs::path& dir) {
  if (dir.empty() || path.empty()) return false;
  auto d = dir.begin(), p = path.begin();
  for (; d != dir.end(); ++d, ++p)
    if (p == path.end() || *p != *d) return false;
  return true;
}

}  // namespace

std::string data_dir() {
  if (const char* env = std::getenv("KVSIM_DATA_DIR"); env && *env) return env;
  const fs::path binary = this_binary();
  const fs::path source = KVSIM_SOURCE_DATA_DIR;
  std::error_code error;
  const fs::path build = std::string(KVSIM_BUILD_DIR).empty() ? fs::path() : fs::canonical(KVSIM_BUILD_DIR, error);
  const bool in_build = !build.empty() && inside(binary, build);
  // bin/kvsim -> PREFIX; lib/python3/dist-packages/kvsim/_kvsim*.so -> PREFIX: at most 6 levels
  // up, and from the build tree never above it (an install into a folder of the build tree
  // still finds its own data).
  fs::path dir = binary.parent_path();
  for (int level = 0; level < 6 && !dir.empty(); ++level) {
    const fs::path candidate = dir / "share" / "kvsim";
    if (has_cards(candidate)) return candidate.string();
    if (dir == dir.root_path() || (in_build && dir == build)) break;
    dir = dir.parent_path();
  }
  if (in_build && has_cards(source)) return source.string();
  const fs::path installed = KVSIM_INSTALL_DATA_DIR;
  if (!installed.empty() && has_cards(installed)) return installed.string();
  if (has_cards(source)) return source.string();
  return "data";
}

}  // namespace kvsim
