// The replay's options as the front ends (the CLI and the Python module) write them: policy
// parameters routed to the chosen policies, and the rest of a ReplayRequest.
#include <algorithm>
#include <map>

#include "kvsim/core/lists.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

[[noreturn]] void bad_option(const std::string& option, const std::string& problem) {
  throw kvtrace::InputError("", "", "--" + option + ": " + problem);
}

using Overrides = std::vector<std::map<std::string, std::string>>;

// Routes one parameter to the overrides of the policies it is for.
void route(const std::vector<std::string>& names, std::string key, const std::string& value, Overrides& overrides) {
  if (key.empty()) bad_option("param", "'=" + value + "' is not key=value");
  std::string target;
  const size_t dot = key.find('.');
  if (dot != std::string::npos) {
    target = canonical_policy_name(key.substr(0, dot));
    key = key.substr(dot + 1);
  }
  bool used = false;
  for (size_t p = 0; p < names.size(); ++p) {
    const PolicyInfo& info = find_policy(names[p]);
    const bool takes =
        std::any_of(info.params.begin(), info.params.end(), [&](const ParamSpec& s) { return s.name == key; });
    // With one policy every plain key goes to it, so an unknown one is named with the
    // parameters it does take.
    if (target.empty() ? takes || names.size() == 1 : names[p] == target) {
      overrides[p][key] = value;
      used = true;
    }
  }
  if (!used)
    bad_option("param", target.empty() ? "no chosen policy takes '" + key + "'"
                                       : "policy '" + target + "' is not among those chosen");
}

// The kvsim names of `given` (kvpress aliases resolved); one policy named twice is refused.
std::vector<std::string> canonical_names(const std::vector<std::string>& given) {
  std::vector<std::string> names;
  for (const std::string& name : given) {
    names.push_back(find_policy(name).name);
    for (size_t p = 0; p + 1 < names.size(); ++p)
      if (names[p] == names.back())
        bad_option("policies", "'" + given[p] + "' and '" + name + "' name one policy, " + names.back());
  }
  return names;
}

std::vector<PolicyChoice> choose(const std::vector<std::string>& names, const Overrides& overrides) {
  std::vector<PolicyChoice> out;
  for (size_t p = 0; p < names.size(); ++p) out.push_back(choose_policy(names[p], overrides[p]));
  return out;
}

// --question N or auto, --compress-every N (docs/semantics.md, section 2).
// A count of at least 1, as given to --option.
int64_t positive(const std::string& option, const std::string& text, const char* what) {
  if (text.empty() || text.size() > 12 || text.find_first_not_of("0123456789") != std::string::npos)
    bad_option(option, std::string("'").append(text).append("' is not ").append(what));
  const int64_t value = std::stoll(text);
  if (value < 1) bad_option(option, "must be at least 1");
  return value;
}

void apply_protocol(const ReplayRequest& request, ReplayConfig& config) {
  const QuestionOption question = question_of(request.question);
  config.question_auto = question.automatic;
  config.protocol.question = question.tokens;
  if ((config.protocol.question > 0 || config.question_auto) && config.mode != Mode::prefill)
    bad_option("question", "needs --mode prefill (the context is compressed at its end, before the question)");
  if (!request.compress_every.empty()) {
    // N, or N:absolute (R-KV's phase: the count starts at position 0, the prompt included).
    std::string steps = request.compress_every;
    const size_t colon = steps.find(':');
    if (colon != std::string::npos) {
      if (steps.substr(colon + 1) != "absolute")
        bad_option("compress-every", "'" + steps + "': expected N or N:absolute");
      steps.resize(colon);
      config.protocol.compress_counts_prompt = true;
    }
    config.protocol.compress_every = positive("compress-every", steps, "a step count");
  }
  config.threshold = parse_threshold(request.threshold, request.window);
  config.protect = parse_protection(request.protect);
  if (!request.span_step.empty())  // 0 counts: the first row is a row like any other
    config.span_step = request.span_step == "0" ? 0 : positive("span-step", request.span_step, "a step (0 or more)");
}

// --share with --share-score: one set per layer or per model evicts single positions from
// caches that each keep B, so neither pages nor head-adaptive budgets go with it.
void apply_share(const ReplayRequest& request, ReplayConfig& config) {
  config.share = parse_share(request.share);
  const std::map<std::string, Aggregate> scores = {
      {"mean", Aggregate::mean}, {"max", Aggregate::max}, {"sum", Aggregate::sum}};
  const auto score = scores.find(request.share_score);
  if (score == scores.end()) bad_option("share-score", "'" + request.share_score + "' is not mean, max or sum");
  config.share_score = score->second;
  if (config.share == Share::none) return;
  const std::string option = "--share " + request.share;
  if (config.paging.on())
    throw kvtrace::InputError("", "", option + " evicts single positions from every cache: it cannot run with --page");
  if (config.head_floor >= 0)
    throw kvtrace::InputError("", "", option + " keeps B per cache: it cannot run with --head-budget adaptive");
}

