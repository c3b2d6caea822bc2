// kvsim._kvsim, the closed loop: kvsim.eval() is the document `kvsim eval --json` writes,
// PROXY_MEASURES and PROXY_TARGETS the keys of its proxy table, in order,
// computed by the library's evaluate (kvsim/eval/eval.hpp) on a trace's token sequences, as
// the CLI computes it (off the calling thread, so Ctrl-C stops it: run_interruptibly; Python
// policies take the GIL call by call).
#include <pybind11/stl.h>

#include "kvsim/eval/eval.hpp"
#include "kvsim/model/llama2.hpp"
#include "module.hpp"

namespace kvsim::python {
namespace {

py::object eval(const Trace& trace, const std::string& model_path, const std::vector<std::string>& policy_names,
                const std::vector<std::string>& budgets, const std::vector<std::pair<std::string, std::string>>& params,
                const std::vector<int>& seqs, int tokens, const std::string& aggregate, int threads,
                const std::string& layer_budget, const std::string& question, int64_t prompt_len,
                int64_t recall_distance, const std::vector<std::string>& protect) {
  const auto held = trace.hold();
  const kvtrace::TraceReader& reader = *held;
  EvalConfig config;
  if (policy_names.empty()) bad_option("policies", "no policy given");
  refuse_repeats("--policies", policy_names);
  config.policies = choose_policies(policy_names, params);
  for (const PolicyChoice& policy : config.policies) check_closed_loop_policy(*policy.info);
  if (budgets.empty()) bad_option("budgets", "no budget given");
  refuse_repeats("--budgets", budgets);
  for (const auto& budget : budgets) config.budgets.push_back(Budget::parse(budget));
  config.aggregate = parse_aggregate(aggregate);
  if (threads < 0) bad_option("threads", "must be >= 0");
  if (tokens < 0) bad_option("tokens", "must be >= 0");
  config.threads = threads;
  config.recall_distance = recall_distance;
  config.protect = parse_protection(protect);
  config.layer_budget = layer_budget;
  const QuestionOption asked = question_of(question);
  config.question = asked.tokens;
  config.question_auto = asked.automatic;
  if (prompt_len < 0) bad_option("prompt_len", "must be >= 0 (0: the trace's prompt_len)");
  std::vector<int> chosen = seqs;
  if (chosen.empty())
    for (int s = 0; s < reader.n_sequences(); ++s) chosen.push_back(s);
  std::vector<EvalSequence> sequences;
  for (int s : chosen) {
    if (s < 0 || s >= reader.n_sequences())
      bad_option("seqs", "sequence " + std::to_string(s) + " out of range (there are " +
                             std::to_string(reader.n_sequences()) + ")");
    sequences.push_back(trace_sequence(reader, s, tokens));
    if (prompt_len > 0) sequences.back().prompt_len = prompt_len;
  }
  check_eval_protection(sequences, config, reader.path());
  const PoliciesInUse in_use(config.policies);
  std::string json;
  run_interruptibly([&](const std::atomic<bool>& cancel) {
    const kvtrace::Llama2Model model = kvtrace::Llama2Model::load(model_path);
    config.cancel = &cancel;
    json = eval_json(evaluate(model, sequences, config), reader.path(), model_path);
  });
  return py::module_::import("json").attr("loads")(json);
}

}  // namespace

void bind_eval(py::module_& m) {
  m.def("_eval", &eval);
  m.attr("DEFAULT_EVAL_POLICIES") = list_tuple(kDefaultEvalPolicies);
  m.attr("DEFAULT_EVAL_BUDGETS") = list_tuple(kDefaultEvalBudgets);
  m.attr("DEFAULT_RECALL_DISTANCE") = kDefaultRecallDistance;
  std::vector<std::string> measures, targets;
  for (const ProxyAxis& measure : proxy_measures()) measures.emplace_back(measure.key);
  for (const ProxyAxis& target : proxy_targets()) targets.emplace_back(target.key);
  m.attr("PROXY_MEASURES") = py::tuple(py::cast(measures));
  m.attr("PROXY_TARGETS") = py::tuple(py::cast(targets));
}

}  // namespace kvsim::python
