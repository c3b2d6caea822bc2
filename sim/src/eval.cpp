// The closed-loop engine of `kvsim eval` (kvsim/eval.hpp): the llama2.c model over fixed
// tokens, every head attending only to its cache group's cache, a Policy deciding evictions
// with the replay engine's semantics (sim/src/engine.cpp) step for step.
#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "future.hpp"
#include "kvsim/eval.hpp"
#include "kvtrace/attention_source.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/llama2.hpp"
#include "kvtrace/schema.hpp"
#include "kvtrace/tokenizer.hpp"

namespace kvsim {
namespace {

// The full rows of a group's heads at the current step (GroupContext::full_rows).
class LoopFullRows final : public FullRows {
 public:
  explicit LoopFullRows(int heads) : rows_(static_cast<size_t>(heads)) {}
  int n_heads() const override { return static_cast<int>(rows_.size()); }
  std::span<const float> row(int head) const override { return rows_[static_cast<size_t>(head)]; }
  void set(int head, std::span<const float> row) { rows_[static_cast<size_t>(head)].assign(row.begin(), row.end()); }

 private:
  std::vector<std::vector<float>> rows_;
};

// One cache group of one layer: its query heads (consecutive), its cache and its policy.
struct LoopGroup {
  int first_head = 0, last_head = 0;  // inclusive
  std::unique_ptr<Policy> policy;
  std::unique_ptr<PackedFuture> future;
  std::unique_ptr<LoopFullRows> full_rows;  // policies that need them
  std::vector<int32_t> cache;               // ascending positions, the newest last
  std::vector<uint8_t> in_cache;            // by position
  std::vector<double> combined;             // the observed row being built over the group's heads
  std::vector<float> observed;
  std::vector<int32_t> victims;
  GroupRecord record;
};

class ClosedLoopHook final : public kvtrace::AttentionHook {
 public:
  ClosedLoopHook(const kvtrace::Llama2Config& config, const PolicyChoice* policy, int64_t budget, int64_t n,
                 const ClosedLoopOptions& options)
      : config_(config),
        policy_(policy),
        budget_(budget),
        n_(n),
        options_(options),
        allowed_(static_cast<size_t>(config.n_heads)) {
    const auto layers = static_cast<size_t>(config.n_layers);
    if (options.record_rows)
      rows_.assign(layers, std::vector<std::vector<float>>(
                               static_cast<size_t>(config.n_heads),
                               std::vector<float>(static_cast<size_t>(kvtrace::packed_length(n)), 0.0f)));
    if (options.record_values)
      values_.assign(layers, std::vector<std::vector<float>>(
                                 static_cast<size_t>(config.n_kv_heads),
                                 std::vector<float>(static_cast<size_t>(n * config.head_dim()), 0.0f)));
    if (policy) build_groups();
  }

  void on_qkv(int layer, int pos, std::span<const float>, std::span<const float>, std::span<const float> v) override {
    if (!options_.record_values) return;
    const int d = config_.head_dim();
    for (int kv = 0; kv < config_.n_kv_heads; ++kv)
      std::copy_n(
          v.data() + kv * d, d,
          values_[static_cast<size_t>(layer)][static_cast<size_t>(kv)].data() + static_cast<std::ptrdiff_t>(pos) * d);
  }

  std::span<const int> allowed_positions(int layer, int head, int pos) override {
    if (!policy_) return {};
    LoopGroup& group = group_of(layer, head);
    if (head == group.first_head) {  // step pos is appended to the group's cache
      group.cache.push_back(pos);
      group.in_cache[static_cast<size_t>(pos)] = 1;
      group.combined.assign(group.cache.size(), 0.0);
    }
    // A copy per head: the model reads it after on_attention, when the group may have evicted.
    std::vector<int>& allowed = allowed_[static_cast<size_t>(head)];
    allowed.assign(group.cache.begin(), group.cache.end());
    return allowed;
  }

