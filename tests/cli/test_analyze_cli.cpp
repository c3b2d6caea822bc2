// kvsim analyze as a user runs it on the bundled real traces, and --layer-budget persistence.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

const std::string kTrace = std::string(KVSIM_SOURCE_DIR) + "/data/traces/stories15M-8x256.h5";

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The text with its lines joined: the header wraps at a width, where depends on the trace's path.
std::string joined(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

}  // namespace

TEST(CliAnalyze, PrintsPersistenceLagsCrossLayerAndRepeats) {
  const auto result = kvtest::run_kvsim("analyze " + kTrace + " --seqs 0,4");
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_TRUE(has(joined(result.output), "2 sequences x 6 layers x 6 heads")) << result.output;
  EXPECT_TRUE(has(result.output, "layer  persistence  defined  ever-pivotal  repeat")) << result.output;
  EXPECT_TRUE(has(result.output, "\nall ")) << result.output;
  EXPECT_TRUE(has(result.output, "   lag 1    lag 4   lag 16   lag 64")) << result.output;
  EXPECT_TRUE(has(result.output, "top-10% recall")) << result.output;
  EXPECT_TRUE(has(result.output, "   4-5 ")) << result.output;  // cross-layer pairs
  EXPECT_TRUE(has(result.output, "Repetitive attention in sequence 0")) << result.output;
  EXPECT_TRUE(has(result.output, "budget weights by persistence")) << result.output;
}

// The repetitive-attention paragraph wraps as one paragraph (no line ends mid-sentence short
// of the width), and the BOS piece "\n<s>\n" shows as <s>.
TEST(CliAnalyze, RepeatsParagraphWrapsWholeAndBosShowsBare) {
  const auto result = kvtest::run_kvsim("analyze " + kTrace + " --seqs 0 --layers 0");
  ASSERT_EQ(result.code, 0) << result.output;
  const size_t begin = result.output.find("Repetitive attention in sequence 0");
  const size_t end = result.output.find("layer  |S_t|", begin);
  ASSERT_NE(end, std::string::npos) << result.output;
  std::vector<std::string> lines;
  for (size_t at = begin; at < end; at = result.output.find('\n', at) + 1)
    lines.push_back(result.output.substr(at, result.output.find('\n', at) - at));
  ASSERT_GE(lines.size(), 2u) << result.output;
  for (size_t i = 0; i + 1 < lines.size(); ++i) EXPECT_GT(lines[i].size(), 80u) << "a short line: " << lines[i];
  EXPECT_TRUE(has(result.output, " 0 '<s>' ")) << result.output;
  EXPECT_FALSE(has(result.output, "\\n<s>")) << result.output;
}

TEST(CliAnalyze, WritesCsvJsonAndPlotsTheSameWhateverTheThreadCount) {
  kvtest::TempDir dir;
  const std::string common = "analyze " + kTrace + " --seqs 1,3 --lags 2,8 --topk 5 ";
  const auto one = kvtest::expect_same_whatever_threads(common, dir, 2, {"csv", "json"});
  ASSERT_EQ(one.code, 0) << one.output;
  const std::string csv = kvtest::slurp(dir.file("one.csv"));
  // 36 (layer, head) rows, 6 layer means, 1 overall.
  EXPECT_EQ(kvtest::count_lines(csv), 1 + 36 + 6 + 1);
  EXPECT_EQ(csv.rfind("layer,head,count,persistence,persistence_defined,ever_pivotal,repeat_share,spearman_lag2,"
                      "spearman_lag8,topk_recall_lag2,topk_recall_lag8\n",
                      0),
            0u)
      << csv;
  EXPECT_TRUE(has(csv, "\nall,mean,72,")) << csv;
  const std::string json = kvtest::slurp(dir.file("one.json"));
  for (const char* key : {"\"per_head\"", "\"per_layer\"", "\"per_sequence\"", "\"cross_layer\"", "\"repeats\"",
                          "\"definitions\"", "\"top_k\": \"5\""})
    EXPECT_TRUE(has(json, key)) << key;
}

TEST(CliAnalyze, WritesPlots) {
  kvtest::TempDir dir;
  const std::string plots = dir.file("plots");
  const auto result = kvtest::run_kvsim("analyze " + kTrace + " --seqs 2 --plot " + plots);
#ifdef KVSIM_HAVE_PLOT
  ASSERT_EQ(result.code, 0) << result.output;
  for (const char* name :
       {"persistence.png", "ever-pivotal.png", "spearman-vs-lag.png", "topk-recall-vs-lag.png", "cross-layer.png"})
    EXPECT_GT(std::filesystem::file_size(std::filesystem::path(plots) / name), 10000u) << name;
#else
  EXPECT_EQ(result.code, 2);
#endif
}

TEST(CliAnalyze, HelpListsTheOptions) {
  const auto result = kvtest::run_kvsim("analyze --help");
  ASSERT_EQ(result.code, 0) << result.output;
  for (const char* option :
       {"--lags", "--topk", "--csv", "--json", "--plot", "--seqs", "--layers", "--threads", "--rows"})
    EXPECT_TRUE(has(result.output, option)) << option;
}

TEST(CliAnalyze, BadInputIsOneLineExitTwoAndNoFile) {
  kvtest::TempDir dir;
  const std::string out = " --csv " + dir.file("out.csv") + " --json " + dir.file("out.json");
  for (const std::string& args : std::vector<std::string>{
           "analyze " + kTrace + " --lags 0" + out,
           "analyze " + kTrace + " --lags 1,x" + out,
           "analyze " + kTrace + " --topk 0" + out,
           "analyze " + kTrace + " --topk abc" + out,
           "analyze " + kTrace + " --min-positions 1" + out,
           "analyze " + kTrace + " --max-steps 0" + out,
           "analyze " + kTrace + " --samples -1" + out,
           "analyze " + kTrace + " --seqs 8" + out,
           "analyze " + kTrace + " --layers 6" + out,
           "analyze " + kTrace + " --seqs 1,1" + out,
           "analyze " + kTrace + " --rows attn" + out,
           "analyze " + kTrace + " --threads -1" + out,
           "analyze " + kTrace + " --csv /nonexistent/x.csv",
           "analyze " + dir.file("missing.h5") + out,
           "analyze" + out,
       }) {
    kvtest::expect_one_line_error(args);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(CliSweep, LayerBudgetByPersistence) {
  kvtest::TempDir dir;
  const std::string common = "sweep " + kTrace + " --policies h2o --budgets 20% --seqs 0,1 --json ";
  const auto uniform = kvtest::run_kvsim(common + dir.file("uniform.json"));
  ASSERT_EQ(uniform.code, 0) << uniform.output;
  const auto persistence = kvtest::run_kvsim(common + dir.file("persistence.json") + " --layer-budget persistence");
  ASSERT_EQ(persistence.code, 0) << persistence.output;
  // The schedule moves budget between layers, so the results differ from a uniform budget.
  EXPECT_NE(kvtest::slurp(dir.file("uniform.json")), kvtest::slurp(dir.file("persistence.json")));
  const auto replay =
      kvtest::run_kvsim("replay " + kTrace + " --policy tova --budget 30% --seqs 2 --layer-budget persistence");
  EXPECT_EQ(replay.code, 0) << replay.output;
  kvtest::expect_one_line_error("sweep " + kTrace + " --layer-budget persistance");
}
