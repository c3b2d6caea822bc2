#pragma once
// A CPU implementation of Karpathy's llama2.c model: its checkpoint format and its forward
// pass, one token at a time, with a hook into every attention computation. kvsim uses it to
// capture real attention traces (`kvsim capture`) and to run closed-loop evaluation, where
// the model attends only to what an eviction policy's cache holds (`kvsim eval`).
//
// Checkpoint: llama2.c's legacy (version 0) export, little-endian. Seven int32
// (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative
// vocab_size means an unshared classifier follows), then float32 weights in this order:
// token_embedding [vocab, dim], rms_att [layers, dim], wq [layers, dim, dim],
// wk [layers, kv_dim, dim], wv [layers, kv_dim, dim], wo [layers, dim, dim],
// rms_ffn [layers, dim], w1 [layers, hidden, dim], w2 [layers, dim, hidden],
// w3 [layers, hidden, dim], rms_final [dim], freq_cis_real and freq_cis_imag
// [seq_len, head_dim/2] each (unused: RoPE is computed), then wcls [vocab, dim] if unshared.
// Matrices are row-major [out, in]; kv_dim = n_kv_heads * head_dim.
//
// Math, as llama2.c's forward(): RMSNorm (eps 1e-5), RoPE (theta 10000, interleaved pairs:
// dims 2i, 2i+1 of each head rotated by pos * theta^(-2i/head_dim)), softmax attention with
// scale 1/sqrt(head_dim), grouped-query attention (query head h uses kv head
// h / (n_heads / n_kv_heads)), SwiGLU FFN w2(silu(w1 x) * w3 x), final RMSNorm, classifier.
#include <span>
#include <string>
#include <vector>

#include "kvtrace/schema.hpp"

namespace kvtrace {

struct Llama2Config {
  int dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0, seq_len = 0;
  bool shared_classifier = true;  // false: the file holds its own wcls
  int head_dim() const { return dim / n_heads; }
  int kv_dim() const { return n_kv_heads * head_dim(); }
  int kv_mul() const { return n_heads / n_kv_heads; }  // query heads per kv head
};

// The RoPE above as trace attributes: theta 10000, no scaling, rotary_dims = head_dim,
// interleaved pairs.
RopeMeta llama2_rope(const Llama2Config& config);

// Hook into every attention computation of a forward step. Called, for each layer in
// order: on_qkv once, then for each query head allowed_positions and on_attention.
struct AttentionHook {
  virtual ~AttentionHook() = default;
  // After q, k, v of the new position are computed (q and k after RoPE).
  // q is [n_heads * head_dim], k and v are [n_kv_heads * head_dim].
  virtual void on_qkv(int /*layer*/, int /*pos*/, std::span<const float> /*q*/, std::span<const float> /*k*/,
                      std::span<const float> /*v*/) {}
  // The positions query head `head` may attend to at step pos: ascending, each <= pos, the
  // last one pos itself. An empty span means all of 0..pos. The span must stay valid until
  // the next allowed_positions call: the head's values are summed over these positions after
  // on_attention returns. The softmax is then taken over exactly these
  // positions (this is how eviction changes the model). Violations throw std::logic_error.
  virtual std::span<const int> allowed_positions(int /*layer*/, int /*head*/, int /*pos*/) { return {}; }
  // The softmax row actually used, aligned with the positions attended.
  virtual void on_attention(int /*layer*/, int /*head*/, int /*pos*/, std::span<const int> /*positions*/,
                            std::span<const float> /*probs*/) {}
  // True when the hook wants, before allowed_positions, each head's full row: the softmax
  // over every position 0..pos, evicted ones included (what the row is before a cache masks
  // it). on_full_row then receives it; it is computed as the attended row is.
  virtual bool wants_full_rows(int /*layer*/) { return false; }
  virtual void on_full_row(int /*layer*/, int /*head*/, int /*pos*/, std::span<const float> /*probs*/) {}
};

class Llama2Model {
 public:
  // Reads the whole checkpoint into memory. Throws InputError(path, "", problem) for a
  // missing file, an implausible header, a size that does not match the header, weights
  // larger than the machine's memory (or an allocation refused), or a NaN or infinity in any
  // tensor the forward pass reads (named with its layer and index).
  static Llama2Model load(const std::string& path);

