// dms: kvpress's DMSPress (NVIDIA/kvpress 8bb29b9, kvpress/presses/dms_press.py lines 88-120)
// over any scoring policy: at every eviction the schedule makes (each step in stream mode; the
// prompt's end, then each decode step, in prefill mode), every cached position outside the
// last `sliding_window_size` whose score (the wrapped policy's Policy::scores) is below
// `dms_threshold` goes; no budget caps the cache. The threshold protocol of section 2
// (--threshold, --window) as a policy: docs/semantics.md, sections 2 and 4.
#include <cmath>

#include "kvsim/core/threshold.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvtrace/error.hpp"
#include "wrapped.hpp"

namespace kvsim {
namespace {

class DMS final : public Wrapped {
 public:
  DMS(Factory make_inner, const Params& params) : Wrapped(std::move(make_inner), false) {
    threshold_.below = params.real("dms_threshold");
    threshold_.window = params.integer("sliding_window_size");
  }

  void evict(int64_t step, std::span<const int32_t> cache, int64_t, bool, std::vector<int32_t>& victims) override {
    if (!inner().scores(step, cache, scores_) || scores_.size() != cache.size())
      throw std::logic_error("a scoring policy gave no score per cached position");
    for (double score : scores_)
      if (std::isnan(score)) throw NanScore();
    threshold_keep(cache, scores_, threshold_, step, keep_);
    kept_.clear();
    for (size_t j : keep_) kept_.push_back(cache[j]);
    evict_all_but(cache, kept_, victims);
  }

 private:
  Threshold threshold_;
  std::vector<double> scores_;
  std::vector<size_t> keep_;
  std::vector<int32_t> kept_;
};

}  // namespace

WrapperInfo dms_wrapper() {
  WrapperInfo info;
  info.name = "dms";
  info.summary = "DMSPress: evict what scores below a threshold outside the recent window";
  info.press = "DMSPress";
  info.module = "dms_press";
  info.budgeted = false;
  info.params = {
      {"dms_threshold", ParamType::real, "", "T: a position outside the window goes when its score is below T (required)",
       -1e300, 1e300, {}},
      {"sliding_window_size", ParamType::integer, "128", "W: the last W positions are never evicted", 0, 1e9, {}},
  };
  info.make = [](Wrapped::Factory make_inner, const Params& own) -> std::unique_ptr<Policy> {
    if (!own.has("dms_threshold"))
      throw kvtrace::InputError("", "", "the dms wrapper needs its threshold: --param dms_threshold=T (kvpress's "
                                        "DMSPress has no default)");
    return std::make_unique<DMS>(std::move(make_inner), own);
  };
  return info;
}

}  // namespace kvsim
