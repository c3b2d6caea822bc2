#pragma once
// The eviction-policy interface, shared by the replay engine (teacher-forced, from traces)
// and the live model runner (closed loop). A policy sees the renormalised attention over its
// cache and answers which cached positions to evict; it never knows which engine drives it,
// and never touches files. A new policy is one file in sim/policies/ and one line in
// sim/policies/list.hpp.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvtrace/schema.hpp"

namespace kvsim {

// Attention each position will still receive: R_step[i], the sum over steps s > step of the
// group's full (unevicted) attention row a_s[i], for every position i in 0..step. Only
// policies that declare needs_future get it.
class FutureAttention {
 public:
  virtual ~FutureAttention() = default;
  virtual std::span<const double> remaining(int64_t step) const = 0;
};

// The current step's full rows of a cache group's heads: a_t[0..t] over every position,
// evicted ones included, before any renormalisation (what the model computes before its cache
// masks the row). Only policies that declare needs_full_rows get it; valid inside observe().
class FullRows {
 public:
  virtual ~FullRows() = default;
  virtual int n_heads() const = 0;
  virtual std::span<const float> row(int head) const = 0;  // head: 0..n_heads-1 of the group
};

// The stored tensors of a cache group, as the trace (or the closed loop's model) holds them:
// float32, one head [n_tokens * head_dim] row-major, post-RoPE for q and k. Valid for the
// whole run and shared by every simulation, never copied per policy. Inside observe(step)
// the rows of the cached positions and row `step` of the queries hold their values (the
// closed loop computes later rows as it goes). Only the tensors a policy declares are set
// (PolicyInfo::needs_keys, needs_values, needs_queries); the others are empty.
struct GroupTensors {
  int head_dim = 0;
  std::vector<const float*> keys;     // per kv head of the group, ascending
  std::vector<const float*> values;   // likewise
  std::vector<const float*> queries;  // per query head of the group, in GroupContext order
  kvtrace::RopeMeta rope;             // how q and k were rotated, as far as the trace says

  // Query head j of the group reads kv head j / (queries per kv head).
  std::span<const float> key(size_t kv_head, int64_t position) const { return at(keys, kv_head, position); }
  std::span<const float> value(size_t kv_head, int64_t position) const { return at(values, kv_head, position); }
  std::span<const float> query(size_t head, int64_t step) const { return at(queries, head, step); }

 private:
  std::span<const float> at(const std::vector<const float*>& heads, size_t head, int64_t row) const {
    const auto d = static_cast<size_t>(head_dim);
    return {heads[head] + static_cast<size_t>(row) * d, d};
  }
};

struct GroupContext {
  int64_t n_tokens = 0;
  int64_t budget = 0;  // B: at most B positions stay cached between steps
  int n_heads = 1;     // query heads sharing this cache
  uint64_t seed = 0;   // deterministic per (sequence, layer, group)
  const FutureAttention* future = nullptr;
  const FullRows* full_rows = nullptr;    // policies that declare needs_full_rows
  const GroupTensors* tensors = nullptr;  // policies that declare needs_keys, _values or _queries
  // Cross-layer policies only: this instance's layer, and the state its per-layer instances
  // of one sequence share (made by PolicyInfo::make_sequence_state). The engine steps
  // layers 0..L-1 in order at every step.
  int layer = 0;
  std::shared_ptr<void> sequence_state;
};

class Policy {
 public:
  virtual ~Policy() = default;
  // Before the first step of a cache group.
  virtual void reset(const GroupContext& group) = 0;
  // Step `step` has been appended: `cache` holds the cached positions in ascending order
  // (the last one is `step`), `attention` the group's renormalised row â aligned with it
  // (empty for a policy that declares needs_full_rows but not needs_attention).
  virtual void observe(int64_t /*step*/, std::span<const int32_t> /*cache*/, std::span<const float> /*attention*/) {}
  // After observe, at every step. `excess` = cache size - budget. Append the positions to
  // evict to `victims`: a budgeted policy must name at least `excess` when it is positive.
  // `compress` is true once at the end of the prompt in prefill mode (reach the budget).
  virtual void evict(int64_t step, std::span<const int32_t> cache, int64_t excess, bool compress,
                     std::vector<int32_t>& victims) = 0;
  // Budget sharing: `other` is this policy with the same parameters and cache group, reset for
  // a larger budget, and neither has evicted yet. Copy its state, keep what this instance
  // derived from its own budget, and return true; or return false (the default) to be run
  // from the start on its own. Return true only if evict() names nothing while excess <= 0
  // and the state does not depend on the budget before the first eviction.
  virtual bool adopt(const Policy& /*other*/) { return false; }
  // Span protection (--protect, docs/semantics.md section 2): pinned[p] != 0 for every
  // position p this cache keeps once it is cached; given once after reset, valid for the run.
  // evict() then never names a pinned position: it chooses among the others by its own rule,
  // the excess of them or all when fewer are left. Returns whether the policy does so; the
  // default (false for a nonempty set) gets the run refused.
  virtual bool pin(std::span<const uint8_t> pinned) { return pinned.empty(); }

