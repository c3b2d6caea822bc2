// llama2.c's model on the CPU: loading a checkpoint, the forward pass, greedy decoding.
// Reads top to bottom like llama2.c's run.c; matrix-vector products go through Eigen.
#include "kvsim/model/llama2.hpp"

#include <unistd.h>

#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <new>
#include <numeric>
#include <stdexcept>
#include <string>

#include "kvtrace/error.hpp"

namespace kvtrace {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;
using VectorMap = Eigen::Map<Eigen::VectorXf>;
using ConstVectorMap = Eigen::Map<const Eigen::VectorXf>;

constexpr std::int64_t kHeaderBytes = 7 * sizeof(std::int32_t);

// ---------------------------------------------------------------------------------------
// Loading

// Checks the header for values no real checkpoint has, before anything is allocated.
void validate(const Llama2Config& p, const std::string& path) {
  auto fail = [&](const std::string& what) {
    throw InputError(path, "", what + " (not a llama2.c legacy checkpoint?)");
  };
  auto in_range = [&](const char* name, int v, int hi) {
    if (v <= 0 || v > hi)
      fail(std::string("header field ") + name + " = " + std::to_string(v) + " is outside [1, " + std::to_string(hi) +
           "]");
  };
  in_range("dim", p.dim, 1 << 16);
  in_range("hidden_dim", p.hidden_dim, 1 << 18);
  in_range("n_layers", p.n_layers, 1 << 10);
  in_range("n_heads", p.n_heads, p.dim);
  in_range("n_kv_heads", p.n_kv_heads, p.n_heads);
  in_range("vocab_size", p.vocab_size, 1 << 22);
  in_range("seq_len", p.seq_len, 1 << 20);
  if (p.dim % p.n_heads != 0)
    fail("dim " + std::to_string(p.dim) + " is not a multiple of n_heads " + std::to_string(p.n_heads));
  if (p.n_heads % p.n_kv_heads != 0)
    fail("n_heads " + std::to_string(p.n_heads) + " is not a multiple of n_kv_heads " + std::to_string(p.n_kv_heads));
  if (p.head_dim() % 2 != 0) fail("head_dim " + std::to_string(p.head_dim()) + " is odd; RoPE needs pairs");
}

// Number of floats the header promises (all factors are bounded by validate()).
std::int64_t expected_floats(const Llama2Config& p) {
  const std::int64_t dim = p.dim, hidden = p.hidden_dim, layers = p.n_layers, kv_dim = p.kv_dim(), vocab = p.vocab_size;
  const std::int64_t per_layer = dim                        // rms_att
                                 + dim * dim                // wq
                                 + 2 * kv_dim * dim         // wk, wv
                                 + dim * dim                // wo
                                 + dim                      // rms_ffn
                                 + 3 * hidden * dim;        // w1, w2, w3
  std::int64_t n = vocab * dim + layers * per_layer + dim;  // + rms_final
  n += 2 * (std::int64_t{p.seq_len} * p.head_dim() / 2);    // freq_cis_real, freq_cis_imag
  if (!p.shared_classifier) n += vocab * dim;               // wcls
  return n;
}

// The memory the machine has: what an allocation larger than this would only get by swapping
// or by being killed when the pages are touched.
std::int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return std::numeric_limits<std::int64_t>::max();
  return static_cast<std::int64_t>(pages) * page_size;
}

std::string gib(std::int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  return text;
}

// Sizes `floats` to `count` values for the checkpoint at `path`, refusing what cannot fit in
// memory before touching it, and turning a refused allocation (an address-space limit, say)
// into the same one line.
void allocate_floats(std::vector<float>& floats, std::int64_t count, const std::string& path, const std::string& what) {
  const std::int64_t bytes = count * static_cast<std::int64_t>(sizeof(float));
  const std::string cannot = "cannot hold " + what + ": " + std::to_string(bytes) + " bytes (" + gib(bytes) + ")";
  const std::int64_t memory = physical_memory_bytes();
  if (bytes > memory) throw InputError(path, "", cannot + ", more than this machine's " + gib(memory) + " of memory");
  try {
    floats.resize(static_cast<std::size_t>(count));
  } catch (const std::bad_alloc&) {
    throw InputError(path, "", cannot + " could not be allocated");
  }
}

