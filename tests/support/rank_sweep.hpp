#pragma once
// The sweep CSV kvsim rank's tests rank (tests/sim/test_rank.cpp by hand, tests/cli/test_rank_cli.cpp
// as a user runs it): three policies at three budgets.
namespace kvtest {

inline const char* kRankHeader =
    "policy,params,budget,budget_tokens_mean,budget_share_mean,retention_mean,output_error_mean\n";

// Budgets of 32, 64 and 128 tokens on 256-token sequences: shares 0.125, 0.25 and 0.5, every
// number exact in binary.
//
// The area is sum over neighbouring budgets of (x_{i+1} - x_i) (q_i + q_{i+1}) / 2, divided by
// the span x_3 - x_1 = 0.375:
//   h2o     0.75, 0.875, 0.9375:   0.125 x 0.8125   + 0.25 x 0.90625   = 0.328125    -> 0.875
//   tova    0.8125, 0.9375, 0.984375:
//                                  0.125 x 0.875    + 0.25 x 0.9609375 = 0.349609375 -> 0.9322916667
//   oracle  0.875, 0.96875, 1:     0.125 x 0.921875 + 0.25 x 0.984375  = 0.361328125 -> 0.9635416667
// Smallest budget with retention >= 0.95: oracle 64 (0.25: 0.96875), tova 128 (0.5: 0.984375;
// 0.9375 at 64 is short), h2o none (0.9375 at most).
// Output error is each row's 1 - retention here, so its means are 1 minus those above and
// its order (ascending) the same; <= 0.05: oracle 64, tova 128, h2o none.
inline const char* kRankHandRows =
    "h2o,,32,32,0.125,0.75,0.25\n"
    "h2o,,64,64,0.25,0.875,0.125\n"
    "h2o,,128,128,0.5,0.9375,0.0625\n"
    "tova,,32,32,0.125,0.8125,0.1875\n"
    "tova,,64,64,0.25,0.9375,0.0625\n"
    "tova,,128,128,0.5,0.984375,0.015625\n"
    "oracle,,32,32,0.125,0.875,0.125\n"
    "oracle,,64,64,0.25,0.96875,0.03125\n"
    "oracle,,128,128,0.5,1,0\n";

}  // namespace kvtest
