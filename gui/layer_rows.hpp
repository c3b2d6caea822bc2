#pragma once
// The attention rows of every query head of one layer of one sequence, read once through
// kvtrace (stored attn, or recomputed exactly from q and k by kvtrace's own source) and
// held packed in memory. Replays read them through AttentionSource views that share the
// rows without copying them, so moving the budget slider only re-runs the policy.
#include <cstdint>
#include <memory>
#include <vector>

#include "kvtrace/attention_source.hpp"

namespace kvtrace {
class TraceReader;
}

namespace kvgui {

class LayerRows {
 public:
  // Throws kvtrace::InputError.
  static std::shared_ptr<const LayerRows> load(const kvtrace::TraceReader& reader, int seq, int layer,
                                               kvtrace::RowsFrom from = kvtrace::RowsFrom::automatic);
  LayerRows(int seq, int layer, int64_t n_tokens, std::vector<std::vector<float>> packed_per_head);

  int seq() const { return seq_; }
  int layer() const { return layer_; }
  int64_t n_tokens() const { return n_tokens_; }
  int n_heads() const { return static_cast<int>(packed_.size()); }
  // a_t[0..t] of query head `head`.
  const float* row(int head, int64_t t) const;
  float at(int head, int64_t t, int64_t position) const { return row(head, t)[position]; }

  // A source over `heads` (query heads, in that order) that shares these rows; it keeps
  // them alive, so it may outlive the caller's pointer and be used on another thread.
  static std::unique_ptr<kvtrace::AttentionSource> source(std::shared_ptr<const LayerRows> rows,
                                                          std::vector<int> heads);

 private:
  int seq_, layer_;
  int64_t n_tokens_;
  std::vector<std::vector<float>> packed_;  // per head, row t at offset t(t+1)/2
};

}  // namespace kvgui
