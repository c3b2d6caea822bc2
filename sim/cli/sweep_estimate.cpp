#include "sweep_estimate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "kvsim/core/lists.hpp"
#include "kvsim/core/parallel_for.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "progress.hpp"

namespace kvsim::cli {
namespace {

// Seconds of one core per row entry of one head (docs/semantics.md): rows from q and k (plus
// per dimension of a head), rows read from stored attn, and per cell of the grid; measured
// on Debian 12, gcc 12 -O2, an x86-64 core of 2026, with output error on.
constexpr double kStartSeconds = 0.06;
constexpr double kRowSeconds = 6.9e-9, kDimSeconds = 1.3e-11, kAttnRowSeconds = 2.8e-8, kCellSeconds = 1.0e-9;
// Bytes: the program, then per worker thread per token of the longest sequence: per query
// head (its q, k, v in float32 and the rows), per dimension of a head, per cell and kv head.
constexpr double kStartBytes = 20e6, kHeadBytes = 400, kDimBytes = 7, kCellBytes = 300;
constexpr double kDefaultThreshold = 60;

std::string count(int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string bytes_text(double bytes) {
  char text[32];
  if (bytes >= 1024.0 * 1024 * 1024)
    std::snprintf(text, sizeof text, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  else
    std::snprintf(text, sizeof text, "%.0f MiB", std::ceil(bytes / (1024.0 * 1024)));
  return text;
}

double threshold_seconds() {
  const char* text = std::getenv("KVSIM_ESTIMATE_THRESHOLD");
  if (!text || !*text) return kDefaultThreshold;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (*end || !std::isfinite(seconds) || seconds < 0)
    throw kvtrace::InputError("", "", "KVSIM_ESTIMATE_THRESHOLD: '" + std::string(text) + "' is not seconds (>= 0)");
  return seconds;
}

}  // namespace

SweepSize sweep_size(const kvtrace::TraceReader& reader, const ReplayConfig& config) {
  const kvtrace::TraceMeta& meta = reader.meta();
  SweepSize size;
  const std::vector<int> sequences = chosen_or_all(config.sequences, reader.n_sequences(), "sequence", reader.path());
  const std::vector<int> layers = chosen_or_all(config.layers, meta.n_layers, "layer", reader.path());
  size.sequences = static_cast<int64_t>(sequences.size());
  size.layers = static_cast<int64_t>(layers.size());
  size.heads = meta.n_heads;
  size.kv_heads = meta.n_kv_heads;
  size.head_dim = meta.head_dim;
  size.policies = static_cast<int64_t>(config.policies.size());
  size.budgets = static_cast<int64_t>(config.budgets.size());
  size.quants = std::max<int64_t>(1, static_cast<int64_t>(config.quant.size()));
  size.threads = worker_threads(config.threads);
  double tokens = 0;
  for (int s : sequences) {
    const kvtrace::SequenceMeta& sequence = reader.sequence(s);
    const auto t = static_cast<double>(sequence.n_tokens);
    tokens += t;
    size.row_entries += t * (t + 1) / 2;
    size.longest = std::max(size.longest, sequence.n_tokens);
    if (layers.empty() || static_cast<size_t>(layers.front()) >= sequence.layers.size()) continue;
    const kvtrace::LayerForm& form = sequence.layers[static_cast<size_t>(layers.front())];
    if (config.rows == kvtrace::RowsFrom::attn || (config.rows == kvtrace::RowsFrom::automatic && form.has_attn))
      size.qk_rows = false;
  }
  size.tokens = sequences.empty() ? 0 : tokens / static_cast<double>(sequences.size());
  return size;
}

SweepEstimate estimate_sweep(const SweepSize& size) {
  const double cells = static_cast<double>(size.policies * size.budgets * size.quants);
  const double per_entry = (size.qk_rows ? kRowSeconds + kDimSeconds * static_cast<double>(size.head_dim)
                                         : kAttnRowSeconds) +
                           kCellSeconds * cells;
  const double work = size.row_entries * static_cast<double>(size.layers * size.heads) * per_entry;
  const int64_t items = std::max<int64_t>(1, size.sequences * size.layers);  // one per sequence and layer
  const auto threads = static_cast<double>(std::min<int64_t>(std::max(1, size.threads), items));
  SweepEstimate estimate;
  estimate.seconds = kStartSeconds + work / threads;
  const double per_token = static_cast<double>(size.heads) *
                               (kHeadBytes + kDimBytes * static_cast<double>(size.head_dim)) +
                           kCellBytes * cells * static_cast<double>(size.kv_heads);
  estimate.bytes = kStartBytes + threads * static_cast<double>(size.longest) * per_token;
  return estimate;
}

std::string estimate_line(const SweepSize& size, const SweepEstimate& estimate) {
  std::string line = "kvsim sweep: about " + duration_text(estimate.seconds) + " and " + bytes_text(estimate.bytes) +
                     " for " + count(size.sequences, "sequence", "sequences") + " x " +
                     count(std::llround(size.tokens), "token", "tokens") + ", " +
                     count(size.layers, "layer", "layers") + " x " + count(size.heads, "head", "heads") + ", " +
                     count(size.policies, "policy", "policies") + " x " + count(size.budgets, "budget", "budgets");
  if (size.quants > 1) line += " x " + count(size.quants, "quantization", "quantizations");
  return line + " on " + count(size.threads, "thread", "threads");
}

void announce_sweep(const kvtrace::TraceReader& reader, const ReplayConfig& config) {
  if (!progress_shown()) return;
  const SweepSize size = sweep_size(reader, config);
  const SweepEstimate estimate = estimate_sweep(size);
  if (estimate.seconds < threshold_seconds()) return;
  std::cerr << estimate_line(size, estimate) << std::endl;
}

}  // namespace kvsim::cli
