// kvsim capture as a user runs it: exit codes, one-line errors, prompts files. Tests that
// need the real stories15M model (scripts/fetch-model.sh) are skipped when it is absent.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"
#include "../support/model_dir.hpp"

namespace fs = std::filesystem;

namespace {

using Result = kvtest::CliResult;
Result run(const std::string& args, const std::string& env = "") { return kvtest::run_kvsim(args, env); }

using kvtest::model_dir;

using kvtest::have_model;

}  // namespace

TEST(CliCapture, Help) {
  const Result result = run("capture --help");
  EXPECT_EQ(result.code, 0);
  EXPECT_NE(result.output.find("usage: kvsim capture"), std::string::npos);
  EXPECT_NE(result.output.find("--continue-after-eos"), std::string::npos);
  EXPECT_NE(run("--help").output.find("capture"), std::string::npos);
}

TEST(CliCapture, MissingModelSaysHowToFetchIt) {
  kvtest::TempDir dir;
  const std::string out = dir.file("x.h5");
  for (const std::string& env : {"KVSIM_MODEL_DIR=" + dir.file("nowhere"), std::string()}) {
    const std::string args = env.empty() ? "capture --model " + dir.file("none.bin") + " --prompt hi --out " + out
                                         : "capture --prompt hi --out " + out;
    const Result result = kvtest::expect_one_line_error(args, env);
    EXPECT_NE(result.output.find("scripts/fetch-model.sh"), std::string::npos) << result.output;
  }
  EXPECT_FALSE(fs::exists(out));
}

TEST(CliCapture, BadInputIsOneLineAndExitTwo) {
  kvtest::TempDir dir;
  const std::string out = dir.file("x.h5");
  std::ofstream(dir.file("empty.txt")) << "# only a comment\n\n";
  std::ofstream(dir.file("bad.jsonl")) << "{\"prompt\": \"ok\"}\n[1, 2]\n";
  std::ofstream(dir.file("worse.jsonl")) << "{\"prompt\": \n";
  std::ofstream(dir.file("ok.txt")) << "Once upon a time\n";
  std::ofstream(dir.file("noq.jsonl")) << "{\"context\": \"Tom had a ball.\"}\n";
  std::ofstream(dir.file("emptyq.jsonl")) << "{\"context\": \"Tom had a ball.\", \"questions\": [\"Who?\", \"\"]}\n";
  std::ofstream(dir.file("both.jsonl")) << "{\"context\": \"A.\", \"question\": \"B?\", \"questions\": [\"C?\"]}\n";
  for (const std::string& args : std::vector<std::string>{
           "capture --out " + out,                                                  // no prompt
           "capture --prompt a --prompts " + dir.file("ok.txt") + " --out " + out,  // both
           "capture --prompt a",                                                    // no --out
           "capture --prompts " + dir.file("missing.txt") + " --out " + out,
           "capture --prompts " + dir.file("empty.txt") + " --out " + out,
           "capture --prompts " + dir.file("bad.jsonl") + " --out " + out,
           "capture --prompts " + dir.file("worse.jsonl") + " --out " + out,
           "capture --prompt a --dtype float8 --out " + out,
           "capture --prompt a --compress 12 --out " + out,
           "capture --prompt a --tokens 0 --out " + out,
           "capture --prompt a --tokens 300 --out " + out,
           "capture --prompt a --bogus --out " + out,
           "capture --prompt 'a b c d e f g h i j k l m n o p' --tokens 4 --out " + out,
           "capture --prompt a --tokens 8 --out /nonexistent/dir/x.h5",
           "capture --context 'Tom had a ball.' --out " + out,                       // no question
           "capture --question 'Who?' --out " + out,                                 // no context
           "capture --context '' --question 'Who?' --out " + out,                    // empty context
           "capture --context 'Tom had a ball.' --question '' --out " + out,         // empty question
           "capture --context a --question b --prompt c --out " + out,               // with --prompt
           "capture --context a --question b --prompts " + dir.file("ok.txt") + " --out " + out,
           "capture --prompts " + dir.file("noq.jsonl") + " --out " + out,
           "capture --prompts " + dir.file("emptyq.jsonl") + " --out " + out,
           "capture --prompts " + dir.file("both.jsonl") + " --out " + out,
       }) {
    kvtest::expect_one_line_error(args);
  }
  EXPECT_FALSE(fs::exists(out)) << "no output file after a failure";
}

