// Shared keep-sets as a user runs them: --share layer|model with --share-score in replay and
// sweep, the survival file they write, and their bad input (docs/semantics.md, section 2).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

// The eviction steps a survival CSV gives each (policy, budget, seq, position, layer or "").
using Steps =
    std::map<std::tuple<std::string, std::string, std::string, std::string, std::string>, std::set<std::string>>;

// The distinct eviction steps of each position of each (policy, budget, sequence), over the
// kv heads of its layer (by_layer) or over every layer and kv head.
Steps eviction_steps(const std::string& csv, bool by_layer) {
  Steps steps;
  std::istringstream lines(csv);
  std::string line;
  std::getline(lines, line);  // policy,params,budget,quant,seq,layer,group,position,token,eviction_step
  while (std::getline(lines, line)) {
    std::vector<std::string> fields;
    std::istringstream cells(line);
    for (std::string field; std::getline(cells, field, ',');) fields.push_back(field);
    steps[{fields[0], fields[2], fields[4], fields[7], by_layer ? fields[5] : ""}].insert(fields.back());
  }
  return steps;
}

bool one_step_each(const Steps& steps) {
  for (const auto& [position, at] : steps)
    if (at.size() != 1) return false;
  return !steps.empty();
}

TEST(CliShare, RefusedInOneLine) {
  const kvtest::TempDir dir;
  const std::string trace = kvtest::synth_small_trace(dir);
  const std::string replay = "replay " + trace + " --budget 8 --policy ";
  for (const auto& [args, line] : std::vector<std::pair<std::string, std::string>>{
           {replay + "recent --share layer",
            "policy recent has no per-position scores; --share layer needs a scoring policy"},
           {replay + "full --share model",
            "policy full has no per-position scores; --share model needs a scoring policy"},
           {replay + "ada-h2o --share layer", "policy ada-h2o shares a layer's slots among its kv heads"},
           {replay + "h2o --share layer --page 4",
            "--share layer evicts single positions from every cache: it cannot run with --page"},
           {replay + "h2o --share model --head-budget adaptive",
            "--share model keeps B per cache: it cannot run with --head-budget adaptive"},
           {replay + "h2o --share model --layer-budget 1,2",
            "--share model: policy h2o holds different budgets on different layers"},
           {replay + "h2o --share heads", "--share: 'heads' is not none, layer or model"},
           {replay + "h2o --share layer --share-score median", "--share-score: 'median' is not mean, max or sum"}}) {
    SCOPED_TRACE(args);
    const kvtest::CliResult result = kvtest::expect_one_line_error(args);
    EXPECT_NE(result.output.find(line), std::string::npos) << result.output;
  }
  // In a sweep the one policy that cannot is named, and nothing is written.
  const std::string csv = dir.file("sweep.csv");
  const auto sweep =
      kvtest::expect_one_line_error("sweep " + trace + " --policies h2o,recent --budgets 8 --share model --csv " + csv);
  EXPECT_NE(sweep.output.find("policy recent has no per-position scores"), std::string::npos) << sweep.output;
  EXPECT_FALSE(std::filesystem::exists(csv));
}

// Per-head sets evict a position at different steps in the two kv heads; one set per layer at
// one step in both, one set for the model at one step in every layer.
TEST(CliShare, SurvivalHasOneEvictionStepPerSet) {
  const kvtest::TempDir dir;
  const std::string trace = kvtest::synth_small_trace(dir);
  const std::string common = "sweep " + trace + " --policies h2o,snapkv,knorm,tova --budgets 6,25% --param window=2";
  std::map<std::string, std::string> survival;
  for (const std::string share : {"none", "layer", "model"}) {
    const std::string path = dir.file(share + ".csv");
    const auto run = kvtest::run_kvsim(common + " --share " + share + " --survival " + path);
    ASSERT_EQ(run.code, 0) << run.output;
    survival[share] = kvtest::slurp(path);
  }
  EXPECT_FALSE(one_step_each(eviction_steps(survival["none"], true)));
  EXPECT_TRUE(one_step_each(eviction_steps(survival["layer"], true)));
  EXPECT_FALSE(one_step_each(eviction_steps(survival["layer"], false)));
  EXPECT_TRUE(one_step_each(eviction_steps(survival["model"], false)));
}

TEST(CliShare, SameWhateverThreads) {
  const kvtest::TempDir dir;
  const std::string trace = kvtest::synth_small_trace(dir, 3);
  const auto run = kvtest::expect_same_whatever_threads(
      "sweep " + trace + " --policies h2o,tova --budgets 6,12 --share model --share-score max ", dir, 3,
      {"csv", "json", "survival"});
  EXPECT_NE(run.output.find("one keep-set for the model (max score)"), std::string::npos) << run.output;
}

}  // namespace
