#include "kvtrace/validate.hpp"

#include <algorithm>

#include "kvtrace/attention_source.hpp"
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
      std::vector<std::vector<float>> keys;
      for (Tensor tensor : {Tensor::k, Tensor::q, Tensor::v}) {
        if (!form.has(tensor)) continue;
        const int heads = tensor == Tensor::q ? meta.n_heads : meta.n_kv_heads;
        for (int head = 0; head < heads; ++head) {
          std::vector<float> values = reader.read_head(seq, layer, tensor, head);
          summary.values_checked += static_cast<int64_t>(values.size());
          ++summary.heads_checked;
          if (tensor == Tensor::k)
            keys.push_back(std::move(values));
          else if (tensor == Tensor::q && form.has_k)  // rows recomputed from q and k must be finite
            check_scores_finite(reader, seq, layer, head, values, keys[static_cast<size_t>(meta.kv_head_of(head))]);
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
