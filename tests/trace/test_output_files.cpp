// kvtrace's output files (atomic_file.hpp) under hostile conditions, and what the reader says
// when the trace it reads changes under it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include "../support/small_trace.hpp"
#include "../support/temp_dir.hpp"
#include "kvtrace/atomic_file.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"

namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string message_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const kvtrace::InputError& e) {
    return e.what();
  }
  return "";
}

// Files written together are renamed into place only when every one is complete: one that
// cannot be written leaves none of them, and what the final names held before stays.
TEST(OutputFiles, FilesWrittenTogetherAreAllOrNothing) {
  kvtest::TempDir dir;
  std::ofstream(dir.file("a.txt")) << "old";
  const std::string message = message_of([&] {
    kvtrace::write_files_atomically({{dir.file("a.txt"), "new a"}, {dir.file("b.txt"), "new b"}, {"/dev/full", "c"}},
                                    kvtrace::OutputKind::text, "cannot write the plot");
  });
  EXPECT_EQ(message, "/dev/full: cannot write the plot: No space left on device");
  EXPECT_EQ(slurp(dir.file("a.txt")), "old");
  EXPECT_FALSE(fs::exists(dir.file("b.txt")));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);

  kvtrace::write_files_atomically({{dir.file("a.txt"), "new a"}, {dir.file("b.txt"), "new b"}},
                                  kvtrace::OutputKind::seekable, "cannot write the plot");
  EXPECT_EQ(slurp(dir.file("a.txt")), "new a");
  EXPECT_EQ(slurp(dir.file("b.txt")), "new b");
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

class TraceChanges : public ::testing::Test {
 protected:
  void SetUp() override { path_ = kvtest::write_small_trace(dir_); }
  std::string read_after(const std::function<void()>& change) {
    const kvtrace::TraceReader reader(path_);
    change();
    return message_of([&] { (void)reader.read_head(0, 0, kvtrace::Tensor::k, 0); });
  }
  // Sets the file's modification time to `seconds` after the epoch.
  void set_mtime(const std::string& path, time_t seconds) const {
    const timespec times[2] = {{seconds, 0}, {seconds, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  }
  kvtest::TempDir dir_;
  std::string path_;
};

// The message says what changed: the size, the modification time, or the file itself (its
// inode: replaced by another of the same size and time).
TEST_F(TraceChanges, SayWhatChanged) {
  const std::string touched = read_after([&] { set_mtime(path_, 1000000000); });
  EXPECT_NE(touched.find("changed while being read (modification time"), std::string::npos) << touched;
  EXPECT_EQ(touched.find("bytes"), std::string::npos) << touched;

  const std::string grown = read_after([&] { std::ofstream(path_, std::ios::app) << "x"; });
  EXPECT_NE(grown.find("changed while being read (size"), std::string::npos) << grown;

  set_mtime(path_, 1000000000);
  const std::string replaced = read_after([&] {
    const std::string copy = dir_.file("copy.h5");
    fs::copy_file(path_, copy);
    set_mtime(copy, 1000000000);
    fs::rename(copy, path_);
  });
  EXPECT_NE(replaced.find("changed while being read (inode"), std::string::npos) << replaced;
}

}  // namespace
