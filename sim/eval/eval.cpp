// The closed loop of `kvsim eval` (kvsim/eval/eval.hpp): the llama2.c model over fixed tokens,
// every head attending only to its cache group's cache, the caches kept by the replay
// engine itself (SteppedEngine, one per layer) from the rows the model computes as it goes.
#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "kvsim/eval/eval.hpp"
#include "kvtrace/attention_source.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "kvsim/model/llama2.hpp"
#include "kvtrace/schema.hpp"
#include "kvsim/model/tokenizer.hpp"

namespace kvsim {
namespace {

// One layer: its engine, the simulation each head attends through, and the step's rows.
struct LoopLayer {
  std::unique_ptr<kvtrace::PackedAttentionSource> future;  // policies that need the future
  std::unique_ptr<SteppedEngine> engine;
  std::vector<size_t> simulation_of_head;
  std::vector<GroupRecord> records;  // per simulation, results filled at the end
  kvtrace::RowBlock rows, full_rows;
};

class ClosedLoopHook final : public kvtrace::AttentionHook {
 public:
  ClosedLoopHook(const kvtrace::Llama2Config& config, const PolicyChoice* policy, int64_t budget, int64_t n,
                 const ClosedLoopOptions& options)
      : config_(config), policy_(policy), n_(n), options_(options), allowed_(static_cast<size_t>(config.n_heads)) {
    const auto layers = static_cast<size_t>(config.n_layers);
    if (options.record_rows)
      rows_.assign(layers, std::vector<std::vector<float>>(
                               static_cast<size_t>(config.n_heads),
                               std::vector<float>(static_cast<size_t>(kvtrace::packed_length(n)), 0.0f)));
    if (options.record_values)
      values_.assign(layers, std::vector<std::vector<float>>(
                                 static_cast<size_t>(config.n_kv_heads),
                                 std::vector<float>(static_cast<size_t>(n * config.head_dim()), 0.0f)));
    // The model's own q, k and v that the policy reads or the caller records, filled
    // position by position.
    auto heads = [&](bool needed, int count) {
      return std::vector<std::vector<std::vector<float>>>(
          needed ? layers : 0,
          std::vector<std::vector<float>>(static_cast<size_t>(count),
                                          std::vector<float>(static_cast<size_t>(n * config.head_dim()))));
    };
    const bool reads_keys = policy && policy->info->needs_keys, reads_queries = policy && policy->info->needs_queries;
    model_keys_ = heads(reads_keys || options.record_keys, config.n_kv_heads);
    model_values_ = heads(policy && policy->info->needs_values, config.n_kv_heads);
    model_queries_ = heads(reads_queries || options.record_queries, config.n_heads);
    if (policy) build_layers(budget);
  }

  void on_qkv(int layer, int pos, std::span<const float> q, std::span<const float> k,
              std::span<const float> v) override {
    if (policy_) {  // the layer's step begins: its rows are filled head by head
      LoopLayer& loop = layers_[static_cast<size_t>(layer)];
      loop.rows.reshape(pos, 1, n_, config_.n_heads);
      if (wants_full_rows(layer)) loop.full_rows.reshape(pos, 1, n_, config_.n_heads);
    }
    const auto l = static_cast<size_t>(layer);
    if (!model_keys_.empty()) store_row(k, pos, model_keys_[l]);
    if (!model_values_.empty()) store_row(v, pos, model_values_[l]);
    if (!model_queries_.empty()) store_row(q, pos, model_queries_[l]);
    if (options_.record_values) store_row(v, pos, values_[l]);
  }

  std::span<const int> allowed_positions(int layer, int head, int pos) override {
    if (!policy_) return {};
    LoopLayer& loop = layers_[static_cast<size_t>(layer)];
    // What the simulation holds, and the new position. A copy per head: the model reads it
    // after on_attention, when the layer may have evicted.
    const std::span<const int32_t> cache = loop.engine->cache(loop.simulation_of_head[static_cast<size_t>(head)]);
    std::vector<int>& allowed = allowed_[static_cast<size_t>(head)];
    allowed.assign(cache.begin(), cache.end());
    allowed.push_back(pos);
    return allowed;
  }

