// --protect KIND:N (docs/semantics.md, section 2) as a user runs it: on a trace captured with
// --context and --question, the same bytes at any thread count and the rules in the JSON;
// every refusal one line and exit 2.
#include <gtest/gtest.h>

#include "../support/cli_checks.hpp"
#include "../support/model_dir.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

// The QA trace of docs/traces.md: 2 sequences of 64 tokens with context, question and answer
// spans. Empty when the model is not there.
std::string capture_qa(const kvtest::TempDir& dir) {
  const std::string path = dir.file("qa.h5");
  const auto made = kvtest::run_kvsim(
      "capture --context 'Lily had a red ball. She lost it in the park. Her dog Max found it under a tree.' "
      "--question 'Who found the ball?' --question 'Where was the ball?' --tokens 64 --out " + path);
  EXPECT_EQ(made.code, 0) << made.output;
  return path;
}

}  // namespace

TEST(CliProtect, CapturedTraceTheSameWhateverThreads) {
  if (!kvtest::have_model()) GTEST_SKIP() << "stories15M not found in " << kvtest::model_dir();
  kvtest::TempDir dir;
  const std::string trace = capture_qa(dir);
  const auto run = kvtest::expect_same_whatever_threads(
      "sweep " + trace + " --policies h2o,snapkv,scissorhands,recent,oracle --budgets 8,30% --mode prefill "
      "--question auto --protect context:4 --protect question:1 ",
      dir, 3, {"csv", "json"});
  EXPECT_NE(run.output.find("protect context:4,question:1;"), std::string::npos) << run.output;
  EXPECT_NE(kvtest::slurp(dir.file("one.json")).find("\"protect\": \"context:4,question:1\""), std::string::npos);
  kvtest::expect_same_whatever_threads(
      "sweep " + trace + " --policies h2o,snapkv --budgets 8 --protect context:2 --pool 2 ", dir, 2, {"csv"});
  kvtest::expect_same_whatever_threads(
      "sweep " + trace + " --policies h2o,ada-snapkv --budgets 8 --protect context:2 --head-budget adaptive ", dir,
      2, {"csv"});
  const auto absent = kvtest::expect_one_line_error("replay " + trace + " --policy h2o --budget 8 --protect needle:1");
  EXPECT_NE(absent.output.find(trace + ": --protect: no replayed sequence has a span of kind needle (kinds there: "
                                       "answer, context, question)"),
            std::string::npos)
      << absent.output;
  kvtest::expect_one_line_error("replay " + trace + " --policy scissorhands-official --budget 8 --protect context:1");
  kvtest::expect_one_line_error("eval --trace " + trace + " --policies snapkv --budgets 8 --protect needle:1");
}

TEST(CliProtect, RefusalsAreOneLine) {
  kvtest::TempDir dir;
  const std::string trace = kvtest::synth_small_trace(dir);
  const auto none = kvtest::expect_one_line_error("replay " + trace + " --policy h2o --budget 8 --protect context:2");
  EXPECT_NE(none.output.find("--protect context:2: the replayed sequences have no spans"), std::string::npos)
      << none.output;
  for (const std::string rule : {"context", "context:0", "context:-1", "context:x", "a b:1", ":3"})
    kvtest::expect_one_line_error("sweep " + trace + " --policies h2o --budgets 8 --protect '" + rule + "'");
  kvtest::expect_one_line_error("sweep " + trace + " --policies h2o --budgets 8 --protect c:1 --protect c:2");
}
