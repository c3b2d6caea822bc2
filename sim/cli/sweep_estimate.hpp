#pragma once
// The line a long sweep starts with: the time and memory it is estimated to take, from the
// work's size and rates measured on a reference machine (docs/semantics.md, section
// "Progress and the sweep's estimate"). Shown with the progress meter only, when the
// estimate passes a minute.
#include <cstdint>
#include <string>

#include "kvsim/replay/replay.hpp"

namespace kvtrace {
class TraceReader;
}

namespace kvsim::cli {

struct SweepSize {
  int64_t sequences = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t policies = 0, budgets = 0, quants = 1;  // the grid's cells: their product
  int threads = 1;                                // worker threads
  double tokens = 0;                              // the mean length of the sequences
  double row_entries = 0;                         // sum over sequences of T (T + 1) / 2: one head of one layer
  int64_t longest = 0;                            // the longest sequence's tokens
  bool qk_rows = true;                            // rows computed from q and k (else read from attn)
};

struct SweepEstimate {
  double seconds = 0;
  double bytes = 0;
};

SweepSize sweep_size(const kvtrace::TraceReader& reader, const ReplayConfig& config);
SweepEstimate estimate_sweep(const SweepSize& size);
// "kvsim sweep: about 4h10m and 2.3 GiB for 4 sequences x 3000 tokens, 32 layers x 32 heads,
// 5 policies x 3 budgets on 16 threads"
std::string estimate_line(const SweepSize& size, const SweepEstimate& estimate);

// Prints the estimate line on standard error when progress is shown and the estimate passes
// the threshold: 60 seconds, or $KVSIM_ESTIMATE_THRESHOLD seconds (tests set it to 0).
void announce_sweep(const kvtrace::TraceReader& reader, const ReplayConfig& config);

}  // namespace kvsim::cli