// A value that is not finite, as the error lines show it.
std::string shown(float value) { return std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf"; }

// A weight tensor as the checkpoint stores it; per_layer is 0 for a tensor outside the layers.
struct WeightTensor {
  const char* name;
  const float* data;
  std::int64_t count, per_layer;
};

// Index of the first NaN or infinity in data[0, count), or -1. A block's largest magnitude
// (as bits) is found without branches, which the compiler vectorises: the scan of a whole
// checkpoint costs a small share of reading it.
std::int64_t first_non_finite(const float* data, std::int64_t count) {
  constexpr std::int64_t kBlock = 4096;
  constexpr std::uint32_t kInfinity = 0x7f800000u;  // magnitudes at or above it are inf or NaN
  for (std::int64_t start = 0; start < count; start += kBlock) {
    const std::int64_t end = std::min(count, start + kBlock);
    std::uint32_t largest = 0;
    for (std::int64_t i = start; i < end; ++i)
      largest = std::max(largest, std::bit_cast<std::uint32_t>(data[i]) & 0x7fffffffu);
    if (largest < kInfinity) continue;
    for (std::int64_t i = start; i < end; ++i)
      if (!std::isfinite(data[i])) return i;
  }
  return -1;
}

// A NaN or infinite weight makes every logit NaN or every softmax degenerate, which the
// metrics would then report as numbers; such a checkpoint is refused where it is read.
void check_finite(const WeightTensor& tensor, const std::string& path) {
  const std::int64_t bad = first_non_finite(tensor.data, tensor.count);
  if (bad < 0) return;
  const std::string value = shown(tensor.data[bad]);
  std::string where = std::string("tensor ") + tensor.name;
  if (tensor.per_layer > 0)
    where += " (layer " + std::to_string(bad / tensor.per_layer) + ") holds " + value + " at index " +
             std::to_string(bad % tensor.per_layer);
  else
    where += " holds " + value + " at index " + std::to_string(bad);
  throw InputError(path, "", where + "; every weight must be finite");
}

}  // namespace

Llama2Model Llama2Model::load(const std::string& path) {
  std::error_code ec;
  const auto file_size = std::filesystem::file_size(path, ec);
  if (ec) throw InputError(path, "", "cannot read model checkpoint: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open model checkpoint");

  std::int32_t header[7];
  if (file_size < static_cast<std::uintmax_t>(kHeaderBytes) || !in.read(reinterpret_cast<char*>(header), sizeof header))
    throw InputError(path, "", "file too short for a llama2.c checkpoint header");
  if (header[0] == 0x616b3432)  // "ak42": llama2.c's version 1/2 exports
    throw InputError(path, "", "llama2.c version-1/2 export; only the legacy (version 0) format is supported");

  Llama2Model m;
  m.path_ = path;
  Llama2Config& p = m.config_;
  p.dim = header[0];
  p.hidden_dim = header[1];
  p.n_layers = header[2];
  p.n_heads = header[3];
  p.n_kv_heads = header[4];
  p.shared_classifier = header[5] > 0;
  p.vocab_size = header[5] == INT32_MIN ? 0 : std::abs(header[5]);
  p.seq_len = header[6];
  validate(p, path);

  const std::int64_t n_floats = expected_floats(p);
  const std::int64_t want_bytes = kHeaderBytes + n_floats * 4;
  if (static_cast<std::int64_t>(file_size) != want_bytes)
    throw InputError(path, "",
                     "file has " + std::to_string(file_size) + " bytes but its header (dim " + std::to_string(p.dim) +
                         ", " + std::to_string(p.n_layers) + " layers, vocab " + std::to_string(p.vocab_size) +
                         ") needs " + std::to_string(want_bytes));

  allocate_floats(m.data_, n_floats, path, "the weights");
  if (!in.read(reinterpret_cast<char*>(m.data_.data()), n_floats * 4))
    throw InputError(path, "", "could not read the weights");

  // Lay the weight pointers over the data, in llama2.c's memory_map_weights order, each
  // tensor the forward pass reads listed for the finiteness check.
  const std::int64_t dim = p.dim, hidden = p.hidden_dim, layers = p.n_layers, kv_dim = p.kv_dim(), vocab = p.vocab_size;
  const float* ptr = m.data_.data();
  std::vector<WeightTensor> tensors;
  auto take = [&](const char* name, std::int64_t n, std::int64_t per_layer = 0) {
    const float* at = ptr;
    ptr += n;
    if (name) tensors.push_back({name, at, n, per_layer});
    return at;
  };
  Weights& w = m.w_;
  w.token_embedding = take("token_embedding_table", vocab * dim);
  w.rms_att = take("rms_att_weight", layers * dim, dim);
  w.wq = take("wq", layers * dim * dim, dim * dim);
  w.wk = take("wk", layers * dim * kv_dim, dim * kv_dim);
  w.wv = take("wv", layers * dim * kv_dim, dim * kv_dim);
  w.wo = take("wo", layers * dim * dim, dim * dim);
  w.rms_ffn = take("rms_ffn_weight", layers * dim, dim);
  w.w1 = take("w1", layers * dim * hidden, dim * hidden);
  w.w2 = take("w2", layers * hidden * dim, hidden * dim);
  w.w3 = take("w3", layers * dim * hidden, dim * hidden);
  w.rms_final = take("rms_final_weight", dim);
  take(nullptr, std::int64_t{p.seq_len} * p.head_dim() / 2);  // freq_cis_real: unused, RoPE is computed
  take(nullptr, std::int64_t{p.seq_len} * p.head_dim() / 2);  // freq_cis_imag
  w.wcls = p.shared_classifier ? w.token_embedding : take("wcls", vocab * dim);
  for (const WeightTensor& tensor : tensors) check_finite(tensor, path);

  // RoPE table, with llama2.c's exact float expressions.
  const int head_size = p.head_dim(), pairs = head_size / 2;
  m.rope_cos_.resize(static_cast<std::size_t>(p.seq_len) * pairs);
  m.rope_sin_.resize(m.rope_cos_.size());
  for (int pos = 0; pos < p.seq_len; ++pos) {
    for (int i = 0; i < pairs; ++i) {
      const float freq = 1.0f / powf(10000.0f, static_cast<float>(2 * i) / static_cast<float>(head_size));
      const float val = static_cast<float>(pos) * freq;
      m.rope_cos_[static_cast<std::size_t>(pos) * pairs + i] = cosf(val);
      m.rope_sin_[static_cast<std::size_t>(pos) * pairs + i] = sinf(val);
    }
  }
  return m;
}

