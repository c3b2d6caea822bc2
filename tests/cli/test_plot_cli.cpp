// --plot on every verb that draws, under one rule (docs/guide.md, "Plots"): a name ending in
// .png or .svg is one image, a name without an extension a directory of PNGs, and a verb that
// draws several plots refuses an image name; --plot-size, --dpi and --font-size set the figure.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../support/cli_checks.hpp"
#include "../support/model_dir.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

namespace fs = std::filesystem;

const std::string kTrace = std::string(KVSIM_SOURCE_DIR) + "/data/traces/stories15M-8x256.h5";
const std::string kPlan = "plan --model llama-3.1-8b --gpu h100-80gb --budget 20% --kv-quant flexgen4,kivi2";

// A PNG's width and height, from its IHDR chunk (big-endian at bytes 16..23).
std::pair<int, int> png_size(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char header[24] = {};
  in.read(reinterpret_cast<char*>(header), 24);
  auto word = [&](int at) { return (header[at] << 24) | (header[at + 1] << 16) | (header[at + 2] << 8) | header[at + 3]; };
  return {word(16), word(20)};
}

#ifdef KVSIM_HAVE_PLOT

TEST(CliPlot, AnalyzeRefusesAnImageNameForItsSeveralPlots) {
  kvtest::TempDir dir;
  const auto result = kvtest::expect_one_line_error("analyze " + kTrace + " --seqs 0 --plot " + dir.file("an.png"));
  EXPECT_NE(result.output.find("names one image, but this draws 5 plots; give a directory name without an extension"),
            std::string::npos)
      << result.output;
  EXPECT_FALSE(fs::exists(dir.file("an.png")));
}

TEST(CliPlot, AnalyzeDrawsIntoADirectoryAtTheChosenDpi) {
  kvtest::TempDir dir;
  const auto result =
      kvtest::run_kvsim("analyze " + kTrace + " --seqs 0 --lags 1,4 --plot " + dir.file("an") + " --dpi 100");
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_EQ(png_size(dir.file("an/cross-layer.png")), std::make_pair(800, 500));  // 8 x 5 inches at 100 dpi
  EXPECT_TRUE(fs::exists(dir.file("an/persistence.png")));
}

TEST(CliPlot, SweepDrawsEachMetricIntoADirectory) {
  kvtest::TempDir dir;
  const auto result = kvtest::run_kvsim("sweep " + kTrace + " --seqs 0 --layers 0 --policies h2o,oracle --budgets 25%,50% "
                                        "--plot-metric retention,p5,occupancy_dense_peak --plot " + dir.file("plots") +
                                        " --plot-size 3.5x2.5 --dpi 200 --font-size 8");
  ASSERT_EQ(result.code, 0) << result.output;
  for (const char* name : {"retention_mean.png", "retention_p5.png", "occupancy_dense_peak.png"})
    EXPECT_EQ(png_size(dir.file("plots/") + name), std::make_pair(700, 500)) << name;
}

TEST(CliPlot, SweepRefusesAnImageNameForSeveralMetrics) {
  kvtest::TempDir dir;
  const auto result = kvtest::expect_one_line_error("sweep " + kTrace + " --seqs 0 --budgets 50% --plot-metric "
                                                    "retention,min --plot " + dir.file("p.png"));
  EXPECT_NE(result.output.find("names one image, but this draws 2 plots"), std::string::npos) << result.output;
}

TEST(CliPlot, BadPlotOptionsAreOneLine) {
  kvtest::TempDir dir;
  const std::string sweep = "sweep " + kTrace + " --seqs 0 --budgets 50% --plot " + dir.file("p.png");
  const std::pair<std::string, std::string> cases[] = {
      {sweep + " --plot-size 8", "--plot-size: '8' is not WxH in inches"},
      {sweep + " --plot-size 0.5x3", "--plot-size: '0.5x3' is not WxH in inches"},
      {sweep + " --dpi 20", "--dpi: 20 is not from 50 to 1200"},
      {sweep + " --font-size 2", "--font-size: not from 4 to 40 points"},
      {sweep + " --plot-metric retention,bogus", "--plot-metric: unknown measure 'bogus'"},
      {sweep + " --plot-metric p5,retention_p5", "--plot-metric: 'retention_p5' is named twice"},
      {"sweep " + kTrace + " --seqs 0 --budgets 50% --plot " + dir.file("p.jpg"),
       "must end in .png or .svg (one image) or have no extension (a directory)"},
      {kPlan + " --plot " + dir.file("p.svg") + " --dpi 5000", "--dpi: 5000 is not from 50 to 1200"},
      {"analyze " + kTrace + " --plot " + dir.file("d") + " --font-size 50", "--font-size: not from 4 to 40 points"},
  };
  for (const auto& [args, message] : cases) {
    const auto result = kvtest::expect_one_line_error(args);
    EXPECT_NE(result.output.find(message), std::string::npos) << args << "\n" << result.output;
  }
  EXPECT_FALSE(fs::exists(dir.file("p.png")));
}

TEST(CliPlot, SweepRefusesAMetricNoCellHas) {
  kvtest::TempDir dir;
  const auto result = kvtest::expect_one_line_error("sweep " + kTrace + " --seqs 0 --layers 0 --budgets 50% "
                                                    "--plot-metric span_evidence_held_all --plot " + dir.file("p.png"));
  EXPECT_NE(result.output.find("no cell of this sweep has a value for 'span_evidence_held_all'"), std::string::npos)
      << result.output;
}

TEST(CliPlot, PlanDrawsIntoAFileOrADirectory) {
  kvtest::TempDir dir;
  auto result = kvtest::run_kvsim(kPlan + " --plot " + dir.file("p.png") + " --plot-size 6x4 --dpi 100");
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_EQ(png_size(dir.file("p.png")), std::make_pair(600, 400));
  result = kvtest::run_kvsim(kPlan + " --plot " + dir.file("plots"));
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_EQ(png_size(dir.file("plots/plan.png")), std::make_pair(1200, 750));  // 8 x 5 at 150 dpi
}

TEST(CliPlot, EvalDrawsBothPlotsAtTheChosenSize) {
  if (!kvtest::have_model()) GTEST_SKIP() << "stories15M not found in " << kvtest::model_dir();
  kvtest::TempDir dir;
  const auto result = kvtest::run_kvsim("eval --trace " + kTrace + " --seqs 0 --tokens 24 --policies tova,recent "
                                        "--budgets 25%,50% --plot " + dir.file("e.png") + " --proxy-plot " +
                                        dir.file("proxy") + " --plot-size 4x3 --dpi 100");
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_EQ(png_size(dir.file("e.png")), std::make_pair(400, 300));
  EXPECT_EQ(png_size(dir.file("proxy/proxy.png")), std::make_pair(400, 300));
}

#endif

}  // namespace
