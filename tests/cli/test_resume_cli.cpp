// kvsim sweep --resume: an interrupted sweep (Ctrl-C or a kill) keeps only complete rows, and
// resuming it gives the CSV an uninterrupted sweep writes, byte for byte.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>
#include <utility>
#include <vector>

#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

const char* const kGrid[] = {
    "--policies", "scissorhands,h2o,tova,snapkv,recent,streaming,random", "--budgets", "10%,30%,60%", "--threads", "1"};

// Starts `kvsim sweep TRACE <grid> --csv CSV --resume` and returns its pid.
pid_t start_sweep(const std::string& trace, const std::string& csv) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    std::vector<const char*> argv = {KVSIM_EXE, "sweep", trace.c_str()};
    for (const char* arg : kGrid) argv.push_back(arg);
    for (const char* arg : {"--csv", csv.c_str(), "--resume"}) argv.push_back(arg);
    argv.push_back(nullptr);
    ::execv(KVSIM_EXE, const_cast<char* const*>(argv.data()));
    ::_exit(127);
  }
  return pid;
}

// Waits until the CSV holds at least `rows` complete rows (or the sweep ended).
void wait_for_rows(pid_t pid, const std::string& csv, int rows) {
  for (int i = 0; i < 3000; ++i) {
    if (kvtest::count_lines(kvtest::slurp(csv)) >= rows + 1) return;
    int status;
    if (::waitpid(pid, &status, WNOHANG) == pid) FAIL() << "the sweep ended before it could be interrupted";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL() << "no rows appeared";
}

std::string grid_args() {
  std::string out;
  for (const char* arg : kGrid) out += std::string(" ") + arg;
  return out;
}

class Resume : public ::testing::Test {
 protected:
  // One trace and one uninterrupted sweep for all the tests.
  static void SetUpTestSuite() {
    shared_ = new kvtest::TempDir();
    trace_ = shared_->file("t.h5");
    kvtest::run_kvsim("synth " + trace_ + " --layers 2 --heads 4 --kv-heads 2 --head-dim 32 --tokens 1024 --seqs 2");
    kvtest::run_kvsim("sweep " + trace_ + grid_args() + " --csv " + shared_->file("whole.csv"));
    whole_ = kvtest::slurp(shared_->file("whole.csv"));
  }
  static void TearDownTestSuite() { delete shared_; }
  void SetUp() override { ASSERT_EQ(kvtest::count_lines(whole_), 1 + 7 * 3) << "the reference sweep failed"; }

  void interrupt_and_resume(int signal) {
    const std::string csv = dir_.file("resumed.csv");
    const pid_t pid = start_sweep(trace_, csv);
    wait_for_rows(pid, csv, 3);  // the first policy's rows are in
    ::kill(pid, signal);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (signal == SIGINT) {
      ASSERT_TRUE(WIFEXITED(status));
      EXPECT_EQ(WEXITSTATUS(status), 130);
      const std::string partial = kvtest::slurp(csv);
      EXPECT_EQ(partial.back(), '\n') << "Ctrl-C leaves complete rows only";
      EXPECT_EQ(whole_.compare(0, partial.size(), partial), 0) << "the rows written are the uninterrupted run's";
      EXPECT_LT(partial.size(), whole_.size()) << "interrupted before the end";
    } else {
      ASSERT_TRUE(WIFSIGNALED(status));
    }
    const auto resumed = kvtest::run_kvsim("sweep " + trace_ + grid_args() + " --csv " + csv + " --resume");
    ASSERT_EQ(resumed.code, 0) << resumed.output;
    EXPECT_EQ(kvtest::slurp(csv), whole_);
  }

  kvtest::TempDir dir_;
  static inline kvtest::TempDir* shared_ = nullptr;
  static inline std::string trace_, whole_;
};

}  // namespace

TEST_F(Resume, AfterCtrlC) { interrupt_and_resume(SIGINT); }

TEST_F(Resume, AfterKill) { interrupt_and_resume(SIGKILL); }

