#pragma once
// Checks the CLI tests share: bad input fails with exit code 2 and one line of output, and
// what a verb prints and writes does not depend on --threads.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "run_cli.hpp"
#include "temp_dir.hpp"

namespace kvtest {

// The small trace the CLI's bad-input tests start from: `kvsim synth` of 2 layers x 4 heads
// (2 kv heads), head dim 8, 24 tokens, into dir/t.h5. A failure to make it fails the test.
inline std::string synth_small_trace(const TempDir& dir, int sequences = 2) {
  const std::string path = dir.file("t.h5");
  const auto made = run_kvsim("synth " + path + " --layers 2 --heads 4 --kv-heads 2 --head-dim 8 --tokens 24 --seqs " +
                              std::to_string(sequences));
  EXPECT_EQ(made.code, 0) << made.output;
  return path;
}

// Expects exit code 2 and exactly one line (the error); returns the run.
inline CliResult expect_one_line_error(const std::string& args, const std::string& env = "") {
  const CliResult result = run_kvsim(args, env);
  EXPECT_EQ(result.code, 2) << args << "\n" << result.output;
  EXPECT_EQ(count_lines(result.output), 1) << args << "\n" << result.output;
  return result;
}

// Runs `common` with --threads 1, then --threads `threads`, each writing the files `outputs`
// names ("csv", "json", "survival") into `dir`: one.csv, one.json, one_survival.csv, and
// two.csv, ... Expects both runs to succeed and to print and write the same bytes; returns
// the first.
inline CliResult expect_same_whatever_threads(const std::string& common, const TempDir& dir, int threads,
                                              const std::vector<std::string>& outputs) {
  auto file = [&](const std::string& run, const std::string& option) {
    return dir.file(option == "survival" ? run + "_survival.csv" : run + "." + option);
  };
  auto run = [&](const std::string& name, int t) {
    std::string args = common + "--threads " + std::to_string(t);
    for (const auto& option : outputs) args += " --" + option + " " + file(name, option);
    return run_kvsim(args);
  };
  const CliResult one = run("one", 1);
  EXPECT_EQ(one.code, 0) << one.output;
  const CliResult two = run("two", threads);
  EXPECT_EQ(two.code, 0) << two.output;
  EXPECT_EQ(one.output, two.output);
  for (const auto& option : outputs) EXPECT_EQ(slurp(file("one", option)), slurp(file("two", option))) << option;
  return one;
}

}  // namespace kvtest
