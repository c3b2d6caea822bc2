// Span metrics as a user gets them (docs/semantics.md, section 3 "Spans"): a trace captured
// with a context and a question, replayed with --json and --survival; the spans' `gone` at the
// step is what the survival table implies. Skipped without the stories15M model.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../support/model_dir.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Per (seq, position), every row's eviction step in the survival table. Its first eight
// fields hold no comma here (policy defaults: no params), and the step is the last field.
std::map<std::pair<int, int>, std::vector<int>> eviction_steps(const std::string& csv) {
  std::map<std::pair<int, int>, std::vector<int>> steps;
  std::istringstream lines(csv);
  std::string line;
  std::getline(lines, line);  // the header
  while (std::getline(lines, line)) {
    std::vector<std::string> fields;
    size_t begin = 0;
    for (int f = 0; f < 8; ++f) {
      const size_t comma = line.find(',', begin);
      fields.push_back(line.substr(begin, comma - begin));
      begin = comma + 1;
    }
    const int step = std::stoi(line.substr(line.rfind(',') + 1));
    steps[{std::stoi(fields[4]), std::stoi(fields[7])}].push_back(step);
  }
  return steps;
}

TEST(CliSpans, GoneIsWhatTheSurvivalTableImplies) {
  if (!kvtest::have_model()) GTEST_SKIP() << "stories15M not found in " << kvtest::model_dir();
  kvtest::TempDir dir;
  const std::string trace = dir.file("qa.h5");
  ASSERT_EQ(kvtest::run_kvsim("capture --context 'Lily had a red ball. She lost it in the park.' --question "
                              "'Where was the ball?' --tokens 40 --out " + trace).code, 0);
  for (const char* policy : {"snapkv", "h2o", "streaming"}) {
    const kvtest::CliResult result =
        kvtest::run_kvsim("replay " + trace + " --policy " + policy + " --budget 6 --mode prefill --question auto --json " +
                          dir.file("r.json") + " --survival " + dir.file("s.csv"));
    ASSERT_EQ(result.code, 0) << result.output;
    EXPECT_NE(result.output.find("seq  span        positions    step"), std::string::npos) << result.output;
    const nlohmann::json spans = nlohmann::json::parse(read_text(dir.file("r.json")))["cells"][0]["spans"];
    const auto steps = eviction_steps(read_text(dir.file("s.csv")));
    ASSERT_EQ(spans.size(), 3u) << policy;
    int context_gone = 0;
    for (const nlohmann::json& span : spans) {
      const int seq = span["seq"], start = span["start"], end = span["end"], step = span["step"];
      int came = 0, gone = 0;
      for (int p = start; p < end && p <= step; ++p, ++came) {
        bool everywhere = true;
        for (int evicted : steps.at({seq, p})) everywhere = everywhere && evicted >= 0 && evicted < step;
        gone += everywhere;
      }
      if (came == 0) {
        EXPECT_TRUE(span["gone"].is_null()) << policy << " " << span.dump();
        continue;
      }
      EXPECT_DOUBLE_EQ(span["gone"].get<double>(), static_cast<double>(gone) / came) << policy << " " << span.dump();
      if (span["kind"] == "context") context_gone = gone;
    }
    EXPECT_GT(context_gone, 0) << policy << ": a budget of 6 leaves most of the context gone";
  }
}

}  // namespace
