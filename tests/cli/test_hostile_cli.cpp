// Hostile input and a new user's first hour: every reproduced item as a test that
// builds what it needs, runs the CLI and checks the exit code and the one line.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

class Hostile : public ::testing::Test {
 protected:
  void SetUp() override {
    trace_ = kvtest::synth_small_trace(dir_);
  }
  std::string replay(const std::string& extra) const {
    return "replay " + trace_ + " --policy h2o --budget 8 " + extra;
  }
  // Exit 2 with one line holding `fragment`.
  static void expect_refused(const kvtest::CliResult& result, const std::string& fragment) {
    EXPECT_EQ(result.code, 2) << result.output;
    EXPECT_EQ(kvtest::count_lines(result.output), 1) << result.output;
    EXPECT_NE(result.output.find(fragment), std::string::npos) << result.output;
  }
  // Only the files named, nothing left behind (no temporary files).
  void expect_only(std::vector<std::string> names) const {
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(dir_.path())) found.push_back(entry.path().filename().string());
    std::sort(found.begin(), found.end());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(found, names);
  }
  kvtest::TempDir dir_;
  std::string trace_;
};

// 1. Outputs: devices written in place, symlinks followed, inputs and duplicates refused.
TEST_F(Hostile, DevicesAreWrittenNotReplaced) {
  if (::geteuid() != 0) GTEST_SKIP() << "mknod needs root";
  const std::string null = dir_.file("null"), full = dir_.file("full");
  ASSERT_EQ(::mknod(null.c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  ASSERT_EQ(::mknod(full.c_str(), S_IFCHR | 0666, makedev(1, 7)), 0);
  EXPECT_EQ(kvtest::run_kvsim(replay("--csv " + null)).code, 0);
  EXPECT_TRUE(fs::is_character_file(null));
  expect_refused(kvtest::run_kvsim(replay("--json " + full)), "No space left on device");
  EXPECT_TRUE(fs::is_character_file(full));
  expect_refused(kvtest::run_kvsim("synth " + null + " --tokens 8"), "needs a regular file");
  EXPECT_TRUE(fs::is_character_file(null));
  expect_only({"t.h5", "null", "full"});
}

TEST_F(Hostile, SymlinksAreFollowedAndInputsNeverOverwritten) {
  const std::string target = dir_.file("target.csv"), link = dir_.file("link.csv");
  std::ofstream(target) << "old\n";
  fs::create_symlink("target.csv", link);
  EXPECT_EQ(kvtest::run_kvsim(replay("--csv " + link)).code, 0);
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(kvtest::slurp(target).rfind("policy,", 0), 0u);
  const auto size = fs::file_size(trace_);
  expect_refused(kvtest::run_kvsim(replay("--csv " + trace_)), "is an input of this run");
  fs::create_symlink("t.h5", dir_.file("alias.h5"));
  expect_refused(kvtest::run_kvsim(replay("--json " + dir_.file("alias.h5"))), "is an input of this run");
  EXPECT_EQ(fs::file_size(trace_), size);
  expect_refused(kvtest::run_kvsim(replay("--csv " + dir_.file("a") + " --json " + dir_.file("a"))), "given twice");
  expect_refused(kvtest::run_kvsim("analyze " + trace_ + " --csv " + trace_), "is an input of this run");
  expect_only({"t.h5", "target.csv", "link.csv", "alias.h5"});
}

// 2. A full disk while writing a trace: one line, exit 2, no temporary file (RLIMIT_FSIZE
// stands for the full disk: writes past it fail as ENOSPC does).
TEST_F(Hostile, FullDiskWhileWritingATrace) {
  for (const char* limit : {"20", "300", "2000"}) {
    const auto result =
        kvtest::run_kvsim("synth " + dir_.file("big.h5") + " --layers 4 --heads 8 --tokens 1024 --compress 1",
                          std::string("trap '' XFSZ; ulimit -f ") + limit + ";");
    expect_refused(result, "File too large");
  }
  expect_only({"t.h5"});
}

// 9. One parser for every list: repeats, empty items and overflowing weights are refused.
TEST_F(Hostile, ListsRefuseRepeatsEmptyItemsAndOverflow) {
  const std::string csv = " --csv " + dir_.file("s.csv");
  for (const auto& [args, fragment] : std::vector<std::pair<std::string, std::string>>{
           {replay("--seqs 0,0"), "--seqs: index 0 is given twice"},
           {replay("--layers 1,1"), "--layers: index 1 is given twice"},
           {replay("--seqs 0,"), "--seqs: empty item"},
           {replay("--layers ,1"), "--layers: empty item"},
           {"sweep " + trace_ + " --policies h2o,tova,h2o" + csv, "--policies: 'h2o' is given twice"},
           {"sweep " + trace_ + " --budgets 10%,10%" + csv, "--budgets: '10%' is given twice"},
           {"sweep " + trace_ + " --budgets 10%,,20%" + csv, "--budgets: empty item"},
           {"analyze " + trace_ + " --seqs 0,0", "--seqs: index 0 is given twice"},
           {"analyze " + trace_ + " --lags 1,4,", "--lags: empty item"},
           {"analyze " + trace_ + " --lags 0", "--lags: '0' is below 1"},
           {"eval --trace " + trace_ + " --seqs 1,1 --policies h2o", "--seqs: index 1 is given twice"},
           {replay("--layer-budget 1,2,"), "--layer-budget: empty item"},
       })
    expect_refused(kvtest::run_kvsim(args), fragment);
  // Weights near the largest double: their ratio, not an overflowed mean, makes the budgets.
  const auto huge = kvtest::run_kvsim(replay("--layer-budget 1e308,1e308"));
  const auto even = kvtest::run_kvsim(replay(""));
  ASSERT_EQ(huge.code, 0) << huge.output;
  auto all_line = [](const std::string& out) { return out.substr(out.find("\nall "), 60); };
  EXPECT_EQ(all_line(huge.output), all_line(even.output));
}

// 8. A trace truncated while a sweep reads it: one line, exit 2, whichever thread notices.
TEST_F(Hostile, TraceTruncatedDuringASweep) {
  const std::string big = dir_.file("big.h5");
  ASSERT_EQ(
      kvtest::run_kvsim("synth " + big + " --layers 12 --heads 8 --kv-heads 2 --head-dim 64 --tokens 1536 --seqs 2")
          .code,
      0);
  const std::string command =
      std::string(KVSIM_EXE) + " sweep " + big +
      " --policies h2o,tova,snapkv,scissorhands,recent --budgets 10%,50% --threads 2 2>&1 & pid=$!; "
      "sleep 0.7; truncate -s " +
      std::to_string(fs::file_size(big) * 6 / 10) + " " + big + "; wait $pid; echo \"exit $?\"";
  FILE* pipe = ::popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  ::pclose(pipe);
  EXPECT_NE(output.find("exit 2"), std::string::npos) << output;
  EXPECT_EQ(kvtest::count_lines(output), 2) << output;  // the one line, and "exit 2"
  EXPECT_NE(output.find("big.h5"), std::string::npos) << output;
}

// 11. A sweep whose quant column is only "none" is unquantized: --kv-quant applies to it.
TEST_F(Hostile, PlanKvQuantOnAnUnquantizedSweep) {
  const std::string csv = dir_.file("sweep.csv");
  ASSERT_EQ(kvtest::run_kvsim("sweep " + trace_ + " --policies h2o,tova --budgets 25%,50% --csv " + csv).code, 0);
  ASSERT_NE(kvtest::slurp(csv).find(",quant,"), std::string::npos);
  const auto plan = kvtest::run_kvsim("plan --model llama-3.1-8b --gpu h100-80gb --sweep " + csv +
                                      " --target 'retention>=0.5' --kv-quant flexgen4");
  ASSERT_EQ(plan.code, 0) << plan.output;
  EXPECT_NE(plan.output.find("flexgen4"), std::string::npos) << plan.output;
}

// 14. Human tables and notes fit 100 columns, a quantized sweep of every policy included.
TEST_F(Hostile, HumanOutputFitsOneHundredColumns) {
  const std::string csv = dir_.file("q.csv");
  for (const std::string& args : std::vector<std::string>{
           "sweep " + trace_ +
               " --policies full,scissorhands,scissorhands-official,h2o,tova,snapkv,recent,random,oracle,"
               "lookahead,scissorhands-xlayer --budgets 25%,50% --quant flexgen4,kivi2 --csv " +
               csv,
           replay(""), "analyze " + trace_, "plan --model llama-3.1-8b --gpu h100-80gb --sweep " + csv,
           "eval --trace " + std::string(KVSIM_SOURCE_DIR) +
               "/data/traces/stories15M-8x256.h5 --seqs 0 --tokens 24 --policies h2o,tova --budgets 50%"}) {
    const auto result = kvtest::run_kvsim(args);
    ASSERT_EQ(result.code, 0) << args << "\n" << result.output;
    size_t begin = 0, longest = 0;
    for (size_t end; (end = result.output.find('\n', begin)) != std::string::npos; begin = end + 1)
      longest = std::max(longest, end - begin);
    EXPECT_LE(longest, 100u) << args << "\n" << result.output;
  }
}

// 16. synth refuses what a trace may not hold, and what the disk cannot, before it writes.
TEST_F(Hostile, SynthRefusesImpossibleSizesUpFront) {
  expect_refused(kvtest::run_kvsim("synth " + dir_.file("s.h5") + " --seqs 1048577 --tokens 2"),
                 "sequences must be in 1..1048576");
  expect_refused(
      kvtest::run_kvsim("synth " + dir_.file("s.h5") + " --seqs 100000 --tokens 100000 --layers 64 --heads 32"),
      "GB free");
  expect_only({"t.h5"});
}

// 13. "-" is standard output; the table then goes to stderr.
TEST_F(Hostile, DashIsStandardOutput) {
  const auto csv = kvtest::run_kvsim(replay("--csv - 2>/dev/null | cat"));
  EXPECT_EQ(csv.code, 0);
  EXPECT_EQ(csv.output.rfind("policy,params,budget", 0), 0u) << csv.output;
  const auto json = kvtest::run_kvsim(replay("--json - 2>/dev/null | cat"));
  EXPECT_EQ(json.output.rfind("{", 0), 0u) << json.output;
  expect_refused(kvtest::run_kvsim(replay("--csv - --json -")), "only one output");
  expect_refused(kvtest::run_kvsim("synth - --tokens 8"), "standard output");
  expect_only({"t.h5"});
}

// 16. SIGINT or SIGTERM during synth or capture leaves no temporary file.
TEST_F(Hostile, SignalsLeaveNoTemporaryFile) {
  for (int signal : {SIGINT, SIGTERM}) {
    const std::string out = dir_.file("big.h5");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::signal(SIGINT, SIG_DFL);  // as at a terminal (a shell's background job ignores SIGINT)
      std::freopen("/dev/null", "w", stdout);
      std::freopen("/dev/null", "w", stderr);
      ::execl(KVSIM_EXE, KVSIM_EXE, "synth", out.c_str(), "--layers", "8", "--heads", "16", "--tokens", "2048",
              "--seqs", "8", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Until the temporary file exists, so the signal comes while it writes.
    bool writing = false;
    for (int wait = 0; wait < 1000 && !writing; ++wait) {
      for (const auto& entry : fs::directory_iterator(dir_.path()))
        writing = writing || entry.path().filename().string().rfind(".big.h5.tmp-", 0) == 0;
      if (!writing) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_TRUE(writing);
    ::kill(pid, signal);
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == signal) << status;
    expect_only({"t.h5"});
  }
}

}  // namespace

// Crashes inside HDF5 itself (tests/fuzz/hdf5-known/): each verb that opens a trace reads its
// structure in a child process first, so the user gets one line and exit 2.
TEST(HostileHdf5, CrashesInsideHdfFiveAreOneLine) {
  const std::string known = std::string(KVSIM_SOURCE_DIR) + "/tests/fuzz/hdf5-known/";
  for (const char* name : {"global-heap-bad-index-segv.h5", "group-node-count-null-memcpy-segv.h5",
                           "global-heap-zero-object-hang.h5", "vlen-absurd-length-alloc.h5",
                           "object-header-absurd-size.h5"}) {
    for (const std::string verb : {"info", "validate", "replay", "sweep", "analyze"}) {
      const std::string extra = verb == "replay" ? " --policy h2o --budget 8" : "";
      const auto result = kvtest::run_kvsim(verb + " " + known + name + extra);
      EXPECT_EQ(result.code, 2) << verb << " " << name << ": " << result.output;
      EXPECT_EQ(kvtest::count_lines(result.output), 1) << verb << " " << name << ": " << result.output;
    }
  }
  // A heap over-read inside HDF5 that ASan reports; a release build reads on: not a crash.
  const int code = kvtest::run_kvsim("info " + known + "attr-message-overread.h5").code;
  EXPECT_TRUE(code == 0 || code == 2) << code;
}
