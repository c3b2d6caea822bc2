#include "kvtrace/synth.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <vector>

#include "kvtrace/attention_source.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/half.hpp"
#include "kvtrace/writer.hpp"

namespace kvtrace {
namespace {

constexpr double kPi = 3.14159265358979323846;

// splitmix64: a tiny counter-based generator, so any head can be generated on its own.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  double normal() {  // Box-Muller
    const double u = 1.0 - uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * kPi * uniform());
  }

 private:
  uint64_t state_;
};

uint64_t stream_seed(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0, uint64_t d = 0) {
  Rng mix(seed);
  uint64_t out = mix.next();
  for (uint64_t part : {a, b, c, d}) {
    Rng step(out ^ (part * 0xd1b54a32d192ed03ull));
    out = step.next();
  }
  return out;
}

enum Stream : uint64_t { kSequence = 1, kKvHead = 2, kQueryHead = 3, kValues = 4, kTokens = 5 };

const char* const kWords[] = {"the",  "a",     "little", "girl",  "boy",   "dog",    "cat",  "sun",   "sea",   "tree",
                              "ran",  "saw",   "was",    "happy", "big",   "red",    "home", "play",  "said",  "and",
                              "to",   "with",  "her",    "his",   "they",  "friend", "park", "ball",  "day",   "time",
                              "went", "found", "bird",   "sky",   "water", "mom",    "dad",  "named", "loved", "very",
                              ".",    ",",     "!",      "?",     "\"",    "of",     "in",   "on",    "one",   "small",
                              "blue", "green", "fish",   "box",   "cake",  "car",    "book", "door",  "tall",  "sad"};
constexpr int kWordCount = sizeof(kWords) / sizeof(kWords[0]);

// Per-sequence choices shared by every layer: the heavy-hitter candidates.
struct SequencePlan {
  std::vector<uint8_t> heavy;  // 1 where a position is a heavy hitter in most heads
};

SequencePlan plan_sequence(const SynthOptions& options, int seq) {
  Rng rng(stream_seed(options.seed, kSequence, static_cast<uint64_t>(seq)));
  SequencePlan plan;
  plan.heavy.assign(static_cast<size_t>(options.n_tokens), 0);
  for (auto& flag : plan.heavy) flag = rng.uniform() < 0.04 ? 1 : 0;
  return plan;
}

// The designed basis of a head's features (before a per-kv-head permutation and sign flip):
// dim 0 sink marker, dim 1 heavy-hitter marker, then rotary pairs for locality, then noise.
struct HeadLayout {
  int pairs;
  int noise_dims;
  explicit HeadLayout(int head_dim) {
    pairs = std::max(0, std::min(8, (head_dim - 2) / 4));
    noise_dims = head_dim - 2 - 2 * pairs;
  }
};

double pair_frequency(int p) { return 1.2 * std::pow(0.55, p); }

struct KvHeadData {
  std::vector<float> keys;  // [n * d], already permuted
  std::vector<int> permutation;
  std::vector<float> signs;
};

KvHeadData make_keys(const SynthOptions& options, const SequencePlan& plan, int seq, int layer, int kv_head,
                     double root_inverse_scale) {
  const int d = options.head_dim;
  const int64_t n = options.n_tokens;
  HeadLayout layout(d);
  Rng rng(stream_seed(options.seed, kKvHead, static_cast<uint64_t>(seq), static_cast<uint64_t>(layer),
                      static_cast<uint64_t>(kv_head)));
  KvHeadData out;
  out.permutation.resize(static_cast<size_t>(d));
  std::iota(out.permutation.begin(), out.permutation.end(), 0);
  for (int i = d - 1; i > 0; --i)
    std::swap(out.permutation[static_cast<size_t>(i)], out.permutation[rng.next() % static_cast<uint64_t>(i + 1)]);
  out.signs.resize(static_cast<size_t>(d));
  for (auto& sign : out.signs) sign = (rng.next() & 1) ? 1.0f : -1.0f;

  const int n_sinks = 1 + static_cast<int>(rng.next() % 3);
  std::vector<double> heavy_weight(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const bool shared = plan.heavy[static_cast<size_t>(i)] && rng.uniform() < 0.75;
    const bool own = rng.uniform() < 0.01;
    if (shared || own) heavy_weight[static_cast<size_t>(i)] = rng.uniform(0.6, 1.0);
  }
  const double noise_std = std::sqrt(1.0 / std::sqrt(std::max(1, layout.noise_dims)));
  std::vector<double> designed(static_cast<size_t>(d));
  out.keys.resize(static_cast<size_t>(n * d));
  for (int64_t i = 0; i < n; ++i) {
    designed[0] = i < n_sinks ? 1.0 : 0.0;
    designed[1] = heavy_weight[static_cast<size_t>(i)];
    for (int p = 0; p < layout.pairs; ++p) {
      const double angle = pair_frequency(p) * static_cast<double>(i);
      designed[static_cast<size_t>(2 + 2 * p)] = std::cos(angle) / std::sqrt(layout.pairs);
      designed[static_cast<size_t>(3 + 2 * p)] = std::sin(angle) / std::sqrt(layout.pairs);
    }
    for (int j = 2 + 2 * layout.pairs; j < d; ++j) designed[static_cast<size_t>(j)] = noise_std * rng.normal();
    for (int j = 0; j < d; ++j)
      out.keys[static_cast<size_t>(i * d + out.permutation[static_cast<size_t>(j)])] =
          static_cast<float>(root_inverse_scale * designed[static_cast<size_t>(j)] * out.signs[static_cast<size_t>(j)]);
  }
  return out;
}