  // Scoring policies (PolicyInfo::scoring; kvsim/policies/scoring.hpp implements this and
  // forget for them): after observe() at `step`, sets `scores` to one score per position of
  // `cache` (aligned with it: ascending, the newest last) and returns true. The contract: the
  // policy's own evict() at this step removes the lowest scores first, ties going to the
  // lower position (what evict_lowest picks), and a position it protects at this step (a
  // recent window, sinks, the newest token where it never evicts it) scores +infinity.
  // Scores are what evict() would rank now, so they may depend on the cache's size (a window
  // clipped to the budget) but never on `excess`. The default, false: not a scoring policy
  // (recent, streaming, random, full, bounds, ...).
  virtual bool scores(int64_t /*step*/, std::span<const int32_t> /*cache*/, std::vector<double>& /*scores*/) const {
    return false;
  }
  // Scoring policies only: the engine has chosen the victims itself (page mode), in place of
  // evict() at this step: `cache` is the cache before they go, `indices` their indices in it
  // (ascending). Drop their state as evict() would have dropped it.
  virtual void forget(std::span<const int32_t> /*cache*/, std::span<const size_t> /*indices*/) {}

  // Merging policies (PolicyInfo::merges): the value the cache holds at the cached `position`
  // for the group's query head `head` (0..n_heads-1) when evictions merged other values into
  // it (docs/semantics.md, section 3); empty: the true value. Read between one step's evict()
  // and the next.
  virtual std::span<const double> merged_value(size_t /*head*/, int32_t /*position*/) const { return {}; }
};

// Thrown where a policy ranks its scores and one is NaN (evict_lowest does it): NaN has no
// place in an order, so any victim would be arbitrary. The engine makes it one InputError
// naming the policy, layer, kv head and step.
struct NanScore : std::runtime_error {
  NanScore() : std::runtime_error("a score is NaN") {}
};

class RowRanking;

// Upper bounds are not policies: at each step they pick the best cache for one head's full
// row. The engine asks them instead of keeping a cache.
class BoundPolicy : public Policy {
 public:
  void evict(int64_t, std::span<const int32_t>, int64_t, bool, std::vector<int32_t>&) override {}
  // The attention mass of the best cache of at most budget + 1 entries at `step` for the
  // group's head `head`, given its full row a_t[0..step] and the earlier entries
  // a_t[0..step-1] ranked by value (null when ranks() is false). Appends the chosen
  // positions to `positions` when it is not null. A selection (PolicyInfo::selects) returns
  // the mass of what it reads instead, however many positions that is.
  virtual double bound(int64_t step, size_t head, std::span<const float> row, RowRanking* earlier, int64_t budget,
                       std::vector<int32_t>* positions) = 0;
  virtual bool ranks() const { return true; }  // false: bound() reads no ranking (none is built)
};

// ---- parameters ----

// index_set: "all" or a list of indices and ranges such as 5-35 (kvsim/core/lists.hpp).
enum class ParamType { integer, real, choice, index_set };
const char* param_type_name(ParamType type);  // "integer", "real", "choice", "index_set"

struct ParamSpec {
  std::string name;
  ParamType type = ParamType::integer;
  std::string default_value;  // empty: derived from the budget at reset (help says how)
  std::string help;
  double min = 0, max = 1e18;
  std::vector<std::string> choices;
};

// Validated parameter values of one policy instance.
class Params {
 public:
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  int64_t integer(const std::string& name) const;
  double real(const std::string& name) const;
  const std::string& text(const std::string& name) const;
  const std::map<std::string, std::string>& values() const { return values_; }
  void set(const std::string& name, std::string value) { values_[name] = std::move(value); }