TEST(CliCapture, PromptsFilesCaptureAndValidate) {
  if (!have_model()) GTEST_SKIP() << "stories15M not found in " << model_dir() << " (run scripts/fetch-model.sh)";
  kvtest::TempDir dir;
  std::ofstream(dir.file("prompts.txt")) << "# two stories\nOnce upon a time, there was a little girl named Lily who "
                                            "loved the sea.\n\nTom had a red ball.\n";
  Result result = run("capture --prompts " + dir.file("prompts.txt") + " --tokens 40 --out " + dir.file("t.h5"));
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_NE(result.output.find("--- seq 0: 40 tokens (prompt 19, generated 21)\nOnce upon a time, there was a little "
                               "girl named Lily who loved the sea. She would go to the beach every day"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("--- seq 1: 40 tokens"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("wrote "), std::string::npos);
  result = run("validate " + dir.file("t.h5"));
  EXPECT_EQ(result.code, 0) << result.output;
  result = run("info " + dir.file("t.h5"));
  EXPECT_NE(result.output.find("Tom had a red ball."), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("source     capture"), std::string::npos) << result.output;
  // The llama2.c runner's RoPE (llama2.hpp), written by capture and printed by info.
  EXPECT_NE(result.output.find("rope       theta=10000 scaling=none factor=1 rotary_dims=48 pairing=interleaved\n"),
            std::string::npos)
      << result.output;

  // JSONL: a prompt with a newline and quotes; float32 with attention rows.
  std::ofstream(dir.file("p.jsonl")) << "{\"prompt\": \"\\\"Hi!\\\" said Sue.\\n\\\"Hello,\\\" said Max.\"}\n";
  result =
      run("capture --prompts " + dir.file("p.jsonl") + " --tokens 24 --attn --dtype float32 --out " + dir.file("j.h5"));
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_NE(result.output.find("\"Hi!\" said Sue.\n\"Hello,\" said Max."), std::string::npos) << result.output;
  result = run("info " + dir.file("j.h5"));
  EXPECT_NE(result.output.find("attn:float32"), std::string::npos) << result.output;
  EXPECT_EQ(run("validate " + dir.file("j.h5")).code, 0);

  // JSONL: a context with questions, a sequence each, as --context with --question.
  std::ofstream(dir.file("qa.jsonl")) << "{\"context\": \"Tom had a red ball.\", \"questions\": [\"Who?\", "
                                         "\"What?\"]}\n{\"prompt\": \"Once\"}\n";
  ASSERT_EQ(run("capture --prompts " + dir.file("qa.jsonl") + " --tokens 24 --out " + dir.file("qa.h5")).code, 0);
  ASSERT_EQ(run("capture --context 'Tom had a red ball.' --question Who? --question What? --tokens 24 --out " +
                dir.file("cli.h5")).code, 0);
  result = run("info " + dir.file("qa.h5"));
  EXPECT_NE(result.output.find("    0  context [1, 7), question [7, 10), answer [10, 24)\n"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("    1  context [1, 7), question [7, 10), answer [10, 24)\n"), std::string::npos)
      << result.output;
  const std::string spans = result.output.substr(result.output.find("  seq  spans"));
  EXPECT_EQ(spans.find("\n    2  "), std::string::npos) << "no spans for a plain prompt: " << spans;
  // The same sequences from the command line: the same spans.
  const std::string cli = run("info " + dir.file("cli.h5")).output;
  EXPECT_EQ(cli.substr(cli.find("  seq  spans")), spans) << cli;
}

// The bundled real traces (data/traces, made by scripts/make-traces.sh).
TEST(CliCapture, BundledTracesAreRealAndValid) {
  const std::string trace = std::string(KVSIM_SOURCE_DIR) + "/data/traces/stories15M-8x256.h5";
  Result result = run("info " + trace);
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_NE(result.output.find("model      stories15M"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("source     capture   created 2025-01-01T00:00:00Z"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("sequences  8, 2048 tokens"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("q:float16 k:float16 v:float16"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("The cat sat on the mat."), std::string::npos) << result.output;
  result = run("validate " + trace);
  EXPECT_EQ(result.code, 0) << result.output;
}
