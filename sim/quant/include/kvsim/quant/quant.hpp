#pragma once
// KV quantization (docs/semantics.md, section 3): fake-quantize keys and values with b
// bits per element in groups of G elements that share one scale and one zero point
// (asymmetric min-max), along the token (per-token) or along the channel (per-channel, as
// KIVI does for keys), with an optional full-precision residual window of the most recent
// tokens. A pure library: no files, no trace types; the replay engine calls it per kv head.
//
// Quantizing one group {x}: zero = min x, scale = (max x - min x) / (2^b - 1); both are
// rounded to float16 when scale_bits is 16 (as FlexGen and KIVI store them; 32 keeps them
// as float32); q = clamp(round_half_even((x - zero) / scale), 0, 2^b - 1); x' = zero + q * scale.
// A constant group (scale 0) reads back as its zero point, so it stays exact whenever the
// value is representable in the scale's format (always for float16 traces).
//
// Groups: per-token, G consecutive channels of one token (one head's head_dim elements; a
// group never spans tokens or heads, and the last group of a token is shorter when G does
// not divide head_dim, where FlexGen would pad). Per-channel, G consecutive token positions
// of one channel, aligned to multiples of G from position 0 (KIVI's grouping).
//
// Streaming semantics (which positions the attention at step t reads at full precision):
// the token t itself is always read at full precision (its k and v are computed in full and
// used before they are stored, as in FlexGen and KIVI). Besides it:
//   per-token tensors: the R most recent earlier positions, t - R <= i < t (KIVI's values:
//     a sliding window of R tokens, the oldest quantized as a new one arrives);
//   per-channel tensors: positions i >= C * floor(t / C) with C = R (or G when R = 0):
//     KIVI's keys, which collect R full-precision tokens and quantize them together once R
//     have accumulated, so between 0 and R - 1 earlier tokens are full precision. R must be
//     a multiple of G, so a group is only ever quantized once all its tokens exist.
// A quantized position's value does not depend on when it was quantized (its group is fixed),
// so one quantized copy of the whole sequence serves every step: QuantizedHead::row(i, t)
// picks the original or the quantized row. In prefill mode the prompt's own rows are computed
// before anything is stored, so they read full precision; the rule applies to decode steps.
// Quantization groups are formed over the full sequence's positions: evicting a token does
// not requantize its group (a system that compacts and requantizes is not modelled).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvsim/core/engine.hpp"

namespace kvsim {

enum class QuantAxis { per_token, per_channel };

// How one tensor (the keys or the values) is stored.
struct QuantTensorSpec {
  int bits = 0;  // 1..8; 0: kept at full precision
  int group = 64;
  QuantAxis axis = QuantAxis::per_token;
  bool quantized() const { return bits > 0; }
  bool operator==(const QuantTensorSpec&) const = default;
};

struct QuantSpec {
  std::string name = "none";  // the preset name, or the canonical text of a custom spec
  QuantTensorSpec key, value;
  int residual = 0;     // R: recent tokens kept at full precision (see above)
  int scale_bits = 16;  // bits of each stored scale and zero point: 16 (float16) or 32
  bool enabled() const { return key.quantized() || value.quantized(); }
  // Parses back to an equal spec: "none", or e.g. "k2v2:g32:r128:kc:vt".
  std::string canonical() const;
  // One human line, e.g. "4-bit k and v, groups of 64 per token, fp16 scale and zero".
  std::string describe() const;
};

// Presets: "none" (no quantization), "flexgen4" (4-bit k and v, groups of 64 along each
// token's head_dim, no residual: FlexGen's KV compression, what the Scissorhands paper
// combined with eviction) and "kivi2" (2-bit; keys per channel, values per token; groups of
// 32; residual 128; KIVI-2).
const std::vector<QuantSpec>& quant_presets();

// A preset name, or a custom spec (case-insensitive):
//   int<b>            keys and values at b bits (1..8), e.g. int8, int4
//   k<b>v<b>          keys and values at their own bits; 16 (or f) keeps one at full precision
// followed by options, each after a ':'
//   g<G>    group size, elements per scale/zero pair (default 64)
//   r<R>    full-precision residual window in tokens (default 0)
//   kc, kt  keys per channel / per token (default kt)
//   vc, vt  values per channel / per token (default vt)
//   s16, s32  scale and zero point stored as float16 (default) or float32
// e.g. "int8", "k4v2:g64", "k2v2:g32:r128:kc" (= kivi2), "int4:g128:s32".
// Throws InputError with the reason.
QuantSpec parse_quant(const std::string& text);
// Comma-separated specs (duplicates removed, order kept).
std::vector<QuantSpec> parse_quant_list(const std::string& text);

// Stored bits per element of one tensor, scales and zero points included: b + 2 * s / G for
// a quantized tensor (4-bit with an fp16 scale and zero per 64 values: 4.5), full_bits when
// it is not quantized. With head_dim > 0, per-token groups are counted as stored for that
// head_dim (ceil(head_dim / G) pairs per token and head: 4-bit, G = 64 over head_dim 48 is
// 4 + 32 / 48). The residual window is not included (it is a per-sequence constant of R
// tokens at full_bits; see stored_bits_per_element).
double bits_per_element(const QuantTensorSpec& tensor, int scale_bits, int head_dim = 0, int full_bits = 16);
// The mean of keys and values.
double bits_per_element(const QuantSpec& spec, int head_dim = 0, int full_bits = 16);
// Bits per element of a cache holding n_tokens positions of one head (keys and values),
// counting the residual window as min(n_tokens, R) tokens at full_bits.
double stored_bits_per_element(const QuantSpec& spec, int head_dim, int64_t n_tokens, int full_bits = 16);

// Whether the attention at step `step` reads `position` (<= step) of this tensor at full
// precision (see the streaming semantics above).
bool full_precision(const QuantTensorSpec& tensor, int residual, int64_t position, int64_t step);

// Fake-quantizes one head's tensor in place: data is [n_tokens * head_dim], token-major.
// Every position is quantized (the copy QuantizedHead reads for quantized positions).
void fake_quantize(std::span<float> data, int64_t n_tokens, int head_dim, const QuantTensorSpec& tensor,
                   int scale_bits = 16);
// The cache as it stands at the last step (step n_tokens - 1): positions that
// full_precision() keeps at that step stay exact, the rest are quantized. (With R = 0 and
// per-token groups that is every position but the last.)
void fake_quantize(std::vector<float>& data, int64_t n_tokens, int head_dim, int bits, int group, QuantAxis axis,
                   int residual, int scale_bits = 16);

// Relative error |x - x'| / |x| (L2 over the whole span); 0 when x is all zeros.
double relative_error(std::span<const float> original, std::span<const float> quantized);

// One kv head's keys or values [n_tokens, head_dim], with the quantized copy made once.
class QuantizedHead final : public StoredValues {
 public:
  QuantizedHead() = default;
  QuantizedHead(std::span<const float> data, int64_t n_tokens, int head_dim, const QuantTensorSpec& tensor,
                int residual, int scale_bits = 16);
  // The head_dim values the attention at `step` reads for `position` (position <= step).
  std::span<const float> row(int64_t position, int64_t step) const override;
  std::span<const float> original_row(int64_t position) const;
  std::span<const float> quantized_row(int64_t position) const;
  int64_t n_tokens() const { return n_tokens_; }
  int head_dim() const { return head_dim_; }

 private:
  QuantTensorSpec tensor_;
  int residual_ = 0;
  int64_t n_tokens_ = 0;
  int head_dim_ = 0;
  std::vector<float> original_, quantized_;
};

}  // namespace kvsim
