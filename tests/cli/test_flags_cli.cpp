// Options and names as a user types them: replay's --policy/--budget and sweep's
// --policies/--budgets in both verbs, "did you mean" for an option or a policy a letter off,
// policy names whatever their case, usage lines with the defaults, the trace named by its
// place, and a warning for a budget that holds the whole sequence.
#include <gtest/gtest.h>

#include <string>

#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

const std::string kTrace = std::string(KVSIM_SOURCE_DIR) + "/data/traces/stories15M-8x256.h5";
const std::string kSmall = " --seqs 0 --layers 0 --threads 1";

bool has(const std::string& output, const std::string& text) { return output.find(text) != std::string::npos; }

TEST(CliFlags, BothSpellingsInBothVerbs) {
  kvtest::TempDir dir;
  const auto plain = kvtest::run_kvsim("sweep " + kTrace + " --policies h2o --budgets 64" + kSmall + " --csv " +
                                       dir.file("a.csv"));
  ASSERT_EQ(plain.code, 0) << plain.output;
  const auto single = kvtest::run_kvsim("sweep " + kTrace + " --policy h2o --budget 64" + kSmall + " --csv " +
                                        dir.file("b.csv"));
  ASSERT_EQ(single.code, 0) << single.output;
  EXPECT_EQ(kvtest::slurp(dir.file("a.csv")), kvtest::slurp(dir.file("b.csv")));
  const auto replay = kvtest::run_kvsim("replay " + kTrace + " --policy h2o --budget 64" + kSmall);
  ASSERT_EQ(replay.code, 0) << replay.output;
  const auto listed = kvtest::run_kvsim("replay " + kTrace + " --policies h2o --budgets 64" + kSmall);
  ASSERT_EQ(listed.code, 0) << listed.output;
  EXPECT_EQ(listed.output, replay.output);
  auto error = kvtest::expect_one_line_error("replay " + kTrace + " --policies h2o,tova" + kSmall);
  EXPECT_TRUE(has(error.output, "replay takes one policy")) << error.output;
  error = kvtest::expect_one_line_error("replay " + kTrace + " --budgets 32,64" + kSmall);
  EXPECT_TRUE(has(error.output, "replay takes one budget")) << error.output;
  error = kvtest::expect_one_line_error("sweep " + kTrace + " --policy h2o --policies tova" + kSmall);
  EXPECT_TRUE(has(error.output, "--policies and --policy are one option")) << error.output;
  error = kvtest::expect_one_line_error("replay " + kTrace + " --budgets 64 --compression-ratio 0.5 --mode prefill");
  EXPECT_TRUE(has(error.output, "give one")) << error.output;
}

TEST(CliFlags, AnOptionALetterOffNamesTheNearest) {
  for (const auto& [args, nearest] : std::vector<std::pair<std::string, std::string>>{
           {"sweep " + kTrace + " --polcies h2o", "--policies"},
           {"replay " + kTrace + " --budgte 64", "--budget"},
           {"replay " + kTrace + " --treads 1", "--threads"},
           {"info " + kTrace + " --jsn x.json", "--json"}}) {
    const auto error = kvtest::expect_one_line_error(args);
    EXPECT_TRUE(has(error.output, "(did you mean " + nearest + "?)")) << error.output;
  }
  const auto far = kvtest::expect_one_line_error("replay " + kTrace + " --zzzzzzzz 1");
  EXPECT_TRUE(has(far.output, "(see kvsim replay --help)")) << far.output;
}

