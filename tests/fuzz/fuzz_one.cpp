#include "fuzz_one.hpp"

#include <H5Cpp.h>

#include <algorithm>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "kvsim/analysis/analysis.hpp"
#include "kvsim/core/budget.hpp"
#include "kvsim/core/policy.hpp"
#include "kvsim/quant/quant.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/validate.hpp"
#include "trace_builder.hpp"

namespace kvfuzz {

namespace {

// The harness's own bounds on work per input (the reader's Limits allow far more: a tiny
// file may legitimately declare large datasets whose chunks were never written).
constexpr int64_t kMaxScanValues = int64_t{1} << 22;  // floats read by the validate scan
constexpr int64_t kMaxReplayTokens = 256;
constexpr int64_t kMaxReplayWork = int64_t{1} << 24;  // heads * n^2 * (head_dim + 1)

int64_t scan_values(const kvtrace::TraceReader& reader) {
  const kvtrace::TraceMeta& meta = reader.meta();
  int64_t total = 0;
  for (int seq = 0; seq < reader.n_sequences(); ++seq) {
    const kvtrace::SequenceMeta& sequence = reader.sequence(seq);
    const int64_t head = sequence.n_tokens * meta.head_dim;
    for (int layer = 0; layer < meta.n_layers; ++layer) {
      const kvtrace::LayerForm& form = reader.layer(seq, layer);
      if (form.has_q) total += meta.n_heads * head;
      if (form.has_k) total += meta.n_kv_heads * head;
      if (form.has_v) total += meta.n_kv_heads * head;
      if (form.has_attn) total += meta.n_heads * kvtrace::packed_length(sequence.n_tokens);
      if (total > kMaxScanValues) return total;
    }
  }
  return total;
}

// Deterministic choices from the input's last bytes, so one input always does the same.
uint8_t byte_from_end(const uint8_t* data, size_t size, size_t back) { return size > back ? data[size - 1 - back] : 0; }

}  // namespace

const char* outcome_name(Outcome outcome) {
  switch (outcome) {
    case Outcome::rejected:
      return "rejected";
    case Outcome::opened:
      return "opened";
    case Outcome::replayed:
      return "replayed";
  }
  return "?";
}

namespace {

Result run_image(std::span<const unsigned char> image, const Choices& choices) {
  Result result;
  try {
    const kvtrace::TraceReader reader = kvtrace::TraceReader::from_memory(image, "fuzz-input.h5");
    const kvtrace::TraceMeta& meta = reader.meta();
    if (scan_values(reader) > kMaxScanValues) {
      result.outcome = Outcome::opened;
      result.message = "opened; too large to scan in the harness";
      return result;
    }
    kvtrace::validate_trace(reader);

    const int64_t n = reader.sequence(0).n_tokens;
    const int64_t work = static_cast<int64_t>(meta.n_heads) * n * n * (meta.head_dim + 1);
    if (n > kMaxReplayTokens || work > kMaxReplayWork) {
      result.outcome = Outcome::opened;
      result.message = "validated; too large to replay in the harness";
      return result;
    }

    // The policies the replayed layer can feed: one that reads tensors the layer lacks, or
    // un-rotates with RoPE attributes the trace lacks, or merges values under --quant, is
    // refused by design (tests/cli covers that), and would make every such input a rejection.
    const kvtrace::LayerForm& form = reader.layer(0, 0);
    const bool quant = (choices.options & 2) != 0;
    std::vector<std::string> runnable;
    for (const kvsim::PolicyInfo& info : kvsim::policies())
      if ((!info.needs_keys || form.has_k) && (!info.needs_values || form.has_v) &&
          (!info.needs_queries || form.has_q) && (!info.rope_problem || info.rope_problem(meta.rope).empty()) &&
          !(quant && info.merges))
        runnable.push_back(info.name);
    const bool percent = (choices.options & 4) != 0;
    const int64_t budget = percent ? std::max<int64_t>(1, (1 + choices.budget % 100) * n / 100)
                                   : 1 + static_cast<int64_t>(choices.budget) % (n + 2);
    // Likewise a policy keeping `sinks` (simlayerkv: `initial`) positions refuses a budget at or
    // below them, and compactor one below its start + end: fewer kept positions.
    const std::string& second = runnable[choices.policy % runnable.size()];
    std::map<std::string, std::string> params;
    for (const kvsim::ParamSpec& param : kvsim::find_policy(second).params)
      if (param.name == "sinks" || param.name == "initial")
        params[param.name] = std::to_string(std::clamp<int64_t>(budget - 1, 0, 4));
    if (second == "compactor") {
      const int64_t start = std::min<int64_t>(8, budget / 2);
      params["start"] = std::to_string(start);
      params["end"] = std::to_string(std::min<int64_t>(4, budget - start));
    }
    kvsim::ReplayConfig config;
    config.policies.push_back(kvsim::choose_policy("scissorhands"));
    config.policies.push_back(kvsim::choose_policy(second, params));
    config.budgets.push_back(
        kvsim::Budget::parse(percent ? std::to_string(1 + choices.budget % 100) + "%" : std::to_string(budget)));
    config.mode = (choices.options & 1) ? kvsim::Mode::prefill : kvsim::Mode::stream;
    if (quant) config.quant.push_back(kvsim::parse_quant("kivi2"));
    config.aggregate = static_cast<kvsim::Aggregate>((choices.options >> 3) % 3);
    config.rows = static_cast<kvtrace::RowsFrom>((choices.options >> 5) % 3);
    config.sequences = {0};
    config.layers = {0};
    config.threads = 1;
    config.keep_records = true;
    kvsim::set_layer_schedules("uniform", reader, config);  // pyramidkv's and cake's own
    const kvsim::ReplayResults results = kvsim::replay_trace(reader, config);
    result.outcome = Outcome::replayed;
    result.message = "replayed " + std::to_string(results.cells.size()) + " cells: " + config.policies[0].label + ", " +
                     config.policies[1].label + " at budget " + config.budgets[0].text;
  } catch (const kvtrace::InputError& e) {
    result.outcome = Outcome::rejected;
    result.message = e.what();
  }
  return result;
}

bool starts_with_hdf5_signature(const uint8_t* data, size_t size) {
  static constexpr uint8_t kSignature[4] = {0x89, 'H', 'D', 'F'};
  return size >= 4 && std::equal(kSignature, kSignature + 4, data);
}

}  // namespace

Result run_one(const uint8_t* data, size_t size) {
  if (starts_with_hdf5_signature(data, size)) {
    // A (mutated) trace file: the replay choices come from its last bytes.
    const Choices choices{byte_from_end(data, size, 0), byte_from_end(data, size, 1), byte_from_end(data, size, 2)};
    return run_image(std::span<const unsigned char>(data, size), choices);
  }
  // A recipe for a trace HDF5 writes itself (trace_builder.hpp).
  Recipe recipe(data, size);
  Choices choices;
  std::vector<unsigned char> image;
  try {
    image = build_trace(recipe, choices);
  } catch (const H5::Exception& e) {
    // Some recipes ask HDF5 for what it cannot write (e.g. a chunk bigger than a fixed
    // shape): nothing to test.
    Result result;
    result.message = "recipe not writable: " + e.getDetailMsg();
    return result;
  }
  Result result = run_image(image, choices);
  result.message = "[recipe] " + result.message;
  return result;
}

}  // namespace kvfuzz
