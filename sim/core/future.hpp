#pragma once
// The future a lookahead policy may see: attention each position will still receive.
#include <memory>

#include "kvsim/core/engine.hpp"

namespace kvsim {

// R_t[i] = sum over s > t of the group's aggregated full row a_s[i], from a pass over the
// source, summed from the last step backwards (exact order, double). Holds n(n+1)/2 doubles.
class PackedFuture final : public FutureAttention {
 public:
  PackedFuture(kvtrace::AttentionSource& source, const CacheGroup& group, Aggregate aggregate);
  std::span<const double> remaining(int64_t step) const override;

 private:
  std::unique_ptr<double[]> remaining_;  // packed by step, as the rows are
};

}  // namespace kvsim