TEST(CliFlags, PolicyNamesWhateverTheirCase) {
  const auto plain = kvtest::run_kvsim("replay " + kTrace + " --policy h2o --budget 64" + kSmall);
  ASSERT_EQ(plain.code, 0) << plain.output;
  const auto upper = kvtest::run_kvsim("replay " + kTrace + " --policy H2O --budget 64" + kSmall);
  ASSERT_EQ(upper.code, 0) << upper.output;
  EXPECT_EQ(upper.output, plain.output);  // reported as h2o
  const auto sweep = kvtest::run_kvsim("sweep " + kTrace + " --policies H2O,SnapKV --budgets 64" + kSmall +
                                       " --param SNAPKV.window=8");
  ASSERT_EQ(sweep.code, 0) << sweep.output;
  EXPECT_TRUE(has(sweep.output, "snapkv(window=8)")) << sweep.output;
  const auto near = kvtest::expect_one_line_error("sweep " + kTrace + " --policies h2,tova" + kSmall);
  EXPECT_TRUE(has(near.output, "unknown policy 'h2' (did you mean h2o?)")) << near.output;
}

TEST(CliFlags, UsageShowsTheDefaultsAndTheTraceByItsPlace) {
  const auto replay = kvtest::run_kvsim("replay --help");
  ASSERT_EQ(replay.code, 0) << replay.output;
  EXPECT_TRUE(has(replay.output, "usage: kvsim replay TRACE [--policy NAME (default scissorhands)] "
                                 "[--budget B (default 20%)]"))
      << replay.output;
  const auto sweep = kvtest::run_kvsim("sweep --help");
  ASSERT_EQ(sweep.code, 0) << sweep.output;
  EXPECT_TRUE(has(sweep.output, "[--policies a,b (default scissorhands,h2o,")) << sweep.output;
  EXPECT_TRUE(has(sweep.output, "[--budgets B,B (default 10%,20%,")) << sweep.output;
  for (const std::string verb : {"replay", "sweep", "info", "validate", "analyze"}) {
    const auto missing = kvtest::expect_one_line_error(verb);
    EXPECT_TRUE(has(missing.output, "kvsim " + verb + ": missing TRACE (usage: kvsim " + verb + " TRACE"))
        << missing.output;
    EXPECT_FALSE(has(missing.output, "--trace")) << missing.output;
  }
}

TEST(CliFlags, ABudgetThatHoldsTheWholeSequenceIsWarnedOf) {
  kvtest::TempDir dir;
  // Standard output in the result, standard error in err.txt (run_shell adds 2>&1 outside).
  auto run = [&](const std::string& args) {
    return kvtest::run_shell(std::string("(") + KVSIM_EXE + " " + args + kSmall + " 2>" + dir.file("err.txt") + ")");
  };
  const auto full = run("replay " + kTrace + " --policy h2o --budget 300 --csv " + dir.file("full.csv"));
  ASSERT_EQ(full.code, 0) << full.output;
  const std::string warning = kvtest::slurp(dir.file("err.txt"));
  EXPECT_EQ(kvtest::count_lines(warning), 1) << warning;
  EXPECT_TRUE(has(warning, "kvsim replay: warning: budget 300 is at least the length of every sequence replayed "
                           "(256 tokens)"))
      << warning;
  // The run is the one asked for: the table of a budget that keeps everything.
  const auto whole = run("replay " + kTrace + " --policy h2o --budget 100% --csv " + dir.file("whole.csv"));
  ASSERT_EQ(whole.code, 0) << whole.output;
  EXPECT_EQ(kvtest::slurp(dir.file("err.txt")), "");  // shares are not warned of
  EXPECT_EQ(kvtest::count_lines(full.output), kvtest::count_lines(whole.output));
  EXPECT_TRUE(has(full.output, "\nall       1.0000  1.0000   1.0000")) << full.output;
  const auto sweep = run("sweep " + kTrace + " --policies h2o --budgets 64,256,300");
  ASSERT_EQ(sweep.code, 0) << sweep.output;
  EXPECT_EQ(kvtest::slurp(dir.file("err.txt")),
            "kvsim sweep: warning: budgets 256, 300 are at least the length of every sequence replayed (256 tokens): "
            "a cache of that many tokens holds the whole sequence\n");
  const auto small = run("replay " + kTrace + " --policy h2o --budget 255");
  ASSERT_EQ(small.code, 0) << small.output;
  EXPECT_EQ(kvtest::slurp(dir.file("err.txt")), "");
}

}  // namespace