std::vector<float> make_queries(const SynthOptions& options, const KvHeadData& kv, int seq, int layer, int head,
                                double root_inverse_scale) {
  const int d = options.head_dim;
  const int64_t n = options.n_tokens;
  HeadLayout layout(d);
  Rng rng(stream_seed(options.seed, kQueryHead, static_cast<uint64_t>(seq), static_cast<uint64_t>(layer),
                      static_cast<uint64_t>(head)));
  // Logit strengths of this head's components: heads differ in how sink-, heavy- or
  // locally-focused they are, as real heads do.
  const double sink = rng.uniform(2.0, 8.0);
  const double heavy = rng.uniform(1.0, 5.0);
  const double local = rng.uniform(0.0, 7.0);
  const double noise = rng.uniform(0.3, 1.5);
  const double noise_std = std::sqrt(noise / std::sqrt(std::max(1, layout.noise_dims)));
  std::vector<double> designed(static_cast<size_t>(d));
  std::vector<float> out(static_cast<size_t>(n * d));
  for (int64_t t = 0; t < n; ++t) {
    designed[0] = sink;
    designed[1] = heavy * rng.uniform(0.7, 1.0);
    for (int p = 0; p < layout.pairs; ++p) {
      const double angle = pair_frequency(p) * static_cast<double>(t);
      designed[static_cast<size_t>(2 + 2 * p)] = local * std::cos(angle) / std::sqrt(layout.pairs);
      designed[static_cast<size_t>(3 + 2 * p)] = local * std::sin(angle) / std::sqrt(layout.pairs);
    }
    for (int j = 2 + 2 * layout.pairs; j < d; ++j) designed[static_cast<size_t>(j)] = noise_std * rng.normal();
    for (int j = 0; j < d; ++j)
      out[static_cast<size_t>(t * d + kv.permutation[static_cast<size_t>(j)])] =
          static_cast<float>(root_inverse_scale * designed[static_cast<size_t>(j)] * kv.signs[static_cast<size_t>(j)]);
  }
  return out;
}

std::vector<float> make_values(const SynthOptions& options, int seq, int layer, int kv_head) {
  Rng rng(stream_seed(options.seed, kValues, static_cast<uint64_t>(seq), static_cast<uint64_t>(layer),
                      static_cast<uint64_t>(kv_head)));
  std::vector<float> out(static_cast<size_t>(options.n_tokens * options.head_dim));
  for (auto& x : out) x = static_cast<float>(rng.normal());
  return out;
}

// What the file will hold, so attention is computed from exactly the stored q and k.
void round_to_dtype(std::vector<float>& data, DType dtype) {
  if (dtype == DType::f16)
    for (auto& x : data) x = half_to_float(float_to_half(x));
}

void check_options(const std::string& path, const SynthOptions& o) {
  auto bad = [&](const std::string& what) { throw InputError(path, "", "synth: " + what); };
  if (o.n_layers < 1 || o.n_layers > Limits::max_layers)
    bad("layers must be in 1.." + std::to_string(Limits::max_layers));
  if (o.n_heads < 1 || o.n_heads > Limits::max_heads) bad("heads must be in 1.." + std::to_string(Limits::max_heads));
  if (o.n_kv_heads < 1 || o.n_heads % o.n_kv_heads != 0) bad("kv heads must divide heads");
  if (o.head_dim < 4 || o.head_dim > Limits::max_head_dim)
    bad("head_dim must be in 4.." + std::to_string(Limits::max_head_dim));
  if (o.n_tokens < 1 || o.n_tokens > Limits::max_tokens)
    bad("tokens must be in 1.." + std::to_string(Limits::max_tokens));
  if (o.n_tokens * o.head_dim > Limits::max_head_elements) bad("tokens * head_dim too large");
  if (o.write_attn && o.n_tokens > Limits::max_attn_tokens) bad("too many tokens for the attn form");
  if (o.n_sequences < 1 || o.n_sequences > Limits::max_sequences)
    bad("sequences must be in 1.." + std::to_string(Limits::max_sequences) + " (what a trace may hold)");
  // Refused up front rather than after filling the disk: an estimate of the file, uncompressed
  // (about 8 KiB of HDF5 structure per sequence and layer besides the values).
  const double element = o.dtype == DType::f16 ? 2 : o.dtype == DType::f32 ? 4 : 8;
  const double per_layer = static_cast<double>(o.n_tokens) * o.head_dim * element *
                               ((o.write_qk ? o.n_heads + o.n_kv_heads : 0) + (o.write_v ? o.n_kv_heads : 0)) +
                           (o.write_attn ? static_cast<double>(packed_length(o.n_tokens)) * o.n_heads * element : 0) +
                           8192;
  const double estimate = static_cast<double>(o.n_sequences) * (o.n_layers * per_layer + 8.0 * o.n_tokens + 8192);
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::absolute(path).parent_path();
  const auto space = std::filesystem::space(dir, ec);
  if (!ec && o.compression == 0 && estimate > static_cast<double>(space.available))
    bad("the trace would need about " + std::to_string(static_cast<long long>(estimate / 1e9)) + " GB; " +
        dir.string() + " has " + std::to_string(static_cast<long long>(static_cast<double>(space.available) / 1e9)) +
        " GB free");
  if (o.prompt_len > o.n_tokens) bad("prompt length exceeds tokens");
  if (!o.write_qk && !o.write_attn) bad("the form must include q/k or attn");
}

}  // namespace