TEST_F(Resume, TruncatedLastLineIsDropped) {
  const std::string csv = dir_.file("cut.csv");
  ASSERT_EQ(kvtest::run_kvsim("sweep " + trace_ + grid_args() + " --csv " + csv + " --resume").code, 0);
  ASSERT_EQ(kvtest::slurp(csv), whole_);
  {
    std::ofstream out(csv, std::ios::binary);
    out << whole_.substr(0, whole_.size() / 2);  // cut in the middle of a row
  }
  const auto resumed = kvtest::run_kvsim("sweep " + trace_ + grid_args() + " --csv " + csv + " --resume");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_EQ(kvtest::slurp(csv), whole_);
}

TEST_F(Resume, RowsOfAnotherSweepAreRefused) {
  const std::string csv = dir_.file("other.csv");
  ASSERT_EQ(kvtest::run_kvsim("sweep " + trace_ + " --policies h2o --budgets 10% --csv " + csv).code, 0);
  auto result = kvtest::expect_one_line_error("sweep " + trace_ + grid_args() + " --csv " + csv + " --resume");
  EXPECT_NE(result.output.find("other.csv.settings is missing"), std::string::npos) << result.output;
  const std::string resumable = dir_.file("resumable.csv");
  ASSERT_EQ(
      kvtest::run_kvsim("sweep " + trace_ + " --policies h2o --budgets 10% --csv " + resumable + " --resume").code, 0);
  result = kvtest::expect_one_line_error("sweep " + trace_ + grid_args() + " --csv " + resumable + " --resume");
  EXPECT_NE(result.output.find("'policies: h2o'"), std::string::npos) << result.output;
}

// A sweep that finished (with --resume or without) resumes to nothing: exit 0, the CSV as it
// was, byte for byte, and one line on stderr; its rows are still checked against the grid.
TEST_F(Resume, AFinishedSweepIsLeftAsItIs) {
  const std::string csv = dir_.file("finished.csv");
  for (const bool with_settings : {false, true}) {
    {
      std::ofstream out(csv, std::ios::binary);
      out << whole_;
    }
    if (with_settings) {  // finished by a run with --resume: its settings lie beside it
      std::remove(csv.c_str());
      ASSERT_EQ(kvtest::run_kvsim("sweep " + trace_ + grid_args() + " --csv " + csv + " --resume").code, 0);
    }
    const std::string settings = kvtest::slurp(csv + ".settings");
    const std::string err = dir_.file("err.txt");
    const auto again =
        kvtest::run_shell(std::string("(") + KVSIM_EXE + " sweep " + trace_ + grid_args() + " --csv " + csv +
                          " --resume >/dev/null 2>" + err + ")");
    ASSERT_EQ(again.code, 0) << kvtest::slurp(err);
    EXPECT_EQ(kvtest::slurp(csv), whole_) << with_settings;
    EXPECT_EQ(kvtest::slurp(csv + ".settings"), settings) << with_settings;
    const std::string note = kvtest::slurp(err);
    EXPECT_EQ(kvtest::count_lines(note), 1) << note;
    EXPECT_NE(note.find("kvsim sweep: " + csv + " holds every row of this sweep already"), std::string::npos) << note;
  }
  std::remove((csv + ".settings").c_str());
  const auto other = kvtest::expect_one_line_error("sweep " + trace_ + " --policies h2o,tova --budgets 10% --csv " +
                                                   csv + " --resume");  // complete, but another grid's rows
  EXPECT_NE(other.output.find("finished.csv.settings is missing"), std::string::npos) << other.output;
  EXPECT_EQ(kvtest::slurp(csv), whole_);
}

// Every setting that changes a row, and the trace itself, must match.
TEST_F(Resume, OtherSettingsOrAnotherTraceAreRefused) {
  const std::string csv = dir_.file("settings.csv");
  const std::string grid = " --policies h2o,tova --budgets 10%,30% --csv " + csv + " --resume";
  ASSERT_EQ(kvtest::run_kvsim("sweep " + trace_ + grid).code, 0);
  for (const auto& [extra, fragment] :
       std::vector<std::pair<std::string, std::string>>{{" --seqs 0", "'seqs: 0'"},
                                                        {" --layers 1", "'layers: 1'"},
                                                        {" --mode prefill", "'mode: prefill'"},
                                                        {" --aggregate max", "'aggregate: max'"},
                                                        {" --output-error off", "'output-error: off'"},
                                                        {" --layer-budget 1,2", "'layer-budget: 1,2'"},
                                                        {" --rows qk", "'rows: qk'"}}) {
    const auto result = kvtest::expect_one_line_error("sweep " + trace_ + grid + extra);
    EXPECT_NE(result.output.find(fragment), std::string::npos) << extra << ": " << result.output;
  }
  const std::string other = dir_.file("other.h5");
  ASSERT_EQ(
      kvtest::run_kvsim("synth " + other + " --layers 2 --heads 4 --kv-heads 2 --head-dim 32 --tokens 64 --seqs 2")
          .code,
      0);
  const auto result = kvtest::expect_one_line_error("sweep " + other + grid);
  EXPECT_NE(result.output.find("'trace: "), std::string::npos) << result.output;
  EXPECT_EQ(kvtest::run_kvsim("sweep " + trace_ + grid).code, 0);  // the same sweep still resumes
}

