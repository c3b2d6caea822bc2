// Outputs under hostile conditions: plot paths that are inputs, full disks under plots and
// standard output, closed and broken standard output, long names, /proc/self/fd links to
// pipes and sockets, temporary files a killed run left. Each test builds what it needs, runs
// the CLI and checks the exit code, the one line and what is left on disk.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Runs a shell command line; what it prints on stdout comes back (redirect stderr in it).
std::string run_shell(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  ::pclose(pipe);
  return output;
}

// One kvsim run on a full disk of the test's own (a small tmpfs in a private mount namespace).
// The mount ends with the run, so what it held is listed: "name size" per file, "name/" per
// folder, sorted. `shell`: what the script itself printed (its own errors).
struct SmallDiskRun {
  int code = -1;
  std::string out, err, listing, shell;
};

class HostileOutputs : public ::testing::Test {
 protected:
  void SetUp() override {
    trace_ = kvtest::synth_small_trace(dir_);
  }

  static std::string kvsim() { return std::string(KVSIM_EXE); }

  // Exit 2 with one line holding every fragment.
  static void expect_refused(const kvtest::CliResult& result, std::initializer_list<std::string> fragments) {
    EXPECT_EQ(result.code, 2) << result.output;
    EXPECT_EQ(kvtest::count_lines(result.output), 1) << result.output;
    for (const auto& fragment : fragments)
      EXPECT_TRUE(has(result.output, fragment)) << fragment << "\n" << result.output;
  }

  // The names in `folder` (hidden ones too), sorted.
  static std::vector<std::string> names_in(const std::string& folder) {
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(folder)) found.push_back(entry.path().filename().string());
    std::sort(found.begin(), found.end());
    return found;
  }

  static bool can_mount() { return ::geteuid() == 0 && std::system("unshare -m true >/dev/null 2>&1") == 0; }

  // Runs kvsim with `args` while the folder "small" of the test's directory ($S) is a tmpfs of
  // `kib` KiB; `prepare` (shell) runs first. kvsim's standard output goes to `stdout_to`, a
  // shell word (default: a file outside the tmpfs).
  SmallDiskRun run_on_small_disk(int kib, const std::string& prepare, const std::string& args,
                                 const std::string& stdout_to = "") const {
    const std::string small = dir_.file("small"), script = dir_.file("small.sh");
    fs::create_directories(small);
    const std::string out = stdout_to.empty() ? std::string("'").append(dir_.file("run.out")).append("'") : stdout_to;
    std::ofstream(script) << "S='" << small << "'\n"
                          << "mount -t tmpfs -o size=" << kib << "k tmpfs \"$S\" || exit 99\n"
                          << prepare << "\n"
                          << kvsim() << " " << args << " > " << out << " 2> '" << dir_.file("run.err") << "'\n"
                          << "echo $? > '" << dir_.file("run.code") << "'\n"
                          << "find \"$S\" -mindepth 1 \\( -type d -printf '%P/\\n' -o -printf '%P %s\\n' \\) | sort > '"
                          << dir_.file("run.list") << "'\n";
    const std::string shell = run_shell("unshare -m sh " + script + " 2>&1");
    SmallDiskRun run;
    const std::string code = kvtest::slurp(dir_.file("run.code"));
    run.code = code.empty() ? -1 : std::stoi(code);
    run.out = stdout_to.empty() ? kvtest::slurp(dir_.file("run.out")) : "";
    run.err = kvtest::slurp(dir_.file("run.err"));
    run.listing = kvtest::slurp(dir_.file("run.list"));
    run.shell = shell;
    return run;
  }

  // Exit 2, one line on stderr holding every fragment, nothing on stdout.
  static void expect_failed_write(const SmallDiskRun& run, std::initializer_list<std::string> fragments) {
    EXPECT_EQ(run.code, 2) << run.err << run.shell;
    EXPECT_EQ(kvtest::count_lines(run.err), 1) << run.err;
    EXPECT_EQ(run.out, "");
    for (const auto& fragment : fragments) EXPECT_TRUE(has(run.err, fragment)) << fragment << "\n" << run.err;
  }

  kvtest::TempDir dir_;
  std::string trace_;
};

