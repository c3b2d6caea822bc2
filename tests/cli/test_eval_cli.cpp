// kvsim eval as a user runs it: the closed-loop table on the bundled trace and on a text file,
// identical output whatever the thread count, one-line errors with exit code 2. Tests that run
// the model need stories15M (scripts/fetch-model.sh) and are skipped without it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"
#include "../support/model_dir.hpp"

namespace fs = std::filesystem;

namespace {

const std::string kTrace = std::string(KVSIM_SOURCE_DIR) + "/data/traces/stories15M-8x256.h5";

using kvtest::model_dir;

using kvtest::have_model;

#define NEED_MODEL() \
  if (!have_model()) GTEST_SKIP() << "stories15M not found in " << model_dir() << " (run scripts/fetch-model.sh)"

}  // namespace

TEST(CliEval, Help) {
  const auto result = kvtest::run_kvsim("eval --help");
  EXPECT_EQ(result.code, 0);
  EXPECT_NE(result.output.find("usage: kvsim eval"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("--text"), std::string::npos);
  EXPECT_NE(kvtest::run_kvsim("--help").output.find("eval"), std::string::npos);
}

TEST(CliEval, BadInputIsOneLineAndExitTwo) {
  kvtest::TempDir dir;
  std::ofstream(dir.file("blank.txt")) << "  \n\n";
  const std::string csv = dir.file("out.csv");
  for (const std::string& args : std::vector<std::string>{
           "eval",                                                         // neither --trace nor --text
           "eval --trace " + kTrace + " --text " + dir.file("blank.txt"),  // both
           "eval --trace " + kTrace + " --policies oracle",                // a bound
           "eval --trace " + kTrace + " --policies quest",                 // a selection (per head)
           "eval --trace " + kTrace + " --policies nonesuch",
           "eval --trace " + kTrace + " --budgets 0",
           "eval --trace " + kTrace + " --budgets 120%",
           "eval --trace " + kTrace + " --aggregate median",
           "eval --trace " + kTrace + " --param h2o.zzz=1",
           "eval --trace " + kTrace + " --seqs x",
           "eval --trace " + kTrace + " --threads -1",
           "eval --trace " + kTrace + " --recall-distance 0",
           "eval --trace " + kTrace + " --recall-distance x",
           "eval --trace " + kTrace + " --csv /nonexistent/dir/x.csv",
           "eval --trace " + dir.file("missing.h5") + " --csv " + csv,
           "eval --trace " + kTrace + " --seqs 99 --csv " + csv,
           "eval --trace " + kTrace + " --tokens 1000 --csv " + csv,
           "eval --text " + dir.file("blank.txt") + " --csv " + csv,
           "eval --text " + dir.file("missing.txt") + " --csv " + csv,
           "eval " + dir.file("none.bin") + " --trace " + kTrace + " --csv " + csv,
       }) {
    kvtest::expect_one_line_error(args);
  }
  EXPECT_FALSE(fs::exists(csv));
  const auto missing = kvtest::run_kvsim("eval --trace " + kTrace, "KVSIM_MODEL_DIR=" + dir.file("nowhere"));
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.output.find("scripts/fetch-model.sh"), std::string::npos) << missing.output;
}

TEST(CliEval, TraceTableSameBytesWhateverTheThreadCount) {
  NEED_MODEL();
  kvtest::TempDir dir;
  const std::string common =
      "eval --trace " + kTrace + " --seqs 0,5 --tokens 32 --policies tova,recent --budgets 25%,100% ";
  const auto one = kvtest::expect_same_whatever_threads(common, dir, 3, {"csv", "json"});
  ASSERT_EQ(one.code, 0) << one.output;
  EXPECT_NE(one.output.find("2 sequences, 64 tokens, 62 predictions; full cache: perplexity"), std::string::npos)
      << one.output;
  EXPECT_NE(one.output.find("Spearman"), std::string::npos);
  EXPECT_NE(one.output.find("teacher-forced"), std::string::npos);
  const std::string csv = kvtest::slurp(dir.file("one.csv"));
  EXPECT_EQ(kvtest::count_lines(csv), 1 + 2 * 2);
  EXPECT_EQ(
      csv.rfind(
          "policy,params,budget,budget_tokens_mean,budget_share_mean,perplexity,perplexity_full,perplexity_increase,",
          0),
      0u);
  // At 100% nothing is evicted: the full cache exactly.
  for (const char* row : {"\ntova,,100%,32,1,", "\nrecent,,100%,32,1,"}) {
    const size_t at = csv.find(row);
    ASSERT_NE(at, std::string::npos) << row << "\n" << csv;
    std::vector<std::string> fields;
    std::stringstream stream(csv.substr(at + 1, csv.find('\n', at + 1) - at - 1));
    for (std::string field; std::getline(stream, field, ',');) fields.push_back(field);
    ASSERT_GE(fields.size(), 14u);
    EXPECT_EQ(fields[5], fields[6]);  // perplexity, perplexity_full
    EXPECT_EQ(fields[7], "0");        // perplexity_increase
    EXPECT_EQ(fields[8], "0");        // relative
    EXPECT_EQ(fields[10], "1");       // top1_agreement
    EXPECT_EQ(fields[12], "32");      // occupancy_peak
    EXPECT_EQ(fields[13], "0");       // evictions
  }
}

