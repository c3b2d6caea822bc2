// --page (docs/semantics.md, section 2): sweeps, replays and plans in page mode as a user
// runs them, and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

const std::string kTrace = std::string(KVSIM_SOURCE_DIR) + "/data/traces/stories15M-8x256.h5";

// The fields of each line of a CSV (no quoted commas in these files).
std::vector<std::vector<std::string>> fields_of(const std::string& csv) {
  std::vector<std::vector<std::string>> lines;
  for (size_t begin = 0; begin < csv.size();) {
    const size_t end = csv.find('\n', begin);
    std::vector<std::string>& fields = lines.emplace_back();
    const std::string line = csv.substr(begin, end - begin);
    for (size_t from = 0;;) {
      const size_t comma = line.find(',', from);
      fields.push_back(line.substr(from, comma - from));
      if (comma == std::string::npos) break;
      from = comma + 1;
    }
    begin = end + 1;
  }
  return lines;
}

// The lines of a CSV without its page column (page mode's).
std::string without_page_column(const std::string& csv) {
  const auto lines = fields_of(csv);
  const auto page = std::find(lines.front().begin(), lines.front().end(), "page") - lines.front().begin();
  std::string out;
  for (const auto& fields : lines) {
    for (size_t f = 0; f < fields.size(); ++f)
      if (static_cast<std::ptrdiff_t>(f) != page) out += (out.empty() || out.back() == '\n' ? "" : ",") + fields[f];
    out += "\n";
  }
  return out;
}

}  // namespace

TEST(CliPage, SweepWritesThePageAndIsTheSameWhateverTheThreads) {
  kvtest::TempDir dir;
  const auto one = kvtest::expect_same_whatever_threads(
      "sweep " + kTrace + " --policies h2o,tova,snapkv,scissorhands --budgets 20%,40 --seqs 0,3 --page 16 ", dir, 2,
      {"csv", "json"});
  ASSERT_EQ(one.code, 0) << one.output;
  EXPECT_NE(one.output.find("mode stream, pages of 16 (mean score);"), std::string::npos) << one.output;
  const std::string csv = kvtest::slurp(dir.file("one.csv"));
  EXPECT_NE(csv.find(",occupancy_model_union_peak,page\n"), std::string::npos) << csv;
  EXPECT_EQ(kvtest::count_lines(csv), 1 + 4 * 2);
  const auto lines = fields_of(csv);
  const auto page = std::find(lines.front().begin(), lines.front().end(), "page") - lines.front().begin();
  size_t rows = 0;
  for (size_t l = 1; l < lines.size(); ++l) rows += lines[l].at(static_cast<size_t>(page)) == "16";
  EXPECT_EQ(rows, 8u);
  const std::string json = kvtest::slurp(dir.file("one.json"));
  EXPECT_NE(json.find("\"page\": 16"), std::string::npos);
  EXPECT_NE(json.find("\"page_score\": \"mean\""), std::string::npos);
  // max differs from mean somewhere in the grid.
  const auto max = kvtest::run_kvsim("sweep " + kTrace +
                                     " --policies h2o,tova,snapkv,scissorhands --budgets 20%,40 "
                                     "--seqs 0,3 --page 16 --page-score max --csv " +
                                     dir.file("max.csv"));
  ASSERT_EQ(max.code, 0) << max.output;
  EXPECT_NE(max.output.find("pages of 16 (max score)"), std::string::npos);
  EXPECT_NE(kvtest::slurp(dir.file("max.csv")), csv);
}

TEST(CliPage, PagesOfOnePositionAreTovasOwnEviction) {
  // tova evicts its lowest score, one per step: pages of 1 evict exactly that.
  kvtest::TempDir dir;
  const std::string common = "sweep " + kTrace + " --policies tova,knorm --budgets 10%,64 --seqs 1 --csv ";
  ASSERT_EQ(kvtest::run_kvsim(common + dir.file("token.csv")).code, 0);
  ASSERT_EQ(kvtest::run_kvsim(common + dir.file("page.csv") + " --page 1").code, 0);
  EXPECT_EQ(without_page_column(kvtest::slurp(dir.file("page.csv"))), kvtest::slurp(dir.file("token.csv")));
}

TEST(CliPage, ReplayPrintsThePageMode) {
  const auto result = kvtest::run_kvsim("replay " + kTrace + " --policy h2o --budget 30% --seqs 0 --page 16");
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_NE(result.output.find("mode stream, pages of 16 (mean score)\n"), std::string::npos) << result.output;
}

TEST(CliPage, RefusesWhatItCannotRun) {
  for (const char* policy : {"recent", "streaming", "random", "full", "oracle", "scissorhands-official"}) {
    const auto result = kvtest::expect_one_line_error("sweep " + kTrace + " --policies h2o," + policy +
                                                      " --budgets 20% --seqs 0 --page 16");
    EXPECT_NE(result.output.find(std::string("policy ") + policy +
                                 " has no per-position scores; --page needs a scoring policy"),
              std::string::npos)
        << result.output;
  }
  kvtest::expect_one_line_error("sweep " + kTrace + " --policies h2o --budgets 20% --page -1");
  kvtest::expect_one_line_error("sweep " + kTrace + " --policies h2o --budgets 20% --page 16 --page-score median");
}

TEST(CliPage, PlanCountsPagesAsBlocks) {
  kvtest::TempDir dir;
  ASSERT_EQ(kvtest::run_kvsim("sweep " + kTrace + " --policies h2o,tova --budgets 20%,50% --seqs 0 --page 16 --csv " +
                              dir.file("s.csv"))
                .code,
            0);
  const std::string plan = "plan --model llama-3.1-8b --gpu h100-80gb --context 4096 --sweep " + dir.file("s.csv") +
                           " --target 'retention>=0.9'";
  const auto result = kvtest::run_kvsim(plan);
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_NE(result.output.find("the sweep evicted whole pages of 16 positions (--page): a page is a block"),
            std::string::npos)
      << result.output;
  const auto other = kvtest::expect_one_line_error(plan + " --block-size 32");
  EXPECT_NE(other.output.find("plan it with --block-size 16"), std::string::npos) << other.output;
}

TEST(CliPage, ResumeKeepsThePageColumn) {
  kvtest::TempDir dir;
  const std::string sweep =
      "sweep " + kTrace + " --policies h2o,tova --budgets 20% --seqs 0 --page 16 --resume --csv " + dir.file("r.csv");
  ASSERT_EQ(kvtest::run_kvsim(sweep).code, 0);
  const std::string whole = kvtest::slurp(dir.file("r.csv"));
  EXPECT_NE(whole.find(",occupancy_model_union_peak,page\n"), std::string::npos) << whole;
  const auto resumed = kvtest::run_kvsim(sweep);
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_EQ(kvtest::slurp(dir.file("r.csv")), whole);
  // A resume in token mode is another sweep's.
  kvtest::expect_one_line_error("sweep " + kTrace + " --policies h2o,tova --budgets 20% --seqs 0 --csv " +
                                dir.file("r.csv") + " --resume");
}