#ifdef KVSIM_HAVE_PLOT
const char* const kAnalyzePlots[] = {"persistence.png", "ever-pivotal.png", "spearman-vs-lag.png",
                                     "topk-recall-vs-lag.png", "cross-layer.png"};

// Every file of analyze's plot directory is an output like --csv: an input of the run at one
// of its names, through a symlink or as the trace itself, is refused before any work.
TEST_F(HostileOutputs, AnalyzePlotDirectoryNeverOverwritesAnInput) {
  const std::string plots = dir_.file("plots");
  fs::create_directories(plots);
  const auto size = fs::file_size(trace_);
  for (const char* name : kAnalyzePlots) {
    const std::string link = plots + "/" + name;
    fs::create_symlink(trace_, link);
    expect_refused(kvtest::run_kvsim("analyze " + trace_ + " --plot " + plots), {link, "is an input of this run"});
    fs::remove(link);
  }
  EXPECT_EQ(fs::file_size(trace_), size);
  EXPECT_EQ(kvtest::run_kvsim("info " + trace_).code, 0);

  const std::string stored = plots + "/persistence.png";
  fs::copy_file(trace_, stored);
  expect_refused(kvtest::run_kvsim("analyze " + stored + " --plot " + plots), {"is an input of this run"});
  EXPECT_EQ(kvtest::run_kvsim("info " + stored).code, 0);
  fs::remove(stored);

  expect_refused(kvtest::run_kvsim("analyze " + trace_ + " --csv " + plots + "/cross-layer.png --plot " + plots),
                 {"given twice"});
  EXPECT_EQ(names_in(plots), std::vector<std::string>{});
}

// Plots are drawn in memory and written like the CSV: a full disk is one line naming the
// path and the error, exit 2, and nothing under the final name (no truncated image).
TEST_F(HostileOutputs, PlotsOnAFullDiskLeaveNothing) {
  if (!can_mount()) GTEST_SKIP() << "needs root and unshare -m for a small tmpfs";
  for (const char* name : {"p.svg", "p.png"}) {
    const auto run = run_on_small_disk(16, "", "sweep " + trace_ + " --budgets 25%,50% --plot \"$S/" + name + "\"");
    expect_failed_write(run, {"small/" + std::string(name) + ": cannot write the plot: No space left on device"});
    EXPECT_EQ(run.listing, "") << name;
  }
  const auto plan =
      run_on_small_disk(16, "", "plan --model llama-3.1-8b --gpu h100-80gb --budget 20% --plot \"$S/x.svg\"");
  expect_failed_write(plan, {"x.svg: cannot write the plot: No space left on device"});
  EXPECT_EQ(plan.listing, "");
}

// analyze draws its five plots in memory and commits them together: a failure leaves no plot
// of this run, and the plots an earlier run left stay as they were.
TEST_F(HostileOutputs, AnalyzePlotsOnAFullDiskAreAllOrNothing) {
  if (!can_mount()) GTEST_SKIP() << "needs root and unshare -m for a small tmpfs";
  const auto fresh = run_on_small_disk(16, "", "analyze " + trace_ + " --plot \"$S/plots\"");
  expect_failed_write(fresh, {"cannot write the plot: No space left on device"});
  EXPECT_EQ(fresh.listing, "plots/\n");

  const auto earlier = run_on_small_disk(
      48, "mkdir \"$S/plots\"; for f in persistence ever-pivotal; do echo old > \"$S/plots/$f.png\"; done",
      "analyze " + trace_ + " --plot \"$S/plots\"");
  expect_failed_write(earlier, {"cannot write the plot: No space left on device"});
  EXPECT_EQ(earlier.listing, "plots/\nplots/ever-pivotal.png 4\nplots/persistence.png 4\n");
}
#endif

