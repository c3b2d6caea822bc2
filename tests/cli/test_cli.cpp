// The CLI as a user runs it: exit codes, one-line errors, --help on every verb.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

using Result = kvtest::CliResult;
Result run(const std::string& args, const std::string& env = "") { return kvtest::run_kvsim(args, env); }

}  // namespace

TEST(Cli, HelpOnEveryVerb) {
  for (const char* verb : {"info", "validate", "synth", "capture", "replay", "sweep", "policies"}) {
    const Result result = run(std::string(verb) + " --help");
    EXPECT_EQ(result.code, 0) << verb;
    EXPECT_NE(result.output.find("usage: kvsim"), std::string::npos) << verb;
  }
  EXPECT_EQ(run("--help").code, 0);
  EXPECT_EQ(run("").code, 2);
}

TEST(Cli, SynthInfoValidate) {
  kvtest::TempDir dir;
  const std::string trace = dir.file("s.h5");
  Result result = run("synth " + trace + " --layers 2 --heads 4 --kv-heads 2 --head-dim 16 --tokens 40 --seqs 3");
  ASSERT_EQ(result.code, 0) << result.output;
  result = run("info " + trace + " --json " + dir.file("info.json"));
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_NE(result.output.find("2 layers x 4 heads, 2 kv heads (GQA"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("sequences  3, 120 tokens"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("q:float16 k:float16 v:float16"), std::string::npos) << result.output;
  std::ifstream json(dir.file("info.json"));
  EXPECT_TRUE(json.good());
  result = run("validate " + trace);
  EXPECT_EQ(result.code, 0) << result.output;
  EXPECT_NE(result.output.find("ok: "), std::string::npos);
}

TEST(Cli, BadInputIsOneLineAndExitTwo) {
  kvtest::TempDir dir;
  const std::string text = dir.file("notes.txt");
  std::ofstream(text) << "hello\n";
  for (const std::string& args : std::vector<std::string>{
           "validate " + text, "info " + dir.file("missing.h5"), "validate",
           "synth " + dir.file("x.h5") + " --form xyz", "synth " + dir.file("x.h5") + " --heads 6 --kv-heads 4",
           "synth /nonexistent/x.h5", "frobnicate", "info " + text + " --bogus"}) {
    kvtest::expect_one_line_error(args);
  }
  EXPECT_FALSE(std::ifstream(dir.file("x.h5")).good()) << "no output file after a failure";
}

// A parameter's help that runs past the width goes on under the help, not under the name.
TEST(Cli, PoliciesWrapParameterHelpUnderItself) {
  const Result result = run("policies");
  ASSERT_EQ(result.code, 0) << result.output;
  const std::string layers = "    layers     = all    layers it compresses: all, or a list such as 5-35";
  const size_t at = result.output.find(layers);
  ASSERT_NE(at, std::string::npos) << result.output;
  const size_t next = result.output.find('\n', at) + 1;
  EXPECT_EQ(result.output.substr(next, 24), std::string(24, ' ')) << result.output.substr(at, 300);
  for (size_t line = 0; line < result.output.size(); line = result.output.find('\n', line) + 1) {
    const std::string text = result.output.substr(line, result.output.find('\n', line) - line);
    EXPECT_LE(text.size(), 100u) << text;
    if (result.output.find('\n', line) == std::string::npos) break;
  }
}
