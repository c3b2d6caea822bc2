#pragma once
// Where scripts/fetch-model.sh caches stories15M, as kvsim looks for it; tests that need the
// real model skip, saying so, when it is not there.
#include <cstdlib>
#include <filesystem>

namespace kvtest {

inline std::filesystem::path model_dir() {
  namespace fs = std::filesystem;
  if (const char* dir = std::getenv("KVSIM_MODEL_DIR"); dir && *dir) return dir;
  if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache && *cache) return fs::path(cache) / "kvsim/models";
  const char* home = std::getenv("HOME");
  return fs::path(home ? home : "") / ".cache/kvsim/models";
}

inline bool have_model() {
  return std::filesystem::exists(model_dir() / "stories15M.bin") &&
         std::filesystem::exists(model_dir() / "tokenizer.bin");
}

}  // namespace kvtest