// A setting the rows were made with that this sweep leaves out is another setting too.
TEST_F(Resume, SettingsLeftOutAreRefused) {
  for (const auto& [extra, fragment] : std::vector<std::pair<std::string, std::string>>{
           {" --compress-every 4", "'compress-every: 4'"},
           {" --threshold 0.5 --window 32", "'threshold: 0.5 window 32'"}}) {
    const std::string csv = dir_.file("left-out.csv");
    std::remove(csv.c_str());
    std::remove((csv + ".settings").c_str());
    const std::string grid = " --policies h2o --budgets 10% --seqs 0 --csv " + csv + " --resume";
    ASSERT_EQ(kvtest::run_kvsim("sweep " + trace_ + grid + extra).code, 0) << extra;
    const auto result = kvtest::expect_one_line_error("sweep " + trace_ + grid);
    EXPECT_NE(result.output.find("the rows were made with " + fragment), std::string::npos)
        << extra << ": " << result.output;
    EXPECT_EQ(kvtest::run_kvsim("sweep " + trace_ + grid + extra).code, 0) << extra;  // still resumes
  }
}

// The settings file a resume writes beside the CSV is an output like the CSV: never the trace.
TEST_F(Resume, SettingsBesideTheCsvAreNeverTheTrace) {
  const std::string csv = dir_.file("x.csv");
  const std::string trace = csv + ".settings";
  ASSERT_EQ(::link(trace_.c_str(), trace.c_str()), 0);
  const std::string before = kvtest::slurp(trace);
  const auto result = kvtest::expect_one_line_error("sweep " + trace + " --policies h2o --budgets 10% --csv " + csv +
                                                    " --resume");
  EXPECT_NE(result.output.find("is an input of this run"), std::string::npos) << result.output;
  EXPECT_EQ(kvtest::slurp(trace), before);
}

// A settings file is read only up to what kvsim writes there, and shown only as text.
TEST_F(Resume, SettingsThatAreNotKvsimsAreOneLine) {
  const std::string csv = dir_.file("y.csv");
  const std::string grid = " --policies h2o --budgets 10% --csv " + csv + " --resume";
  ASSERT_EQ(kvtest::run_kvsim("sweep " + trace_ + grid).code, 0);
  const std::string sidecar = csv + ".settings";
  ASSERT_EQ(std::remove(sidecar.c_str()), 0);
  ASSERT_EQ(::symlink("/dev/zero", sidecar.c_str()), 0);  // endless
  auto result = kvtest::expect_one_line_error("sweep " + trace_ + grid, "timeout 60");
  EXPECT_NE(result.output.find("not a settings file kvsim wrote"), std::string::npos) << result.output;
  ASSERT_EQ(std::remove(sidecar.c_str()), 0);
  std::ofstream(sidecar, std::ios::binary) << std::string("\x89HDF\r\n\x1a\n\x00\x01", 10);
  result = kvtest::expect_one_line_error("sweep " + trace_ + grid);
  EXPECT_NE(result.output.find("not a settings file kvsim wrote"), std::string::npos) << result.output;
}

// A resume reads its CSV back, so the CSV is a regular file: never a device, a FIFO or "-".
TEST_F(Resume, TheCsvIsARegularFile) {
  const std::string fifo = dir_.file("rows.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& csv : {std::string("/dev/zero"), fifo, std::string("-")}) {
    const auto result =
        kvtest::expect_one_line_error("sweep " + trace_ + " --policies h2o --budgets 10% --csv " + csv + " --resume",
                                      "timeout 60");
    EXPECT_NE(result.output.find("--resume"), std::string::npos) << csv << ": " << result.output;
  }
}