  bool wants_full_rows(int) override { return policy_ && policy_->info->needs_full_rows; }
  void on_full_row(int layer, int head, int pos, std::span<const float> probs) override {
    if (options_.record_rows && options_.record_full_rows)
      std::copy(probs.begin(), probs.end(),
                rows_[static_cast<size_t>(layer)][static_cast<size_t>(head)].data() + kvtrace::packed_row_offset(pos));
    LoopGroup& group = group_of(layer, head);
    group.full_rows->set(head - group.first_head, probs);
  }

  void on_attention(int layer, int head, int pos, std::span<const int> positions,
                    std::span<const float> probs) override {
    if (options_.record_rows && !(options_.record_full_rows && wants_full_rows(layer))) {
      float* row =
          rows_[static_cast<size_t>(layer)][static_cast<size_t>(head)].data() + kvtrace::packed_row_offset(pos);
      for (size_t j = 0; j < positions.size(); ++j) row[positions[j]] = probs[j];
    }
    if (!policy_) return;
    LoopGroup& group = group_of(layer, head);
    if (policy_->info->needs_attention) accumulate(group, probs);
    if (head == group.last_head) finish_step(group, pos);
  }

  std::vector<GroupRecord> take_records() {
    std::vector<GroupRecord> records;
    for (auto& layer : groups_)
      for (auto& group : layer) records.push_back(std::move(group.record));
    return records;
  }
  std::vector<std::vector<std::vector<float>>> take_rows() { return std::move(rows_); }
  std::vector<std::vector<std::vector<float>>> take_values() { return std::move(values_); }

 private:
  void build_groups() {
    const PolicyInfo& info = *policy_->info;
    const int n_kv = config_.n_kv_heads, kv_mul = config_.kv_mul();
    const bool layer_wide = info.grouping == Grouping::layer;
    std::shared_ptr<void> state;
    if (info.make_sequence_state) state = info.make_sequence_state(policy_->params, config_.n_layers, n_);
    groups_.resize(static_cast<size_t>(config_.n_layers));
    for (int l = 0; l < config_.n_layers; ++l) {
      std::unique_ptr<kvtrace::PackedAttentionSource> future_source;
      if (info.needs_future)
        future_source =
            std::make_unique<kvtrace::PackedAttentionSource>(n_, (*options_.future_rows)[static_cast<size_t>(l)]);
      // Group indices as the replay: kv heads 0..n_kv-1, the whole layer n_kv.
      for (int g = layer_wide ? n_kv : 0; g < (layer_wide ? n_kv + 1 : n_kv); ++g) {
        LoopGroup group;
        group.first_head = layer_wide ? 0 : g * kv_mul;
        group.last_head = layer_wide ? config_.n_heads - 1 : (g + 1) * kv_mul - 1;
        group.policy = info.make(policy_->params);
        CacheGroup heads;
        for (int h = group.first_head; h <= group.last_head; ++h) heads.heads.push_back(h);
        if (future_source) group.future = std::make_unique<PackedFuture>(*future_source, heads, options_.aggregate);
        GroupContext context;
        context.n_tokens = n_;
        context.budget = budget_;
        context.n_heads = static_cast<int>(heads.heads.size());
        context.seed = cache_group_seed(options_.sequence, l, g);
        context.future = group.future.get();
        if (info.needs_full_rows) {
          group.full_rows = std::make_unique<LoopFullRows>(context.n_heads);
          context.full_rows = group.full_rows.get();
        }
        context.layer = l;
        context.sequence_state = state;
        group.policy->reset(context);
        group.in_cache.assign(static_cast<size_t>(n_), 0);
        GroupRecord& record = group.record;
        record.seq = options_.sequence;
        record.layer = l;
        record.group = layer_wide ? 0 : g;
        record.layer_wide = layer_wide;
        record.heads = heads.heads;
        SimulationResult& result = record.result;
        result.n_heads = context.n_heads;
        result.n_steps = n_;
        result.budget = budget_;
        result.occupancy.assign(static_cast<size_t>(n_), 0);
        result.eviction_step.assign(static_cast<size_t>(n_), -1);
        groups_[static_cast<size_t>(l)].push_back(std::move(group));
      }
      for (auto& group : groups_[static_cast<size_t>(l)])
        for (int h = group.first_head; h <= group.last_head; ++h)
          group_index_.push_back(&group - groups_[static_cast<size_t>(l)].data());
    }
  }