RopeMeta llama2_rope(const Llama2Config& config) {
  RopeMeta rope;
  rope.theta = 10000.0;
  rope.scaling_type = "none";
  rope.scaling_factor = 1.0;
  rope.rotary_dims = config.head_dim();
  rope.pairing = "interleaved";
  return rope;
}

// ---------------------------------------------------------------------------------------
// The forward pass

namespace {

// o = weight * (x / sqrt(mean(x^2) + 1e-5)); o may alias x. Returns mean(x^2) + 1e-5, which is
// not finite when x is not, or when x is finite but its squares overflow float32 (o is then 0).
float rmsnorm(float* o, const float* x, const float* weight, int size) {
  const float ss = ConstVectorMap(x, size).squaredNorm() / static_cast<float>(size) + 1e-5f;
  const float scale = 1.0f / std::sqrt(ss);
  VectorMap(o, size) = ConstVectorMap(weight, size).cwiseProduct(scale * ConstVectorMap(x, size));
  return ss;
}

// In place, over x[0..size).
void softmax(float* x, int size) {
  float max_val = x[0];
  for (int i = 1; i < size; ++i) max_val = std::max(max_val, x[i]);
  float sum = 0.0f;
  for (int i = 0; i < size; ++i) {
    x[i] = std::exp(x[i] - max_val);
    sum += x[i];
  }
  for (int i = 0; i < size; ++i) x[i] /= sum;
}

// xout[d] = W[d, n] @ x[n], W row-major.
void matmul(float* xout, const float* x, const float* w, int n, int d) {
  VectorMap(xout, d).noalias() = ConstMatrixMap(w, d, n) * ConstVectorMap(x, n);
}

// Rotates the pairs (2i, 2i+1) of each of n_heads heads in vec by position pos.
void rope(float* vec, int n_heads, int pos, const Llama2Model& m) {
  const int head_size = m.config().head_dim();
  for (int h = 0; h < n_heads; ++h) {
    float* v = vec + h * head_size;
    for (int i = 0; i < head_size / 2; ++i) {
      const float fcr = m.rope_cos(pos, i), fci = m.rope_sin(pos, i);
      const float v0 = v[2 * i], v1 = v[2 * i + 1];
      v[2 * i] = v0 * fcr - v1 * fci;
      v[2 * i + 1] = v0 * fci + v1 * fcr;
    }
  }
}

void check_positions(std::span<const int> positions, int pos) {
  for (std::size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] < 0 || positions[i] > pos || (i > 0 && positions[i] <= positions[i - 1]))
      throw std::invalid_argument("AttentionHook::allowed_positions: positions must be ascending within 0..pos");
  }
  if (positions.back() != pos)
    throw std::invalid_argument("AttentionHook::allowed_positions: positions must include the current position");
}

}  // namespace

