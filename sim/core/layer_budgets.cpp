// Budgets that move across layers (docs/semantics.md, section 2): PyramidKV's linear
// schedule and CAKE's preference allocation, on the positions outside the window W; each
// layer's budget is its share plus W, so the layers' total is n_layers * B.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kvsim/core/budget.hpp"
#include "kvsim/core/lists.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

[[noreturn]] void bad_schedule(const std::string& problem) {
  throw kvtrace::InputError("", "", "--layer-budget: " + problem);
}

int64_t whole_option(const std::string& item, const std::string& key, int64_t minimum) {
  const std::string value = item.substr(key.size() + 1);
  char* end = nullptr;
  const long long parsed = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || parsed < minimum || parsed > 1000000000)
    bad_schedule("'" + item + "': " + key + " must be a whole number from " + std::to_string(minimum));
  return parsed;
}

}  // namespace

LayerSchedule pyramid_schedule(const std::string& text, int n_layers) {
  LayerSchedule schedule;
  schedule.name = text;
  schedule.kind = LayerSchedule::Kind::pyramid;
  schedule.n_layers = n_layers;
  size_t at = text.find(':');
  while (at != std::string::npos) {
    const size_t next = text.find(':', at + 1);
    const std::string item = text.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    if (item.rfind("beta=", 0) == 0)
      schedule.beta = whole_option(item, "beta", 1);
    else if (item.rfind("window=", 0) == 0)
      schedule.window = whole_option(item, "window", 0);
    else
      bad_schedule("'" + item + "' is not a pyramid option (beta=N, window=N)");
    at = next;
  }
  return schedule;
}

// KVCache-Factory pyramidkv/pyramidkv_utils.py, PyramidKVCluster.update_kv (L348-375): with
// C = B and the window W, min = (C - W) // beta and max = 2 (C - W) - min, capped at T - W (then
// min = 2 (C - W) - max); layer l gets the line from max (layer 0) to min (layer L - 1). The
// authors step by floor((max - min) / (L - 1)), which adds L r / 2 tokens over the layers
// (r = (max - min) mod (L - 1)); here each layer gets the exact line's value, rounded by
// largest remainder (ties: the lower layer), so the total is exactly L (C - W). Uniform when
// T < C (nothing compressed), T < 2 (C - W) (their every-layer-C branch), C <= W (they assert
// C > W) or L = 1.
std::vector<int64_t> pyramid_budgets(int64_t budget, int64_t tokens, int n_layers, int64_t beta, int64_t window) {
  const int64_t open = budget - window;
  if (open <= 0 || n_layers < 2 || tokens < budget || tokens < 2 * open) return {};
  int64_t low = open / beta, high = 2 * open - low;
  if (high >= tokens - window) {
    high = tokens - window;
    low = 2 * open - high;
  }
  const int64_t steps = n_layers - 1;
  std::vector<int64_t> out(static_cast<size_t>(n_layers)), remainder(static_cast<size_t>(n_layers));
  int64_t total = 0;
  for (int l = 0; l < n_layers; ++l) {
    const int64_t numerator = high * steps - l * (high - low);  // >= 0: high >= low
    out[static_cast<size_t>(l)] = numerator / steps;
    remainder[static_cast<size_t>(l)] = numerator % steps;
    total += numerator / steps;
  }
  std::vector<int> order(static_cast<size_t>(n_layers));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return remainder[static_cast<size_t>(a)] > remainder[static_cast<size_t>(b)]; });
  for (int64_t k = 0; k < static_cast<int64_t>(n_layers) * open - total; ++k) ++out[static_cast<size_t>(order[k])];
  return out;
}

// antgroup/cakekv cake/utils.py L21-67, step by step: cap, spread the capped excess over the
// layers under the cap (the remainder to the first of them), then add (or take) the
// difference to the total over the layers under the cap (above 1), the remainder likewise.
std::vector<int64_t> cake_adjust_budgets(std::vector<int64_t> budgets, int64_t total, int64_t cap) {
  auto spread = [&](const std::vector<char>& valid, int64_t amount, int64_t sign) {
    const int64_t count = std::count(valid.begin(), valid.end(), 1);
    if (count == 0) return;
    int64_t remainder = amount % count;
    for (size_t l = 0; l < budgets.size(); ++l) {
      if (!valid[l]) continue;
      budgets[l] += sign * (amount / count + (remainder > 0 ? 1 : 0));
      if (remainder > 0) --remainder;
    }
  };
  int64_t excess = 0;
  for (int64_t& b : budgets) {
    excess += std::max<int64_t>(b - cap, 0);
    b = std::min(b, cap);
  }
  std::vector<char> valid(budgets.size());
  if (excess > 0) {
    for (size_t l = 0; l < budgets.size(); ++l) valid[l] = budgets[l] < cap;
    spread(valid, excess, 1);
  }
  const int64_t difference = total - std::accumulate(budgets.begin(), budgets.end(), int64_t{0});
  if (difference != 0) {
    for (size_t l = 0; l < budgets.size(); ++l) valid[l] = difference > 0 ? budgets[l] < cap : budgets[l] > 1;
    spread(valid, std::abs(difference), difference > 0 ? 1 : -1);
  }
  return budgets;
}

// cake/cake_cache.py CakeprefillKVCache: nothing compressed when T <= C + W (L219; kvsim
// keeps C per layer there); layer budgets P_l / sum P * (C - W) L (L224), truncated to
// integers as numpy's int array does, adjusted (L226), each capped at T - W again (L241).
std::vector<int64_t> cake_budgets(std::span<const double> preference, int64_t budget, int64_t tokens, int64_t window) {
  const int64_t open = budget - window;
  if (open <= 0 || tokens <= budget + window || preference.empty()) return {};
  const double sum = std::accumulate(preference.begin(), preference.end(), 0.0);
  if (!(sum > 0) || !std::isfinite(sum)) return {};
  const auto n_layers = static_cast<int64_t>(preference.size());
  const int64_t total = open * n_layers;
  std::vector<int64_t> budgets;
  for (double p : preference) budgets.push_back(static_cast<int64_t>(p / sum * static_cast<double>(total)));
  budgets = cake_adjust_budgets(std::move(budgets), total, tokens - window);
  for (int64_t& b : budgets) b = std::min(b, tokens - window);
  return budgets;
}

std::vector<int64_t> LayerSchedule::layer_budgets(int64_t budget, int seq, int64_t tokens) const {
  std::vector<int64_t> open;
  if (kind == Kind::weights) {
    std::vector<int64_t> out;
    for (int l = 0; l < static_cast<int>(weights.empty() ? n_layers : weights.size()); ++l)
      out.push_back(apply(budget, l));
    return out;
  }
  if (kind == Kind::pyramid) open = pyramid_budgets(budget, tokens, n_layers, beta, window);
  if (kind == Kind::cake && seq >= 0 && static_cast<size_t>(seq) < preference.size())
    open = cake_budgets(preference[static_cast<size_t>(seq)], budget, tokens, window);
  if (open.empty()) return std::vector<int64_t>(static_cast<size_t>(n_layers), budget);
  for (int64_t& b : open) b = std::max<int64_t>(1, b + window);
  return open;
}

int64_t LayerSchedule::apply(int64_t budget, int layer, int seq, int64_t tokens) const {
  if (kind == Kind::weights) return apply(budget, layer);
  return layer_budgets(budget, seq, tokens)[static_cast<size_t>(layer)];
}

}  // namespace kvsim