  LoopGroup& group_of(int layer, int head) {
    const auto per_layer = static_cast<size_t>(config_.n_heads);
    return groups_[static_cast<size_t>(layer)][static_cast<size_t>(
        group_index_[static_cast<size_t>(layer) * per_layer + static_cast<size_t>(head)])];
  }

  // The head's row is a softmax over the cache, so it is already renormalised; it is still
  // divided by its own sum (in double), as the replay engine divides a row by its retained
  // mass, so that both engines combine the same rows into the same observed row.
  void accumulate(LoopGroup& group, std::span<const float> probs) {
    double mass = 0;
    for (float p : probs) mass += p;
    const size_t size = probs.size();
    if (options_.aggregate == Aggregate::max) {
      for (size_t j = 0; j < size; ++j) group.combined[j] = std::max(group.combined[j], probs[j] / mass);
      return;
    }
    const int heads = group.last_head - group.first_head + 1;
    const double share = options_.aggregate == Aggregate::mean ? 1.0 / static_cast<double>(heads) : 1.0;
    const double weight = share / mass;
    for (size_t j = 0; j < size; ++j) group.combined[j] += probs[j] * weight;
  }

  // After the group's last head at step t: observe, evict, remove the victims.
  void finish_step(LoopGroup& group, int t) {
    SimulationResult& result = group.record.result;
    result.occupancy[static_cast<size_t>(t)] = static_cast<int32_t>(group.cache.size());
    if (policy_->info->needs_attention) {
      group.observed.resize(group.combined.size());
      for (size_t j = 0; j < group.combined.size(); ++j) group.observed[j] = static_cast<float>(group.combined[j]);
      group.policy->observe(t, group.cache, group.observed);
    } else if (policy_->info->needs_full_rows) {
      group.policy->observe(t, group.cache, {});
    }
    const int64_t excess = static_cast<int64_t>(group.cache.size()) - budget_;
    group.victims.clear();
    group.policy->evict(t, group.cache, excess, false, group.victims);
    const std::string& name = policy_->info->name;
    for (int32_t victim : group.victims) {
      if (victim < 0 || victim > t || !group.in_cache[static_cast<size_t>(victim)])
        throw std::logic_error("policy " + name + " evicted position " + std::to_string(victim) +
                               ", which is not cached at step " + std::to_string(t));
      group.in_cache[static_cast<size_t>(victim)] = 0;
      result.eviction_step[static_cast<size_t>(victim)] = t;
    }
    if (policy_->info->budgeted && static_cast<int64_t>(group.victims.size()) < excess)
      throw std::logic_error("policy " + name + " evicted " + std::to_string(group.victims.size()) +
                             " positions at step " + std::to_string(t) + ", needs " + std::to_string(excess));
    result.evictions += static_cast<int64_t>(group.victims.size());
    if (!group.victims.empty())
      std::erase_if(group.cache, [&](int32_t position) { return !group.in_cache[static_cast<size_t>(position)]; });
  }

  const kvtrace::Llama2Config& config_;
  const PolicyChoice* policy_;
  int64_t budget_, n_;
  const ClosedLoopOptions& options_;
  std::vector<std::vector<LoopGroup>> groups_;  // [layer][group]
  std::vector<std::ptrdiff_t> group_index_;     // [layer * n_heads + head]: index into groups_[layer]
  std::vector<std::vector<int>> allowed_;       // per head: the positions it attends at this step
  std::vector<std::vector<std::vector<float>>> rows_, values_;
};

// -log softmax(logits)[target], in double.
double negative_log_likelihood(std::span<const float> logits, int target) {
  const float top = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float value : logits) sum += std::exp(static_cast<double>(value) - top);
  return static_cast<double>(top) + std::log(sum) - static_cast<double>(logits[static_cast<size_t>(target)]);
}

}  // namespace

