// The scorers of Compactor as kvpress writes them: compactor_scores.hpp.
#include "compactor_scores.hpp"

#include <algorithm>
#include <cmath>

#include "kvsim/core/policy.hpp"

namespace kvsim {
namespace {

uint64_t splitmix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Lower-triangular L with L L^T = g (k x k), or false where a pivot is not positive.
bool cholesky(const std::vector<double>& g, size_t k, std::vector<double>& l) {
  l.assign(k * k, 0.0);
  for (size_t i = 0; i < k; ++i)
    for (size_t j = 0; j <= i; ++j) {
      double sum = g[i * k + j];
      for (size_t p = 0; p < j; ++p) sum -= l[i * k + p] * l[j * k + p];
      if (i == j) {
        if (!(sum > 0)) return false;
        l[i * k + i] = std::sqrt(sum);
      } else {
        l[i * k + j] = sum / l[j * k + j];
      }
    }
  return true;
}

// Column sums of one query head's chunked softmax (non_causal_chunked_attn, lines 63-93),
// added to `sums`.
void chunked_column_sums(const GroupTensors& tensors, size_t head, size_t kv, std::span<const int32_t> positions,
                         size_t chunk, std::vector<double>& sums) {
  const size_t m = positions.size(), d = static_cast<size_t>(tensors.head_dim);
  const size_t padded = (m + chunk - 1) / chunk * chunk;
  std::vector<double> logits(chunk);
  for (size_t start = 0; start < padded; start += chunk) {
    const size_t real = std::min(chunk, m - start);  // the rest of the chunk is padding
    for (size_t i = 0; i < chunk; ++i) {
      for (size_t j = 0; j < chunk; ++j) {
        if (j >= real) {
          logits[j] = -1e-9;  // a padded key (padded queries' rows too)
        } else if (i >= real) {
          logits[j] = 0;  // a padded query's row
        } else {
          const std::span<const float> q = tensors.query(head, positions[start + i]);
          const std::span<const float> k = tensors.key(kv, positions[start + j]);
          double dot = 0;
          for (size_t a = 0; a < d; ++a) dot += static_cast<double>(q[a]) * k[a];
          logits[j] = dot;
        }
      }
      const double top = *std::max_element(logits.begin(), logits.end());
      double total = 0;
      for (double& x : logits) total += x = std::exp(x - top);
      for (size_t j = 0; j < real; ++j) sums[start + j] += logits[j] / total;
    }
  }
}

}  // namespace

std::vector<double> gaussian_sketch(uint64_t seed, size_t d, size_t k) {
  std::vector<double> phi(d * k);
  uint64_t state = seed;
  const double scale = 1 / std::sqrt(static_cast<double>(k));
  for (size_t i = 0; i < phi.size(); i += 2) {  // Box-Muller: two normals per two uniforms
    const double u = (static_cast<double>(splitmix(state) >> 11) + 0.5) / 9007199254740992.0;
    const double v = static_cast<double>(splitmix(state) >> 11) / 9007199254740992.0;
    const double r = std::sqrt(-2 * std::log(u)), angle = 2 * M_PI * v;
    phi[i] = r * std::cos(angle) * scale;
    if (i + 1 < phi.size()) phi[i + 1] = r * std::sin(angle) * scale;
  }
  return phi;
}

void leverage_scores(std::span<const double> keys, size_t d, std::span<const double> sketch, size_t k,
                     std::vector<double>& out) {
  const size_t m = keys.size() / d;
  std::vector<double> mean(d, 0.0);
  for (size_t j = 0; j < m; ++j)
    for (size_t a = 0; a < d; ++a) mean[a] += keys[j * d + a];
  for (double& x : mean) x /= static_cast<double>(m);
  if (sketch.empty()) k = d;
  std::vector<double> x(m * k, 0.0);  // the centred keys, sketched
  for (size_t j = 0; j < m; ++j)
    for (size_t a = 0; a < d; ++a) {
      const double centred = keys[j * d + a] - mean[a];
      if (sketch.empty()) {
        x[j * k + a] = centred;
        continue;
      }
      for (size_t b = 0; b < k; ++b) x[j * k + b] += centred * sketch[a * k + b];
    }
  std::vector<double> g(k * k, 0.0), l;
  for (size_t j = 0; j < m; ++j)
    for (size_t a = 0; a < k; ++a)
      for (size_t b = 0; b <= a; ++b) g[a * k + b] += x[j * k + a] * x[j * k + b];
  for (size_t a = 0; a < k; ++a)
    for (size_t b = 0; b < a; ++b) g[b * k + a] = g[a * k + b];  // symmetric by construction
  double jitter = 1e-2;
  bool factored = false;
  for (int attempt = 0; attempt < 5 && !factored; ++attempt) {
    std::vector<double> shifted = g;
    for (size_t a = 0; a < k; ++a) shifted[a * k + a] += jitter;
    factored = cholesky(shifted, k, l);
    jitter *= 10;
  }
  if (!factored) throw NanScore();
  out.assign(m, 0.0);
  std::vector<double> z(k);
  for (size_t j = 0; j < m; ++j) {  // x_j . G^-1 x_j = |L^-1 x_j|^2
    double score = 0;
    for (size_t a = 0; a < k; ++a) {
      double sum = x[j * k + a];
      for (size_t p = 0; p < a; ++p) sum -= l[a * k + p] * z[p];
      z[a] = sum / l[a * k + a];
      score += z[a] * z[a];
    }
    out[j] = std::max(score, 0.0);
  }
}

void non_causal_scores(const GroupTensors& tensors, std::span<const int32_t> positions, size_t chunk,
                       std::vector<double>& out) {
  const size_t m = positions.size(), heads = tensors.queries.size();
  std::vector<double> sums(m, 0.0);
  for (size_t h = 0; h < heads; ++h)
    chunked_column_sums(tensors, h, h * tensors.keys.size() / heads, positions, chunk, sums);
  std::vector<double> weighted(m);
  for (size_t j = 0; j < m; ++j) {
    double squares = 0;
    for (float x : tensors.value(0, positions[j])) squares += static_cast<double>(x) * x;
    weighted[j] = sums[j] / static_cast<double>(heads) * std::sqrt(squares);
  }
  out.assign(m, 0.0);
  for (size_t j = 0; j < m; ++j)  // avg_pool1d(kernel 3, padding 1): the zeros outside count
    out[j] = ((j > 0 ? weighted[j - 1] : 0.0) + weighted[j] + (j + 1 < m ? weighted[j + 1] : 0.0)) / 3;
  z_normalise(out);
}

void z_normalise(std::vector<double>& scores) {
  if (scores.size() < 2) {  // no spread to divide by (torch: NaN); a lone entry scores 0
    std::fill(scores.begin(), scores.end(), 0.0);
    return;
  }
  const auto m = static_cast<double>(scores.size());
  double mean = 0, squares = 0;
  for (double s : scores) mean += s;
  mean /= m;
  for (double s : scores) squares += (s - mean) * (s - mean);
  const double deviation = std::max(std::sqrt(squares / (m - 1)), 1e-6);
  for (double& s : scores) s = (s - mean) / deviation;
}

std::string keys_rope_problem(const kvtrace::RopeMeta& rope) { return rope_problem(rope, "the keys"); }

void PreRopeKeys::reset(const GroupContext& group) {
  tensors_ = group.tensors;
  d_ = static_cast<size_t>(tensors_->head_dim);
  rope_ = Rope(tensors_->rope, tensors_->head_dim);
  keys_.assign(static_cast<size_t>(group.n_tokens) * d_, 0.0);
  phi_ =
      sketch_ > 0 ? gaussian_sketch(seed_ ^ (group.seed * 0x9e3779b97f4a7c15ull), d_, sketch_) : std::vector<double>();
}

void PreRopeKeys::observe(int64_t step) {
  const std::span<const float> key = tensors_->key(0, step);
  double* out = keys_.data() + static_cast<size_t>(step) * d_;
  std::copy(key.begin(), key.end(), out);
  rope_.unrotate(out, step);
}

void PreRopeKeys::leverage(std::span<const int32_t> positions, std::vector<double>& out) const {
  gathered_.resize(positions.size() * d_);
  for (size_t j = 0; j < positions.size(); ++j)
    std::copy_n(keys_.data() + static_cast<size_t>(positions[j]) * d_, d_, gathered_.data() + j * d_);
  leverage_scores(gathered_, d_, phi_, sketch_, out);
}

}  // namespace kvsim
