#include "layer_rows.hpp"

#include <algorithm>
#include <numeric>

#include "kvtrace/reader.hpp"
#include "kvtrace/schema.hpp"

namespace kvgui {
namespace {

// Serves some heads of shared LayerRows, the way kvtrace::PackedAttentionSource serves the
// rows it owns.
class SharedRowsSource final : public kvtrace::AttentionSource {
 public:
  SharedRowsSource(std::shared_ptr<const LayerRows> rows, std::vector<int> heads)
      : rows_(std::move(rows)), heads_(std::move(heads)) {}
  int64_t n_tokens() const override { return rows_->n_tokens(); }
  int n_heads() const override { return static_cast<int>(heads_.size()); }
  void rows(int64_t first, int64_t count, kvtrace::RowBlock& block) override {
    std::vector<const float*> heads;
    for (int head : heads_) heads.push_back(rows_->row(head, 0));
    block.view_packed(first, count, std::move(heads));  // read in place: rows_ outlives the block
  }

 private:
  std::shared_ptr<const LayerRows> rows_;
  std::vector<int> heads_;
};

}  // namespace

LayerRows::LayerRows(int seq, int layer, int64_t n_tokens, std::vector<std::vector<float>> packed_per_head)
    : seq_(seq), layer_(layer), n_tokens_(n_tokens), packed_(std::move(packed_per_head)) {}

std::shared_ptr<const LayerRows> LayerRows::load(const kvtrace::TraceReader& reader, int seq, int layer,
                                                 kvtrace::RowsFrom from) {
  const int n_heads = reader.meta().n_heads;
  std::vector<int> heads(static_cast<size_t>(n_heads));
  std::iota(heads.begin(), heads.end(), 0);
  const auto source = kvtrace::open_attention_source(reader, seq, layer, heads, from);
  const int64_t n = source->n_tokens();
  std::vector<std::vector<float>> packed(static_cast<size_t>(n_heads),
                                         std::vector<float>(static_cast<size_t>(kvtrace::packed_length(n))));
  kvtrace::RowBlock block;
  for (int64_t first = 0; first < n; first += kvtrace::kRowBlockSize) {
    const int64_t count = std::min(kvtrace::kRowBlockSize, n - first);
    source->rows(first, count, block);
    for (int h = 0; h < n_heads; ++h)
      for (int64_t t = first; t < first + count; ++t) {
        const float* row = block.row(h, t);
        std::copy(row, row + t + 1, packed[static_cast<size_t>(h)].data() + kvtrace::packed_row_offset(t));
      }
  }
  return std::make_shared<const LayerRows>(seq, layer, n, std::move(packed));
}

const float* LayerRows::row(int head, int64_t t) const {
  return packed_[static_cast<size_t>(head)].data() + kvtrace::packed_row_offset(t);
}

std::unique_ptr<kvtrace::AttentionSource> LayerRows::source(std::shared_ptr<const LayerRows> rows,
                                                            std::vector<int> heads) {
  return std::make_unique<SharedRowsSource>(std::move(rows), std::move(heads));
}

}  // namespace kvgui