void check_closed_loop_policy(const PolicyInfo& info) {
  if (info.engine == Engine::bound)
    throw kvtrace::InputError("", "",
                              "policy " + info.name +
                                  " is an upper bound (the best cache of each head at each step, chosen from "
                                  "the full row), not a cache a model can run with; kvsim eval cannot run it");
}

ClosedLoopRun run_closed_loop(const kvtrace::Llama2Model& model, std::span<const int> tokens,
                              const PolicyChoice* policy, int64_t budget, const ClosedLoopOptions& options) {
  const kvtrace::Llama2Config& config = model.config();
  const auto n = static_cast<int64_t>(tokens.size());
  if (n < 1) throw kvtrace::InputError("", "", "no tokens to evaluate");
  if (n > config.seq_len)
    throw kvtrace::InputError("", "",
                              "sequence of " + std::to_string(n) + " tokens is longer than the model's seq_len " +
                                  std::to_string(config.seq_len));
  for (int token : tokens)
    if (token < 0 || token >= config.vocab_size)
      throw kvtrace::InputError("", "",
                                "token id " + std::to_string(token) + " is outside the model's vocabulary [0, " +
                                    std::to_string(config.vocab_size) + ")");
  if (policy) {
    check_closed_loop_policy(*policy->info);
    if (budget < 1) throw kvtrace::InputError("", "", "budget must be at least 1 token");
    if (policy->info->needs_future) {
      const auto* future = options.future_rows;
      if (!future || static_cast<int>(future->size()) != config.n_layers ||
          (*future)[0].size() != static_cast<size_t>(config.n_heads) ||
          (*future)[0][0].size() != static_cast<size_t>(kvtrace::packed_length(n)))
        throw kvtrace::InputError(
            "", "",
            "policy " + policy->info->name + " needs the full-cache run's rows of the same tokens (future_rows)");
    }
  }

  ClosedLoopRun run;
  run.n_tokens = n;
  run.argmax.resize(static_cast<size_t>(n));
  run.nll.resize(static_cast<size_t>(n - 1));
  if (options.keep_logits) run.logits.reserve(static_cast<size_t>(n) * static_cast<size_t>(config.vocab_size));
  const bool hooked = policy || options.record_rows || options.record_values;
  std::unique_ptr<ClosedLoopHook> hook;
  if (hooked) hook = std::make_unique<ClosedLoopHook>(config, policy, budget, n, options);
  kvtrace::Llama2Session session(model);
  for (int64_t i = 0; i < n; ++i) {
    const std::span<const float> logits = session.forward(tokens[static_cast<size_t>(i)], hook.get());
    run.argmax[static_cast<size_t>(i)] = kvtrace::argmax(logits);
    if (i + 1 < n)
      run.nll[static_cast<size_t>(i)] = negative_log_likelihood(logits, tokens[static_cast<size_t>(i) + 1]);
    if (options.keep_logits) run.logits.insert(run.logits.end(), logits.begin(), logits.end());
  }
  if (hook) {
    run.groups = hook->take_records();
    run.rows = hook->take_rows();
    run.values = hook->take_values();
  }
  return run;
}

std::vector<EvalSequence> text_sequences(const kvtrace::Tokenizer& tokenizer, std::string_view text, int tokens) {
  if (tokens < 2) throw kvtrace::InputError("", "", "sequences need at least 2 tokens");
  const std::vector<int> ids = tokenizer.encode(text, true, false);
  std::vector<EvalSequence> out;
  for (size_t first = 0; first < ids.size(); first += static_cast<size_t>(tokens)) {
    const size_t last = std::min(ids.size(), first + static_cast<size_t>(tokens));
    if (last - first < 2) break;
    EvalSequence sequence;
    sequence.index = static_cast<int>(out.size());
    sequence.tokens.assign(ids.begin() + static_cast<std::ptrdiff_t>(first),
                           ids.begin() + static_cast<std::ptrdiff_t>(last));
    out.push_back(std::move(sequence));
  }
  return out;
}

}  // namespace kvsim