  bool wants_full_rows(int) override { return policy_ && policy_->info->needs_full_rows; }
  void on_full_row(int layer, int head, int pos, std::span<const float> probs) override {
    if (options_.record_rows && options_.record_full_rows)
      std::copy(probs.begin(), probs.end(),
                rows_[static_cast<size_t>(layer)][static_cast<size_t>(head)].data() + kvtrace::packed_row_offset(pos));
    LoopLayer& loop = layers_[static_cast<size_t>(layer)];
    std::copy(probs.begin(), probs.end(), loop.full_rows.row_to_fill(head, pos));
  }

  void on_attention(int layer, int head, int pos, std::span<const int> positions,
                    std::span<const float> probs) override {
    if (options_.record_rows && !(options_.record_full_rows && wants_full_rows(layer))) {
      float* row =
          rows_[static_cast<size_t>(layer)][static_cast<size_t>(head)].data() + kvtrace::packed_row_offset(pos);
      for (size_t j = 0; j < positions.size(); ++j) row[positions[j]] = probs[j];
    }
    if (!policy_) return;
    LoopLayer& loop = layers_[static_cast<size_t>(layer)];
    float* row = loop.rows.row_to_fill(head, pos);  // the row the model used: its softmax over the cache, 0 elsewhere
    std::fill(row, row + pos + 1, 0.0f);
    for (size_t j = 0; j < positions.size(); ++j) row[positions[j]] = probs[j];
    if (head == config_.n_heads - 1) loop.engine->step(loop.rows, wants_full_rows(layer) ? &loop.full_rows : nullptr);
  }

  std::vector<GroupRecord> take_records() {
    std::vector<GroupRecord> records;
    for (auto& loop : layers_) {
      std::vector<SimulationResult> results = loop.engine->results();
      for (size_t s = 0; s < results.size(); ++s) {
        loop.records[s].result = std::move(results[s]);
        records.push_back(std::move(loop.records[s]));
      }
    }
    return records;
  }
  std::vector<std::vector<std::vector<float>>> take_rows() { return std::move(rows_); }
  std::vector<std::vector<std::vector<float>>> take_values() { return std::move(values_); }
  std::vector<std::vector<std::vector<float>>> take_keys() { return std::move(model_keys_); }
  std::vector<std::vector<std::vector<float>>> take_queries() { return std::move(model_queries_); }

 private:
  // Row `pos` of each head of a step's q, k or v ([heads * head_dim]) into `heads`.
  void store_row(std::span<const float> step, int pos, std::vector<std::vector<float>>& heads) const {
    const int d = config_.head_dim();
    for (size_t h = 0; h < heads.size(); ++h)
      std::copy_n(step.data() + h * static_cast<size_t>(d), d, heads[h].data() + static_cast<std::ptrdiff_t>(pos) * d);
  }

