#include "kvtrace/validate.hpp"

#include <algorithm>

#include "kvtrace/reader.hpp"

namespace kvtrace {

ValidationSummary validate_trace(const std::string& path, const std::function<void(int64_t, int64_t)>& progress) {
  return validate_trace(TraceReader(path), progress);
}

ValidationSummary validate_trace(const TraceReader& reader, const std::function<void(int64_t, int64_t)>& progress) {
  const TraceMeta& meta = reader.meta();
  ValidationSummary summary;
  summary.sequences = reader.n_sequences();
  const int64_t total = static_cast<int64_t>(reader.n_sequences()) * meta.n_layers;
  int64_t done = 0;
  // Attention rows are read in blocks of at most this many values.
  constexpr int64_t kBlockValues = int64_t{1} << 22;
  for (int seq = 0; seq < reader.n_sequences(); ++seq) {
    const SequenceMeta& sequence = reader.sequence(seq);
    summary.tokens += sequence.n_tokens;
    reader.tokens(seq);
    reader.token_text(seq);
    for (int layer = 0; layer < meta.n_layers; ++layer) {
      const LayerForm& form = reader.layer(seq, layer);
      for (Tensor tensor : {Tensor::q, Tensor::k, Tensor::v}) {
        if (!form.has(tensor)) continue;
        const int heads = tensor == Tensor::q ? meta.n_heads : meta.n_kv_heads;
        for (int head = 0; head < heads; ++head) {
          summary.values_checked += static_cast<int64_t>(reader.read_head(seq, layer, tensor, head).size());
          ++summary.heads_checked;
        }
      }
      if (form.has_attn) {
        for (int head = 0; head < meta.n_heads; ++head) {
          int64_t row = 0;
          while (row < sequence.n_tokens) {
            int64_t rows = 1;
            while (row + rows < sequence.n_tokens &&
                   packed_row_offset(row + rows + 1) - packed_row_offset(row) <= kBlockValues)
              ++rows;
            summary.values_checked += static_cast<int64_t>(reader.read_attn_rows(seq, layer, head, row, rows).size());
            row += rows;
          }
          ++summary.heads_checked;
        }
      }
      if (progress) progress(++done, total);
    }
  }
  return summary;
}

}  // namespace kvtrace