// Standard output is checked at the end of every verb: a full disk, a full device or a closed
// descriptor is one line and exit 2, not a silently short table.
TEST_F(HostileOutputs, StandardOutputWriteErrorsAreOneLine) {
  if (::geteuid() == 0) {
    const std::string full = dir_.file("full");
    ASSERT_EQ(::mknod(full.c_str(), S_IFCHR | 0666, makedev(1, 7)), 0);
    const std::string policies = run_shell(kvsim() + " policies 2>&1 >" + full + "; echo \"exit $?\"");
    EXPECT_EQ(policies, "kvsim policies: cannot write standard output: No space left on device\nexit 2\n");
  }
  const std::string closed = run_shell(kvsim() + " policies 2>&1 >&-; echo \"exit $?\"");
  EXPECT_EQ(closed, "kvsim policies: cannot write standard output: Bad file descriptor\nexit 2\n");
  const std::string help = run_shell(kvsim() + " --help 2>&1 >&-; echo \"exit $?\"");
  EXPECT_EQ(help, "kvsim: cannot write standard output: Bad file descriptor\nexit 2\n");

  if (!can_mount()) GTEST_SKIP() << "needs root and unshare -m for a small tmpfs";
  std::string budgets = "5";
  for (int budget = 6; budget <= 23; ++budget) budgets.append(",").append(std::to_string(budget));
  const std::string sweep = "sweep " + trace_ +
                            " --policies h2o,tova,snapkv,recent,scissorhands,oracle,random,lookahead,full --budgets " +
                            budgets;
  const auto whole = kvtest::run_kvsim(sweep + " 2>/dev/null");
  ASSERT_EQ(whole.code, 0);
  ASSERT_GT(whole.output.size(), 8192u);  // more than the free space below
  const auto run = run_on_small_disk(16, "head -c 12288 /dev/zero > \"$S/fill\"", sweep, "\"$S/out.txt\"");
  EXPECT_EQ(run.code, 2);
  EXPECT_EQ(run.err, "kvsim sweep: cannot write standard output: No space left on device\n");
}

// A closed standard output is an error, and no file the verb opens takes its descriptor: the
// tables never land in an output.
TEST_F(HostileOutputs, ClosedStandardOutputIsNotReused) {
  const std::string csv = dir_.file("r.csv");
  const std::string result = run_shell(kvsim() + " replay " + trace_ + " --policy h2o --budget 8 --csv " + csv +
                                       " 2>&1 >&-; echo \"exit $?\"");
  EXPECT_EQ(result, "kvsim replay: cannot write standard output: Bad file descriptor\nexit 2\n");
  EXPECT_EQ(kvtest::slurp(csv).rfind("policy,params,budget", 0), 0u);
  EXPECT_FALSE(has(kvtest::slurp(csv), "teacher-forced")) << "the table went into the CSV";
}

// A reader that stops reading is not a write error: with SIGPIPE at its default kvsim ends by
// it, as any writer into a pipe; with SIGPIPE ignored it ends as it would have, quietly.
TEST_F(HostileOutputs, AReaderThatStopsIsNotAnError) {
  const std::string err = dir_.file("err"), code = dir_.file("code");
  const std::string writer = "{ sleep 0.3; " + kvsim() + " policies 2>" + err + "; echo $? >" + code + "; }";
  const std::string reader = " | { exec 0<&-; sleep 1; }";
  run_shell(writer + reader);
  EXPECT_EQ(kvtest::slurp(code), "141\n");  // 128 + SIGPIPE
  EXPECT_EQ(kvtest::slurp(err), "");
  run_shell("trap '' PIPE; " + writer + reader);
  EXPECT_EQ(kvtest::slurp(code), "0\n");
  EXPECT_EQ(kvtest::slurp(err), "");
  const std::string head = run_shell(kvsim() + " policies 2>&1 | head -n 1");
  EXPECT_EQ(kvtest::count_lines(head), 1) << head;
  const std::string file = dir_.file("policies.txt");
  const std::string fine = run_shell(kvsim() + " policies >" + file + " 2>&1; echo \"exit $?\"");
  EXPECT_EQ(fine, "exit 0\n");
  EXPECT_EQ(kvtest::slurp(file), kvtest::run_kvsim("policies").output);
}