  Llama2Model(Llama2Model&&) noexcept = default;
  Llama2Model& operator=(Llama2Model&&) noexcept = default;
  Llama2Model(const Llama2Model&) = delete;  // the weight pointers point into data_
  Llama2Model& operator=(const Llama2Model&) = delete;

  const Llama2Config& config() const { return config_; }
  const std::string& path() const { return path_; }

  // Pointers into the loaded file (layer l of a per-layer array starts at l * its size).
  struct Weights {
    const float *token_embedding, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3, *rms_final, *wcls;
  };
  const Weights& weights() const { return w_; }

  // RoPE rotation for position pos and pair i (dims 2i, 2i+1 of a head), as llama2.c
  // computes it: cosf/sinf(pos * (1 / powf(10000, 2i / head_dim))).
  float rope_cos(int pos, int i) const { return rope_cos_[pos * (config_.head_dim() / 2) + i]; }
  float rope_sin(int pos, int i) const { return rope_sin_[pos * (config_.head_dim() / 2) + i]; }

 private:
  Llama2Model() = default;
  Llama2Config config_;
  std::string path_;
  std::vector<float> data_;  // every float after the header
  Weights w_{};
  std::vector<float> rope_cos_, rope_sin_;  // [seq_len, head_dim / 2]
};

// One sequence's state: the position reached and its own full K/V cache. The model must
// outlive the session. Sessions of one model may run in parallel threads.
class Llama2Session {
 public:
  // Throws InputError(model path, ...) when the key and value caches for seq_len positions
  // do not fit in memory.
  explicit Llama2Session(const Llama2Model& model);

  // Feeds token at position() and advances it. Returns the logits [vocab_size], valid until
  // the next call. Throws std::out_of_range for a token outside the vocabulary or when the
  // sequence would exceed seq_len, and InputError(model path, "", problem naming the position
  // and token) when a hidden state entering an RMSNorm has a sum of squares that is not
  // finite in float32 (an overflow, or NaN) or a logit is not finite: finite weights too
  // large for the forward pass.
  std::span<const float> forward(int token, AttentionHook* hook = nullptr);

  int position() const { return pos_; }
  void reset() { pos_ = 0; }  // start a new sequence (the cache is overwritten as it goes)
  const Llama2Model& model() const { return *model_; }

 private:
  const Llama2Model* model_;
  int pos_ = 0;
  // Activations, as llama2.c's RunState.
  std::vector<float> x_, xb_, xb2_, hb_, hb2_, q_, att_, full_att_, logits_;
  std::vector<float> key_cache_, value_cache_;  // [n_layers, seq_len, kv_dim]
  std::vector<int> all_positions_;              // 0, 1, ..., seq_len - 1
};

// Index of the largest value; ties go to the lowest index (llama2.c's sample_argmax).
int argmax(std::span<const float> values);

// Greedy decoding as llama2.c's run.c at temperature 0. Feeds the prompt, then the argmax
// of each step's logits, in one fresh session, until the sequence holds total_tokens tokens
// (clamped to seq_len; never fewer than the prompt) or the argmax is BOS (id 1), which run.c
// treats as the end of a story; that BOS is not appended. Returns prompt + generated ids;
// every returned token has been fed, so the hook has seen exactly positions
// 0..result.size()-1 (the logits after the last token are computed and discarded).
// Throws std::invalid_argument for an empty prompt and InputError("", "", ...) for a prompt
// longer than seq_len.
std::vector<int> generate_greedy(const Llama2Model& model, std::vector<int> prompt_ids, int total_tokens,
                                 AttentionHook* hook = nullptr);

}  // namespace kvtrace
