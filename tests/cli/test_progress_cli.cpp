// Progress on standard error (sim/cli/progress.hpp) as a user sees it: --progress writes the
// meter to standard error and leaves standard output byte for byte as it is; without a
// terminal and without --progress nothing is written to standard error; every long verb takes
// the options; a terminal gets the meter redrawn in place; a sweep's estimate line shows
// when its estimate passes the threshold.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "../support/cli_checks.hpp"
#include "../support/model_dir.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

struct Streams {
  int code;
  std::string out, err;
};

// Runs kvsim with standard output and standard error in files of their own (neither a terminal).
Streams run_split(const kvtest::TempDir& dir, const std::string& args, const std::string& env = "") {
  const std::string out = dir.file("stdout.txt"), err = dir.file("stderr.txt");
  const auto result =
      kvtest::run_shell("(" + env + (env.empty() ? "" : " ") + KVSIM_EXE + " " + args + " >" + out + " 2>" + err + ")");
  return {result.code, kvtest::slurp(out), kvtest::slurp(err)};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

const std::string kSweep = " --policies h2o,tova,recent --budgets 25%,50% --threads 2";

}  // namespace

TEST(CliProgress, SweepProgressGoesToStderrOnly) {
  kvtest::TempDir dir;
  const std::string trace = kvtest::synth_small_trace(dir);
  const Streams plain = run_split(dir, "sweep " + trace + kSweep);
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(plain.err, "") << "no terminal, no --progress: nothing on standard error";
  const Streams shown = run_split(dir, "sweep " + trace + kSweep + " --progress");
  ASSERT_EQ(shown.code, 0) << shown.err;
  EXPECT_EQ(shown.out, plain.out) << "standard output is the same byte for byte";
  // 2 sequences x 2 layers: 4 items, the last line says how long they took.
  EXPECT_TRUE(contains(shown.err, "sweep 100% 4/4 in ")) << shown.err;
  EXPECT_FALSE(contains(shown.err, "\r")) << "a file gets whole lines, not redraws";
  const Streams quiet = run_split(dir, "sweep " + trace + kSweep + " --no-progress");
  EXPECT_EQ(quiet.out, plain.out);
  EXPECT_EQ(quiet.err, "");
}

TEST(CliProgress, EveryLongVerbTakesTheOptions) {
  for (const std::string verb : {"sweep", "replay", "analyze", "eval", "synth", "capture", "validate"}) {
    const auto help = kvtest::run_kvsim(verb + " --help");
    EXPECT_TRUE(contains(help.output, "--progress")) << verb;
    EXPECT_TRUE(contains(help.output, "--no-progress")) << verb;
  }
  kvtest::TempDir dir;
  const std::string trace = kvtest::synth_small_trace(dir);
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"replay " + trace + " --policy h2o --budget 50%", "replay 100% 4/4 in "},
      {"analyze " + trace, "analyze 100% 4/4 in "},
      {"validate " + trace, "validate 100% "},
      {"synth " + dir.file("s.h5") + " --layers 1 --heads 2 --kv-heads 1 --head-dim 8 --tokens 16 --seqs 3",
       "synth 100% "}};
  for (const auto& [args, line] : runs) {
    const Streams plain = run_split(dir, args);
    ASSERT_EQ(plain.code, 0) << args << "\n" << plain.err;
    EXPECT_EQ(plain.err, "") << args;
    const Streams shown = run_split(dir, args + " --progress");
    ASSERT_EQ(shown.code, 0) << args << "\n" << shown.err;
    EXPECT_TRUE(contains(shown.err, line)) << args << "\n" << shown.err;
    EXPECT_EQ(shown.out, plain.out) << args;
  }
}

TEST(CliProgress, ModelVerbsShowProgress) {
  if (!kvtest::have_model()) GTEST_SKIP() << "stories15M not found in " << kvtest::model_dir();
  kvtest::TempDir dir;
  const std::string trace = std::string(KVSIM_SOURCE_DIR) + "/data/traces/stories15M-8x256.h5";
  const Streams eval = run_split(dir, "eval --trace " + trace + " --seqs 0 --policies h2o --budgets 50% --progress");
  ASSERT_EQ(eval.code, 0) << eval.err;
  EXPECT_TRUE(contains(eval.err, "eval 100% ")) << eval.err;
  const Streams capture =
      run_split(dir, "capture --prompt 'Once upon a time' --tokens 24 --out " + dir.file("c.h5") + " --progress");
  ASSERT_EQ(capture.code, 0) << capture.err;
  EXPECT_TRUE(contains(capture.err, "capture 100% ")) << capture.err;
}

