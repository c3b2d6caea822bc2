// kvsim rank as a user runs it: the leaderboard of a sweep CSV in each format, -o written as
// every output is, and hostile input (a missing column, a value that is no number, an empty
// file, a folder, options out of range, sweeps it cannot rank) refused in one line, exit 2.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "../support/cli_checks.hpp"
#include "../support/rank_sweep.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

const std::string kHeader = kvtest::kRankHeader;
// kRankHandRows (worked by hand in tests/support/rank_sweep.hpp: oracle 0.9635 at 64, tova
// 0.9323 at 128, h2o 0.8750 at none) and full, which ignores the budget.
const std::string kRows = std::string(kvtest::kRankHandRows) +
                          "full,,32,32,0.125,1,0\n"
                          "full,,64,64,0.25,1,0\n"
                          "full,,128,128,0.5,1,0\n";

std::string sweep(const kvtest::TempDir& dir, const std::string& text = kHeader + kRows) {
  write(dir.file("s.csv"), text);
  return dir.file("s.csv");
}

void expect_refused(const std::string& args, const std::string& expected) {
  const auto result = kvtest::expect_one_line_error(args);
  EXPECT_NE(result.output.find(expected), std::string::npos) << args << "\n" << result.output;
}

}  // namespace

TEST(CliRank, PrintsTheLeaderboard) {
  kvtest::TempDir dir;
  const std::string path = sweep(dir);
  const auto result = kvtest::run_kvsim("rank " + path);
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_NE(result.output.find("rank  policy     mean  smallest budget\n"
                               "   1  oracle*  0.9635  64 (0.2500)\n"
                               "   2  tova     0.9323  128 (0.5000)\n"
                               "   3  h2o      0.8750  -\n"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("full: ignores the budget, not ranked"), std::string::npos) << result.output;
  const auto error = kvtest::run_kvsim("rank " + path + " --metric output_error_mean --target 0.2 --format csv");
  ASSERT_EQ(error.code, 0) << error.output;
  EXPECT_NE(error.output.find("3,h2o,,,,false,output_error_mean,lower,0.125,0.125,0.5,3,0.2,64,0.25\n"),
            std::string::npos)
      << error.output;
}

TEST(CliRank, WritesTheFormatToOutAndPrintsTheText) {
  kvtest::TempDir dir;
  const std::string path = sweep(dir);
  const auto result = kvtest::run_kvsim("rank " + path + " --format markdown -o " + dir.file("r.md"));
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_NE(result.output.find("   1  oracle*  0.9635  64 (0.2500)\n"), std::string::npos) << result.output;
  EXPECT_EQ(kvtest::slurp(dir.file("r.md")), kvtest::run_kvsim("rank " + path + " --format markdown").output);
  // -o -: standard output carries the format alone, the text goes to stderr.
  std::string command = "(";
  command.append(KVSIM_EXE).append(" rank ").append(path).append(" --format latex -o - 2>/dev/null)");
  const auto piped = kvtest::run_shell(command);
  ASSERT_EQ(piped.code, 0) << piped.output;
  EXPECT_EQ(piped.output.rfind("% ", 0), 0u) << piped.output;
  EXPECT_NE(piped.output.find("\\end{tabular}"), std::string::npos) << piped.output;
  EXPECT_EQ(piped.output.find("   1  oracle*"), std::string::npos) << piped.output;
}

TEST(CliRank, HostileSweepsAreOneLine) {
  kvtest::TempDir dir;
  // The reader's refusals, each naming the file.
  const std::string path = sweep(dir, kHeader + kRows);
  expect_refused("rank " + path + " --metric retention_p5", path + ": no 'retention_p5' column");
  sweep(dir, kHeader + "h2o,,32,32,0.125,abc,0.25\n");
  expect_refused("rank " + path, path + ": line 2");
  sweep(dir, "");
  expect_refused("rank " + path, path + ": empty");
  expect_refused("rank " + dir.file("none.csv"), dir.file("none.csv") + ": cannot read the sweep");
  expect_refused("rank " + dir.path().string(), dir.path().string() + ": cannot read the sweep: it is a directory");
  // What ranking adds.
  sweep(dir, kHeader + "h2o,,32,32,0.125,0.75,\nh2o,,64,64,0.25,0.8,\ntova,,64,64,0.25,0.9,\n");
  expect_refused("rank " + path, path + ": the ranked policies share 1 budget(s)");
  sweep(dir, kHeader + "h2o,,32,32,0.125,0.75,0.1\nh2o,,64,64,0.25,0.8,\n");
  expect_refused("rank " + path + " --metric output_error_mean",
                 path + ": h2o at budget 64: output_error_mean is empty (not measured)");
  sweep(dir, kHeader + "full,,32,32,0.125,1,0\nfull,,64,64,0.25,1,0\n");
  expect_refused("rank " + path, path + ": no policy whose budget bounds its cache");
  sweep(dir, kHeader + "h2o,,64,64,0.25,0.75,\nh2o,,25%,64,0.25,0.8,\n");
  expect_refused("rank " + path, path + ": h2o: its budgets all have budget_share_mean 0.250000, a span of 0");
  write(dir.file("paged.csv"), std::string("policy,budget,budget_share_mean,retention_mean,page\n") +
                                   "h2o,32,0.125,0.75,16\nh2o,64,0.25,0.8,0\n");
  expect_refused("rank " + dir.file("paged.csv"), "rows of different --page sizes");
}

TEST(CliRank, HostileOptionsAreOneLine) {
  kvtest::TempDir dir;
  const std::string path = sweep(dir);
  expect_refused("rank " + path + " --metric occupancy_mean", "--metric: 'occupancy_mean' is not a quality column");
  expect_refused("rank " + path + " --format html", "--format: 'html' is not text, markdown, latex or csv");
  expect_refused("rank " + path + " --target nan", "--target: must be a finite number");
  expect_refused("rank " + path + " --target abc", "--target");
  expect_refused("rank", "missing SWEEP");
  expect_refused("rank " + path + " -o " + path, "");
  expect_refused("rank " + path + " -o " + dir.file("missing/r.csv"), dir.file("missing/r.csv"));
}
