// Outputs under hostile conditions: plot paths that are inputs, full disks under plots and
// standard output, closed and broken standard output, long names, /proc/self/fd links to
// pipes and sockets, temporary files a killed run left. Each test builds what it needs, runs
// the CLI and checks the exit code, the one line and what is left on disk.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class HostileOutputs : public ::testing::Test {
 protected:
  void SetUp() override {
    trace_ = dir_.file("t.h5");
    const auto made =
        kvtest::run_kvsim("synth " + trace_ + " --layers 2 --heads 4 --kv-heads 2 --head-dim 8 --tokens 24 --seqs 2");
    ASSERT_EQ(made.code, 0) << made.output;
  }

  static std::string kvsim() { return std::string(KVSIM_EXE); }

  // Exit 2 with one line holding every fragment.
  static void expect_refused(const kvtest::CliResult& result, std::initializer_list<std::string> fragments) {
    EXPECT_EQ(result.code, 2) << result.output;
    EXPECT_EQ(kvtest::count_lines(result.output), 1) << result.output;
    for (const auto& fragment : fragments)
      EXPECT_TRUE(has(result.output, fragment)) << fragment << "\n" << result.output;
  }

  // The names in `folder` (hidden ones too), sorted.
  static std::vector<std::string> names_in(const std::string& folder) {
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(folder)) found.push_back(entry.path().filename().string());
    std::sort(found.begin(), found.end());
    return found;
  }

  kvtest::TempDir dir_;
  std::string trace_;
};

// Any legal name can be written: the temporary sibling of a 255-byte name is shortened.
TEST_F(HostileOutputs, LongestLegalNameIsWritten) {
  const std::string name = std::string(251, 'a') + ".csv";
  ASSERT_EQ(name.size(), 255u);
  const auto result = kvtest::run_kvsim("replay " + trace_ + " --policy h2o --budget 8 --csv " + dir_.file(name));
  EXPECT_EQ(result.code, 0) << result.output;
  EXPECT_EQ(kvtest::slurp(dir_.file(name)).rfind("policy,params,budget", 0), 0u);
  EXPECT_EQ(names_in(dir_.path().string()), (std::vector<std::string>{name, "t.h5"}));
}

}  // namespace
