// kvtrace's output files (atomic_file.hpp) under hostile conditions.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include "../support/temp_dir.hpp"
#include "kvtrace/atomic_file.hpp"
#include "kvtrace/error.hpp"

namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The temporary sibling of the longest legal name fits the file system's name limit.
TEST(OutputFiles, LongestLegalNameHasATemporaryThatFits) {
  kvtest::TempDir dir;
  std::string accented = std::string(236, 'y');
  for (int i = 0; i < 9; ++i) accented += "\xc3\xa9";  // é, two bytes
  accented += "z";
  ASSERT_EQ(accented.size(), 255u);
  for (const std::string& name : {std::string(255, 'x'), accented}) {
    kvtrace::AtomicFile file(dir.file(name), kvtrace::OutputKind::text);
    EXPECT_LE(fs::path(file.temp_path()).filename().string().size(), 255u) << file.temp_path();
    kvtrace::write_file_atomically(dir.file(name), "whole");
    EXPECT_EQ(slurp(dir.file(name)), "whole");
  }
}

}  // namespace