void write_synthetic_trace(const std::string& path, const SynthOptions& options,
                           const std::function<void(int64_t, int64_t)>& progress) {
  check_options(path, options);
  TraceMeta meta;
  meta.model = options.model;
  meta.source = "synthetic";
  meta.n_layers = options.n_layers;
  meta.n_heads = options.n_heads;
  meta.n_kv_heads = options.n_kv_heads;
  meta.head_dim = options.head_dim;
  meta.attn_scale = 1.0 / std::sqrt(static_cast<double>(options.head_dim));
  TraceWriter writer(path, meta, WriterOptions{options.dtype, options.compression});
  const double root_inverse_scale = std::sqrt(1.0 / meta.attn_scale);
  const int64_t n = options.n_tokens;
  const int64_t total = static_cast<int64_t>(options.n_sequences) * options.n_layers;
  int64_t done = 0;
  for (int seq = 0; seq < options.n_sequences; ++seq) {
    Rng token_rng(stream_seed(options.seed, kTokens, static_cast<uint64_t>(seq)));
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    std::vector<std::string> text(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const int word = i == 0 ? -1 : static_cast<int>(token_rng.next() % kWordCount);
      tokens[static_cast<size_t>(i)] = word < 0 ? 1 : 100 + word;
      text[static_cast<size_t>(i)] = word < 0 ? "<s>" : std::string(" ") + kWords[word];
    }
    const int64_t prompt_len = options.prompt_len >= 0 ? options.prompt_len : n / 2;
    writer.add_sequence(prompt_len, tokens, text);
    const SequencePlan plan = plan_sequence(options, seq);
    for (int layer = 0; layer < options.n_layers; ++layer) {
      writer.add_layer(seq, layer,
                       LayerContents{options.write_qk, options.write_qk, options.write_v, options.write_attn, 0, 0.0});
      std::vector<KvHeadData> kv_heads;
      for (int kv = 0; kv < options.n_kv_heads; ++kv) {
        kv_heads.push_back(make_keys(options, plan, seq, layer, kv, root_inverse_scale));
        round_to_dtype(kv_heads.back().keys, options.dtype);
        if (options.write_qk) writer.write_head(seq, layer, Tensor::k, kv, kv_heads.back().keys);
        if (options.write_v) writer.write_head(seq, layer, Tensor::v, kv, make_values(options, seq, layer, kv));
      }
      for (int head = 0; head < options.n_heads; ++head) {
        const int kv = head / (options.n_heads / options.n_kv_heads);
        std::vector<float> queries =
            make_queries(options, kv_heads[static_cast<size_t>(kv)], seq, layer, head, root_inverse_scale);
        round_to_dtype(queries, options.dtype);
        if (options.write_qk) writer.write_head(seq, layer, Tensor::q, head, queries);
        if (options.write_attn) {
          QKAttentionSource source(n, options.head_dim, {std::move(queries)}, {kv_heads[static_cast<size_t>(kv)].keys},
                                   {0}, SoftmaxOptions{meta.attn_scale, 0, 0.0});
          std::vector<float> packed(static_cast<size_t>(packed_length(n)));
          RowBlock block;
          for (int64_t first = 0; first < n; first += kRowBlockSize) {
            const int64_t count = std::min(kRowBlockSize, n - first);
            source.rows(first, count, block);
            for (int64_t t = first; t < first + count; ++t)
              std::copy(block.row(0, t), block.row(0, t) + t + 1, packed.begin() + packed_row_offset(t));
          }
          writer.write_head(seq, layer, Tensor::attn, head, packed);
        }
      }
      if (progress) progress(++done, total);
    }
  }
  writer.close();
}

}  // namespace kvtrace
