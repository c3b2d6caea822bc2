// The attention need of rows, layers and traces (kvsim/analysis/attention_need.hpp).
#include "kvsim/analysis/attention_need.hpp"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "kvsim/core/lists.hpp"
#include "kvsim/core/parallel_for.hpp"
#include "kvtrace/attention_source.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"

namespace kvsim {

int64_t attention_need(std::span<const float> row, double mass) {
  std::vector<float> sorted(row.begin(), row.end());
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  double sum = 0;
  for (size_t k = 0; k < sorted.size(); ++k) {
    sum += sorted[k];
    if (sum >= mass) return static_cast<int64_t>(k + 1);
  }
  return static_cast<int64_t>(sorted.size());
}

std::vector<int64_t> attention_needs(std::span<const float> row, std::span<const double> masses) {
  std::vector<float> sorted(row.begin(), row.end());
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  std::vector<int64_t> out(masses.size(), static_cast<int64_t>(sorted.size()));
  // Masses in any order: each walks the same running sum until it reaches its mass.
  std::vector<size_t> order(masses.size());
  for (size_t m = 0; m < order.size(); ++m) order[m] = m;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return masses[a] < masses[b]; });
  double sum = 0;
  size_t next = 0;
  for (size_t k = 0; k < sorted.size() && next < order.size(); ++k) {
    sum += sorted[k];
    while (next < order.size() && sum >= masses[order[next]]) out[order[next++]] = static_cast<int64_t>(k + 1);
  }
  return out;
}

std::vector<double> parse_need_masses(const std::string& text, const std::string& option) {
  std::vector<double> masses;
  for (const std::string& item : parse_name_list("--" + option, text)) {
    char* end = nullptr;
    const double mass = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(mass > 0 && mass <= 1))
      throw kvtrace::InputError(
          "", "", "--" + option + ": '" + item + "' is not an attention mass in (0, 1] (write e.g. 0.95)");
    masses.push_back(mass);
  }
  std::sort(masses.begin(), masses.end());
  masses.erase(std::unique(masses.begin(), masses.end()), masses.end());
  return masses;
}

std::string need_mass_text(double mass) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.10g", mass);
  return buffer;
}

namespace {

// One (sequence, layer): the needs of every head at every recorded step, per mass, in
// (head, step) order, and per step their sum over heads.
struct ItemNeed {
  int64_t first = 0, n = 0;
  std::vector<std::vector<float>> values;      // [mass][head * steps + step - first]
  std::vector<std::vector<double>> step_sum;   // [mass][t - first]
  std::vector<std::vector<int64_t>> step_max;  // [mass][t - first]
};

ItemNeed item_need(kvtrace::AttentionSource& source, const std::vector<double>& masses, int64_t first) {
  ItemNeed item;
  item.n = source.n_tokens();
  item.first = std::clamp<int64_t>(first, 0, item.n);
  const auto steps = static_cast<size_t>(item.n - item.first);
  const auto heads = static_cast<size_t>(source.n_heads());
  item.values.assign(masses.size(), std::vector<float>(heads * steps));
  item.step_sum.assign(masses.size(), std::vector<double>(steps, 0.0));
  item.step_max.assign(masses.size(), std::vector<int64_t>(steps, 0));
  kvtrace::RowBlock block;
  for (int64_t from = item.first; from < item.n; from += kvtrace::kRowBlockSize) {
    const int64_t count = std::min(kvtrace::kRowBlockSize, item.n - from);
    source.rows(from, count, block);
    for (size_t h = 0; h < heads; ++h)
      for (int64_t t = from; t < from + count; ++t) {
        const std::span<const float> row(block.row(static_cast<int>(h), t), static_cast<size_t>(t + 1));
        const std::vector<int64_t> needs = attention_needs(row, masses);
        const auto s = static_cast<size_t>(t - item.first);
        for (size_t m = 0; m < masses.size(); ++m) {
          item.values[m][h * steps + s] = static_cast<float>(needs[m]);
          item.step_sum[m][s] += static_cast<double>(needs[m]);
          item.step_max[m][s] = std::max(item.step_max[m][s], needs[m]);
        }
      }
  }
  return item;
}

std::vector<int> sorted(std::vector<int> values) {
  std::sort(values.begin(), values.end());
  return values;
}

}  // namespace

