#pragma once
// The attention need (docs/semantics.md, section 5): at step t a query head's need at mass p is
// the smallest k such that the k largest entries of its full row a_t[0..t] sum to at least p,
// the fewest positions any cache could hold for that head to keep p of its attention at that
// step. It is a property of the trace's rows, the same for every policy. kvsim analyze --need
// reports it per layer over every step, kvsim sweep --need over the recorded steps of the mode
// (all steps in stream mode, the decoding steps in prefill mode, from the question's first
// with a question), where its peak becomes a budget kvsim plan --target need@p plans from.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kvsim/core/summary.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvsim/replay/sweep_table.hpp"

namespace kvtrace {
class TraceReader;
}

namespace kvsim {

// The need of one row at mass p in (0, 1]: k summed in double over the entries in descending
// order; the row's length when all of it sums to less than p (float rounding near p = 1), 0
// for an empty row. The reference: one full sort per call.
int64_t attention_need(std::span<const float> row, double mass);
// The needs at several masses, in their order, from one sort of the row.
std::vector<int64_t> attention_needs(std::span<const float> row, std::span<const double> masses);

// "0.9,0.95,0.99" (--need): masses in (0, 1], each given once, returned ascending. Throws
// InputError naming `option`.
std::vector<double> parse_need_masses(const std::string& text, const std::string& option = "need");
// A mass as rows and tables name it: %.10g ("0.95").
std::string need_mass_text(double mass);

struct NeedConfig {
  std::vector<double> masses;
  kvtrace::RowsFrom rows = kvtrace::RowsFrom::automatic;
  std::vector<int> sequences;  // empty: all
  std::vector<int> layers;     // empty: all
  int threads = 0;
  // The first recorded step of a sequence; empty: 0 (every step, stream mode).
  std::function<int64_t(int seq)> first_step;
};

// One layer: per mass, the need over every (sequence, query head, recorded step), and per
// recorded step the mean over (sequence, head) of the sequences that have the step.
struct LayerNeed {
  int layer = 0;
  std::vector<Summary> needs;                  // [mass]: count, mean, p5, p95, min, max
  std::vector<std::vector<double>> step_mean;  // [mass][t]: NaN for steps no sequence records
};

struct TraceNeed {
  std::vector<double> masses;
  std::vector<int> sequences, layers;  // ascending
  int n_heads = 0;
  std::vector<LayerNeed> per_layer;           // in `layers` order
  std::vector<int64_t> tokens;                // [sequence index]: n
  std::vector<std::vector<int64_t>> peak;     // [mass][sequence index]: max over layers, heads, steps
  std::vector<std::vector<double>> step_max;  // [mass][t]: max over layers, sequences and heads
};

TraceNeed trace_need(const kvtrace::TraceReader& reader, const NeedConfig& config);
// The recorded steps of `config`'s mode: first_step per sequence (sequence_protocol's context).
std::function<int64_t(int seq)> recorded_steps_from(const kvtrace::TraceReader& reader, const ReplayConfig& config);

// The budget a serving engine needs to hold each sequence's peak need k (B + 1 = k positions
// at a step): the smallest share with one decimal whose B = floor(share n) is at least k - 1
// on every sequence.
Budget need_budget(const TraceNeed& need, size_t mass);
// One sweep row per mass (policy "need", params "p=<mass>"): the budget need_budget writes,
// its mean B and B / n over the sequences, the need's mean and peak as occupancy_mean and
// occupancy_peak, the samples it covers; no retention or output error (empty).
std::vector<SweepRow> need_sweep_rows(const TraceNeed& need, Mode mode);

// ---- reports (attention_need_report.cpp) ----
// Per layer and mass: mean, p95 and max of the need, and the max as a share of the longest n.
std::string need_table(const TraceNeed& need, const std::string& steps);
std::string need_json(const TraceNeed& need);  // one JSON value (compact)

}  // namespace kvsim
