// CAKE's layer preference (docs/semantics.md, section 2), measured on a trace's rows before
// the replay, and the "cake" schedule built from it.
#include <algorithm>
#include <cmath>
#include <thread>

#include "kvsim/analysis/analysis.hpp"
#include "kvsim/core/lists.hpp"
#include "kvsim/core/parallel_for.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"

namespace kvsim {
namespace {

[[noreturn]] void bad_cake(const std::string& problem) {
  throw kvtrace::InputError("", "", "--layer-budget: " + problem);
}

double positive_real(const std::string& item, const std::string& key) {
  const std::string value = item.substr(key.size() + 1);
  char* end = nullptr;
  const double parsed = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !std::isfinite(parsed) || parsed <= 0 || parsed > 1e6)
    bad_cake("'" + item + "': " + key + " must be a positive number");
  return parsed;
}

}  // namespace

// antgroup/cakekv cake/model/modify_llama.py L90-108 on the window rows t = T-W..T-1 and the
// keys j < T-W: H = -sum p log(p + 1e-10) over heads, rows and keys (cake/utils.py L15-19);
// V = sum over heads and keys of the variance over the rows (torch.var: divided by W - 1).
CakeMeasure cake_measure(kvtrace::AttentionSource& source, int64_t tokens, int64_t window) {
  CakeMeasure out;
  if (window < 2 || tokens <= window || tokens > source.n_tokens()) return out;
  kvtrace::RowBlock block;
  source.rows(tokens - window, window, block);
  const int64_t keys = tokens - window;
  std::vector<double> mean(static_cast<size_t>(keys));
  for (int h = 0; h < source.n_heads(); ++h) {
    std::fill(mean.begin(), mean.end(), 0.0);
    for (int64_t t = tokens - window; t < tokens; ++t) {
      const float* row = block.row(h, t);
      for (int64_t j = 0; j < keys; ++j) {
        const double p = row[j];
        out.dispersion -= p * std::log(p + 1e-10);
        mean[static_cast<size_t>(j)] += p;
      }
    }
    for (double& m : mean) m /= static_cast<double>(window);
    for (int64_t j = 0; j < keys; ++j) {
      double squares = 0;
      for (int64_t t = tokens - window; t < tokens; ++t) {
        const double d = block.row(h, t)[j] - mean[static_cast<size_t>(j)];
        squares += d * d;
      }
      out.variance += squares / static_cast<double>(window - 1);
    }
  }
  out.measured = true;
  return out;
}

// modify_llama.py L108: P = H^(1 / tau1) V^(1 / tau2).
double cake_preference(const CakeMeasure& measure, double tau1, double tau2) {
  return std::pow(measure.dispersion, 1.0 / tau1) * std::pow(measure.variance, 1.0 / tau2);
}

LayerSchedule cake_schedule(const std::string& text, const ScheduleRows& rows, int threads) {
  LayerSchedule schedule;
  schedule.name = text;
  schedule.kind = LayerSchedule::Kind::cake;
  schedule.n_layers = rows.n_layers;
  // The authors' default when no tuned pair is given (experiments/LongBench/pred_cake.py L200).
  double tau1 = 1.0, tau2 = 1.0;
  size_t at = text.find(':');
  while (at != std::string::npos) {
    const size_t next = text.find(':', at + 1);
    const std::string item = text.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    if (item.rfind("tau1=", 0) == 0) {
      tau1 = positive_real(item, "tau1");
    } else if (item.rfind("tau2=", 0) == 0) {
      tau2 = positive_real(item, "tau2");
    } else if (item.rfind("window=", 0) == 0) {
      const double w = positive_real(item, "window");
      if (w != std::floor(w) || w < 2) bad_cake("'" + item + "': window must be a whole number from 2");
      schedule.window = static_cast<int64_t>(w);
    } else {
      bad_cake("'" + item + "' is not a cake option (tau1=X, tau2=X, window=N)");
    }
    at = next;
  }
  const auto layers = static_cast<size_t>(rows.n_layers);
  std::vector<CakeMeasure> measures(rows.sequences.size() * layers);
  const int workers = worker_threads(threads);
  parallel_for(
      measures.size(), workers,
      [&](size_t i) {
        const int seq = rows.sequences[i / layers];
        auto source = rows.open(seq, static_cast<int>(i % layers));
        measures[i] = cake_measure(*source, rows.tokens(seq), schedule.window);
      },
      [] {});
  if (!rows.sequences.empty())
    schedule.preference.resize(static_cast<size_t>(*std::max_element(rows.sequences.begin(), rows.sequences.end())) +
                               1);
  for (size_t s = 0; s < rows.sequences.size(); ++s) {
    std::vector<double> preference;
    for (size_t l = 0; l < layers; ++l) {
      const CakeMeasure& measure = measures[s * layers + l];
      if (!measure.measured) break;
      preference.push_back(cake_preference(measure, tau1, tau2));
    }
    if (preference.size() == layers)
      schedule.preference[static_cast<size_t>(rows.sequences[s])] = std::move(preference);
  }
  return schedule;
}

}  // namespace kvsim
