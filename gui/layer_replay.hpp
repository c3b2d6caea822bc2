#pragma once
// A replay of the shown layer as the views read it, and the library calls that make one:
// kvsim::replay_rows over the session's rows (LayerRows), at one budget or, in one pass, at
// several (kvsim::replay_rows_at_budgets: what the budget slider's neighbours are made with).
#include <QString>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "kvsim/core/engine.hpp"
#include "kvsim/replay/replay.hpp"
#include "layer_rows.hpp"

namespace kvtrace {
struct TraceMeta;
}

namespace kvgui {

// One replay of the shown layer and the settings it ran with.
struct LayerReplay {
  int seq = -1, layer = -1;
  int head = -1;  // the shown head: the replay covers replayHeads(policy, meta, head)
  kvsim::PolicyChoice policy;
  QString budget_text;  // as chosen ("64" or "20%")
  int64_t budget = 0;   // B it resolved to
  kvsim::Mode mode = kvsim::Mode::stream;
  kvsim::EngineOptions options;             // the engine options it ran with (paging, protocol, head floor)
  std::vector<kvsim::GroupRecord> records;  // of those heads
  QString error;                            // the policy refused this setting (records empty)
  double replay_ms = 0;                     // time the library's replay took (0: from the cache)
  double replay_cpu_ms = 0;                 // CPU time of the replaying thread in it
  double latency_ms = 0;                    // from the setting change to the result reaching the UI thread
  bool cached = false;                      // served from the replay cache, not replayed

  bool valid() const { return !records.empty(); }
  bool bound() const { return policy.info && policy.info->engine == kvsim::Engine::bound; }
  // The record of the cache group holding query head `head`, and the head's index in it.
  const kvsim::GroupRecord* record_of(int head, int* index = nullptr) const;
};

// The query heads [first, first + count) a replay covers.
struct ReplayHeads {
  int first = 0, count = 0;
};
// Whether the views replay `policy` at `layer` over the trace rather than from the rows in
// memory: a cross-layer policy beyond layer 0 (its layers decide together, layer 0 being a
// chain of one), and a policy that reads the stored tensors.
bool replaysTrace(const kvsim::PolicyChoice& policy, int layer);

// What the views replay to show query head `head`: the head alone for an upper bound that
// reads only its own rows (each head's bound is its own: oracle), its kv group for the other
// per-kv-head policies, the whole layer for layer-wide and cross-layer ones, and for every
// policy under head-adaptive budgets (options.head_floor >= 0: the kv heads share the budget).
ReplayHeads replayHeads(const kvsim::PolicyChoice& policy, const kvtrace::TraceMeta& meta, int head,
                        const kvsim::EngineOptions& options = {});

// kvsim::replay_rows over the shown layer's rows: replayHeads(policy, meta, head) only (so a
// change replays as little as it must), or, with head < 0, every kv group of the layer, one
// at a time (as replay_trace groups them); a layer-wide policy always replays the whole
// layer. Records carry the real sequence, layer, group and heads.
std::vector<kvsim::GroupRecord> replayLayer(const std::shared_ptr<const LayerRows>& rows,
                                            const kvtrace::TraceMeta& meta, const kvsim::PolicyChoice& policy,
                                            int64_t budget, const kvsim::EngineOptions& options, int head = -1);
// The same at several budgets in one pass ([budget][group]); head >= 0.
std::vector<std::vector<kvsim::GroupRecord>> replayLayerAtBudgets(const std::shared_ptr<const LayerRows>& rows,
                                                                  const kvtrace::TraceMeta& meta,
                                                                  const kvsim::PolicyChoice& policy,
                                                                  std::span<const int64_t> budgets,
                                                                  const kvsim::EngineOptions& options, int head);
// The parts a replay of the whole layer is made of, in order: the layer itself for a
// layer-wide policy or under head-adaptive budgets, else each kv group (as replay_trace
// groups them: seeded policies see the same seeds).
std::vector<ReplayHeads> layerParts(const kvsim::PolicyChoice& policy, const kvtrace::TraceMeta& meta,
                                    const kvsim::EngineOptions& options);
// The records of one part at one budget, made or being made by another replay (the session's);
// null, or a broken promise, when it could not make them.
using PartRecords = std::shared_future<std::shared_ptr<const std::vector<kvsim::GroupRecord>>>;

// Every part of the layer at several budgets ([budget][group]), as replayLayer with head < 0
// replays them, on up to `threads` threads (the same records on any number). With one budget,
// the parts in `made` (by first query head) are taken from there, waited for before the others.
std::vector<std::vector<kvsim::GroupRecord>> replayWholeLayerAtBudgets(
    const std::shared_ptr<const LayerRows>& rows, const kvtrace::TraceMeta& meta, const kvsim::PolicyChoice& policy,
    std::span<const int64_t> budgets, const kvsim::EngineOptions& options, int threads = 1,
    const std::map<int, PartRecords>& made = {});

}  // namespace kvgui