// Any legal name can be written: the temporary sibling of a 255-byte name is shortened.
TEST_F(HostileOutputs, LongestLegalNameIsWritten) {
  const std::string name = std::string(251, 'a') + ".csv";
  ASSERT_EQ(name.size(), 255u);
  const auto result = kvtest::run_kvsim("replay " + trace_ + " --policy h2o --budget 8 --csv " + dir_.file(name));
  EXPECT_EQ(result.code, 0) << result.output;
  EXPECT_EQ(kvtest::slurp(dir_.file(name)).rfind("policy,params,budget", 0), 0u);
  EXPECT_EQ(names_in(dir_.path().string()), (std::vector<std::string>{name, "t.h5"}));
}

// /proc/self/fd/N and /dev/stdout naming a pipe or a socket are streams, written in place.
TEST_F(HostileOutputs, DescriptorLinksToPipesAndSocketsAreStreams) {
  for (const std::string path : {"/proc/self/fd/1", "/dev/stdout", "/dev/fd/1"}) {
    const std::string piped = run_shell("{ " + kvsim() + " replay " + trace_ + " --policy h2o --budget 8 --csv " +
                                        path + " 2>&1; echo \"exit $?\"; } | cat");
    EXPECT_TRUE(has(piped, "policy,params,budget")) << path << "\n" << piped;
    EXPECT_TRUE(has(piped, "exit 0")) << path << "\n" << piped;
  }
  int sockets[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sockets), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(sockets[1], STDOUT_FILENO);
    ::close(sockets[0]);
    ::close(sockets[1]);
    std::freopen("/dev/null", "w", stderr);
    ::execl(KVSIM_EXE, KVSIM_EXE, "replay", trace_.c_str(), "--policy", "h2o", "--budget", "8", "--csv",
            "/proc/self/fd/1", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(sockets[1]);
  std::string received;
  char buffer[4096];
  for (ssize_t n; (n = ::read(sockets[0], buffer, sizeof buffer)) > 0;) received.append(buffer, static_cast<size_t>(n));
  ::close(sockets[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(has(received, "policy,params,budget")) << received;
}

// A temporary file whose process is gone (SIGKILL) is removed on the next write into its
// folder; only kvsim's exact naming, only in that folder, never a running process's file.
TEST_F(HostileOutputs, StaleTemporariesAreRemovedOnTheNextWrite) {
  const std::string other = dir_.file("other");
  fs::create_directories(other);
  const std::string live = ".x.csv.tmp-" + std::to_string(::getpid()) + "-0";
  const std::vector<std::string> kept = {".x.csv.tmp-abc-0", ".x.csv.tmp-999999999", "x.csv.tmp-999999999-0",
                                         ".x.csv.tmp-999999999-0.bak", live};
  for (const auto& name : kept) std::ofstream(dir_.file(name)) << "keep";
  std::ofstream(dir_.file(".r.csv.tmp-999999999-3")) << "stale";
  std::ofstream(dir_.file(".aa.tmp-999999998-0")) << "stale";
  fs::create_directories(dir_.file(".d.tmp-999999999-0"));  // not a file: kept
  std::ofstream(other + "/.r.csv.tmp-999999999-3") << "another folder";
  const auto result = kvtest::run_kvsim("replay " + trace_ + " --policy h2o --budget 8 --csv " + dir_.file("r.csv"));
  ASSERT_EQ(result.code, 0) << result.output;
  std::vector<std::string> expected = kept;
  for (const char* name : {".d.tmp-999999999-0", "other", "r.csv", "t.h5"}) expected.push_back(name);
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(names_in(dir_.path().string()), expected);
  EXPECT_EQ(names_in(other), std::vector<std::string>{".r.csv.tmp-999999999-3"});
}

// A loop of symbolic links given as the trace says so.
TEST_F(HostileOutputs, SymlinkLoopAsTheTrace) {
  const std::string loop = dir_.file("loop.h5");
  fs::create_symlink("loop.h5", loop);
  expect_refused(kvtest::run_kvsim("info " + loop), {loop + ": too many levels of symbolic links"});
  expect_refused(kvtest::run_kvsim("replay " + trace_ + " --policy h2o --budget 8 --csv " + loop),
                 {loop + ": too many levels of symbolic links"});
}

}  // namespace
