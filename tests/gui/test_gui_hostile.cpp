// kvsim-gui's program as a user runs it, without anyone to click: what it refuses is one
// line and exit code 2 (never a dialog that waits), and its screenshot is an output like any
// other (complete or absent, never half-written, never over what was there). Every run has a
// time limit, so a window that never quits fails the test instead of hanging it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support/run_cli.hpp"  // CliResult, count_lines, slurp
#include "../support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

// 8 sequences of 256 tokens, 6 layers, 6 heads.
const std::string kTrace = KVSIM_SOURCE_DIR "/data/traces/stories15M-8x256.h5";

class GuiHostile : public ::testing::Test {
 protected:
  // kvsim-gui (KVSIM_EXE) on the offscreen platform, its settings in the test's folder, killed
  // after `limit_s` seconds (exit code 124 then): what goes before the program.
  std::string unattended(int limit_s) const {
    return "QT_QPA_PLATFORM=offscreen XDG_CONFIG_HOME=" + dir_.file("config") + " timeout -k 5 " +
           std::to_string(limit_s);
  }
  kvtest::CliResult gui(const std::string& args, int limit_s = 30) const {
    return kvtest::run_kvsim(args, unattended(limit_s));
  }
  // Exit 2 with one line holding `fragment`.
  static void expect_refused(const kvtest::CliResult& result, const std::string& fragment) {
    EXPECT_EQ(result.code, 2) << result.output;
    EXPECT_EQ(kvtest::count_lines(result.output), 1) << result.output;
    EXPECT_NE(result.output.find(fragment), std::string::npos) << result.output;
  }
  kvtest::TempDir dir_;
};

// Without anyone to click (a screenshot, a time to quit, the offscreen platform), what the
// window cannot apply is the one line, not a dialog.
TEST_F(GuiHostile, OptionsTheWindowRefusesAreOneLine) {
  const std::string shot = dir_.file("shot.png");
  for (const std::string& flags : {" --screenshot " + shot, std::string(" --quit-after-ms 0"), std::string()}) {
    SCOPED_TRACE(flags);
    expect_refused(gui(kTrace + " --policy nosuch" + flags), "unknown policy 'nosuch'");
    expect_refused(gui(kTrace + " --budget 0%" + flags), "budget '0%': must be above 0%");
    expect_refused(gui(kTrace + " --budget 1e99" + flags), "budget '1e99'");
    expect_refused(gui(kTrace + " --mode sideways" + flags), "sideways");
  }
  EXPECT_FALSE(fs::exists(shot));
}

TEST_F(GuiHostile, TracesThatCannotBeOpenedAreOneLine) {
  const std::string shot = " --screenshot " + dir_.file("shot.png");
  expect_refused(gui(dir_.file("missing.h5") + shot), dir_.file("missing.h5"));
  expect_refused(gui(dir_.path().string() + shot), dir_.path().string());
  const std::string fifo = dir_.file("fifo.h5");  // nothing writes into it: opening it must not wait
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_refused(gui(fifo + shot), "is not a regular file");
  const std::string truncated = dir_.file("truncated.h5");
  {
    const std::string whole = kvtest::slurp(kTrace);
    std::ofstream(truncated, std::ios::binary) << whole.substr(0, whole.size() / 2);
  }
  expect_refused(gui(truncated + shot), truncated);
  EXPECT_FALSE(fs::exists(dir_.file("shot.png")));
}

}  // namespace
