#include "kvtrace/attention_source.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#ifdef __F16C__
#include <immintrin.h>
#endif

#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"

namespace kvtrace {

void RowBlock::reshape(int64_t first_row, int64_t rows, int64_t row_stride, int heads) {
  first = first_row;
  count = rows;
  stride = row_stride;
  n_heads = heads;
  data.resize(static_cast<size_t>(heads) * static_cast<size_t>(rows) * static_cast<size_t>(row_stride));
  packed.clear();
}

void RowBlock::view_packed(int64_t first_row, int64_t rows, std::vector<const float*> heads) {
  first = first_row;
  count = rows;
  stride = 0;
  n_heads = static_cast<int>(heads.size());
  data.clear();
  packed = std::move(heads);
}

PackedAttentionSource::PackedAttentionSource(int64_t n_tokens, std::vector<std::vector<float>> packed_per_head)
    : n_tokens_(n_tokens), packed_(std::move(packed_per_head)) {
  for (const auto& head : packed_)
    if (static_cast<int64_t>(head.size()) != packed_length(n_tokens_))
      throw InputError("", "attn",
                       "packed rows of a head must hold n(n+1)/2 = " + std::to_string(packed_length(n_tokens_)) +
                           " values, got " + std::to_string(head.size()));
}

void PackedAttentionSource::rows(int64_t first, int64_t count, RowBlock& block) {
  std::vector<const float*> heads;
  for (const auto& head : packed_) heads.push_back(head.data());
  block.view_packed(first, count, std::move(heads));  // read in place: the rows outlive the block
}

HeldHead::HeldHead(std::vector<float> values) {
#ifdef __F16C__
  std::vector<uint16_t> half(values.size());
  bool exact = true;
  size_t i = 0;
  for (; exact && i + 8 <= values.size(); i += 8) {
    const __m256 wide = _mm256_loadu_ps(values.data() + i);
    const __m128i narrow = _mm256_cvtps_ph(wide, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 back = _mm256_cvtph_ps(narrow);
    // Bitwise, so -0 and subnormals count as they are.
    exact = _mm256_movemask_ps(
                _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_castps_si256(wide), _mm256_castps_si256(back)))) == 0xff;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(half.data() + i), narrow);
  }
  for (; exact && i < values.size(); ++i) {
    half[i] = _cvtss_sh(values[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const float back = _cvtsh_ss(half[i]);
    exact = std::memcmp(&back, &values[i], sizeof back) == 0;
  }
  if (exact) {
    halves = std::move(half);
    return;
  }
#endif
  floats = std::move(values);
}

QKAttentionSource::QKAttentionSource(int64_t n_tokens, int head_dim, std::vector<HeldHead> queries,
                                     std::vector<HeldHead> keys, std::vector<int> key_of, SoftmaxOptions options)
    : n_tokens_(n_tokens),
      head_dim_(head_dim),
      queries_(std::move(queries)),
      keys_(std::move(keys)),
      key_of_(std::move(key_of)),
      options_(options) {
  const auto size = static_cast<size_t>(n_tokens_) * static_cast<size_t>(head_dim_);
  if (key_of_.size() != queries_.size()) throw InputError("", "", "one key head per query head is needed");
  for (const auto& q : queries_)
    if (q.size() != size) throw InputError("", "q", "query head has the wrong size");
  for (const auto& k : keys_)
    if (k.size() != size) throw InputError("", "k", "key head has the wrong size");
  for (int index : key_of_)
    if (index < 0 || index >= static_cast<int>(keys_.size())) throw InputError("", "k", "no such key head");
}

namespace {

// A vector register of floats (GCC vector extension): the softmax below runs on these so it
// vectorises on any target: 8 lanes where AVX is enabled, else the baseline's 4 (SSE). The
// lane count fixes the order of the sums, so a build gives the same bits on every run.
#ifdef __AVX__
constexpr int kLanes = 8;
#else
constexpr int kLanes = 4;
#endif
using Floats = float __attribute__((vector_size(4 * kLanes)));
using Ints = int32_t __attribute__((vector_size(4 * kLanes)));
// The denominator's lanes, one Floats' worth, as two halves: a double vector of a whole
// Floats is wider than a register, and GCC keeps it in memory.
constexpr int kHalf = kLanes / 2;
using HalfFloats = float __attribute__((vector_size(4 * kHalf)));
using HalfDoubles = double __attribute__((vector_size(8 * kHalf)));

Floats load(const float* p) {
  Floats v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
void store(float* p, Floats v) { std::memcpy(p, &v, sizeof v); }
Floats splat(float x) { return Floats{} + x; }

// exp(x) for x <= 0: x = n ln2 + r with |r| <= ln2/2, exp(r) by Cephes' expf polynomial,
// 2^n from the exponent bits. Within 2 ulp of expf; below -87 it returns exp(-87).
Floats exp_nonpositive(Floats x) {
  x = x < splat(-87.0f) ? splat(-87.0f) : x;
  const Floats shifter = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const Floats n = (x * 1.44269504088896341f + shifter) - shifter;
  const Floats r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  Floats p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const Ints bits = (__builtin_convertvector(n, Ints) + 127) << 23;
  Floats scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

}  // namespace

void causal_softmax_row(float* row, int64_t t, const SoftmaxOptions& options) {
  const int64_t lo = options.sliding_window > 0 ? std::max<int64_t>(0, t - options.sliding_window + 1) : 0;
  std::fill(row, row + lo, 0.0f);
  float* begin = row + lo;
  const int64_t n = t + 1 - lo;
  if (options.logit_softcap > 0) {
    const auto cap = static_cast<float>(options.logit_softcap);
    for (int64_t i = 0; i < n; ++i) begin[i] = cap * std::tanh(begin[i] / cap);
  }
  // The tail is padded into a full vector of -inf, whose exp is 0.
  const int64_t full = n / kLanes * kLanes;
  float tail[kLanes];
  std::fill(tail, tail + kLanes, -INFINITY);
  std::copy(begin + full, begin + n, tail);
  Floats lane_max = load(tail);
  for (int64_t i = 0; i < full; i += kLanes) {
    const Floats v = load(begin + i);
    lane_max = v > lane_max ? v : lane_max;
  }
  float max = lane_max[0];
  for (int j = 1; j < kLanes; ++j) max = std::max(max, lane_max[j]);
  // The denominator in double: a float sum over thousands of entries drifts by ~1e-6.
  HalfDoubles low_sum{}, high_sum{};  // lanes 0..kHalf-1 and kHalf..kLanes-1
  auto add = [&](const float* stored) {
    HalfFloats low, high;
    std::memcpy(&low, stored, sizeof low);
    std::memcpy(&high, stored + kHalf, sizeof high);
    low_sum += __builtin_convertvector(low, HalfDoubles);
    high_sum += __builtin_convertvector(high, HalfDoubles);
  };
  for (int64_t i = 0; i < full; i += kLanes) {
    store(begin + i, exp_nonpositive(load(begin + i) - max));
    add(begin + i);
  }
  const Floats tail_exp =
      exp_nonpositive(load(tail) - max) * (load(tail) > splat(-INFINITY) ? splat(1.0f) : splat(0.0f));
  store(tail, tail_exp);
  add(tail);
  std::copy(tail, tail + (n - full), begin + full);
  double sum = 0;
  for (int j = 0; j < kHalf; ++j) sum += low_sum[j];
  for (int j = 0; j < kHalf; ++j) sum += high_sum[j];
  const auto inverse = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) begin[i] *= inverse;
}

namespace {

// The logits of rows [first, first + count) from those rows' queries ([count * head_dim]).
void block_logits(const float* block_queries, const float* keys, int head_dim, int64_t first, int64_t count,
                  double scale, float* out, int64_t stride) {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t width = first + count;
  Eigen::Map<const RowMajor> q(block_queries, count, head_dim);
  Eigen::Map<const RowMajor> k(keys, width, head_dim);
  Eigen::Map<RowMajor, 0, Eigen::OuterStride<>> logits(out, count, width, Eigen::OuterStride<>(stride));
  logits.noalias() = q * k.transpose();
  logits *= static_cast<float>(scale);
}

}  // namespace

void qk_logits(const float* queries, const float* keys, int head_dim, int64_t first, int64_t count, double scale,
               float* out, int64_t stride) {
  block_logits(queries + first * head_dim, keys, head_dim, first, count, scale, out, stride);
}

const float* QKAttentionSource::rows_of(const HeldHead& head, size_t d, int64_t first, int64_t count,
                                        std::vector<float>& widened) {
  if (!head.floats.empty()) return head.floats.data() + static_cast<size_t>(first) * d;
#ifdef __F16C__
  widened.resize(static_cast<size_t>(count) * d);
  const uint16_t* from = head.halves.data() + static_cast<size_t>(first) * d;
  size_t i = 0;
  for (; i + 8 <= widened.size(); i += 8)
    _mm256_storeu_ps(widened.data() + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i))));
  for (; i < widened.size(); ++i) widened[i] = _cvtsh_ss(from[i]);
