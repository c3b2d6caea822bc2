#include "kvsim/quant/quantized_layer.hpp"

#include <algorithm>

namespace kvsim {
namespace {

// Rows b_t = softmax over i <= t of scale * q_t . k_i with the keys a quantized cache stores:
// at step t the positions i < L(t) are read quantized and i >= L(t) at full precision
// (kvsim::full_precision is a suffix rule in i; L(t) <= t).
class QuantizedKeySource final : public kvtrace::AttentionSource {
 public:
  QuantizedKeySource(int64_t n_tokens, int head_dim, const std::vector<std::vector<float>>& queries,
                     const std::vector<std::vector<float>>& keys, const QuantTensorSpec& key, int residual,
                     int scale_bits, int group_size, kvtrace::SoftmaxOptions softmax)
      : n_tokens_(n_tokens),
        head_dim_(head_dim),
        queries_(queries),
        keys_(keys),
        key_(key),
        residual_(residual),
        group_size_(group_size),
        softmax_(softmax) {
    for (const auto& k : keys) {
      quantized_keys_.push_back(k);
      fake_quantize(quantized_keys_.back(), n_tokens, head_dim, key, scale_bits);
    }
  }
  int64_t n_tokens() const override { return n_tokens_; }
  int n_heads() const override { return static_cast<int>(queries_.size()); }
  void rows(int64_t first, int64_t count, kvtrace::RowBlock& block) override {
    const int64_t width = first + count;
    block.reshape(first, count, width, n_heads());
    scratch_.resize(static_cast<size_t>(count * width));
    for (int h = 0; h < n_heads(); ++h) {
      const auto kv = static_cast<size_t>(h / group_size_);
      kvtrace::qk_logits(queries_[static_cast<size_t>(h)].data(), keys_[kv].data(), head_dim_, first, count,
                         softmax_.scale, block.row_to_fill(h, first), block.stride);
      kvtrace::qk_logits(queries_[static_cast<size_t>(h)].data(), quantized_keys_[kv].data(), head_dim_, first, count,
                         softmax_.scale, scratch_.data(), width);
      for (int64_t t = first; t < width; ++t) {
        const int64_t exact_from = first_full_precision(t);
        const float* quantized = scratch_.data() + (t - first) * width;
        std::copy(quantized, quantized + exact_from, block.row_to_fill(h, t));
        kvtrace::causal_softmax_row(block.row_to_fill(h, t), t, softmax_);
      }
    }
  }

 private:
  int64_t first_full_precision(int64_t t) const {
    int64_t lo = 0, hi = t;  // full_precision(t, t) always holds
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (full_precision(key_, residual_, mid, t))
        hi = mid;
      else
        lo = mid + 1;
    }
    return lo;
  }

  int64_t n_tokens_;
  int head_dim_;
  const std::vector<std::vector<float>>& queries_;
  const std::vector<std::vector<float>>& keys_;
  std::vector<std::vector<float>> quantized_keys_;
  QuantTensorSpec key_;
  int residual_, group_size_;
  kvtrace::SoftmaxOptions softmax_;
  std::vector<float> scratch_;
};

}  // namespace

QuantizedLayer build_quantized_layer(const std::vector<QuantSpec>& specs, int64_t n_tokens, int head_dim,
                                     const std::vector<std::vector<float>>& queries,
                                     const std::vector<std::vector<float>>& keys,
                                     const std::vector<std::vector<float>>& values,
                                     const std::vector<CacheGroup>& groups, const kvtrace::SoftmaxOptions& softmax) {
  QuantizedLayer layer;
  const int group_size = static_cast<int>(queries.size() / keys.size());
  for (const QuantSpec& spec : specs) {
    // Unquantized keys would give the true rows again; the source is still separate so each
    // view is self-contained (its cost is one more pass over the rows).
    layer.sources.push_back(std::make_unique<QuantizedKeySource>(n_tokens, head_dim, queries, keys, spec.key,
                                                                 spec.residual, spec.scale_bits, group_size, softmax));
    std::vector<QuantizedHead> stored;
    for (const auto& v : values) stored.emplace_back(v, n_tokens, head_dim, spec.value, spec.residual, spec.scale_bits);
    layer.values.push_back(std::move(stored));
  }
  for (size_t s = 0; s < specs.size(); ++s) {
    QuantizedView view;
    view.source = layer.sources[s].get();
    if (!values.empty())
      for (const CacheGroup& group : groups) {
        std::vector<const StoredValues*> heads;
        for (int head : group.heads) heads.push_back(&layer.values[s][static_cast<size_t>(head / group_size)]);
        view.values.push_back(std::move(heads));
      }
    layer.views.push_back(std::move(view));
  }
  return layer;
}

}  // namespace kvsim