// Recall tokens: at 100% the closed loop is the full cache, so it predicts every recall token
// (top-1 1) with the full cache's perplexity over them; the same bytes at 1 and 2 threads.
TEST(CliEval, RecallTokensOfTheFullCacheAndThreads) {
  NEED_MODEL();
  kvtest::TempDir dir;
  const std::string common = "eval --trace " + kTrace +
                             " --seqs 0,5 --tokens 96 --policies tova,recent --budgets 25%,100% --recall-distance 16 ";
  const auto one = kvtest::expect_same_whatever_threads(common, dir, 2, {"csv", "json"});
  ASSERT_EQ(one.code, 0) << one.output;
  EXPECT_NE(one.output.find("recall tokens: 34 predictions whose target last occurred more than 16 tokens earlier"),
            std::string::npos)
      << one.output;
  std::stringstream csv(kvtest::slurp(dir.file("one.csv")));
  auto fields_of = [](const std::string& line) {
    std::vector<std::string> fields;
    std::stringstream stream(line);
    for (std::string field; std::getline(stream, field, ',');) fields.push_back(field);
    return fields;
  };
  std::string line;
  std::getline(csv, line);
  const std::vector<std::string> header = fields_of(line);
  auto column = [&](const std::vector<std::string>& row, const std::string& name) {
    const auto at = std::find(header.begin(), header.end(), name);
    return at == header.end() || static_cast<size_t>(at - header.begin()) >= row.size()
               ? std::string("missing")
               : row[static_cast<size_t>(at - header.begin())];
  };
  int full_rows = 0;
  while (std::getline(csv, line)) {
    const std::vector<std::string> row = fields_of(line);
    EXPECT_EQ(column(row, "recall_distance"), "16");
    EXPECT_GT(std::stoi(column(row, "recall_tokens")), 0) << line;
    if (column(row, "budget") != "100%") continue;
    ++full_rows;
    EXPECT_EQ(column(row, "recall_top1_agreement"), "1") << line;
    EXPECT_EQ(column(row, "recall_perplexity"), column(row, "full_recall_perplexity")) << line;
  }
  EXPECT_EQ(full_rows, 2);
}

TEST(CliEval, TextFileAndPlot) {
  NEED_MODEL();
  kvtest::TempDir dir;
  std::ofstream(dir.file("story.txt"))
      << "Once upon a time, there was a little girl named Lily. She loved to play in the park with her dog. "
         "One day, the dog ran away and Lily was sad. Her mom helped her look for the dog, and they found it "
         "under a big tree. Lily hugged her dog and they went home happy.";
  const auto result = kvtest::run_kvsim("eval --text " + dir.file("story.txt") +
                                        " --tokens 30 --policies tova,streaming"
                                        " --budgets 12,50% --plot " +
                                        dir.file("p.png") + " --proxy-plot " + dir.file("q.svg"));
#ifdef KVSIM_HAVE_PLOT
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_TRUE(fs::exists(dir.file("p.png")));
  EXPECT_TRUE(fs::exists(dir.file("q.svg")));
  EXPECT_NE(result.output.find("on " + dir.file("story.txt")), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("streaming"), std::string::npos);
#else
  EXPECT_EQ(result.code, 2) << result.output;
#endif
}