// Items run on a pool of threads; everything is then summed in (layer, sequence) order, so
// the numbers are the same at any thread count.
TraceNeed trace_need(const kvtrace::TraceReader& reader, const NeedConfig& config) {
  if (config.masses.empty()) throw kvtrace::InputError("", "", "--need: no mass given");
  const kvtrace::TraceMeta& meta = reader.meta();
  TraceNeed out;
  out.masses = config.masses;
  out.sequences = sorted(chosen_or_all(config.sequences, reader.n_sequences(), "sequence", reader.path()));
  out.layers = sorted(chosen_or_all(config.layers, meta.n_layers, "layer", reader.path()));
  out.n_heads = meta.n_heads;
  std::vector<int> heads(static_cast<size_t>(meta.n_heads));
  for (int h = 0; h < meta.n_heads; ++h) heads[static_cast<size_t>(h)] = h;
  const size_t n_seq = out.sequences.size(), n_layers = out.layers.size(), n_mass = out.masses.size();
  std::vector<ItemNeed> items(n_seq * n_layers);  // [layer][sequence]
  parallel_for(
      items.size(), worker_threads(config.threads),
      [&](size_t i) {
        const int seq = out.sequences[i % n_seq];
        auto source = kvtrace::open_attention_source(reader, seq, out.layers[i / n_seq], heads, config.rows);
        items[i] = item_need(*source, out.masses, config.first_step ? config.first_step(seq) : 0);
      },
      [] {});

  int64_t longest = 0;
  for (int seq : out.sequences) {
    out.tokens.push_back(reader.sequence(seq).n_tokens);
    longest = std::max(longest, out.tokens.back());
  }
  out.peak.assign(n_mass, std::vector<int64_t>(n_seq, 0));
  out.step_max.assign(n_mass, std::vector<double>(static_cast<size_t>(longest), NAN));
  for (size_t l = 0; l < n_layers; ++l) {
    LayerNeed layer;
    layer.layer = out.layers[l];
    for (size_t m = 0; m < n_mass; ++m) {
      std::vector<float> values;
      std::vector<double> sum(static_cast<size_t>(longest), 0.0);
      std::vector<int64_t> count(static_cast<size_t>(longest), 0);
      for (size_t s = 0; s < n_seq; ++s) {
        const ItemNeed& item = items[l * n_seq + s];
        values.insert(values.end(), item.values[m].begin(), item.values[m].end());
        for (size_t i = 0; i < item.step_sum[m].size(); ++i) {
          const auto t = static_cast<size_t>(item.first) + i;
          sum[t] += item.step_sum[m][i];
          count[t] += out.n_heads;
          const auto peak = static_cast<double>(item.step_max[m][i]);
          if (std::isnan(out.step_max[m][t]) || peak > out.step_max[m][t]) out.step_max[m][t] = peak;
          out.peak[m][s] = std::max(out.peak[m][s], item.step_max[m][i]);
        }
      }
      layer.needs.push_back(summarize(values));
      std::vector<double> mean(static_cast<size_t>(longest), NAN);
      for (size_t t = 0; t < mean.size(); ++t)
        if (count[t] > 0) mean[t] = sum[t] / static_cast<double>(count[t]);
      layer.step_mean.push_back(std::move(mean));
    }
    out.per_layer.push_back(std::move(layer));
  }
  return out;
}

std::function<int64_t(int seq)> recorded_steps_from(const kvtrace::TraceReader& reader, const ReplayConfig& config) {
  if (config.mode != Mode::prefill) return {};
  return [&reader, config](int seq) {
    const kvtrace::SequenceMeta& info = reader.sequence(seq);
    return std::min(info.prompt_len, info.n_tokens) - sequence_protocol(reader, config, seq).question;
  };
}

Budget need_budget(const TraceNeed& need, size_t mass) {
  int64_t permille = 1;  // the share in tenths of a percent
  for (size_t s = 0; s < need.tokens.size(); ++s) {
    const int64_t n = need.tokens[s], budget = std::max<int64_t>(1, need.peak[mass][s] - 1);
    permille = std::max(permille, (1000 * budget + n - 1) / n);
  }
  permille = std::min<int64_t>(permille, 1000);
  char text[32];
  if (permille % 10 == 0)
    std::snprintf(text, sizeof text, "%lld%%", static_cast<long long>(permille / 10));
  else
    std::snprintf(text, sizeof text, "%lld.%lld%%", static_cast<long long>(permille / 10),
                  static_cast<long long>(permille % 10));
  return Budget::parse(text);
}

std::vector<SweepRow> need_sweep_rows(const TraceNeed& need, Mode mode) {
  std::vector<SweepRow> rows;
  for (size_t m = 0; m < need.masses.size(); ++m) {
    SweepRow row;
    row.policy = "need";
    row.params = "p=" + need_mass_text(need.masses[m]);
    const Budget budget = need_budget(need, m);
    row.budget = budget.text;
    row.quant = "none";
    row.bits_per_element = 16;
    row.mode = mode_name(mode);
    for (size_t s = 0; s < need.tokens.size(); ++s) {
      const int64_t b = budget.resolve(need.tokens[s]);
      row.budget_tokens_mean += static_cast<double>(b);
      row.budget_share_mean += static_cast<double>(b) / static_cast<double>(need.tokens[s]);
    }
    row.budget_tokens_mean /= static_cast<double>(need.tokens.size());
    row.budget_share_mean /= static_cast<double>(need.tokens.size());
    row.retention_mean = row.retention_p5 = row.retention_min = NAN;
    row.output_error_mean = row.output_error_p95 = row.output_error_max = NAN;
    double sum = 0;
    for (const LayerNeed& layer : need.per_layer) {
      const Summary& s = layer.needs[m];
      sum += s.mean * static_cast<double>(s.count);
      row.samples += s.count;
      row.occupancy_peak = std::max(row.occupancy_peak, static_cast<int64_t>(s.max));
    }
    row.occupancy_mean = row.samples > 0 ? sum / static_cast<double>(row.samples) : 0.0;
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace kvsim
