#include "kvsim/core/threshold.hpp"

#include <cerrno>
#include <cstdlib>
#include <stdexcept>

#include "threshold_eviction.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

[[noreturn]] void bad_option(const std::string& option, const std::string& problem) {
  throw kvtrace::InputError("", "", "--" + option + ": " + problem);
}

}  // namespace

Threshold parse_threshold(const std::string& threshold, const std::string& window) {
  Threshold out;
  if (threshold.empty()) {
    if (!window.empty()) bad_option("window", "needs --threshold (the window the threshold spares)");
    return out;
  }
  char* end = nullptr;
  errno = 0;
  out.below = std::strtod(threshold.c_str(), &end);
  if (end != threshold.c_str() + threshold.size() || errno != 0 || !std::isfinite(out.below))
    bad_option("threshold", "'" + threshold + "' is not a finite number");
  out.window = kDefaultThresholdWindow;
  if (!window.empty()) {
    if (window.size() > 12 || window.find_first_not_of("0123456789") != std::string::npos)
      bad_option("window", "'" + window + "' is not a token count (0 or more)");
    out.window = std::stoll(window);
  }
  return out;
}

void threshold_keep(std::span<const int32_t> cache, std::span<const double> scores, const Threshold& threshold,
                    int64_t t, std::vector<size_t>& keep) {
  keep.clear();
  const int64_t first_spared = t + 1 - threshold.window;
  for (size_t j = 0; j < cache.size(); ++j)
    if (cache[j] >= first_spared || !(scores[j] < threshold.below)) keep.push_back(j);
}

void ThresholdEviction::check(const PolicyInfo& policy, const EngineOptions& options) {
  const std::string name = "policy " + policy.name;
  if (policy.engine == Engine::bound)
    throw kvtrace::InputError("", "", name + " picks a new cache at every step; --threshold needs a policy that keeps one");
  if (!policy.scoring)
    throw kvtrace::InputError("", "", name + " has no per-position scores; --threshold needs a scoring policy");
  if (options.paging.on())
    throw kvtrace::InputError("", "", "--threshold evicts single positions; it does not combine with --page");
  if (options.head_floor >= 0)
    throw kvtrace::InputError("", "",
                              "--threshold evicts each cache by its own scores; it does not combine with "
                              "--head-budget adaptive");
  if (policy.head_floor >= 0)
    throw kvtrace::InputError("", "",
                              name + " shares its budget across kv heads; --threshold evicts each cache by its own "
                                     "scores");
}

std::span<const size_t> ThresholdEviction::keep(int64_t t, const Policy& policy, const CacheState& cache,
                                                const Threshold& threshold) {
  const std::span<const int32_t> positions = cache.positions();
  if (!policy.scores(t, positions, scores_) || scores_.size() != positions.size())
    throw std::logic_error("a scoring policy gave no score per cached position");
  cache.mask_pinned(scores_);  // a protected position is never below T
  for (double score : scores_)
    if (std::isnan(score)) cache.refuse_nan_score(t);
  threshold_keep(positions, scores_, threshold, t, keep_);
  return keep_;
}

}  // namespace kvsim
