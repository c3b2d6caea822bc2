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

class HostileOutputs : public ::testing::Test {
 protected:
  void SetUp() override {
    trace_ = dir_.file("t.h5");
    const auto made =
        kvtest::run_kvsim("synth " + trace_ + " --layers 2 --heads 4 --kv-heads 2 --head-dim 8 --tokens 24 --seqs 2");
    ASSERT_EQ(made.code, 0) << made.output;
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

  kvtest::TempDir dir_;
  std::string trace_;
};

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

}  // namespace
