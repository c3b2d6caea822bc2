#pragma once
// Runs the kvsim executable as a user would (KVSIM_EXE is its path) and captures what it
// printed, stdout and stderr together.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

namespace kvtest {

struct CliResult {
  int code;
  std::string output;
};

// What `command` (a shell command line) printed, stdout and stderr together, and its exit code.
inline CliResult run_shell(const std::string& command) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  std::string output;
  std::array<char, 4096> buffer{};
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

// `env`: assignments like "A=b" set for the command.
inline CliResult run_kvsim(const std::string& args, const std::string& env = "") {
  return run_shell(env + (env.empty() ? "" : " ") + KVSIM_EXE + " " + args);
}

inline int count_lines(const std::string& text) {
  int count = 0;
  for (char c : text) count += c == '\n';
  return count;
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace kvtest
