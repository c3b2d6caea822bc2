#pragma once
// A replay request decoded once (internal to sim/replay): the sequences and layers replayed,
// what each sequence takes from the trace, and per cell of the grid its policy, quantization,
// layer schedule and the budget B_l each replayed (sequence, layer) holds. The one owner of a
// cell's budgets: the work items run with them and the results report their means.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kvsim/replay/replay.hpp"
#include "kvsim/replay/span_metrics.hpp"
#include "kvtrace/reader.hpp"

namespace kvsim {

// A replayed sequence, read from the trace once.
struct SequencePlan {
  int seq = 0;
  int64_t n_tokens = 0, prompt_len = 0;
  int64_t schedule_tokens = 0;  // T, the tokens a layer schedule's allocation sees
  Protocol protocol;            // sequence_protocol's
  // A question asked of a context another replayed sequence holds (its context_group): the
  // index into ReplayPlan::sequences of the first one, whose compression it takes; -1: none.
  int64_t context_from = -1;
  bool leads_context = false;  // later sequences take this one's compression
  int64_t context_group = -1;  // the trace's, where sequences share the context
  std::vector<uint8_t> pinned;  // --protect: its protected set (pinned_positions), or empty
  SpanRows spans;               // its spans and the rows that measure them (none: not measured)
};

// A cell of the grid: cells[(policy * quants + quant) * budgets + budget].
struct CellPlan {
  size_t policy = 0, quant = 0, budget = 0;
  const PolicyChoice* choice = nullptr;
  const QuantSpec* quant_spec = nullptr;
  const LayerSchedule* schedule = nullptr;  // policy_schedule's
  // B_l of replayed sequence s and replayed layer i (indices into ReplayPlan's sequences and
  // layers): held[s * layers + i].
  std::vector<int64_t> held;
  double budget_tokens_mean = 0, budget_share_mean = 0;  // CellResult's
};

struct ReplayPlan {
  std::vector<SequencePlan> sequences;
  std::vector<int> layers;
  std::vector<CellPlan> cells;
  bool output_error = false;  // measured: not off, and every replayed layer has v
  bool layers_in_lockstep = false;  // every cell's items run every layer of a sequence (--share model)
  int pool = 0;               // ReplayConfig::pool
  bool shares_contexts() const {
    return std::any_of(sequences.begin(), sequences.end(), [](const SequencePlan& s) { return s.leads_context; });
  }
  int64_t held(size_t cell, size_t sequence, size_t layer) const {
    return cells[cell].held[sequence * layers.size() + layer];
  }
};

// Checks `config` against the trace and decodes it, throwing InputError (one line) for what
// replay_trace refuses before it runs: an empty grid, a schedule for other layers, a policy's
// layers or pages the trace cannot take, output error without v, missing tensors, a protocol
// a sequence cannot hold.
ReplayPlan plan_replay(const kvtrace::TraceReader& reader, const ReplayConfig& config);

// B_l of each of the n_layers layers for budget B on sequence `seq`, T = `tokens`.
std::vector<int64_t> held_budgets(const LayerSchedule& schedule, int64_t budget, int seq, int64_t tokens, int n_layers);

}  // namespace kvsim