  // The layers' groups, seeds and simulations as replay makes them (layer_cache_groups,
  // policy_groups), stepped layer after layer at each position as run_lockstep's lanes.
  void build_layers(int64_t budget) {
    const PolicyInfo& info = *policy_->info;
    const int n_kv = config_.n_kv_heads;
    const GroupRange range = policy_groups(info, n_kv);
    std::shared_ptr<void> state;
    if (info.make_sequence_state) state = info.make_sequence_state(policy_->params, config_.n_layers, n_);
    EngineOptions engine_options;
    engine_options.aggregate = options_.aggregate;
    engine_options.protocol.compress_every = options_.compress_every;
    engine_options.paging = options_.paging;
    // A given compression holds whatever adaptive budgets chose in the run that made it.
    engine_options.head_floor = options_.compressed_away.empty() ? options_.head_floor : -1;
    if (options_.question > 0) {
      engine_options.mode = Mode::prefill;
      engine_options.prompt_len = options_.prompt_len;
      engine_options.protocol.question = options_.question;
    }
    for (int l = 0; l < config_.n_layers; ++l) {
      LoopLayer& loop = layers_.emplace_back();
      if (info.needs_future)
        loop.future =
            std::make_unique<kvtrace::PackedAttentionSource>(n_, (*options_.future_rows)[static_cast<size_t>(l)]);
      std::vector<CacheGroup> groups = layer_cache_groups(config_.n_heads, n_kv, options_.sequence, l);
      auto of_layer = [&](const std::vector<std::vector<std::vector<float>>>& heads) {
        return heads.empty() ? std::span<const std::vector<float>>() : heads[static_cast<size_t>(l)];
      };
      attach_group_tensors(groups, config_.n_heads, n_kv,
                           {of_layer(model_keys_), of_layer(model_values_), of_layer(model_queries_),
                            config_.head_dim(), llama2_rope(config_)});
      std::vector<SimulationSpec> specs;
      loop.simulation_of_head.resize(static_cast<size_t>(config_.n_heads));
      for (int g = range.first; g < range.last; ++g) {
        for (int head : groups[static_cast<size_t>(g)].heads)
          loop.simulation_of_head[static_cast<size_t>(head)] = specs.size();
        const int64_t layer_budget =
            options_.layer_budgets.empty() ? budget : options_.layer_budgets[static_cast<size_t>(l)];
        specs.push_back(simulation_spec(*policy_, layer_budget, g, l, state));
        specs.back().pinned = options_.pinned;
        if (!options_.compressed_away.empty()) specs.back().compressed_away = options_.compressed_away[compressions_++];
        GroupRecord& record = loop.records.emplace_back();
        record.seq = options_.sequence;
        record.layer = l;
        record.group = info.grouping == Grouping::layer ? 0 : g;
        record.layer_wide = info.grouping == Grouping::layer;
        record.heads = groups[static_cast<size_t>(g)].heads;
      }
      loop.engine = std::make_unique<SteppedEngine>(config_.n_heads, std::move(groups), std::move(specs), n_,
                                                    engine_options, loop.future.get());
    }
  }

  const kvtrace::Llama2Config& config_;
  const PolicyChoice* policy_;
  int64_t n_;
  const ClosedLoopOptions& options_;
  std::vector<LoopLayer> layers_;
  size_t compressions_ = 0;                // options_.compressed_away handed to the simulations so far
  std::vector<std::vector<int>> allowed_;  // per head: the positions it attends at this step
  std::vector<std::vector<std::vector<float>>> rows_, values_;
  // [layer][head][n * head_dim]: the model's q, k, v for a policy that reads them.
  std::vector<std::vector<std::vector<float>>> model_keys_, model_values_, model_queries_;
};

// -log softmax(logits)[target], in double.
double negative_log_likelihood(std::span<const float> logits, int target) {
  const float top = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float value : logits) sum += std::exp(static_cast<double>(value) - top);
  return static_cast<double>(top) + std::log(sum) - static_cast<double>(logits[static_cast<size_t>(target)]);
}

// Throws InputError unless `compression` holds one entry per (layer, group) of `policy` on the
// model and the run compresses its context once (a question, no --compress-every).
void check_compression(const kvtrace::Llama2Config& config, const PolicyInfo& policy,
                       const ClosedLoopOptions& options) {
  const GroupRange range = policy_groups(policy, config.n_kv_heads);
  const auto wanted = static_cast<size_t>(config.n_layers) * static_cast<size_t>(range.last - range.first);
  if (options.question <= 0 || options.compress_every > 0)
    throw kvtrace::InputError("", "",
                              "a shared context's compression needs the question protocol without --compress-every");
  if (options.compressed_away.size() != wanted ||
      std::any_of(options.compressed_away.begin(), options.compressed_away.end(), [](const auto& p) { return !p; }))
    throw kvtrace::InputError("", "",
                              "a shared context's compression needs one set of positions per layer and group (" +
                                  std::to_string(wanted) + ")");
}

}  // namespace

std::shared_ptr<const std::vector<int32_t>> evicted_positions(const SimulationResult& result) {
  auto away = std::make_shared<std::vector<int32_t>>();
  for (size_t p = 0; p < result.eviction_step.size(); ++p)
    if (result.eviction_step[p] >= 0) away->push_back(static_cast<int32_t>(p));
  return away;
}

ContextCompression context_compression(std::span<const GroupRecord> records) {
  ContextCompression out;
  for (const GroupRecord& record : records) out.push_back(evicted_positions(record.result));
  return out;
}

