// kvsim rank (sim/plan/include/kvsim/plan/rank.hpp): the mean quality over the budget shares
// and the smallest budget meeting the target on a 3-policy x 3-budget sweep worked by hand
// (tests/support/rank_sweep.hpp), the order of a lower-is-better metric, budgets not every
// policy has, and what it refuses.
#include <gtest/gtest.h>

#include <string>

#include "kvsim/plan/rank.hpp"
#include "kvtrace/error.hpp"
#include "../support/rank_sweep.hpp"

namespace {

const std::string kHeader = kvtest::kRankHeader;
const std::string kHandSweep = kvtest::kRankHandRows;

kvsim::Ranking rank(const std::string& rows, const std::string& metric = "retention_mean",
                    std::optional<double> target = std::nullopt) {
  kvsim::RankRequest request;
  request.metric = metric;
  request.target = target;
  return kvsim::rank_sweep(kvsim::parse_sweep_csv(kHeader + rows, "s.csv", metric), "s.csv", request);
}

std::string refusal(const std::string& rows, const std::string& metric = "retention_mean") {
  try {
    rank(rows, metric);
  } catch (const kvtrace::InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST(Rank, MeanOverSharesIsTheTrapezoidAreaOverTheSpan) {
  // 0.125 x (0.5 + 1) / 2 + 0.25 x (1 + 1) / 2 = 0.34375, over 0.375.
  EXPECT_DOUBLE_EQ(kvsim::mean_over_shares({{"32", 0.125, 0.5}, {"64", 0.25, 1}, {"128", 0.5, 1}}), 0.34375 / 0.375);
  // A constant curve's mean is the constant, whatever the spacing.
  EXPECT_DOUBLE_EQ(kvsim::mean_over_shares({{"a", 0.1, 0.7}, {"b", 0.15, 0.7}, {"c", 0.9, 0.7}}), 0.7);
}

TEST(Rank, HandWorkedThreePoliciesAtThreeBudgets) {
  const kvsim::Ranking r = rank(kHandSweep);
  ASSERT_EQ(r.ranked.size(), 3u);
  EXPECT_EQ(r.ranked[0].policy, "oracle");
  EXPECT_TRUE(r.ranked[0].bound);
  EXPECT_DOUBLE_EQ(r.ranked[0].mean, 0.361328125 / 0.375);
  EXPECT_EQ(r.ranked[0].points[*r.ranked[0].smallest].budget, "64");
  EXPECT_EQ(r.ranked[1].policy, "tova");
  EXPECT_DOUBLE_EQ(r.ranked[1].mean, 0.349609375 / 0.375);
  EXPECT_EQ(r.ranked[1].points[*r.ranked[1].smallest].budget, "128");
  EXPECT_EQ(r.ranked[2].policy, "h2o");
  EXPECT_DOUBLE_EQ(r.ranked[2].mean, 0.875);
  EXPECT_FALSE(r.ranked[2].smallest);
  EXPECT_EQ(r.budgets, (std::vector<std::string>{"32", "64", "128"}));
  EXPECT_DOUBLE_EQ(r.share_low, 0.125);
  EXPECT_DOUBLE_EQ(r.share_high, 0.5);
  EXPECT_DOUBLE_EQ(r.target, 0.95);
  EXPECT_EQ(kvsim::rank_text(r),
            "s.csv: 3 policies ranked by retention_mean over 3 budgets, shares 0.1250 to 0.5000\n"
            "rank  policy     mean  smallest budget\n"
            "   1  oracle*  0.9635  64 (0.2500)\n"
            "   2  tova     0.9323  128 (0.5000)\n"
            "   3  h2o      0.8750  -\n"
            "\n"
            "mean: the area under retention_mean against budget_share_mean (trapezoid rule) over the span of\n"
            "  shares; higher is better, ranked descending\n"
            "smallest budget: the least budget share whose retention_mean >= 0.95 ('-': none)\n"
            "* an upper bound, not a policy\n");
}

TEST(Rank, OutputErrorIsRankedAscendingWithItsOwnDefaultTarget) {
  const kvsim::Ranking r = rank(kHandSweep, "output_error_mean");
  EXPECT_FALSE(r.higher_is_better);
  EXPECT_DOUBLE_EQ(r.target, 0.05);
  ASSERT_EQ(r.ranked.size(), 3u);
  EXPECT_EQ(r.ranked[0].policy, "oracle");
  EXPECT_NEAR(r.ranked[0].mean, 1 - 0.361328125 / 0.375, 1e-15);
  EXPECT_EQ(r.ranked[0].points[*r.ranked[0].smallest].budget, "64");
  EXPECT_EQ(r.ranked[1].policy, "tova");
  EXPECT_EQ(r.ranked[1].points[*r.ranked[1].smallest].budget, "128");
  EXPECT_EQ(r.ranked[2].policy, "h2o");
  EXPECT_DOUBLE_EQ(r.ranked[2].mean, 0.125);
  EXPECT_FALSE(r.ranked[2].smallest);
  // A target of its own: <= 0.2 is met by h2o at 64, tova and oracle at 32.
  const kvsim::Ranking loose = rank(kHandSweep, "output_error_mean", 0.2);
  EXPECT_EQ(loose.ranked[2].points[*loose.ranked[2].smallest].budget, "64");
  EXPECT_EQ(loose.ranked[1].points[*loose.ranked[1].smallest].budget, "32");
}

TEST(Rank, TiesGoByName) {
  const kvsim::Ranking r = rank(
      "tova,,32,32,0.125,0.5,\n"
      "tova,,64,64,0.25,0.5,\n"
      "h2o,,32,32,0.125,0.5,\n"
      "h2o,,64,64,0.25,0.5,\n");
  ASSERT_EQ(r.ranked.size(), 2u);
  EXPECT_EQ(r.ranked[0].policy, "h2o");
  EXPECT_EQ(r.ranked[1].policy, "tova");
}

TEST(Rank, PoliciesThatIgnoreTheBudgetAreListedApart) {
  const kvsim::Ranking r = rank(kHandSweep +
                                "full,,32,32,0.125,1,0\n"
                                "full,,64,64,0.25,1,0\n"
                                "full,,128,128,0.5,1,0\n");
  ASSERT_EQ(r.ranked.size(), 3u);
  ASSERT_EQ(r.apart.size(), 1u);
  EXPECT_EQ(r.apart[0].policy, "full");
  EXPECT_DOUBLE_EQ(r.apart[0].mean, 1.0);
  EXPECT_NE(
      kvsim::rank_text(r).find("full: ignores the budget, not ranked (retention_mean 1.0000, the mean of its rows)"),
      std::string::npos)
      << kvsim::rank_text(r);
}

TEST(Rank, PoliciesThatMayHoldMoreThanTheBudgetAreListedApart) {
  // simlayerkv reads B (a lazy layer keeps B) but a layer that is not lazy keeps everything:
  // equal budgets are not equal memory, so it is not ranked, and not said to ignore B.
  const kvsim::Ranking r = rank(kHandSweep +
                                "simlayerkv,,32,32,0.125,0.5,0\n"
                                "simlayerkv,,64,64,0.25,0.7,0\n"
                                "simlayerkv,,128,128,0.5,0.9,0\n");
  ASSERT_EQ(r.apart.size(), 1u);
  EXPECT_TRUE(r.apart[0].reads_budget);
  EXPECT_DOUBLE_EQ(r.apart[0].mean, 0.7);
  EXPECT_NE(kvsim::rank_text(r).find("simlayerkv: may hold more than the budget, not ranked (retention_mean 0.7000, "
                                     "the mean of its rows)"),
            std::string::npos)
      << kvsim::rank_text(r);
}

TEST(Rank, BudgetsNotEveryPolicyHasAreLeftOutWithANote) {
  // tova lacks 128: both are compared at 32 and 64 only; h2o's 128 row is left out.
  const kvsim::Ranking r = rank(
      "h2o,,32,32,0.125,0.75,\n"
      "h2o,,64,64,0.25,0.875,\n"
      "h2o,,128,128,0.5,0.9375,\n"
      "tova,,32,32,0.125,0.8125,\n"
      "tova,,64,64,0.25,0.9375,\n");
  EXPECT_EQ(r.budgets, (std::vector<std::string>{"32", "64"}));
  ASSERT_EQ(r.ranked.size(), 2u);
  EXPECT_DOUBLE_EQ(r.ranked[1].mean, (0.75 + 0.875) / 2);
  EXPECT_EQ(r.ranked[1].points.size(), 2u);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_EQ(r.notes[0], "not every ranked policy has budget 128: the areas cover the 2 budgets they all have");
}

TEST(Rank, RefusesWhatItCannotRank) {
  // One budget in common: no curve.
  EXPECT_NE(refusal("h2o,,32,32,0.125,0.75,\nh2o,,64,64,0.25,0.8,\ntova,,64,64,0.25,0.9,\ntova,,128,128,0.5,0.95,\n")
                .find("s.csv: the ranked policies share 1 budget(s)"),
            std::string::npos);
  // Only a policy that ignores the budget.
  EXPECT_NE(refusal("full,,32,32,0.125,1,\nfull,,64,64,0.25,1,\n").find("s.csv: no policy whose budget bounds"),
            std::string::npos);
  // An empty value at a compared budget.
  EXPECT_NE(refusal("h2o,,32,32,0.125,0.75,0.1\nh2o,,64,64,0.25,0.8,\n", "output_error_mean")
                .find("s.csv: h2o at budget 64: output_error_mean is empty (not measured)"),
            std::string::npos);
  // Two budgets at one share.
  EXPECT_NE(refusal("h2o,,64,64,0.25,0.75,\nh2o,,25%,64,0.25,0.8,\n").find("a span of 0"), std::string::npos);
  // A column that is not a quality.
  kvsim::RankRequest occupancy;
  occupancy.metric = "occupancy_mean";
  try {
    kvsim::check_rank_request(occupancy);
    ADD_FAILURE() << "occupancy_mean accepted";
  } catch (const kvtrace::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--metric: 'occupancy_mean' is not a quality column"), std::string::npos);
  }
}

TEST(Rank, FormatsWriteTheSameCells) {
  const kvsim::Ranking r = rank(kHandSweep);
  const std::string markdown = kvsim::rank_markdown(r);
  EXPECT_NE(markdown.find("| rank | policy | mean | smallest budget |\n| ---: | --- | ---: | --- |\n"
                          "| 1 | oracle\\* | 0.9635 | 64 (0.2500) |\n"),
            std::string::npos)
      << markdown;
  const std::string latex = kvsim::rank_latex(r);
  EXPECT_NE(latex.find("\\begin{tabular}{rlrl}\n\\hline\nrank & policy & mean & smallest budget \\\\\n\\hline\n"
                       "1 & oracle$^*$ & 0.9635 & 64 (0.2500) \\\\\n"),
            std::string::npos)
      << latex;
  EXPECT_EQ(kvsim::rank_csv(r),
            "rank,policy,params,quant,mode,upper_bound,metric,better,mean,share_low,share_high,budgets,target,"
            "smallest_budget,smallest_budget_share\n"
            "1,oracle,,,,true,retention_mean,higher,0.9635416667,0.125,0.5,3,0.95,64,0.25\n"
            "2,tova,,,,false,retention_mean,higher,0.9322916667,0.125,0.5,3,0.95,128,0.5\n"
            "3,h2o,,,,false,retention_mean,higher,0.875,0.125,0.5,3,0.95,,\n");
  EXPECT_EQ(kvsim::rank_format(r, "csv"), kvsim::rank_csv(r));
  EXPECT_THROW(kvsim::check_rank_format("html"), kvtrace::InputError);
}