TEST(CliProgress, BothOptionsAreOneLineAndExitTwo) {
  kvtest::TempDir dir;
  const std::string trace = kvtest::synth_small_trace(dir);
  const auto result = kvtest::expect_one_line_error("sweep " + trace + " --progress --no-progress");
  EXPECT_TRUE(contains(result.output, "--progress and --no-progress")) << result.output;
}

TEST(CliProgress, EstimateLineBeforeALongSweep) {
  kvtest::TempDir dir;
  const std::string trace = kvtest::synth_small_trace(dir);
  // Any sweep passes a threshold of 0 seconds; the line comes first, stdout is untouched.
  const Streams forced = run_split(dir, "sweep " + trace + kSweep + " --progress", "KVSIM_ESTIMATE_THRESHOLD=0");
  ASSERT_EQ(forced.code, 0) << forced.err;
  EXPECT_EQ(forced.err.rfind("kvsim sweep: about ", 0), 0u) << forced.err;
  EXPECT_TRUE(contains(forced.err, " for 2 sequences x 24 tokens, 2 layers x 4 heads, 3 policies x 2 budgets"))
      << forced.err;
  const Streams plain = run_split(dir, "sweep " + trace + kSweep);
  EXPECT_EQ(forced.out, plain.out);
  // The default threshold (60 s) is far above this sweep's estimate: no line.
  const Streams shown = run_split(dir, "sweep " + trace + kSweep + " --progress");
  EXPECT_FALSE(contains(shown.err, "kvsim sweep: about")) << shown.err;
  // Without --progress and without a terminal the estimate is not shown either.
  const Streams quiet = run_split(dir, "sweep " + trace + kSweep, "KVSIM_ESTIMATE_THRESHOLD=0");
  EXPECT_EQ(quiet.err, "");
}

namespace {

// Runs kvsim with standard error on a terminal (a pseudo-terminal this test reads) and
// standard output in a file; returns what each got.
Streams run_on_terminal(const kvtest::TempDir& dir, const std::vector<std::string>& args) {
  int terminal = -1, side = -1;
  if (::openpty(&terminal, &side, nullptr, nullptr, nullptr) != 0) return {-1, "", "openpty failed"};
  const std::string out = dir.file("tty_stdout.txt");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(terminal);
    const int file = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(file, STDOUT_FILENO);
    ::dup2(side, STDERR_FILENO);
    std::vector<const char*> argv = {KVSIM_EXE};
    for (const std::string& arg : args) argv.push_back(arg.c_str());
    argv.push_back(nullptr);
    ::execv(KVSIM_EXE, const_cast<char* const*>(argv.data()));
    ::_exit(127);
  }
  ::close(side);
  std::string err;
  char buffer[4096];
  for (ssize_t n; (n = ::read(terminal, buffer, sizeof buffer)) > 0;) err.append(buffer, static_cast<size_t>(n));
  ::close(terminal);  // read() fails with EIO once the child has closed its side
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, kvtest::slurp(out), err};
}

}  // namespace

TEST(CliProgress, ATerminalGetsTheMeterRedrawnInPlace) {
  kvtest::TempDir dir;
  const std::string trace = kvtest::synth_small_trace(dir);
  const std::vector<std::string> sweep = {"sweep", trace, "--policies", "h2o,tova", "--budgets", "50%"};
  const Streams plain = run_split(dir, "sweep " + trace + " --policies h2o,tova --budgets 50%");
  const Streams shown = run_on_terminal(dir, sweep);
  ASSERT_EQ(shown.code, 0) << shown.err;
  EXPECT_EQ(shown.out, plain.out);
  EXPECT_TRUE(contains(shown.err, "\rsweep ")) << shown.err;
  EXPECT_TRUE(contains(shown.err, "\r\033[K")) << "the line is cleared at the end";
  EXPECT_FALSE(contains(shown.err, "\n")) << "nothing but the redrawn line";
  std::vector<std::string> quiet = sweep;
  quiet.push_back("--no-progress");
  const Streams hidden = run_on_terminal(dir, quiet);
  ASSERT_EQ(hidden.code, 0) << hidden.err;
  EXPECT_EQ(hidden.out, plain.out);
  EXPECT_EQ(hidden.err, "");
}