Llama2Session::Llama2Session(const Llama2Model& model) : model_(&model) {
  const Llama2Config& p = model.config();
  const auto cache = static_cast<std::size_t>(p.n_layers) * p.seq_len * p.kv_dim();
  x_.resize(p.dim);
  xb_.resize(p.dim);
  xb2_.resize(p.dim);
  hb_.resize(p.hidden_dim);
  hb2_.resize(p.hidden_dim);
  q_.resize(p.dim);
  att_.resize(p.seq_len);
  full_att_.resize(p.seq_len);
  logits_.resize(p.vocab_size);
  allocate_floats(key_cache_, static_cast<std::int64_t>(cache), model.path(), "the key cache of a sequence");
  allocate_floats(value_cache_, static_cast<std::int64_t>(cache), model.path(), "the value cache of a sequence");
  all_positions_.resize(p.seq_len);
  std::iota(all_positions_.begin(), all_positions_.end(), 0);
}

// long: one step of the transformer in the order of llama2.c's forward(), layer by layer,
// so that it can be read against that reference line by line.
std::span<const float> Llama2Session::forward(int token, AttentionHook* hook) {
  const Llama2Model& m = *model_;
  const Llama2Config& p = m.config();
  const Llama2Model::Weights& w = m.weights();
  if (token < 0 || token >= p.vocab_size)
    throw std::out_of_range("token id " + std::to_string(token) + " outside the vocabulary [0, " +
                            std::to_string(p.vocab_size) + ")");
  if (pos_ >= p.seq_len)
    throw std::out_of_range("sequence longer than the model's seq_len " + std::to_string(p.seq_len));

  const int pos = pos_;
  const int dim = p.dim, hidden = p.hidden_dim, head_size = p.head_dim();
  const int kv_dim = p.kv_dim(), kv_mul = p.kv_mul();
  const float sqrt_head_size = std::sqrt(static_cast<float>(head_size));
  float* x = x_.data();
  float* xb = xb_.data();
  // A forward pass that leaves float32 would give NaN or uniform logits, which perplexity and
  // agreement would report as numbers: it stops here, naming the step.
  auto overflow = [&](const std::string& what) {
    return InputError(m.path(), "",
                      "position " + std::to_string(pos) + " (token " + std::to_string(token) + "): " + what +
                          "; the weights are finite but the forward pass overflows float32");
  };
  auto normalize = [&](float* out, const float* weight, int layer, const char* norm) {
    const float ss = rmsnorm(out, x, weight, dim);
    if (std::isfinite(ss)) return;
    const std::string where =
        layer < 0 ? std::string("the final RMSNorm") : "layer " + std::to_string(layer) + "'s " + norm + " RMSNorm";
    throw overflow("the hidden state at " + where + " has mean square " + shown(ss));
  };

  // The token's embedding.
  std::copy_n(w.token_embedding + static_cast<std::ptrdiff_t>(token) * dim, dim, x);

  for (int l = 0; l < p.n_layers; ++l) {
    const std::ptrdiff_t ld = static_cast<std::ptrdiff_t>(l) * dim;
    // Attention RMSNorm.
    normalize(xb, w.rms_att + ld, l, "attention");

    // q, k, v for this position; k and v go straight into the cache.
    const std::ptrdiff_t loff = static_cast<std::ptrdiff_t>(l) * p.seq_len * kv_dim;
    float* k = key_cache_.data() + loff + static_cast<std::ptrdiff_t>(pos) * kv_dim;
    float* v = value_cache_.data() + loff + static_cast<std::ptrdiff_t>(pos) * kv_dim;
    matmul(q_.data(), xb, w.wq + ld * dim, dim, dim);
    matmul(k, xb, w.wk + ld * kv_dim, dim, kv_dim);
    matmul(v, xb, w.wv + ld * kv_dim, dim, kv_dim);

    // RoPE on q and k.
    rope(q_.data(), p.n_heads, pos, m);
    rope(k, p.n_kv_heads, pos, m);
    if (hook)
      hook->on_qkv(l, pos, {q_.data(), q_.size()}, {k, static_cast<std::size_t>(kv_dim)},
                   {v, static_cast<std::size_t>(kv_dim)});

    // Multi-head attention, each query head over its allowed positions.
    const bool full_rows = hook && hook->wants_full_rows(l);
    for (int h = 0; h < p.n_heads; ++h) {
      const float* qh = q_.data() + h * head_size;
      const std::ptrdiff_t kv_off = loff + static_cast<std::ptrdiff_t>(h / kv_mul) * head_size;
      auto attend = [&](std::span<const int> over, float* att) {  // softmax of the scaled scores
        for (std::size_t j = 0; j < over.size(); ++j) {
          const float* kt = key_cache_.data() + kv_off + static_cast<std::ptrdiff_t>(over[j]) * kv_dim;
          float score = 0.0f;
          for (int i = 0; i < head_size; ++i) score += qh[i] * kt[i];
          att[j] = score / sqrt_head_size;
        }
        softmax(att, static_cast<int>(over.size()));
      };
      if (full_rows) {
        attend(std::span<const int>(all_positions_).first(pos + 1), full_att_.data());
        hook->on_full_row(l, h, pos, {full_att_.data(), static_cast<std::size_t>(pos) + 1});
      }
      std::span<const int> positions;
      if (hook) positions = hook->allowed_positions(l, h, pos);
      if (positions.empty())
        positions = std::span<const int>(all_positions_).first(pos + 1);
      else
        check_positions(positions, pos);
      const int n = static_cast<int>(positions.size());
      float* att = att_.data();
      attend(positions, att);
      if (hook) hook->on_attention(l, h, pos, positions, {att, static_cast<std::size_t>(n)});

      // Weighted sum of the values into xb.
      float* xbh = xb + h * head_size;
      std::fill_n(xbh, head_size, 0.0f);
      for (int j = 0; j < n; ++j) {
        const float* vt = value_cache_.data() + kv_off + static_cast<std::ptrdiff_t>(positions[j]) * kv_dim;
        const float a = att[j];
        for (int i = 0; i < head_size; ++i) xbh[i] += a * vt[i];
      }
    }

    // Output projection and residual.
    matmul(xb2_.data(), xb, w.wo + ld * dim, dim, dim);
    VectorMap(x, dim) += ConstVectorMap(xb2_.data(), dim);

    // FFN: w2(silu(w1 x) * w3 x), and residual.
    normalize(xb, w.rms_ffn + ld, l, "FFN");
    const std::ptrdiff_t lh = static_cast<std::ptrdiff_t>(l) * dim * hidden;
    matmul(hb_.data(), xb, w.w1 + lh, dim, hidden);
    matmul(hb2_.data(), xb, w.w3 + lh, dim, hidden);
    for (int i = 0; i < hidden; ++i) {
      float val = hb_[i];
      val *= 1.0f / (1.0f + std::exp(-val));  // silu
      hb_[i] = val * hb2_[i];
    }
    matmul(xb, hb_.data(), w.w2 + lh, hidden, dim);
    VectorMap(x, dim) += ConstVectorMap(xb, dim);
  }

  // Final RMSNorm and classifier.
  normalize(x, w.rms_final, -1, nullptr);
  matmul(logits_.data(), x, w.wcls, dim, p.vocab_size);
  const std::int64_t bad = first_non_finite(logits_.data(), p.vocab_size);
  if (bad >= 0) throw overflow("logit " + std::to_string(bad) + " is " + shown(logits_[static_cast<std::size_t>(bad)]));
  ++pos_;
  return logits_;
}