#else
  (void)count;  // without F16C every head is held as float32 (HeldHead), returned above
#endif
  return widened.data();
}

void QKAttentionSource::rows(int64_t first, int64_t count, RowBlock& block) {
  const int64_t width = first + count;
  block.reshape(first, count, width, n_heads());
  const auto d = static_cast<size_t>(head_dim_);
  int widened_kv = -1;
  const float* keys = nullptr;
  for (int h = 0; h < n_heads(); ++h) {
    const int kv = key_of_[static_cast<size_t>(h)];
    if (kv != widened_kv) {  // query heads of one kv head are consecutive in GQA order
      keys = rows_of(keys_[static_cast<size_t>(kv)], d, 0, width, block_keys_);
      widened_kv = kv;
    }
    const float* queries = rows_of(queries_[static_cast<size_t>(h)], d, first, count, block_queries_);
    block_logits(queries, keys, head_dim_, first, count, options_.scale, block.row_to_fill(h, first), block.stride);
    for (int64_t t = first; t < width; ++t) causal_softmax_row(block.row_to_fill(h, t), t, options_);
  }
}

namespace {

// Streams stored attention rows from the file, one block at a time.
class StoredAttentionSource final : public AttentionSource {
 public:
  StoredAttentionSource(const TraceReader& reader, int seq, int layer, std::vector<int> heads)
      : reader_(reader), seq_(seq), layer_(layer), heads_(std::move(heads)), n_tokens_(reader.sequence(seq).n_tokens) {}
  int64_t n_tokens() const override { return n_tokens_; }
  int n_heads() const override { return static_cast<int>(heads_.size()); }
  void rows(int64_t first, int64_t count, RowBlock& block) override {
    block.reshape(first, count, first + count, n_heads());
    for (int h = 0; h < n_heads(); ++h) {
      const std::vector<float> packed =
          reader_.read_attn_rows(seq_, layer_, heads_[static_cast<size_t>(h)], first, count);
      const float* src = packed.data();
      for (int64_t t = first; t < first + count; ++t) {
        std::copy(src, src + t + 1, block.row_to_fill(h, t));
        src += t + 1;
      }
    }
  }

