#pragma once
// Trace schema v1 (docs/semantics.md, section 1): the in-memory description of a trace file.
#include <cstdint>
#include <string>
#include <vector>

namespace kvtrace {

inline constexpr const char* kFormatName = "kvtrace";
inline constexpr int kSchemaVersion = 1;

// Anything larger is refused before a byte is allocated.
struct Limits {
  static constexpr int64_t max_layers = 1024;
  static constexpr int64_t max_heads = 1024;
  static constexpr int64_t max_head_dim = 4096;
  static constexpr int64_t max_tokens = int64_t{1} << 20;
  static constexpr int64_t max_sequences = int64_t{1} << 20;
  static constexpr int64_t max_head_elements = int64_t{1} << 28;  // n_tokens * head_dim, one head
  static constexpr int64_t max_attn_tokens = int64_t{1} << 17;    // packed rows grow as n^2
  static constexpr int64_t max_spans = 4096;                       // per sequence
  static constexpr int64_t max_span_name_bytes = 256;              // a span's name or kind
};

enum class DType { f16, f32, f64 };
const char* dtype_name(DType dtype);

// The datasets a layer group may hold.
enum class Tensor { q, k, v, attn };
const char* tensor_name(Tensor tensor);

// How the model rotated q and k (optional root attributes rope_theta, rope_scaling_type,
// rope_scaling_factor, rotary_dims, rope_pairing): what a policy needs to un-rotate the
// stored post-RoPE keys or queries. A field not in the file stays empty or 0.
struct RopeMeta {
  double theta = 0.0;         // 0: not declared
  std::string scaling_type;   // "": not declared; "none", "linear", "dynamic", "yarn", "llama3", ...
  double scaling_factor = 0;  // 0: not declared (1 with scaling_type "none")
  int rotary_dims = 0;        // 0: not declared; else the first rotary_dims of head_dim are rotated
  // "": not declared; "interleaved": dims (2i, 2i+1) rotate together (llama2.c, GPT-J);
  // "half": dims (i, i + rotary_dims/2) (Hugging Face's rotate_half).
  std::string pairing;

  bool declared() const {
    return theta > 0 || !scaling_type.empty() || scaling_factor > 0 || rotary_dims > 0 || !pairing.empty();
  }
  // "theta=10000 scaling=none rotary_dims=48 pairing=interleaved", the declared fields only.
  std::string describe() const;
  // Calls field(name, value) for each declared field, as `kvsim info --json` and Python's
  // Trace.meta name them: theta, scaling_type, scaling_factor, rotary_dims, pairing.
  template <class Field>
  void for_each_declared(Field&& field) const {
    if (theta > 0) field("theta", theta);
    if (!scaling_type.empty()) field("scaling_type", scaling_type);
    if (scaling_factor > 0) field("scaling_factor", scaling_factor);
    if (rotary_dims > 0) field("rotary_dims", rotary_dims);
    if (!pairing.empty()) field("pairing", pairing);
  }
};

struct TraceMeta {
  std::string model;
  std::string source;
  std::string created;
  std::string tool;
  int version = kSchemaVersion;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  double attn_scale = 0.0;
  RopeMeta rope;

  int group_size() const { return n_heads / n_kv_heads; }
  int kv_head_of(int head) const { return head / group_size(); }
};

struct LayerForm {
  bool has_q = false, has_k = false, has_v = false, has_attn = false;
  DType q_dtype = DType::f32, k_dtype = DType::f32, v_dtype = DType::f32, attn_dtype = DType::f32;
  int sliding_window = 0;      // 0: none; else query t sees keys i with t - i < sliding_window
  double logit_softcap = 0.0;  // 0: none; else logits s -> cap * tanh(s / cap)

  bool has_qk() const { return has_q && has_k; }
  bool has(Tensor tensor) const;
  DType dtype(Tensor tensor) const;
  // The tensors and their dtypes, then the window and softcap when set, as kvsim info lists
  // them: "q:float16 k:float16 v:float16 attn:float32 window=4096".
  std::string describe() const;
};

// A named range of a sequence's tokens (optional group /seqs/<i>/spans): positions
// [start, end). The kind says what it is: system, context, evidence, needle, question, answer,
// or any other word; the name tells spans of one kind apart ("needle-2").
struct Span {
  std::string name, kind;
  int64_t start = 0, end = 0;
  bool operator==(const Span&) const = default;
};
// What is wrong with `span` in a sequence of n_tokens tokens, in words; empty when nothing is:
// 0 <= start < end <= n_tokens, a kind of 1..64 letters, digits, '_', '-' or '.', a name of
// 1..max_span_name_bytes bytes without control characters.
std::string span_problem(const Span& span, int64_t n_tokens);

struct SequenceMeta {
  int64_t n_tokens = 0;
  int64_t prompt_len = 0;
  int64_t question_len = -1;  // optional attribute: the prompt's last question_len tokens are a question; -1: none
  int64_t context_group = -1;  // optional attribute: sequences with one value share their context; -1: none
  bool has_token_text = false;
  std::vector<Span> spans;  // in the file's order; empty: none
  std::vector<LayerForm> layers;
};

inline int64_t packed_length(int64_t n_tokens) { return n_tokens * (n_tokens + 1) / 2; }
inline int64_t packed_row_offset(int64_t row) { return row * (row + 1) / 2; }

std::string seq_path(int seq);
std::string layer_path(int seq, int layer);
std::string tensor_path(int seq, int layer, Tensor tensor);

}  // namespace kvtrace
