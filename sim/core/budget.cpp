#include "kvsim/core/budget.hpp"
#include "kvsim/core/lists.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

[[noreturn]] void bad(const std::string& text, const std::string& problem) {
  throw kvtrace::InputError("", "", "budget '" + text + "': " + problem);
}

bool all_digits(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; }

}  // namespace

Budget Budget::parse(const std::string& text) {
  Budget budget;
  budget.text = text;
  if (text.empty()) bad(text, "empty");
  if (text.rfind("ratio ", 0) == 0) return parse_ratio(text.substr(6));
  if (text.back() == '%') {
    const std::string number = text.substr(0, text.size() - 1);
    const size_t dot = number.find('.');
    const std::string whole = number.substr(0, dot);
    const std::string decimals = dot == std::string::npos ? "" : number.substr(dot + 1);
    if (!(all_digits(whole) || (whole.empty() && !decimals.empty())) ||
        (dot != std::string::npos && !all_digits(decimals)))
      bad(text, "not a percentage (write e.g. 20% or 12.5%)");
    if (whole.size() > 6 || decimals.size() > 6) bad(text, "too many digits");
    budget.fraction = true;
    budget.numerator = std::stoll(whole.empty() ? "0" : whole);
    budget.denominator = 100;
    for (char digit : decimals) {
      budget.numerator = budget.numerator * 10 + (digit - '0');
      budget.denominator *= 10;
    }
    if (budget.numerator <= 0) bad(text, "must be above 0%");
    if (budget.numerator > budget.denominator) bad(text, "must be at most 100%");
    return budget;
  }
  if (text[0] == '-') bad(text, "must be positive");
  if (!all_digits(text)) bad(text, "not a token count or a percentage (write e.g. 64 or 20%)");
  if (text.size() > 12) bad(text, "absurdly large");
  budget.tokens = std::stoll(text);
  if (budget.tokens <= 0) bad(text, "must be at least 1 token");
  return budget;
}

Budget Budget::parse_ratio(const std::string& r) {
  const size_t dot = r.find('.');
  const std::string whole = r.substr(0, dot);
  const std::string decimals = dot == std::string::npos ? "" : r.substr(dot + 1);
  if (!(all_digits(whole) || (whole.empty() && !decimals.empty())) ||
      (dot != std::string::npos && !all_digits(decimals)))
    throw kvtrace::InputError("", "", "--compression-ratio: '" + r + "' is not a number (write e.g. 0.5)");
  if (whole.size() > 6 || decimals.size() > 6)
    throw kvtrace::InputError("", "", "--compression-ratio: '" + r + "' has too many digits");
  Budget budget;
  budget.ratio = true;
  budget.text = "ratio " + r;
  budget.numerator = std::stoll(whole.empty() ? "0" : whole);
  for (char digit : decimals) {
    budget.numerator = budget.numerator * 10 + (digit - '0');
    budget.denominator *= 10;
  }
  if (budget.numerator >= budget.denominator)
    throw kvtrace::InputError("", "", "--compression-ratio: '" + r + "' must be in [0, 1)");
  return budget;
}

int64_t Budget::resolve(int64_t n_tokens) const { return resolve(n_tokens, n_tokens); }

int64_t Budget::resolve(int64_t n_tokens, int64_t compressed) const {
  if (ratio) return std::max<int64_t>(1, (denominator - numerator) * compressed / denominator);
  if (!fraction) return tokens;
  return std::max<int64_t>(1, numerator * n_tokens / denominator);
}

double Budget::share(int64_t n_tokens) const {
  if (ratio) return static_cast<double>(denominator - numerator) / static_cast<double>(denominator);
  return fraction ? static_cast<double>(numerator) / static_cast<double>(denominator)
                  : static_cast<double>(tokens) / static_cast<double>(n_tokens);
}

std::vector<Budget> parse_budgets(const std::string& comma_separated) {
  std::vector<Budget> out;
  for (const std::string& item : parse_name_list("--budgets", comma_separated)) out.push_back(Budget::parse(item));
  return out;
}

std::vector<Budget> parse_ratios(const std::string& comma_separated) {
  std::vector<Budget> out;
  for (const std::string& item : parse_name_list("--compression-ratio", comma_separated))
    out.push_back(Budget::parse_ratio(item));
  return out;
}

LayerSchedule LayerSchedule::from_weights(std::string name, std::vector<double> weights) {
  double mean = std::accumulate(weights.begin(), weights.end(), 0.0) / static_cast<double>(weights.size());
  if (!std::isfinite(mean)) {  // weights near the largest double: their sum overflows, their ratios do not
    const double largest = *std::max_element(weights.begin(), weights.end());
    for (double& w : weights) w /= largest;
    mean = std::accumulate(weights.begin(), weights.end(), 0.0) / static_cast<double>(weights.size());
  }
  for (double& w : weights) w /= mean;
  LayerSchedule schedule;
  schedule.name = std::move(name);
  schedule.n_layers = static_cast<int>(weights.size());
  schedule.weights = std::move(weights);
  return schedule;
}

LayerSchedule LayerSchedule::parse(const std::string& text, int n_layers) {
  if (text.empty() || text == "uniform") {
    LayerSchedule uniform;
    uniform.n_layers = n_layers;
    return uniform;
  }
  if (text == "pyramid" || text.rfind("pyramid:", 0) == 0) return pyramid_schedule(text, n_layers);
  std::vector<double> weights;
  for (const std::string& item : split_list("--layer-budget", text)) {
    char* end = nullptr;
    const double w = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !std::isfinite(w) || w <= 0)
      throw kvtrace::InputError("", "", "--layer-budget: '" + item + "' is not a positive weight");
    weights.push_back(w);
  }
  if (static_cast<int>(weights.size()) != n_layers)
    throw kvtrace::InputError(
        "", "",
        "--layer-budget: " + std::to_string(weights.size()) + " weights for " + std::to_string(n_layers) + " layers");
  return from_weights("list", std::move(weights));
}

int64_t LayerSchedule::apply(int64_t budget, int layer) const {
  if (weights.empty()) return budget;
  // The small epsilon keeps B * w from landing just under an integer it equals exactly.
  const double scaled = static_cast<double>(budget) * weights[static_cast<size_t>(layer)];
  return std::max<int64_t>(1, static_cast<int64_t>(std::floor(scaled + 1e-9)));
}

}  // namespace kvsim