TEST(CliEval, HeadAdaptiveBudgetsInTheClosedLoop) {
  if (!kvtest::have_model()) GTEST_SKIP() << "stories15M not found in " << kvtest::model_dir();
  kvtest::TempDir dir;
  // ada-h2o is h2o under its own floor of 0.2; --head-budget adaptive gives h2o the same: the
  // closed loop couples a layer's kv heads as replay does. Rows equal but for the policy's name.
  const std::string run = "eval --trace " + kTrace + " --seqs 0 --tokens 96 --budgets 30% --csv ";
  ASSERT_EQ(kvtest::run_kvsim(run + dir.file("own.csv") + " --policies ada-h2o").code, 0);
  ASSERT_EQ(kvtest::run_kvsim(run + dir.file("option.csv") + " --policies h2o --head-budget adaptive").code, 0);
  ASSERT_EQ(kvtest::run_kvsim(run + dir.file("uniform.csv") + " --policies h2o").code, 0);
  auto row = [&](const std::string& file) {
    const std::string csv = kvtest::slurp(dir.file(file));
    const std::string line = csv.substr(csv.find('\n') + 1);
    return line.substr(line.find(','));
  };
  EXPECT_EQ(row("own.csv"), row("option.csv"));
  EXPECT_NE(row("own.csv"), row("uniform.csv"));
  kvtest::expect_one_line_error("eval --trace " + kTrace + " --seqs 0 --tokens 8 --head-budget adaptive --page 16");
}

TEST(CliEval, LayerBudgetsInTheClosedLoop) {
  NEED_MODEL();
  kvtest::TempDir dir;
  // 50% of 128 tokens: B = 64 > W = 32, so PyramidKV's schedule moves budget (B_l = 95, 83, 70,
  // 58, 45, 33: C - W = 32, min 32 // 20 = 1, max 63, the line by largest remainder, plus W).
  const std::string run = "eval --trace " + kTrace + " --seqs 0 --tokens 128 --budgets 50% ";
  const auto own = kvtest::run_kvsim(run + "--policies snapkv,pyramidkv,cake --csv " + dir.file("own.csv"));
  ASSERT_EQ(own.code, 0) << own.output;
  EXPECT_NE(own.output.find("per-layer budgets B_l"), std::string::npos) << own.output;
  EXPECT_NE(own.output.find("pyramidkv  50% (64)      0    95.0"), std::string::npos) << own.output;
  const auto pyramid = kvtest::run_kvsim(run + "--policies snapkv --layer-budget pyramid --csv " + dir.file("p.csv"));
  ASSERT_EQ(pyramid.code, 0) << pyramid.output;
  EXPECT_NE(pyramid.output.find("layer budgets: pyramid\n"), std::string::npos) << pyramid.output;
  EXPECT_NE(pyramid.output.find("snapkv    50% (64)      0    95.0"), std::string::npos) << pyramid.output;
  auto rows = [&](const std::string& file) {
    std::vector<std::string> out;
    std::stringstream stream(kvtest::slurp(dir.file(file)));
    std::string line;
    std::getline(stream, line);  // header
    while (std::getline(stream, line)) out.push_back(line.substr(line.find(',')));
    return out;
  };
  const std::vector<std::string> grid = rows("own.csv"), moved = rows("p.csv");
  ASSERT_EQ(grid.size(), 3u);
  EXPECT_NE(grid[0], grid[1]);   // snapkv uniform vs pyramidkv
  EXPECT_NE(grid[0], grid[2]);   // vs cake
  EXPECT_NE(grid[0], moved[0]);  // snapkv uniform vs snapkv under the pyramid
  // The table's budget is the uniform B: 64 in every row.
  for (const std::string& row : grid) EXPECT_EQ(row.rfind(",,50%,64,0.5,", 0), 0u) << row;
  for (const std::string& args :
       {run + "--policies pyramidkv --layer-budget pyramid",  // its own schedule
        run + "--policies h2o --layer-budget 1,2",            // 2 weights, 6 layers
        run + "--policies h2o --layer-budget pyramid:beta=0", run + "--layer-budget cake:x=1"})
    kvtest::expect_one_line_error(args);
}