 private:
  const TraceReader& reader_;
  int seq_, layer_;
  std::vector<int> heads_;
  int64_t n_tokens_;
};

}  // namespace

void check_scores_finite(const TraceReader& reader, int seq, int layer, int head, std::span<const float> q,
                         std::span<const float> k) {
  constexpr double kOverflow = 1e38;
  const int d = reader.meta().head_dim;
  const double scale = reader.meta().attn_scale;
  const size_t n = q.size() / static_cast<size_t>(d);
  auto norm = [d](const float* x) {
    double sum = 0;
    for (int c = 0; c < d; ++c) sum += static_cast<double>(x[c]) * x[c];
    return std::sqrt(sum);
  };
  double q_max = 0, k_max = 0;
  for (size_t t = 0; t < n; ++t) {
    q_max = std::max(q_max, norm(q.data() + t * d));
    k_max = std::max(k_max, norm(k.data() + t * d));
  }
  if (q_max * k_max * scale < kOverflow) return;
  for (size_t t = 0; t < n; ++t)
    for (size_t s = 0; s <= t; ++s) {
      double score = 0;
      for (int c = 0; c < d; ++c) score += static_cast<double>(q[t * d + c]) * k[s * d + c];
      score *= scale;
      if (!(std::abs(score) < kOverflow)) {
        char value[32];
        std::snprintf(value, sizeof value, "%.3g", score);
        reader.fail(layer_path(seq, layer), "head " + std::to_string(head) + ": the score of step " +
                                                std::to_string(t) + " at position " + std::to_string(s) +
                                                " overflows float32 (attn_scale * q.k = " + value +
                                                "); its attention row would be NaN");
      }
    }
}

std::unique_ptr<AttentionSource> open_attention_source(const TraceReader& reader, int seq, int layer,
                                                       std::span<const int> heads, RowsFrom from) {
  const LayerForm& form = reader.layer(seq, layer);
  const TraceMeta& meta = reader.meta();
  for (int head : heads)
    if (head < 0 || head >= meta.n_heads)
      reader.fail(layer_path(seq, layer), "head " + std::to_string(head) + " out of range (the trace has " +
                                              std::to_string(meta.n_heads) + ")");
  const bool use_attn = from == RowsFrom::attn || (from == RowsFrom::automatic && form.has_attn);
  if (use_attn) {
    if (!form.has_attn)
      reader.fail(tensor_path(seq, layer, Tensor::attn), "missing dataset (rows from attn requested)");
    return std::make_unique<StoredAttentionSource>(reader, seq, layer, std::vector<int>(heads.begin(), heads.end()));
  }
  if (!form.has_qk()) reader.fail(layer_path(seq, layer), "cannot recompute attention: the layer has no q and k");
  // Each head is narrowed as soon as it is read: a float32 copy of the whole layer's queries
  // never exists (at 32k tokens and 32 heads it would be 512 MiB).
  std::vector<HeldHead> queries;
  std::vector<std::vector<float>> keys;
  std::vector<int> kv_heads, key_of;
  for (int head : heads) {
    std::vector<float> q = reader.read_head(seq, layer, Tensor::q, head);
    const int kv = meta.kv_head_of(head);
    auto found = std::find(kv_heads.begin(), kv_heads.end(), kv);
    if (found == kv_heads.end()) {
      kv_heads.push_back(kv);
      keys.push_back(reader.read_head(seq, layer, Tensor::k, kv));
      found = kv_heads.end() - 1;
    }
    key_of.push_back(static_cast<int>(found - kv_heads.begin()));
    check_scores_finite(reader, seq, layer, head, q, keys[static_cast<size_t>(key_of.back())]);
    queries.emplace_back(std::move(q));
  }
  std::vector<HeldHead> held_keys;
  for (auto& k : keys) held_keys.emplace_back(std::move(k));
  SoftmaxOptions options{meta.attn_scale, form.sliding_window, form.logit_softcap};
  return std::make_unique<QKAttentionSource>(reader.sequence(seq).n_tokens, meta.head_dim, std::move(queries),
                                             std::move(held_keys), std::move(key_of), options);
}

}  // namespace kvtrace
