// kvsim._kvsim, persistence of importance: analyze over a trace and analyze_rows over
// attention given as a numpy array, as columns of numpy arrays.
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>

#include "array_source.hpp"
#include "kvsim/analysis/analysis.hpp"
#include "kvsim/analysis/attention_need.hpp"
#include "kvsim/replay/replay.hpp"
#include "module.hpp"

namespace kvsim::python {
namespace {

// AnalysisOptions as Python gives them (top_k as text); the defaults are the library's.
struct AnalyzeOptions {
  std::vector<int64_t> lags = AnalysisOptions{}.lags;
  std::string top_k = AnalysisOptions{}.top_k.text;
  int64_t min_positions = AnalysisOptions{}.min_positions, max_steps = AnalysisOptions{}.max_start_steps;
  int samples = AnalysisOptions{}.repeat_samples;
  bool correlations = AnalysisOptions{}.correlations;
};

AnalysisOptions analysis_options(const AnalyzeOptions& o) {
  AnalysisOptions options;
  options.lags = o.lags;
  for (int64_t lag : options.lags)
    if (lag < 1 || lag > (int64_t{1} << 30)) bad_option("lags", "'" + std::to_string(lag) + "' is not an integer >= 1");
  if (options.lags.empty()) bad_option("lags", "nothing given");
  std::sort(options.lags.begin(), options.lags.end());
  options.lags.erase(std::unique(options.lags.begin(), options.lags.end()), options.lags.end());
  try {
    options.top_k = Budget::parse(o.top_k);
  } catch (const InputError&) {
    bad_option("topk", "'" + o.top_k + "' is not a token count or a percentage (write e.g. 8 or 10%)");
  }
  options.min_positions = o.min_positions;
  options.max_start_steps = o.max_steps;
  options.repeat_samples = o.samples;
  options.correlations = o.correlations;
  check_options(options);
  return options;
}

// The per-lag columns, spearman_lagL then topk_recall_lagL for every lag L.
void add_lag_columns(py::dict& d, const AnalysisOptions& options, std::vector<std::vector<double>>& spearman,
                     std::vector<std::vector<double>>& recall) {
  for (size_t l = 0; l < spearman.size(); ++l)
    d[py::str("spearman_lag" + std::to_string(options.lags[l]))] = to_numpy(std::move(spearman[l]));
  for (size_t l = 0; l < recall.size(); ++l)
    d[py::str("topk_recall_lag" + std::to_string(options.lags[l]))] = to_numpy(std::move(recall[l]));
}

// Columns of StatRows (analysis_csv's columns; layer -1 = every layer, head -1 = the mean over heads).
py::dict stat_columns(const std::vector<const StatRow*>& rows, const AnalysisOptions& options) {
  const size_t n = rows.size();
  std::vector<int64_t> layer(n), head(n), count(n), defined(n);
  std::vector<double> persistence(n), ever(n), repeat(n);
  const bool correlations = !rows.empty() && !rows.front()->spearman.empty();
  const size_t lags = correlations ? options.lags.size() : 0;
  std::vector<std::vector<double>> spearman(lags, std::vector<double>(n)), recall(lags, std::vector<double>(n));
  for (size_t i = 0; i < n; ++i) {
    const StatRow& r = *rows[i];
    layer[i] = r.layer;
    head[i] = r.head;
    count[i] = r.count;
    defined[i] = r.persistence_defined;
    persistence[i] = r.persistence;
    ever[i] = r.ever_pivotal;
    repeat[i] = r.repeat_share;
    for (size_t l = 0; l < lags; ++l) {
      spearman[l][i] = r.spearman[l];
      recall[l][i] = r.topk_recall[l];
    }
  }
  py::dict d;
  d["layer"] = to_numpy(std::move(layer));
  d["head"] = to_numpy(std::move(head));
  d["count"] = to_numpy(std::move(count));
  d["persistence"] = to_numpy(std::move(persistence));
  d["persistence_defined"] = to_numpy(std::move(defined));
  d["ever_pivotal"] = to_numpy(std::move(ever));
  d["repeat_share"] = to_numpy(std::move(repeat));
  add_lag_columns(d, options, spearman, recall);
  return d;
}

// Per (sequence, layer, head) columns of the items.
py::dict item_columns(std::vector<LayerAnalysis>& items, const AnalysisOptions& options) {
  std::vector<int64_t> seq, layer, head, n_tokens, early, late, persistent;
  std::vector<double> persistence, ever, repeat;
  const size_t lags = options.correlations ? options.lags.size() : 0;
  std::vector<std::vector<double>> spearman(lags), recall(lags);
  py::list repeats;
  for (const LayerAnalysis& item : items)
    for (const HeadAnalysis& h : item.heads) {
      seq.push_back(item.seq);
      layer.push_back(item.layer);
      head.push_back(h.head);
      n_tokens.push_back(item.n_tokens);
      early.push_back(h.early);
      late.push_back(h.late);
      persistent.push_back(h.persistent);
      persistence.push_back(h.persistence);
      ever.push_back(h.ever_pivotal);
      repeat.push_back(h.repeat_share);
      for (size_t l = 0; l < lags; ++l) {
        spearman[l].push_back(l < h.lags.size() ? h.lags[l].spearman : NAN);
        recall[l].push_back(l < h.lags.size() ? h.lags[l].topk_recall : NAN);
      }
      py::dict steps;
      for (const RepeatStep& r : h.repeats) steps[py::int_(r.step)] = to_numpy(std::vector<int32_t>(r.positions));
      repeats.append(steps);
    }
  py::dict d;
  d["seq"] = to_numpy(std::move(seq));
  d["layer"] = to_numpy(std::move(layer));
  d["head"] = to_numpy(std::move(head));
  d["n_tokens"] = to_numpy(std::move(n_tokens));
  d["early"] = to_numpy(std::move(early));
  d["late"] = to_numpy(std::move(late));
  d["persistent"] = to_numpy(std::move(persistent));
  d["persistence"] = to_numpy(std::move(persistence));
  d["ever_pivotal"] = to_numpy(std::move(ever));
  d["repeat_share"] = to_numpy(std::move(repeat));
  add_lag_columns(d, options, spearman, recall);
  d["repeats"] = repeats;
  return d;
}

py::dict analyze(const Trace& trace, const AnalyzeOptions& o, const std::string& rows,
                 const std::vector<int>& sequences, const std::vector<int>& layers, int threads) {
  const auto held = trace.hold();
  const kvtrace::TraceReader& reader = *held;
  AnalysisConfig config;
  config.rows = parse_rows(rows);
  for (int i : sequences)
    if (i < 0) bad_option("seqs", "'" + std::to_string(i) + "' is not an integer >= 0");
  for (int i : layers)
    if (i < 0) bad_option("layers", "'" + std::to_string(i) + "' is not an integer >= 0");
  config.sequences = sequences;
  config.layers = layers;
  config.options = analysis_options(o);
  if (threads < 0) bad_option("threads", "must be >= 0");
  config.threads = threads;
  TraceAnalysis a;
  {
    py::gil_scoped_release release;
    a = analyze_trace(reader, config);
  }
  std::vector<const StatRow*> heads, layer_means;
  for (const StatRow& r : a.heads) heads.push_back(&r);
  for (const StatRow& r : a.layer_means) layer_means.push_back(&r);
  py::dict out;
  out["lags"] = a.options.lags;
  out["sequences"] = a.sequences;
  out["layers"] = a.layers;
  out["heads"] = stat_columns(heads, a.options);
  out["layer_means"] = stat_columns(layer_means, a.options);
  py::dict overall = stat_columns({&a.overall}, a.options);
  py::dict overall_scalars;
  for (auto item : overall) overall_scalars[item.first] = item.second.attr("item")(0);
  out["overall"] = overall_scalars;
  std::vector<int64_t> la, lb;
  std::vector<double> sp, spn;
  for (const CrossLayerPair& p : a.cross_layer) {
    la.push_back(p.layer_a);
    lb.push_back(p.layer_b);
    sp.push_back(p.spearman);
    spn.push_back(p.spearman_normalised);
  }
  py::dict cross;
  cross["layer_a"] = to_numpy(std::move(la));
  cross["layer_b"] = to_numpy(std::move(lb));
  cross["spearman"] = to_numpy(std::move(sp));
  cross["spearman_normalised"] = to_numpy(std::move(spn));
  out["cross_layer"] = cross;
  out["per_sequence"] = item_columns(a.items, a.options);
  std::vector<double> persistence;
  for (const StatRow& r : a.layer_means) persistence.push_back(r.persistence);
  out["persistence_weights"] = to_numpy(persistence_weights(persistence));
  return out;
}

py::dict analyze_rows(const py::object& attention, const AnalyzeOptions& o) {
  Rows rows = rows_of(attention);
  const AnalysisOptions options = analysis_options(o);
  std::vector<LayerAnalysis> items(1);
  {
    py::gil_scoped_release release;
    ArrayAttentionSource source(rows.array.data(), rows.n_heads, rows.n_tokens, rows.packed);
    items[0] = kvsim::analyze_rows(source, options);
  }
  py::dict out;
  out["lags"] = options.lags;
  out["n_tokens"] = rows.n_tokens;
  out["importance"] = to_numpy(std::move(items[0].importance));
  out["importance_normalised"] = to_numpy(std::move(items[0].importance_normalised));
  py::dict heads = item_columns(items, options);
  heads.attr("pop")("seq");
  heads.attr("pop")("layer");
  out["heads"] = heads;
  return out;
}

// The attention need over every step (kvsim analyze --need): per layer and mass the columns
// layer, p, count, mean, p95, max; per mass the budget holding the peak and each sequence's
// peak; per layer and mass the mean need at each step.
py::dict need(const Trace& trace, const std::vector<double>& masses, const std::string& rows,
              const std::vector<int>& sequences, const std::vector<int>& layers, int threads) {
  const auto held = trace.hold();
  NeedConfig config;
  for (double mass : masses)
    if (!(mass > 0 && mass <= 1)) bad_option("p", "'" + need_mass_text(mass) + "' is not an attention mass in (0, 1]");
  if (masses.empty()) bad_option("p", "no mass given");
  config.masses = masses;
  std::sort(config.masses.begin(), config.masses.end());
  config.masses.erase(std::unique(config.masses.begin(), config.masses.end()), config.masses.end());
  config.rows = parse_rows(rows);
  for (int i : sequences)
    if (i < 0) bad_option("seqs", "'" + std::to_string(i) + "' is not an integer >= 0");
  for (int i : layers)
    if (i < 0) bad_option("layers", "'" + std::to_string(i) + "' is not an integer >= 0");
  config.sequences = sequences;
  config.layers = layers;
  if (threads < 0) bad_option("threads", "must be >= 0");
  config.threads = threads;
  TraceNeed n;
  {
    py::gil_scoped_release release;
    n = trace_need(*held, config);
  }
  std::vector<int64_t> layer, count;
  std::vector<double> p, mean, p95, max;
  py::list step_mean;
  for (const LayerNeed& l : n.per_layer)
    for (size_t m = 0; m < n.masses.size(); ++m) {
      layer.push_back(l.layer);
      p.push_back(n.masses[m]);
      count.push_back(l.needs[m].count);
      mean.push_back(l.needs[m].mean);
      p95.push_back(l.needs[m].p95);
      max.push_back(l.needs[m].max);
      step_mean.append(to_numpy(std::vector<double>(l.step_mean[m])));
    }
  py::dict table;
  table["layer"] = to_numpy(std::move(layer));
  table["p"] = to_numpy(std::move(p));
  table["count"] = to_numpy(std::move(count));
  table["mean"] = to_numpy(std::move(mean));
  table["p95"] = to_numpy(std::move(p95));
  table["max"] = to_numpy(std::move(max));
  py::list budgets, peaks;
  for (size_t m = 0; m < n.masses.size(); ++m) {
    budgets.append(need_budget(n, m).text);
    peaks.append(to_numpy(std::vector<int64_t>(n.peak[m])));
  }
  py::dict out;
  out["layers"] = table;
  out["step_mean"] = step_mean;
  out["p"] = n.masses;
  out["budget"] = budgets;
  out["peak"] = peaks;
  out["sequences"] = n.sequences;
  out["tokens"] = n.tokens;
  return out;
}

}  // namespace

void bind_analysis(py::module_& m) {
  py::class_<AnalyzeOptions>(m, "_AnalyzeOptions")
      .def(py::init<>())
      .def_readwrite("lags", &AnalyzeOptions::lags)
      .def_readwrite("top_k", &AnalyzeOptions::top_k)
      .def_readwrite("min_positions", &AnalyzeOptions::min_positions)
      .def_readwrite("max_steps", &AnalyzeOptions::max_steps)
      .def_readwrite("samples", &AnalyzeOptions::samples)
      .def_readwrite("correlations", &AnalyzeOptions::correlations);
  m.def("_analyze", &analyze);
  m.def("_analyze_rows", &analyze_rows);
  m.def("_need", &need);
}

}  // namespace kvsim::python
