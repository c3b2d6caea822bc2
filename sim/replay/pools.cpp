// One pool for a batch in a replay (pools.hpp).
#include "pools.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "kvsim/core/pool.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

[[noreturn]] void refuse_pair(const SequencePlan& first, const SequencePlan& other, const std::string& what,
                              int64_t first_value, int64_t other_value, const std::string& why) {
  throw kvtrace::InputError("", "",
                            "--pool: sequence " + std::to_string(other.seq) + "'s " + what + " (" +
                                std::to_string(other_value) + ") differs from sequence " + std::to_string(first.seq) +
                                "'s (" + std::to_string(first_value) + ") in one pool: " + why);
}

}  // namespace

std::vector<std::vector<size_t>> plan_pools(const ReplayPlan& plan) {
  std::vector<std::vector<size_t>> pools;
  for (size_t s = 0; s < plan.sequences.size(); ++s) {
    if (s % static_cast<size_t>(plan.pool) == 0) pools.emplace_back();
    pools.back().push_back(s);
  }
  return pools;
}

void check_pools(const ReplayConfig& config, const ReplayPlan& plan) {
  for (const PolicyChoice& policy : config.policies) check_pool_policy(*policy.info);
  for (const std::vector<size_t>& pool : plan_pools(plan)) {
    const SequencePlan& first = plan.sequences[pool.front()];
    for (size_t s : pool) {
      const SequencePlan& other = plan.sequences[s];
      if (other.n_tokens != first.n_tokens)
        refuse_pair(first, other, "length", first.n_tokens, other.n_tokens, "a pool steps its sequences together");
      if (config.mode != Mode::prefill) continue;
      const std::string why = "a pool compresses its sequences at the same steps";
      if (other.prompt_len != first.prompt_len)
        refuse_pair(first, other, "prompt_len", first.prompt_len, other.prompt_len, why);
      if (other.protocol.question != first.protocol.question)
        refuse_pair(first, other, "question", first.protocol.question, other.protocol.question, why);
    }
  }
}

std::vector<SequenceSummary> sequence_summaries(const ReplayPlan& plan, const std::vector<const GroupRecord*>& records,
                                                const std::vector<const RecordSums*>& sums) {
  struct Sums {
    Moments retention;
    int64_t occupancy = 0, peak = 0, steps = 0;
    double budget = 0;
    int64_t records = 0;
  };
  std::vector<Sums> of(plan.sequences.size());
  std::vector<size_t> index_of_seq;
  for (size_t s = 0; s < plan.sequences.size(); ++s) {
    const auto seq = static_cast<size_t>(plan.sequences[s].seq);
    if (index_of_seq.size() <= seq) index_of_seq.resize(seq + 1);
    index_of_seq[seq] = s;
  }
  for (size_t r = 0; r < records.size(); ++r) {
    Sums& sequence = of[index_of_seq[static_cast<size_t>(records[r]->seq)]];
    sequence.retention.add(sums[r]->retention);
    sequence.occupancy += sums[r]->occupancy_sum;
    sequence.peak = std::max(sequence.peak, sums[r]->occupancy_peak);
    sequence.steps += records[r]->result.n_steps;
    sequence.budget += static_cast<double>(records[r]->result.budget);
    ++sequence.records;
  }
  std::vector<SequenceSummary> out;
  for (size_t s = 0; s < of.size(); ++s) {
    SequenceSummary summary;
    summary.seq = plan.sequences[s].seq;
    summary.pool = plan.pool > 0 ? static_cast<int>(s / static_cast<size_t>(plan.pool)) : 0;
    const SequencePlan& sequence = plan.sequences[s];
    if (sequence.context_from >= 0 || sequence.leads_context)
      summary.compressed_by = sequence.context_from >= 0
                                  ? plan.sequences[static_cast<size_t>(sequence.context_from)].seq
                                  : sequence.seq;
    summary.retention = summary_of(of[s].retention, NAN, NAN);
    summary.occupancy_mean =
        of[s].steps ? static_cast<double>(of[s].occupancy) / static_cast<double>(of[s].steps) : NAN;
    summary.occupancy_peak = of[s].peak;
    summary.budget_tokens_mean = of[s].records ? of[s].budget / static_cast<double>(of[s].records) : NAN;
    out.push_back(summary);
  }
  return out;
}

}  // namespace kvsim
