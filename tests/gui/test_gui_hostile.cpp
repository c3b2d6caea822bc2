// kvsim-gui's program as a user runs it, without anyone to click: what it refuses is one
// line and exit code 2 (never a dialog that waits), and its screenshot is an output like any
// other (complete or absent, never half-written, never over what was there). Every run has a
// time limit, so a window that never quits fails the test instead of hanging it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support/run_cli.hpp"  // run_shell, count_lines, slurp
#include "../support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

// 8 sequences of 256 tokens, 6 layers, 6 heads.
const std::string kTrace = KVSIM_SOURCE_DIR "/data/traces/stories15M-8x256.h5";
const std::string kPngSignature = "\x89PNG\r\n\x1a\n";

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
  // The names in `folder`, sorted.
  static std::vector<std::string> names_in(const fs::path& folder) {
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(folder)) found.push_back(entry.path().filename().string());
    std::sort(found.begin(), found.end());
    return found;
  }
  kvtest::TempDir dir_;
};

TEST_F(GuiHostile, AScreenshotIsAPngOfTheWindow) {
  const std::string shot = dir_.file("shot.png");
  const kvtest::CliResult result =
      gui(kTrace + " --policy h2o --seq 7 --layer 5 --head 5 --step 255 --screenshot " + shot, 300);
  EXPECT_EQ(result.code, 0) << result.output;
  EXPECT_EQ(kvtest::slurp(shot).substr(0, 8), kPngSignature);
}

// Full disk: a 16 KiB tmpfs (smaller than the window's PNG) in a private mount namespace,
// holding an earlier screenshot. What the run leaves there is copied out before the
// namespace (and its mount) ends.
TEST_F(GuiHostile, AScreenshotOnAFullDiskLeavesTheEarlierOne) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
  const std::string full = dir_.file("full"), left = dir_.file("left"), earlier = "an earlier screenshot\n";
  fs::create_directories(full);
  fs::create_directories(left);
  const std::string script = dir_.file("run.sh");
  std::ofstream(script) << "mount -t tmpfs -o size=16k tmpfs " << full << " || exit 77\n"
                        << "printf 'an earlier screenshot\\n' > " << full << "/shot.png\n"
                        << unattended(300) << " " << KVSIM_EXE << " " << kTrace << " --screenshot " << full
                        << "/shot.png\n"
                        << "code=$?\ncp -a " << full << "/. " << left << "/\nexit $code\n";
  const kvtest::CliResult result = kvtest::run_shell("unshare -m sh " + script);
  if (result.code == 77 || result.output.find("unshare:") != std::string::npos)
    GTEST_SKIP() << "no tmpfs in a private mount namespace here: " << result.output;
  expect_refused(result, "cannot write the screenshot: " + full + "/shot.png");
  EXPECT_NE(result.output.find("No space left on device"), std::string::npos) << result.output;
  EXPECT_EQ(names_in(left), std::vector<std::string>{"shot.png"});  // no temporary file
  EXPECT_EQ(kvtest::slurp(left + "/shot.png"), earlier);
}

TEST_F(GuiHostile, AScreenshotPathIsCheckedBeforeTheRun) {
  const std::string missing = dir_.file("no/such/folder/shot.png");
  expect_refused(gui(kTrace + " --screenshot " + missing), missing + ": cannot write: directory does not exist");
  expect_refused(gui(kTrace + " --screenshot " + dir_.path().string()), "is a directory");
  // The trace itself is an input of the run, not a place for the picture.
  const std::string trace = dir_.file("t.h5");
  fs::copy_file(kTrace, trace);
  expect_refused(gui(trace + " --screenshot " + trace), trace);
  EXPECT_EQ(fs::file_size(trace), fs::file_size(kTrace));
  EXPECT_EQ(names_in(dir_.path()), (std::vector<std::string>{"config", "t.h5"}));
}

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

// A place the trace does not have is refused as kvsim replay refuses it, not shown as the
// nearest place it has.
TEST_F(GuiHostile, PlacesOutsideTheTraceAreRefused) {
  const std::string shot = " --screenshot " + dir_.file("shot.png");
  expect_refused(gui(kTrace + " --layer 99" + shot), kTrace + ": layer 99 out of range (the trace has 6)");
  expect_refused(gui(kTrace + " --layer -1" + shot), "layer -1 out of range (the trace has 6)");
  expect_refused(gui(kTrace + " --head 6" + shot), "head 6 out of range (the trace has 6)");
  expect_refused(gui(kTrace + " --seq 8" + shot), "sequence 8 out of range (the trace has 8)");
  expect_refused(gui(kTrace + " --step 256" + shot), "step 256 out of range (sequence 0 has 256)");
  expect_refused(gui(kTrace + " --step -2" + shot), "step -2 out of range (sequence 0 has 256)");
  EXPECT_FALSE(fs::exists(dir_.file("shot.png")));
}

}  // namespace