// ---------------------------------------------------------------------------------------
// Greedy decoding

int argmax(std::span<const float> values) {
  int best = 0;
  for (std::size_t i = 1; i < values.size(); ++i)
    if (values[i] > values[best]) best = static_cast<int>(i);
  return best;
}

std::vector<int> generate_greedy(const Llama2Model& model, std::vector<int> prompt_ids, int total_tokens,
                                 AttentionHook* hook) {
  const int seq_len = model.config().seq_len;
  if (prompt_ids.empty()) throw std::invalid_argument("generate_greedy: empty prompt");
  if (static_cast<int>(prompt_ids.size()) > seq_len)
    throw InputError("", "",
                     "prompt has " + std::to_string(prompt_ids.size()) + " tokens, more than the model's seq_len " +
                         std::to_string(seq_len));
  const std::size_t limit = static_cast<std::size_t>(
      std::max<std::ptrdiff_t>(std::min(total_tokens, seq_len), static_cast<std::ptrdiff_t>(prompt_ids.size())));

  Llama2Session session(model);
  std::vector<int> tokens = std::move(prompt_ids);
  tokens.reserve(limit);
  for (std::size_t pos = 0; pos < tokens.size(); ++pos) {
    const std::span<const float> logits = session.forward(tokens[pos], hook);
    if (pos + 1 < tokens.size()) continue;  // still in the prompt
    if (tokens.size() >= limit) break;
    const int next = argmax(logits);
    if (next == 1) break;  // BOS: run.c's end of sequence
    tokens.push_back(next);
  }
  return tokens;
}

}  // namespace kvtrace
