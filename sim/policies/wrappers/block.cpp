// block: kvpress's BlockPress (NVIDIA/kvpress 8bb29b9, kvpress/presses/block_press.py lines
// 63-92) over any scoring policy. At the prompt's end (compress), with the cache's n
// positions and budget B: kept = the first B; for each block of `block_size` positions after
// them, the wrapped policy, run on kept + block alone (Wrapped::evict_from_set), keeps B of
// them. Every other eviction is the wrapped policy's own. docs/semantics.md, section 4.
#include <algorithm>

#include "kvsim/policies/registry.hpp"
#include "wrapped.hpp"

namespace kvsim {
namespace {

class Block final : public Wrapped {
 public:
  Block(Factory make_inner, const Params& params) : Wrapped(std::move(make_inner), true), size_(params.integer("block_size")) {}

  void evict(int64_t step, std::span<const int32_t> cache, int64_t excess, bool compress,
             std::vector<int32_t>& victims) override {
    if (!compress || excess <= 0) return Wrapped::evict(step, cache, excess, compress, victims);
    const auto n = static_cast<int64_t>(cache.size());
    const int64_t budget = n - excess;
    kept_.assign(cache.begin(), cache.begin() + budget);
    for (int64_t i = budget; i < n; i += size_) {
      set_ = kept_;
      set_.insert(set_.end(), cache.begin() + i, cache.begin() + std::min(n, i + size_));
      dropped_.clear();
      evict_from_set(set_, static_cast<int64_t>(set_.size()) - budget, dropped_);
      std::sort(dropped_.begin(), dropped_.end());
      kept_.clear();
      std::set_difference(set_.begin(), set_.end(), dropped_.begin(), dropped_.end(), std::back_inserter(kept_));
    }
    evict_all_but(cache, kept_, victims);
  }

 private:
  int64_t size_;
  std::vector<int32_t> kept_, set_, dropped_;
};

}  // namespace

WrapperInfo block_wrapper() {
  WrapperInfo info;
  info.name = "block";
  info.summary = "BlockPress: the prompt compressed block by block (kept + each block scored alone)";
  info.press = "BlockPress";
  info.module = "block_press";
  info.params = {{"block_size", ParamType::integer, "128", "positions per block at the prompt's end", 1, 1e9, {}}};
  info.make = [](Wrapped::Factory make_inner, const Params& own) -> std::unique_ptr<Policy> {
    return std::make_unique<Block>(std::move(make_inner), own);
  };
  return info;
}

}  // namespace kvsim