void check_closed_loop_policy(const PolicyInfo& info) {
  if (info.selects)
    throw kvtrace::InputError("", "",
                              "policy " + info.name +
                                  " selects what each step reads from the full cache (per head), which the "
                                  "closed loop's attention does not model; kvsim eval cannot run it");
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
  if (options.question < 0 ||
      (options.question > 0 && (options.question >= options.prompt_len || options.prompt_len >= n)))
    throw kvtrace::InputError("", "",
                              std::string("--question ")
                                  .append(std::to_string(options.question))
                                  .append(" needs a prompt longer than it (prompt ")
                                  .append(std::to_string(options.prompt_len))
                                  .append(" tokens) and at least one answer token after it (")
                                  .append(std::to_string(n))
                                  .append(" tokens)"));
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
    if (!options.layer_budgets.empty() &&
        (static_cast<int>(options.layer_budgets.size()) != config.n_layers ||
         *std::min_element(options.layer_budgets.begin(), options.layer_budgets.end()) < 1))
      throw kvtrace::InputError(
          "", "", "layer budgets: one of at least 1 token per layer (" + std::to_string(config.n_layers) + ") needed");
    if (!options.compressed_away.empty()) check_compression(config, *policy->info, options);
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
  const bool hooked =
      policy || options.record_rows || options.record_values || options.record_keys || options.record_queries;
  std::unique_ptr<ClosedLoopHook> hook;
  if (hooked) hook = std::make_unique<ClosedLoopHook>(config, policy, budget, n, options);
  kvtrace::Llama2Session session(model);
  for (int64_t i = 0; i < n; ++i) {
    if (options.cancel && options.cancel->load()) throw Cancelled();
    std::span<const float> logits;
    try {
      logits = session.forward(tokens[static_cast<size_t>(i)], hook.get());
    } catch (const kvtrace::InputError& e) {  // a step that overflows: say which sequence
      throw kvtrace::InputError(e.file(), "sequence " + std::to_string(options.sequence), e.problem());
    }
    run.argmax[static_cast<size_t>(i)] = kvtrace::argmax(logits);
    if (i + 1 < n)
      run.nll[static_cast<size_t>(i)] = negative_log_likelihood(logits, tokens[static_cast<size_t>(i) + 1]);
    if (options.keep_logits) run.logits.insert(run.logits.end(), logits.begin(), logits.end());
  }
  if (hook) {
    run.groups = hook->take_records();
    run.rows = hook->take_rows();
    run.values = hook->take_values();
    if (options.record_keys) run.keys = hook->take_keys();
    if (options.record_queries) run.queries = hook->take_queries();
  }
  return run;
}

std::vector<int64_t> recall_positions(std::span<const int> tokens, std::span<const int> full_argmax,
                                      int64_t distance, int64_t first) {
  const auto n = static_cast<int64_t>(tokens.size());
  if (n >= 2 && static_cast<int64_t>(full_argmax.size()) < n - 1)
    throw std::invalid_argument("recall_positions: fewer full-cache argmaxes than predictions");
  std::unordered_map<int, int64_t> last;  // token -> its last position so far
  std::vector<int64_t> out;
  for (int64_t t = 0; t + 1 < n; ++t) {
    last[tokens[static_cast<size_t>(t)]] = t;
    const int target = tokens[static_cast<size_t>(t) + 1];
    const auto earlier = last.find(target);
    if (t >= first && earlier != last.end() && t + 1 - earlier->second > distance &&
        full_argmax[static_cast<size_t>(t)] == target)
      out.push_back(t);
  }
  return out;
}

EvalSequence trace_sequence(const kvtrace::TraceReader& reader, int seq, int tokens) {
  EvalSequence sequence;
  sequence.index = seq;
  for (int32_t token : reader.tokens(seq)) sequence.tokens.push_back(token);
  sequence.prompt_len = reader.sequence(seq).prompt_len;
  sequence.question_len = reader.sequence(seq).question_len;
  sequence.context_group = reader.sequence(seq).context_group;
  if (tokens > 0 && static_cast<int>(sequence.tokens.size()) > tokens)
    sequence.tokens.resize(static_cast<size_t>(tokens));
  const auto n = static_cast<int64_t>(sequence.tokens.size());
  for (kvtrace::Span span : reader.sequence(seq).spans)  // those within the tokens evaluated, clipped
    if (span.start < n) {
      span.end = std::min(span.end, n);
      sequence.spans.push_back(std::move(span));
    }
  return sequence;
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
