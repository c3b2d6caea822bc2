#include "replay_options.hpp"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>

#include "kvsim/analysis/analysis.hpp"
#include "kvsim/core/lists.hpp"
#include "kvsim/replay/report.hpp"
#include "kvtrace/atomic_file.hpp"
#include "kvtrace/reader.hpp"
#include "sweep_plot.hpp"

namespace kvsim::cli {

void add_replay_options(po::options_description& options, ReplayCliOptions& v) {
  options.add_options()("trace", po::value(&v.trace)->required(), "trace file (HDF5, schema v1)")(
      "param", po::value(&v.params)->composing(),
      "policy parameter key=value (sweep: policy.key=value, or key=value for every policy that takes it); repeatable")(
      "mode", po::value(&v.mode)->default_value(v.mode),
      "stream (every step is a decode step) or prefill (prompt at once, then compress to B)")(
      "question", po::value(&v.question),
      "prefill: the prompt's last N tokens are the question (N, or auto: the trace's question_len); the context "
      "before it is compressed to B, the question and answer tokens are kept")(
      "compress-every", po::value(&v.compress_every),
      "decode-time compression: the cache grows to B + N and is compressed back to B every N decode steps; "
      "N:absolute after the steps t with (t + 1) mod N = 0, the prompt counted (R-KV's phase)")(
      "threshold", po::value(&v.threshold),
      "evict by score, no budget (kvpress's DMSPress): at each eviction step every cached position outside the "
      "last --window whose score is below T goes; B only sets the policy's own parameters (scoring policies)")(
      "window", po::value(&v.window), "with --threshold: the last W positions are kept (default 128)")(
      "protect", po::value(&v.protect)->composing(),
      "KIND:N: the first and last N positions of every span of that kind are never evicted once cached; they "
      "count toward B and the policy evicts among the others (repeatable; traces with spans)")(
      "span-step", po::value(&v.span_step),
      "the step whose row span metrics measure (default: the question's first row; traces with spans)")(
      "aggregate", po::value(&v.aggregate)->default_value(v.aggregate),
      "how a GQA group's heads combine into the observed row: mean, max or sum")(
      "rows", po::value(&v.rows)->default_value(v.rows),
      "attention rows from: auto (stored attn if present, else q/k), attn or qk")(
      "output-error", po::value(&v.output_error)->default_value(v.output_error),
      "relative output error: auto (when v is present), on or off")("seqs", po::value(&v.sequences),
                                                                    "sequences to replay, e.g. 0,2,5 (default: all)")(
      "layers", po::value(&v.layers), "layers to replay, e.g. 0,1 (default: all)")(
      "quant", po::value(&v.quant),
      "KV quantization: presets flexgen4 (4-bit, groups of 64), kivi2 (2-bit, keys per channel, residual 128), or "
      "specs like int8, k4v2:g64, k2v2:g32:r128:kc; sweep: a comma list added to the unquantized grid")(
      "page", po::value(&v.page)->default_value(v.page),
      "evict whole pages of P consecutive positions (vLLM's blocks: 16) by the policy's scores; 0: single "
      "positions")("page-score", po::value(&v.page_score)->default_value(v.page_score),
                   "a page's score: mean or max of its positions' scores (with --page)")(
      "layer-budget", po::value(&v.layer_budget)->default_value(v.layer_budget),
      "per-layer schedule: uniform; persistence (more budget to layers with lower persistence, measured on the "
      "replayed sequences); pyramid[:beta=20][:window=32] (PyramidKV); cake[:tau1=1][:tau2=1][:window=32] (CAKE's "
      "layer preference, measured on the replayed sequences); or one weight per layer (w1,w2,...; normalised to "
      "mean 1)")(
      "head-budget", po::value(&v.head_budget)->default_value(v.head_budget),
      "across a layer's kv heads: uniform (each keeps B) or adaptive (Ada-KV: the heads share n_kv_heads x B by "
      "the policy's scores; scoring policies only)")(
      "head-floor", po::value(&v.head_floor)->default_value(v.head_floor, "0.2"),
      "adaptive: the share of B each kv head keeps of its own top scores")(
      "share", po::value(&v.share)->default_value(v.share),
      "one keep-set for several caches, so an evicted position is freed from all: none (each cache its own), "
      "layer (every kv head of a layer) or model (every layer of a sequence); scoring policies only")(
      "share-score", po::value(&v.share_score)->default_value(v.share_score),
      "how the scores of a shared set's caches combine per position: mean, max or sum (with --share)")(

      "pool", po::value(&v.pool)->default_value(v.pool),
      "one pool for a batch: the sequences, N at a time, share N x B per layer and kv head, the lowest scores "
      "across them going first (scoring policies only); 0: every sequence alone");
  add_threads_option(options, v.threads);
  add_progress_options(options);
  options.add_options()("csv", po::value(&v.csv), "write results as CSV")("json", po::value(&v.json),
                                                                          "write results as JSON")(
      "survival", po::value(&v.survival), "write per token, group and policy the step it was evicted (CSV; -1: kept)");
}

void apply_replay_options(const ReplayCliOptions& v, const kvtrace::TraceReader& reader, ReplayConfig& config) {
  ReplayRequest request;
  request.mode = v.mode;
  request.aggregate = v.aggregate;
  request.rows = v.rows;
  request.output_error = v.output_error;
  request.quant = v.quant;
  request.question = v.question;
  request.compress_every = v.compress_every;
  request.threshold = v.threshold;
  request.window = v.window;
  request.protect = v.protect;
  request.span_step = v.span_step;
  request.page = v.page;
  request.page_score = v.page_score;
  request.head_budget = v.head_budget;
  request.head_floor = v.head_floor;
  request.share = v.share;
  request.share_score = v.share_score;
  request.pool = v.pool;
  request.sequences = parse_indices("seqs", v.sequences);
  request.layers = parse_indices("layers", v.layers);
  request.threads = v.threads;
  apply_replay_request(request, config);
  set_layer_schedules(v.layer_budget, reader, config);
  config.keep_records = !v.survival.empty();
  plot_layout(v.plot_style);
  prepare_outputs({v.trace}, {v.csv, v.json, v.survival}, plot_files("plot", v.plot, parse_plot_metrics(v.plot_metric)));
}

void add_other_spelling(po::options_description& options, const std::string& other, const std::string& name) {
  options.add_options()(other.c_str(), po::value<std::string>(), ("the same as --" + name).c_str());
}

std::string either_spelling(const po::variables_map& vm, const std::string& name, const std::string& other,
                            const std::string& value) {
  if (!vm.count(other)) return value;
  if (!vm[name].defaulted())
    throw kvtrace::InputError("", "", "--" + name + " and --" + other + " are one option: give one of them");
  return vm[other].as<std::string>();
}

void warn_whole_sequence_budgets(const std::string& verb, const kvtrace::TraceReader& reader,
                                 const ReplayConfig& config) {
  if (config.threshold.on() || (config.split && config.split->rank() != 0)) return;
  int64_t shortest = 0, longest = 0;
  for (const int s : chosen_or_all(config.sequences, reader.n_sequences(), "sequence", reader.path())) {
    const int64_t n = reader.sequence(s).n_tokens;
    shortest = shortest == 0 ? n : std::min(shortest, n);
    longest = std::max(longest, n);
  }
  std::vector<std::string> whole;
  for (const Budget& budget : config.budgets)
    if (!budget.fraction && !budget.ratio && budget.tokens >= longest) whole.push_back(budget.text);
  if (whole.empty()) return;
  std::string list;
  for (const std::string& text : whole) list += (list.empty() ? "" : ", ") + text;
  std::cerr << "kvsim " << verb << ": warning: " << (whole.size() == 1 ? "budget " : "budgets ") << list
            << (whole.size() == 1 ? " is" : " are") << " at least the length of every sequence replayed ("
            << (shortest == longest ? "" : "at most ") << longest
            << " tokens): a cache of that many tokens holds the whole sequence\n";
}

void write_outputs(const ReplayCliOptions& v, const kvtrace::TraceReader& reader, const ReplayResults& results,
                   bool sweep) {
  if (!v.csv.empty()) kvtrace::write_file_atomically(v.csv, sweep ? sweep_csv(results) : layers_csv(results));
  if (!v.json.empty())
    kvtrace::write_file_atomically(v.json, results_json(results, reader.path(), reader.meta().model));
  if (!v.survival.empty()) {
    std::vector<std::vector<std::string>> text;
    for (int s = 0; s < reader.n_sequences(); ++s) text.push_back(reader.token_text(s));
    kvtrace::write_file_atomically(v.survival, survival_csv(results, text));
  }
#ifdef KVSIM_HAVE_PLOT  // else plot_files refused --plot up front
  if (!v.plot.empty()) {
    const std::vector<std::string> metrics = parse_plot_metrics(v.plot_metric);
    const std::vector<std::string> paths = plot_files("plot", v.plot, metrics);
    std::vector<kvtrace::FileContents> images;
    for (size_t m = 0; m < metrics.size(); ++m) {
      LinePlot plot = sweep_plot(results, reader.meta().model, metrics[m]);
      plot.layout = plot_layout(v.plot_style);
      images.push_back({paths[m], draw_line_plot(plot, plot_format(paths[m]))});
    }
    write_plot_files(images);
  }
#endif
}

}  // namespace kvsim::cli
