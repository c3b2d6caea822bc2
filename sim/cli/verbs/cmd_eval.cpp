// kvsim eval [MODEL] (--trace TRACE | --text FILE): closed-loop evaluation. The llama2.c
// model runs over fixed tokens with every head attending only to its cache, the policies
// deciding (kvsim/eval/eval.hpp); perplexity, its increase and top-1 agreement against the full
// cache (over every prediction and over the recall tokens), beside the teacher-forced replay's retention and output error on the same tokens,
// and how well the one predicts the other (Spearman).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

#include "../cli_common.hpp"
#include "kvsim/eval/eval.hpp"
#include "kvtrace/atomic_file.hpp"
#include "kvsim/model/llama2.hpp"
#include "kvtrace/reader.hpp"
#include "kvsim/model/tokenizer.hpp"
#include "../plot_options.hpp"
#include "../replay_options.hpp"
#ifdef KVSIM_HAVE_PLOT
#include "kvsim/plot/plot.hpp"
#endif

namespace kvsim::cli {
namespace {

namespace fs = std::filesystem;

// Keeps the chosen sequences (all when none is chosen), in the order given.
std::vector<EvalSequence> choose(std::vector<EvalSequence> all, const std::vector<int>& chosen,
                                 const std::string& source) {
  if (chosen.empty()) return all;
  std::vector<EvalSequence> out;
  for (int index : chosen) {
    if (index >= static_cast<int>(all.size()))
      throw kvtrace::InputError(
          source, "",
          "--seqs: sequence " + std::to_string(index) + " out of range (there are " + std::to_string(all.size()) + ")");
    out.push_back(all[static_cast<size_t>(index)]);
  }
  return out;
}

#ifdef KVSIM_HAVE_PLOT
void write_plot(const EvalResults& results, const std::string& model, const std::string& path,
                const PlotLayout& layout) {
  LinePlot plot;
  plot.layout = layout;
  plot.title = "Perplexity increase vs KV budget, closed loop: " + model;
  plot.subtitle = "the model attends only to each policy's cache; " + std::to_string(results.sequences) +
                  " sequences; full-cache perplexity " + std::to_string(results.full_perplexity).substr(0, 6);
  const bool all_fractions =
      std::all_of(results.cells.begin(), results.cells.end(), [](const EvalCell& c) { return c.budget.fraction; });
  plot.x_label = all_fractions ? "KV budget (% of sequence length)" : "KV budget (mean tokens)";
  plot.y_label = "perplexity increase over the full cache";
  plot.y_min = plot.y_max = 0;  // fit the data, from 0
  plot.y_from_zero = true;
  plot.x_floor = 0;
  if (all_fractions) plot.x_cap = 100;
  for (const EvalCell& cell : results.cells) {
    if (plot.series.empty() || plot.series.back().name != cell.policy) plot.series.push_back({cell.policy, {}, false, -1});
    const double x = all_fractions ? 100.0 * cell.budget_share_mean : cell.budget_tokens_mean;
    plot.series.back().points.emplace_back(x, cell.perplexity_increase);
  }
  render_line_plot(plot, path);
}

// The proxy itself: replay's mean retention against the closed loop's perplexity increase,
// one line per policy through its budgets.
void write_proxy_plot(const EvalResults& results, const std::string& model, const std::string& path,
                      const PlotLayout& layout) {
  LinePlot plot;
  plot.layout = layout;
  plot.title = "Replay retention vs closed-loop perplexity increase: " + model;
  char subtitle[160];
  std::snprintf(subtitle, sizeof subtitle, "one point per budget; Spearman over all %lld (policy, budget) pairs: %+.3f",
                static_cast<long long>(results.correlations.front().pairs), results.correlations.front().retention);
  plot.subtitle = subtitle;
  // Retention is a share from 0 to 1 here as in every table, CSV and plot of kvsim.
  plot.x_label = "mean attention-mass retention (teacher-forced replay)";
  plot.y_label = "perplexity increase over the full cache, closed loop";
  plot.y_min = plot.y_max = 0;
  plot.y_from_zero = true;
  plot.x_floor = 0;
  plot.x_cap = 1;
  for (const EvalCell& cell : results.cells) {
    if (plot.series.empty() || plot.series.back().name != cell.policy) plot.series.push_back({cell.policy, {}, false, -1});
    plot.series.back().points.emplace_back(cell.replay_retention.mean, cell.perplexity_increase);
  }
  for (PlotSeries& series : plot.series) std::sort(series.points.begin(), series.points.end());
  render_line_plot(plot, path);
}
#endif

// The values of eval's options, as the command line gives them.
struct EvalArgs {
  std::string model_path, tokenizer_path, trace_path, text_path, csv, json, plot, proxy_plot, seqs;
  std::string aggregate = "mean", page_score = "mean";
  int64_t page = 0;
  PlotCliOptions plot_style;
  std::string policies = kDefaultEvalPolicies, budgets = kDefaultEvalBudgets, ratios;
  std::vector<std::string> params, protect;
  int tokens = 0, threads = 0;
  int64_t compress_every = 0;
  std::string head_budget = "uniform", layer_budget = "uniform", question;
  double head_floor = 0.2;
  int64_t prompt_len = 0;
  int64_t recall_distance = kDefaultRecallDistance;
};

void add_eval_options(po::options_description& options, EvalArgs& a) {
  options.add_options()("model", po::value(&a.model_path),
                        "llama2.c checkpoint (default: stories15M.bin in $KVSIM_MODEL_DIR or ~/.cache/kvsim/models)")(
      "trace", po::value(&a.trace_path), "evaluate on the token sequences of this trace")(
      "text", po::value(&a.text_path),
      "evaluate on this text file, encoded with BOS and cut into sequences of --tokens")(
      "tokenizer", po::value(&a.tokenizer_path),
      "llama2.c tokenizer.bin for --text (default: tokenizer.bin next to the model)")(
      "policies", po::value(&a.policies)->default_value(a.policies),
      "comma-separated policies (bounds such as oracle cannot run a model)")(
      "budgets", po::value(&a.budgets)->default_value(a.budgets),
      "comma-separated budgets: tokens (64) or % of each sequence (20%)")(
      "compression-ratio", po::value(&a.ratios),
      "instead of --budgets, kvpress's compression ratios R (0.5,0.75; with --question): B = (1 - R) x the context")(
      "param", po::value(&a.params)->composing(),
      "policy parameter policy.key=value, or key=value for every policy that takes it; repeatable")(
      "seqs", po::value(&a.seqs), "sequences to evaluate, e.g. 0,2,5 (default: all)")(
      "tokens", po::value(&a.tokens)->default_value(0),
      "--trace: evaluate the first N tokens of each sequence (0: all); --text: tokens per sequence (0: the model's "
      "seq_len)")("aggregate", po::value(&a.aggregate)->default_value(a.aggregate),
                  "how a group's heads combine into the observed row: mean, max or sum")(
      "compress-every", po::value(&a.compress_every),
      "decode-time compression: the cache grows to B + N and is compressed back to B every N steps (closed loop "
      "and replay)")("page", po::value(&a.page)->default_value(a.page),
                     "evict whole pages of P consecutive positions by the policy's scores (0: single positions)")(
      "page-score", po::value(&a.page_score)->default_value(a.page_score), "a page's score: mean or max (with --page)")(
      "head-budget", po::value(&a.head_budget)->default_value(a.head_budget),
      "uniform, or adaptive: Ada-KV's head-adaptive budgets across a layer's kv heads (closed loop and replay)")(
      "head-floor", po::value(&a.head_floor)->default_value(a.head_floor),
      "with --head-budget adaptive: the share of B each kv head keeps of its own top scores")(
      "layer-budget", po::value(&a.layer_budget)->default_value(a.layer_budget),
      "per-layer budgets B_l, closed loop and replay: uniform; pyramid[:beta=20][:window=32] (PyramidKV); "
      "cake[:tau1=1][:tau2=1][:window=32] (CAKE) or persistence, measured on the full-cache run's rows of the "
      "evaluated sequences; or one weight per layer (w1,w2,...; normalised to mean 1)")(
      "question", po::value(&a.question),
      "the prompt's last N tokens are the question (N, or auto: the trace's question_len): the context before it "
      "runs with the full cache and is compressed to B, the question and answer tokens are kept; only the "
      "answer's predictions count")("prompt-len", po::value(&a.prompt_len),
                                    "with --question: each sequence's prompt is its first P tokens (default: the "
                                    "trace's prompt_len; --text needs it)")(
      "recall-distance", po::value(&a.recall_distance)->default_value(a.recall_distance),
      "recall tokens: predictions whose target last occurred more than D tokens earlier and that the full cache "
      "predicts; perplexity and top-1 over them")(
      "protect", po::value(&a.protect)->composing(),
      "KIND:N: the first and last N positions of every span of that kind (the trace's spans) are never evicted, "
      "closed loop and replay; they count toward B (repeatable)");
  add_threads_option(options, a.threads);
  add_progress_options(options);
  options.add_options()("csv", po::value(&a.csv), "write one row per (policy, budget) as CSV")(
      "json", po::value(&a.json), "write results, per-sequence values and correlations as JSON")(
      "plot", po::value(&a.plot),
      "draw perplexity increase vs budget, one line per policy: F.png or F.svg, or a directory (no extension) that "
      "gets perplexity.png")("proxy-plot", po::value(&a.proxy_plot),
                             "draw closed-loop perplexity increase vs replay retention: F.png or F.svg, or a "
                             "directory (no extension) that gets proxy.png");
  add_plot_options(options, a.plot_style);
}

// The run's settings from the options; throws InputError for a bad one.
EvalConfig eval_config(const EvalArgs& a, const po::variables_map& vm) {
  if (a.trace_path.empty() == a.text_path.empty())
    bad_option("trace", "give exactly one of --trace TRACE and --text FILE");
  if (a.tokens < 0) bad_option("tokens", "must be >= 0");
  if (a.threads < 0) bad_option("threads", "must be >= 0");
  EvalConfig config;
  config.policies = choose_policies(split_names("policies", a.policies), a.params);
  if (config.policies.empty()) bad_option("policies", "no policy given");
  for (const PolicyChoice& policy : config.policies) check_closed_loop_policy(*policy.info);
  config.budgets = chosen_budgets(vm, "budgets", a.budgets, a.ratios, true);
  config.aggregate = parse_aggregate(a.aggregate);
  if (vm.count("compress-every") && a.compress_every < 1) bad_option("compress-every", "must be at least 1");
  config.compress_every = a.compress_every;
  if (a.page < 0) bad_option("page", "must be >= 0 (0: token mode)");
  config.paging = {a.page, parse_page_score(a.page_score)};
  config.head_floor = head_floor_of(a.head_budget, a.head_floor, config.paging);
  config.layer_budget = a.layer_budget;
  const QuestionOption asked = question_of(a.question);
  config.question = asked.tokens;
  config.question_auto = asked.automatic;
  if (vm.count("prompt-len") && a.prompt_len < 1) bad_option("prompt-len", "must be at least 1");
  if (vm.count("prompt-len") && a.question.empty()) bad_option("prompt-len", "only means something with --question");
  if (a.recall_distance < 1) bad_option("recall-distance", "must be at least 1");
  config.recall_distance = a.recall_distance;
  config.protect = parse_protection(a.protect);
  config.threads = a.threads;
  return config;
}

// The trace's token sequences (the chosen ones), each checked against the model.
std::vector<EvalSequence> trace_sequences(const EvalArgs& a, const std::vector<int>& chosen,
                                          const kvtrace::Llama2Model& model) {
  const int seq_len = model.config().seq_len;
  const std::string model_name = fs::path(a.model_path).stem().string();
  std::vector<EvalSequence> sequences;
  const kvtrace::TraceReader reader = open_trace(a.trace_path);
  for (int s = 0; s < reader.n_sequences(); ++s) sequences.push_back(trace_sequence(reader, s, a.tokens));
  sequences = choose(std::move(sequences), chosen, a.trace_path);
  for (const EvalSequence& sequence : sequences) {
    const std::string where = kvtrace::seq_path(sequence.index) + "/tokens";
    if (static_cast<int>(sequence.tokens.size()) > seq_len)
      reader.fail(where, std::to_string(sequence.tokens.size()) + " tokens, more than the model's seq_len " +
                             std::to_string(seq_len) + " (use --tokens)");
    if (sequence.tokens.size() < 2) reader.fail(where, "fewer than 2 tokens: nothing to predict");
    for (int token : sequence.tokens)
      if (token < 0 || token >= model.config().vocab_size)
        reader.fail(where, "token id " + std::to_string(token) + " is outside the vocabulary of " + a.model_path);
  }
  if (reader.meta().model != model_name)
    std::cout << "note: the trace was recorded from " << reader.meta().model << "; " << model_name
              << " runs on its tokens (closed loop and replay alike)\n";
  return sequences;
}

// The text file encoded with BOS and cut into sequences (the chosen ones) of `tokens`, or of
// the model's seq_len. The tokenizer defaults to tokenizer.bin beside the model.
std::vector<EvalSequence> text_file_sequences(const EvalArgs& a, const std::vector<int>& chosen,
                                              const kvtrace::Llama2Model& model, bool model_given) {
  std::string tokenizer_path = a.tokenizer_path;
  if (tokenizer_path.empty())
    tokenizer_path = (model_given ? fs::path(a.model_path).parent_path() / "tokenizer.bin"
                                  : fs::path(default_model_dir()) / "tokenizer.bin")
                         .string();
  require_model_file(tokenizer_path, "tokenizer", "pass MODEL and --tokenizer");
  const kvtrace::Tokenizer tokenizer =
      kvtrace::Tokenizer::load_for_model(tokenizer_path, model.config().vocab_size, a.model_path);
  std::ifstream in(a.text_path, std::ios::binary);
  if (!in) throw kvtrace::InputError(a.text_path, "", "cannot open the text file");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<EvalSequence> sequences =
      text_sequences(tokenizer, text, a.tokens > 0 ? a.tokens : model.config().seq_len);
  if (sequences.empty() || text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw kvtrace::InputError(a.text_path, "", "no text to evaluate");
  return choose(std::move(sequences), chosen, a.text_path);
}

// evaluate with a progress bar; a sequence's problem (its prompt, question) names `source`.
EvalResults run_evaluation(const kvtrace::Llama2Model& model, const std::vector<EvalSequence>& sequences,
                           const EvalConfig& config, const std::string& source) {
  Progress progress("eval");
  try {
    return evaluate(model, sequences, config, progress.callback());
  } catch (const kvtrace::InputError& e) {
    if (!e.file().empty() || e.dataset().empty()) throw;
    throw kvtrace::InputError(source, e.dataset(), e.problem());
  }
}

// The output files first, so that a failed write is the only line printed, then the table.
void write_eval_outputs(const EvalResults& results, const EvalArgs& a, const std::string& source) {
  const std::string model_name = fs::path(a.model_path).stem().string();
  if (!a.csv.empty()) kvtrace::write_file_atomically(a.csv, eval_csv(results));
  if (!a.json.empty()) kvtrace::write_file_atomically(a.json, eval_json(results, source, a.model_path));
#ifdef KVSIM_HAVE_PLOT
  if (!a.plot.empty()) write_plot(results, model_name, a.plot, plot_layout(a.plot_style));
  if (!a.proxy_plot.empty()) write_proxy_plot(results, model_name, a.proxy_plot, plot_layout(a.plot_style));
#endif
  std::cout << model_name << " on " << source << "\n" << eval_table(results);
}

}  // namespace

int cmd_eval(const std::vector<std::string>& args) {
  EvalArgs a;
  po::options_description options("eval options");
  add_eval_options(options, a);
  po::positional_options_description positional;
  positional.add("model", 1);
  po::variables_map vm;
  if (!parse_options("eval", "[MODEL] (--trace TRACE | --text FILE) [--policies a,b] [--budgets 20%,30%] [options]",
                     args, options, positional, vm))
    return 0;
  const EvalConfig config = eval_config(a, vm);
  const std::vector<int> chosen = parse_indices("seqs", a.seqs);
  plot_layout(a.plot_style);
  if (!a.plot.empty()) a.plot = plot_files("plot", a.plot, {"perplexity"}).front();  // the file to write
  if (!a.proxy_plot.empty()) a.proxy_plot = plot_files("proxy-plot", a.proxy_plot, {"proxy"}).front();
  prepare_outputs({a.trace_path, a.text_path, a.model_path, a.tokenizer_path}, {a.csv, a.json}, {a.plot, a.proxy_plot});

  if (a.model_path.empty()) a.model_path = (fs::path(default_model_dir()) / "stories15M.bin").string();
  require_model_file(a.model_path, "model checkpoint", "pass MODEL and --tokenizer");
  const kvtrace::Llama2Model model = kvtrace::Llama2Model::load(a.model_path);
  const int seq_len = model.config().seq_len;
  if (a.tokens > seq_len) bad_option("tokens", "must be at most the model's seq_len " + std::to_string(seq_len));

  const bool from_trace = !a.trace_path.empty();
  const std::string& source = from_trace ? a.trace_path : a.text_path;
  std::vector<EvalSequence> sequences =
      from_trace ? trace_sequences(a, chosen, model) : text_file_sequences(a, chosen, model, vm.count("model") > 0);
  if (a.prompt_len > 0)
    for (EvalSequence& sequence : sequences) sequence.prompt_len = a.prompt_len;
  if (!from_trace && !a.question.empty() && a.prompt_len == 0)
    bad_option("question", "--text has no prompt: give --prompt-len P");
  check_eval_protection(sequences, config, source);

  write_eval_outputs(run_evaluation(model, sequences, config, source), a, source);
  return 0;
}

}  // namespace kvsim::cli
