// chunk: kvpress's ChunkPress (NVIDIA/kvpress 8bb29b9, kvpress/presses/chunk_press.py lines
// 65-79; FINCH) over any scoring policy. At the prompt's end (compress), with the cache's n
// positions and budget B: the cache cut into chunks of `chunk_length` positions from the
// first; chunk c, of n_c positions, scored alone (Wrapped::evict_from_set) keeps
// max(1, floor(n_c B / n)) of them, or floor(n_c B / n) where the ones of kvpress's max would
// take the cache past B. Every other eviction is the wrapped policy's own. docs/semantics.md,
// section 4.
#include <algorithm>

#include "kvsim/policies/registry.hpp"
#include "wrapped.hpp"

namespace kvsim {
namespace {

class Chunk final : public Wrapped {
 public:
  Chunk(Factory make_inner, const Params& params)
      : Wrapped(std::move(make_inner), true), length_(params.integer("chunk_length")) {}

  void evict(int64_t step, std::span<const int32_t> cache, int64_t excess, bool compress,
             std::vector<int32_t>& victims) override {
    if (!compress || excess <= 0) return Wrapped::evict(step, cache, excess, compress, victims);
    const auto n = static_cast<int64_t>(cache.size());
    const int64_t budget = n - excess;
    // kvpress's share per chunk, at least one position unless that passes the budget.
    int64_t at_least_one = 0;
    for (int64_t i = 0; i < n; i += length_) at_least_one += std::max<int64_t>(1, share(std::min(length_, n - i), budget, n));
    const bool floor_one = at_least_one <= budget;
    dropped_.clear();
    for (int64_t i = 0; i < n; i += length_) {
      const int64_t size = std::min(length_, n - i);
      const int64_t keep = floor_one ? std::max<int64_t>(1, share(size, budget, n)) : share(size, budget, n);
      evict_from_set(cache.subspan(static_cast<size_t>(i), static_cast<size_t>(size)), size - keep, dropped_);
    }
    std::sort(dropped_.begin(), dropped_.end());
    kept_.clear();
    std::set_difference(cache.begin(), cache.end(), dropped_.begin(), dropped_.end(), std::back_inserter(kept_));
    evict_all_but(cache, kept_, victims);
  }

 private:
  // floor(size B / n): the chunk's share of the budget.
  static int64_t share(int64_t size, int64_t budget, int64_t n) { return size * budget / n; }

  int64_t length_;
  std::vector<int32_t> kept_, dropped_;
};

}  // namespace

WrapperInfo chunk_wrapper() {
  WrapperInfo info;
  info.name = "chunk";
  info.summary = "ChunkPress: the prompt cut into chunks, each scored alone and kept to its share of B";
  info.press = "ChunkPress";
  info.module = "chunk_press";
  info.params = {{"chunk_length", ParamType::integer, "1024", "positions per chunk at the prompt's end", 1, 1e9, {}}};
  info.make = [](Wrapped::Factory make_inner, const Params& own) -> std::unique_ptr<Policy> {
    return std::make_unique<Chunk>(std::move(make_inner), own);
  };
  return info;
}

}  // namespace kvsim