TEST(CliEval, QuestionProtocolInTheClosedLoop) {
  NEED_MODEL();
  kvtest::TempDir dir;
  // Sequence 0's prompt is 19 tokens: the context 0..10 is compressed to 8 at step 10, the
  // question 11..18 and the answer 19..95 are kept; 96 - 19 = 77 answer predictions count.
  const std::string run = "eval --trace " + kTrace + " --seqs 0 --tokens 96 --budgets 8 --policies snapkv,streaming ";
  const auto asked = kvtest::run_kvsim(run + "--question 8 --csv " + dir.file("q.csv"));
  ASSERT_EQ(asked.code, 0) << asked.output;
  EXPECT_NE(asked.output.find("1 sequence, 96 tokens, 77 answer predictions"), std::string::npos) << asked.output;
  EXPECT_NE(asked.output.find("question protocol: prompt 19 tokens, the last 8 of them the question"),
            std::string::npos)
      << asked.output;
  const auto stream = kvtest::run_kvsim(run + "--csv " + dir.file("s.csv"));
  ASSERT_EQ(stream.code, 0) << stream.output;
  EXPECT_NE(kvtest::slurp(dir.file("q.csv")), kvtest::slurp(dir.file("s.csv")));
  // A longer prompt than the trace's, on the trace; and text needs --prompt-len.
  ASSERT_EQ(kvtest::run_kvsim(run + "--question 8 --prompt-len 48").code, 0);
  std::ofstream(dir.file("story.txt")) << "Once upon a time, there was a little girl named Lily. She loved to play "
                                          "in the park with her dog, and every day they ran in the sun.";
  const auto text = kvtest::run_kvsim("eval --text " + dir.file("story.txt") +
                                      " --budgets 4 --policies h2o --question 4 --prompt-len 12");
  ASSERT_EQ(text.code, 0) << text.output;
  EXPECT_NE(text.output.find("prompt 12 tokens, the last 4 of them the question"), std::string::npos) << text.output;
  // Text measures cake's preferences on the full-cache run's rows (there is no trace).
  const auto cake = kvtest::run_kvsim("eval --text " + dir.file("story.txt") +
                                      " --budgets 50% --policies h2o --layer-budget cake:window=4");
  ASSERT_EQ(cake.code, 0) << cake.output;
  EXPECT_NE(cake.output.find("per-layer budgets B_l"), std::string::npos) << cake.output;
  for (const std::string& args : {
           run + "--question 19",                                     // not shorter than the prompt
           run + "--question 8 --prompt-len 96",                      // no answer token
           run + "--question auto",                                   // the trace has no question_len
           run + "--question 0", run + "--question x",                //
           run + "--prompt-len 30",                                   // without --question
           "eval --text " + dir.file("story.txt") + " --question 4",  // text has no prompt
       })
    kvtest::expect_one_line_error(args);
}

// Three questions of one context, captured: under --question auto the first compresses the
// context for all three (a table line, compressed_by 0 for each in JSON). --compress-every
// cannot share (one line, exit 2).
TEST(CliEval, QuestionsOfOneContextShareItsCompression) {
  NEED_MODEL();
  kvtest::TempDir dir;
  const std::string trace = dir.file("qa.h5");
  ASSERT_EQ(kvtest::run_kvsim("capture --context 'Lily had a red ball. She lost it in the park.' --question "
                              "'Who had a ball?' --question 'Where was it lost?' --question 'What colour was it?' "
                              "--tokens 40 --out " + trace)
                .code,
            0);
  const std::string run = "eval --trace " + trace + " --policies random,snapkv --budgets 6 ";
  const auto shared = kvtest::run_kvsim(run + "--question auto --json " + dir.file("shared.json"));
  ASSERT_EQ(shared.code, 0) << shared.output;
  EXPECT_NE(shared.output.find("context group 0: sequences 0, 1, 2 answer from sequence 0's compression of the context"),
            std::string::npos)
      << shared.output;
  const std::string json = kvtest::slurp(dir.file("shared.json"));
  size_t found = 0, count = 0;
  while ((found = json.find("\"compressed_by\": 0", found)) != std::string::npos) ++count, ++found;
  EXPECT_EQ(count, 3u) << json;
  EXPECT_NE(json.find("\"shared_contexts\""), std::string::npos);
  kvtest::expect_one_line_error(run + "--question auto --compress-every 4");
}
