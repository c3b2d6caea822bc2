// Replays the committed fuzz corpus (and any files or directories given) through the fuzz
// target's entry point without libFuzzer, so every compiler's build and CI run it as a
// normal test. Files named seed-*.h5 are well-formed traces and must replay; every other
// file must be answered without a crash (InputError is fine).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_one.hpp"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    if (fs::is_directory(arg)) {
      for (const auto& entry : fs::directory_iterator(arg))
        if (entry.is_regular_file()) files.push_back(entry.path());
    } else {
      files.push_back(arg);
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "usage: fuzz_corpus FILE|DIR...  (no input files found)\n");
    return 2;
  }
  int failures = 0;
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "%s: cannot read\n", file.c_str());
      ++failures;
      continue;
    }
    const kvfuzz::Result result = kvfuzz::run_one(bytes.data(), bytes.size());
    const bool must_replay = file.filename().string().rfind("seed-", 0) == 0;
    const bool ok = !must_replay || result.outcome == kvfuzz::Outcome::replayed;
    std::printf("%s %-8s %s: %s\n", ok ? "ok  " : "FAIL", kvfuzz::outcome_name(result.outcome), file.filename().c_str(),
                result.message.c_str());
    if (!ok) ++failures;
  }
  std::printf("%zu files, %d failures\n", files.size(), failures);
  return failures == 0 ? 0 : 1;
}
