#pragma once
// AttentionSource: the one interface the replay engine reads attention through. It yields
// the causal softmax rows a_t[0..t] of a set of query heads of one layer of one sequence,
// a block of consecutive steps at a time, either read from stored `attn` or recomputed
// exactly from post-RoPE q and k (softmax of attn_scale * q.k over 0..t, with the layer's
// sliding window and logit soft-cap). The engine never sees where the rows come from.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace kvtrace {

class TraceReader;

struct RowBlock {
  int64_t first = 0;   // step of the first row
  int64_t count = 0;   // rows in the block
  int64_t stride = 0;  // floats from one row to the next
  int n_heads = 0;
  std::vector<float> data;  // [n_heads][count][stride]; row t holds a_t[0..t], the rest undefined
  // Or, when not empty, the rows are read in place from where a source holds them: head h's
  // as a packed lower triangle (row t at t (t + 1) / 2), which `data` then does not copy.
  std::vector<const float*> packed;

  const float* row(int head, int64_t t) const {
    if (!packed.empty()) return packed[static_cast<size_t>(head)] + static_cast<size_t>(t * (t + 1) / 2);
    return data.data() + (static_cast<size_t>(head) * static_cast<size_t>(count) + static_cast<size_t>(t - first)) *
                             static_cast<size_t>(stride);
  }
  float* row_to_fill(int head, int64_t t) {  // the rows the block holds (reshape)
    return data.data() + (static_cast<size_t>(head) * static_cast<size_t>(count) + static_cast<size_t>(t - first)) *
                             static_cast<size_t>(stride);
  }
  void reshape(int64_t first_row, int64_t rows, int64_t row_stride, int heads);
  // Rows [first_row, first_row + rows) of packed triangles held elsewhere, one per head.
  void view_packed(int64_t first_row, int64_t rows, std::vector<const float*> heads);
};

class AttentionSource {
 public:
  virtual ~AttentionSource() = default;
  virtual int64_t n_tokens() const = 0;
  virtual int n_heads() const = 0;  // query heads served, in the order given at construction
  // Fills `block` with rows [first, first + count) of every served head.
  virtual void rows(int64_t first, int64_t count, RowBlock& block) = 0;
};

// Steps per block when streaming a head (fixed, so results never depend on scheduling).
inline constexpr int64_t kRowBlockSize = 64;

// Rows given in memory, one packed lower triangle per head (row t at offset t(t+1)/2).
class PackedAttentionSource final : public AttentionSource {
 public:
  PackedAttentionSource(int64_t n_tokens, std::vector<std::vector<float>> packed_per_head);
  int64_t n_tokens() const override { return n_tokens_; }
  int n_heads() const override { return static_cast<int>(packed_.size()); }
  void rows(int64_t first, int64_t count, RowBlock& block) override;

 private:
  int64_t n_tokens_;
  std::vector<std::vector<float>> packed_;
};

struct SoftmaxOptions {
  double scale = 1.0;
  int sliding_window = 0;      // 0: none
  double logit_softcap = 0.0;  // 0: none
};

// One head's [n_tokens * head_dim] rows as the source holds them: float16 when every value
// is one (a float16 trace's are), half the memory, widened again per block of rows (bit for
// bit the same values); else float32.
struct HeldHead {
  std::vector<float> floats;     // empty when held as float16
  std::vector<uint16_t> halves;  // empty when held as float32
  HeldHead() = default;
  HeldHead(std::vector<float> values);  // implicit: a head of values becomes the head held
  size_t size() const { return floats.empty() ? halves.size() : floats.size(); }
};

// Rows recomputed from queries and keys ([n_tokens * head_dim] row-major each); head i of
// the source uses queries[i] against keys[key_of[i]].
class QKAttentionSource final : public AttentionSource {
 public:
  QKAttentionSource(int64_t n_tokens, int head_dim, std::vector<HeldHead> queries, std::vector<HeldHead> keys,
                    std::vector<int> key_of, SoftmaxOptions options);
  int64_t n_tokens() const override { return n_tokens_; }
  int n_heads() const override { return static_cast<int>(queries_.size()); }
  void rows(int64_t first, int64_t count, RowBlock& block) override;

 private:
  // rows [first, first + count) of `head`, as float32: its own storage or `widened`.
  static const float* rows_of(const HeldHead& head, size_t d, int64_t first, int64_t count,
                              std::vector<float>& widened);

  int64_t n_tokens_;
  int head_dim_;
  // A query row is read once, for its own row of logits, a key row once per block of rows
  // (the widening costs ~1/128 of the block's products).
  std::vector<HeldHead> queries_, keys_;
  std::vector<float> block_queries_, block_keys_;
  std::vector<int> key_of_;
  SoftmaxOptions options_;
};

// In place over row[0..t]: logits -> causal softmax probabilities (entries before the
// sliding window become 0).
void causal_softmax_row(float* row, int64_t t, const SoftmaxOptions& options);

class TraceReader;
// Throws InputError naming the layer, head and step when a score attn_scale * q_t.k_s
// (s <= t) of query head `head` reaches 1e38, where float32 overflows and the softmax row
// would be NaN. q: [n, head_dim] of the head, k: of its kv head. Cheap when no score can
// be that large (the bound max|q| max|k| attn_scale is checked first).
void check_scores_finite(const TraceReader& reader, int seq, int layer, int head, std::span<const float> q,
                         std::span<const float> k);

// out[r * stride + i] = scale * q_{first+r} . k_i for r < count and i < first + count:
// the logits of rows [first, first + count) (queries and keys [n_tokens * head_dim]).
void qk_logits(const float* queries, const float* keys, int head_dim, int64_t first, int64_t count, double scale,
               float* out, int64_t stride);

enum class RowsFrom { automatic, attn, qk };

// Opens the rows of `heads` (query heads) of one layer of one sequence. automatic: stored
// attn when the layer has it, else recomputed from q and k. Throws InputError.
std::unique_ptr<AttentionSource> open_attention_source(const TraceReader& reader, int seq, int layer,
                                                       std::span<const int> heads, RowsFrom from = RowsFrom::automatic);

}  // namespace kvtrace