 private:
  std::map<std::string, std::string> values_;
};

enum class Grouping { kv_head, layer };
enum class Engine { cache, bound, cross_layer };

struct PolicyInfo {
  std::string name;
  std::string summary;
  std::vector<ParamSpec> params;
  Grouping grouping = Grouping::kv_head;
  Engine engine = Engine::cache;
  bool budgeted = true;  // false: ignores the budget (full, scissorhands-official)
  // budgeted = false only: B sets the rule of the part it compresses (simlayerkv's lazy
  // layers, duoattention's streaming heads, the dms wrapper's inner policy) while the rest keeps
  // every position, so the cache may hold more than B and each budget is replayed on its own.
  bool reads_budget = false;
  bool ignores_budget() const { return !budgeted && !reads_budget; }
  // Engine::bound only: a selection method, not an upper bound (quest): the whole cache stays
  // in memory (occupancy and plans count it) and bound() picks what each step reads.
  bool selects = false;
  bool upper_bound() const { return engine == Engine::bound && !selects; }
  bool needs_attention = true;   // false: no observed row (recent, streaming, ...): observe() is not called
                                 // unless needs_full_rows
  bool needs_future = false;     // lookahead
  bool needs_full_rows = false;  // GroupContext::full_rows (scissorhands-official)
  // GroupContext::tensors: the stored post-RoPE keys, the values, the queries (a trace
  // without them is refused for this policy).
  bool needs_keys = false, needs_values = false, needs_queries = false;
  bool needs_tensors() const { return needs_keys || needs_values || needs_queries; }
  // Set by a policy that un-rotates q or k: the problem with a trace's RoPE attributes for it
  // ("" when usable); a trace with a problem is refused before the replay.
  std::function<std::string(const kvtrace::RopeMeta&)> rope_problem;
  // A method that is a policy's scores under a budget mechanism (docs/semantics.md, section
  // 2) declares it here, and every run of the policy uses it. layer_budget: the
  // --layer-budget text of its layer schedule for these parameters ("" or empty function:
  // the run's); replay refuses an explicit non-uniform --layer-budget with it. head_floor >=
  // 0: Ada-KV's head-adaptive budgets with this floor, whatever --head-budget says.
  std::function<std::string(const Params&)> layer_budget;
  double head_floor = -1;
  std::function<std::unique_ptr<Policy>(const Params&)> make;
  // make() gives a scoring policy (Policy::scores): set with make by set_make
  // (kvsim/policies/scoring.hpp). Page mode and head-adaptive budgets rank the scores
  // themselves and refuse a policy without them.
  bool scoring = false;
  // make() gives a policy that merges evicted values into kept ones (Policy::merged_value):
  // output error reads the merged values (the reference meter); --quant and the closed loop
  // refuse it.
  bool merges = false;
  std::function<std::shared_ptr<void>(const Params&, int n_layers, int64_t n_tokens)>
      make_sequence_state;  // cross_layer
};

// Fills defaults, checks names, types and ranges of `overrides`; throws InputError.
Params resolve_params(const PolicyInfo& info, const std::map<std::string, std::string>& overrides);

}  // namespace kvsim