// Shared keep-sets, pools and the threshold protocol each take over a simulation's eviction:
// one at a time.
void refuse_mixed_couplings(const ReplayConfig& config) {
  const std::vector<std::pair<bool, const char*>> takers = {
      {config.share != Share::none, "--share"}, {config.pool > 0, "--pool"}, {config.threshold.on(), "--threshold"}};
  std::vector<const char*> on;
  for (const auto& [taken, option] : takers)
    if (taken) on.push_back(option);
  if (on.size() > 1)
    throw kvtrace::InputError(
        "", "", std::string(on[0]) + " and " + on[1] + " each decide which positions go: give one of them");
}

}  // namespace

QuestionOption question_of(const std::string& question) {
  if (question == "auto") return {0, true};
  if (question.empty()) return {};
  return {positive("question", question, "a token count or auto"), false};
}

std::vector<PolicyChoice> choose_policies(const std::vector<std::string>& given,
                                          const std::vector<std::pair<std::string, std::string>>& params) {
  const std::vector<std::string> names = canonical_names(given);
  Overrides overrides(names.size());
  for (const auto& [key, value] : params) route(names, key, value, overrides);
  return choose(names, overrides);
}

std::vector<PolicyChoice> choose_policies(const std::vector<std::string>& given,
                                          const std::vector<std::string>& assignments) {
  const std::vector<std::string> names = canonical_names(given);
  Overrides overrides(names.size());
  for (const auto& param : assignments) {
    const size_t equals = param.find('=');
    if (equals == std::string::npos || equals == 0) bad_option("param", "'" + param + "' is not key=value");
    route(names, param.substr(0, equals), param.substr(equals + 1), overrides);
  }
  return choose(names, overrides);
}

void check_policy_layers(const PolicyChoice& policy, int n_layers, const std::string& holder) {
  for (const ParamSpec& spec : policy.info->params) {
    if (spec.type != ParamType::index_set || spec.name != "layers" || !policy.params.has(spec.name)) continue;
    const std::string& text = policy.params.text(spec.name);
    if (text == "all") continue;
    const std::vector<int> layers = parse_index_list("policy " + policy.info->name + ": parameter layers", text);
    if (std::all_of(layers.begin(), layers.end(), [&](int layer) { return layer < n_layers; })) continue;
    throw kvtrace::InputError("", "",
                              "policy " + policy.info->name + ": parameter layers " + text + " names layers " + holder +
                                  " does not have (it has " + std::to_string(n_layers) +
                                  (n_layers == 1 ? ": 0)" : ": 0-" + std::to_string(n_layers - 1) + ")"));
  }
}

OutputErrorMode parse_output_error(const std::string& text) {
  if (text == "auto") return OutputErrorMode::automatic;
  if (text == "on") return OutputErrorMode::on;
  if (text == "off") return OutputErrorMode::off;
  bad_option("output-error", "'" + text + "' is not auto, on or off");
}

void apply_replay_request(const ReplayRequest& request, ReplayConfig& config) {
  config.mode = parse_mode(request.mode);
  config.aggregate = parse_aggregate(request.aggregate);
  config.rows = parse_rows(request.rows);
  config.output_error = parse_output_error(request.output_error);
  for (const auto& [option, indices] : {std::pair{"seqs", &request.sequences}, std::pair{"layers", &request.layers}})
    for (int i : *indices)
      if (i < 0) bad_option(option, std::string(1, '\'').append(std::to_string(i)).append("' is not an index"));
  config.sequences = request.sequences;
  config.layers = request.layers;
  if (request.threads < 0) bad_option("threads", "must be >= 0");
  config.threads = request.threads;
  if (!request.quant.empty()) config.quant = parse_quant_list(request.quant);
  apply_protocol(request, config);
  if (request.page < 0) bad_option("page", "must be >= 0 (0: token mode)");
  config.paging = {request.page, parse_page_score(request.page_score)};
  config.head_floor = head_floor_of(request.head_budget, request.head_floor, config.paging);
  if (request.pool < 0) bad_option("pool", "must be >= 0 (0: every sequence alone)");
  if (request.pool > 0 && config.paging.on())
    bad_option("pool", "a pool evicts single positions: it cannot run with --page");
  if (request.pool > 0 && config.head_floor >= 0)
    bad_option("pool", "a pool shares budgets across sequences: it cannot run with --head-budget adaptive");
  config.pool = request.pool;
  refuse_mixed_couplings(config);
  apply_share(request, config);
}

const char* share_name(Share share) {
  return share == Share::none ? "none" : share == Share::layer ? "layer" : "model";
}

Share parse_share(const std::string& text) {
  if (text == "none") return Share::none;
  if (text == "layer") return Share::layer;
  if (text == "model") return Share::model;
  bad_option("share", "'" + text + "' is not none, layer or model");
}

double head_floor_of(const std::string& head_budget, double head_floor, const Paging& paging) {
  if (!(head_floor >= 0 && head_floor <= 1)) bad_option("head-floor", "must be in [0, 1]");
  if (head_budget == "uniform") return -1;
  if (head_budget != "adaptive") bad_option("head-budget", "'" + head_budget + "' is not uniform or adaptive");
  if (paging.on())
    bad_option("head-budget", "adaptive allocates single positions across heads: it cannot run with --page");
  return head_floor;
}

}  // namespace kvsim
