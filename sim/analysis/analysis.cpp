// Analysis of the rows of one layer (kvsim/analysis/analysis.hpp): persistence ratio, ever-pivotal
// share, lagged Spearman and top-k recall, head-averaged importance and the repetitive
// attention pattern, in one streaming pass over the AttentionSource.
#include <algorithm>
#include <deque>
#include <numeric>

#include "kvsim/analysis/analysis.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

[[noreturn]] void bad(const std::string& option, const std::string& problem) {
  throw kvtrace::InputError("", "", "--" + option + ": " + problem);
}

// Positions 0..m-1 sorted by value ascending, ties by position ascending: the last k are the
// top-k with ties going to the higher position.
template <class T>
std::vector<int32_t> ascending_order(std::span<const T> values) {
  std::vector<int32_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const T va = values[static_cast<size_t>(a)], vb = values[static_cast<size_t>(b)];
    return va < vb || (va == vb && a < b);
  });
  return order;
}

template <class T>
std::vector<double> ranks_from_order(std::span<const T> values, const std::vector<int32_t>& order) {
  const size_t m = order.size();
  std::vector<double> ranks(m);
  for (size_t i = 0; i < m;) {
    size_t j = i;
    while (j + 1 < m && values[static_cast<size_t>(order[j + 1])] == values[static_cast<size_t>(order[i])]) ++j;
    const double rank = 0.5 * static_cast<double>(i + j) + 1.0;  // mean of ranks i+1 .. j+1
    for (size_t r = i; r <= j; ++r) ranks[static_cast<size_t>(order[r])] = rank;
    i = j + 1;
  }
  return ranks;
}

// A start step waiting for its lags: per head the ranks of a_t[0..t] and its top-k flags.
struct Pending {
  int64_t step = 0;
  int64_t k = 0;
  std::vector<std::vector<double>> ranks;      // [head][t+1]
  std::vector<std::vector<uint8_t>> in_top_k;  // [head][t+1]
};

struct LagSums {
  double spearman = 0, recall = 0;
  int64_t defined = 0, pairs = 0;
};

}  // namespace

std::vector<double> average_ranks(std::span<const float> values) {
  return ranks_from_order(values, ascending_order(values));
}

std::vector<double> average_ranks(std::span<const double> values) {
  return ranks_from_order(values, ascending_order(values));
}

double pearson(std::span<const double> x, std::span<const double> y) {
  const size_t m = std::min(x.size(), y.size());
  if (m < 2) return NAN;
  double mx = 0, my = 0;
  for (size_t i = 0; i < m; ++i) mx += x[i], my += y[i];
  mx /= static_cast<double>(m);
  my /= static_cast<double>(m);
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < m; ++i) {
    const double dx = x[i] - mx, dy = y[i] - my;
    sxy += dx * dy, sxx += dx * dx, syy += dy * dy;
  }
  if (sxx <= 0 || syy <= 0) return NAN;
  return std::clamp(sxy / std::sqrt(sxx * syy), -1.0, 1.0);
}

double spearman(std::span<const float> x, std::span<const float> y) {
  const std::vector<double> rx = average_ranks(x), ry = average_ranks(y);
  return pearson(rx, ry);
}

double spearman(std::span<const double> x, std::span<const double> y) {
  const std::vector<double> rx = average_ranks(x), ry = average_ranks(y);
  return pearson(rx, ry);
}

std::vector<int32_t> top_k_positions(std::span<const float> values, int64_t k) {
  const std::vector<int32_t> order = ascending_order(values);
  const size_t take = static_cast<size_t>(std::clamp<int64_t>(k, 0, static_cast<int64_t>(order.size())));
  std::vector<int32_t> top(order.end() - static_cast<std::ptrdiff_t>(take), order.end());
  std::sort(top.begin(), top.end());
  return top;
}

void check_options(const AnalysisOptions& options) {
  if (options.lags.empty() && options.correlations) bad("lags", "no lag given");
  for (size_t i = 0; i < options.lags.size(); ++i) {
    if (options.lags[i] < 1) bad("lags", "lags must be at least 1 step");
    if (i > 0 && options.lags[i] <= options.lags[i - 1]) bad("lags", "lags must be distinct and ascending");
  }
  if (options.min_positions < 2) bad("min-positions", "must be at least 2 (a rank correlation needs two positions)");
  if (options.max_start_steps < 1) bad("max-steps", "must be at least 1");
  if (options.repeat_samples < 0 || options.repeat_samples > 64) bad("samples", "must be between 0 and 64");
}

LayerAnalysis analyze_rows(kvtrace::AttentionSource& source, const AnalysisOptions& options) {
  check_options(options);
  const int64_t n = source.n_tokens();
  const int n_heads = source.n_heads();
  const size_t heads = static_cast<size_t>(n_heads);
  LayerAnalysis out;
  out.n_tokens = n;
  out.importance.assign(static_cast<size_t>(n), 0.0);
  out.importance_normalised.assign(static_cast<size_t>(n), 0.0);
  out.heads.resize(heads);
  if (n <= 0 || n_heads <= 0) return out;

  const int64_t t_star = n / 2;
  std::vector<std::vector<uint8_t>> early(heads, std::vector<uint8_t>(static_cast<size_t>(t_star + 1), 0));
  std::vector<std::vector<uint8_t>> late = early;

  // Start steps of the lagged statistics: t0, t0 + stride, ... with t + min(lag) < n.
  const bool correlations = options.correlations && !options.lags.empty();
  const int64_t t0 = options.min_positions - 1;
  const int64_t max_lag = correlations ? options.lags.back() : 0;
  const int64_t last_start = correlations ? n - 1 - options.lags.front() : -1;
  const int64_t candidates = std::max<int64_t>(0, last_start - t0 + 1);
  const int64_t stride = std::max<int64_t>(1, (candidates + options.max_start_steps - 1) / options.max_start_steps);
  std::vector<std::vector<LagSums>> sums(heads, std::vector<LagSums>(options.lags.size()));
  std::deque<Pending> pending;

  // Sampled later steps for the repetitive-attention pattern.
  std::vector<int64_t> samples;
  for (int j = 1; j <= options.repeat_samples; ++j) {
    const int64_t s = t_star + j * (n - 1 - t_star) / options.repeat_samples;
    if (s > t_star && (samples.empty() || s > samples.back())) samples.push_back(s);
  }
  for (auto& head : out.heads) head.repeats.reserve(samples.size());
  size_t next_sample = 0;

  kvtrace::RowBlock block;
  for (int64_t first = 0; first < n; first += kvtrace::kRowBlockSize) {
    const int64_t count = std::min(kvtrace::kRowBlockSize, n - first);
    source.rows(first, count, block);
    for (int64_t t = first; t < first + count; ++t) {
      const double threshold = 1.0 / static_cast<double>(t + 1);
      const bool sampled = next_sample < samples.size() && samples[next_sample] == t;
      for (size_t h = 0; h < heads; ++h) {
        const float* row = block.row(static_cast<int>(h), t);
        // Persistence: pivotal positions of the first half, and of the second half that
        // existed at t*.
        if (t <= t_star) {
          for (int64_t i = 0; i <= t; ++i)
            if (static_cast<double>(row[i]) > threshold) early[h][static_cast<size_t>(i)] = 1;
        } else {
          for (int64_t i = 0; i <= t_star; ++i)
            if (static_cast<double>(row[i]) > threshold) late[h][static_cast<size_t>(i)] = 1;
        }
        if (sampled) {
          RepeatStep step;
          step.step = t;
          for (int64_t i = 0; i <= t; ++i)
            if (static_cast<double>(row[i]) > threshold) step.positions.push_back(static_cast<int32_t>(i));
          out.heads[h].repeats.push_back(std::move(step));
        }
        const double scale = static_cast<double>(t + 1);
        for (int64_t i = 0; i <= t; ++i) {
          out.importance[static_cast<size_t>(i)] += row[i];
          out.importance_normalised[static_cast<size_t>(i)] += scale * row[i];
        }
        // Lagged statistics for the start steps this step completes.
        for (const Pending& p : pending) {
          const auto lag = std::find(options.lags.begin(), options.lags.end(), t - p.step);
          if (lag == options.lags.end()) continue;
          const size_t m = static_cast<size_t>(p.step + 1);
          const std::span<const float> y(row, m);
          const std::vector<int32_t> order = ascending_order(y);
          const std::vector<double> ranks = ranks_from_order(y, order);
          LagSums& s = sums[h][static_cast<size_t>(lag - options.lags.begin())];
          const double rho = pearson(p.ranks[h], ranks);
          ++s.pairs;  // a constant row counts as a pair but stays out of the Spearman mean
          if (!std::isnan(rho)) ++s.defined, s.spearman += rho;
          int64_t hits = 0;
          for (size_t r = m - static_cast<size_t>(p.k); r < m; ++r)
            hits += p.in_top_k[h][static_cast<size_t>(order[r])];
          s.recall += static_cast<double>(hits) / static_cast<double>(p.k);
        }
      }
      if (sampled) ++next_sample;
      while (!pending.empty() && t - pending.front().step >= max_lag) pending.pop_front();
      if (correlations && t >= t0 && t <= last_start && (t - t0) % stride == 0) {
        Pending p;
        p.step = t;
        const size_t m = static_cast<size_t>(t + 1);
        p.k = std::clamp<int64_t>(options.top_k.resolve(t + 1), 1, t + 1);
        for (size_t h = 0; h < heads; ++h) {
          const std::span<const float> x(block.row(static_cast<int>(h), t), m);
          const std::vector<int32_t> order = ascending_order(x);
          p.ranks.push_back(ranks_from_order(x, order));
          std::vector<uint8_t> flags(m, 0);
          for (size_t r = m - static_cast<size_t>(p.k); r < m; ++r) flags[static_cast<size_t>(order[r])] = 1;
          p.in_top_k.push_back(std::move(flags));
        }
        pending.push_back(std::move(p));
      }
    }
  }

  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
    out.importance[i] /= n_heads;
    out.importance_normalised[i] /= static_cast<double>(n_heads) * static_cast<double>(n - static_cast<int64_t>(i));
  }
  for (size_t h = 0; h < heads; ++h) {
    HeadAnalysis& head = out.heads[h];
    head.head = static_cast<int>(h);
    for (int64_t i = 0; i <= t_star; ++i) {
      const bool e = early[h][static_cast<size_t>(i)] != 0, l = late[h][static_cast<size_t>(i)] != 0;
      head.early += e, head.late += l, head.persistent += e && l;
    }
    head.persistence = head.late > 0 ? static_cast<double>(head.persistent) / static_cast<double>(head.late) : NAN;
    head.ever_pivotal = static_cast<double>(head.early) / static_cast<double>(t_star + 1);
    if (correlations)
      for (size_t l = 0; l < options.lags.size(); ++l) {
        const LagSums& s = sums[h][l];
        LagStat stat;
        stat.lag = options.lags[l];
        stat.pairs = s.pairs;
        stat.undefined = s.pairs - s.defined;
        stat.spearman = s.defined > 0 ? s.spearman / static_cast<double>(s.defined) : NAN;
        stat.topk_recall = s.pairs > 0 ? s.recall / static_cast<double>(s.pairs) : NAN;
        head.lags.push_back(stat);
      }
    // Point persistence between consecutive sampled steps.
    double share_sum = 0;
    int shares = 0;
    for (size_t j = 1; j < head.repeats.size(); ++j) {
      const RepeatStep& before = head.repeats[j - 1];
      int64_t existed = 0, again = 0;
      for (int32_t i : head.repeats[j].positions) {
        if (i > before.step) continue;
        ++existed;
        again += std::binary_search(before.positions.begin(), before.positions.end(), i);
      }
      if (existed > 0) share_sum += static_cast<double>(again) / static_cast<double>(existed), ++shares;
    }
    head.repeat_share = shares > 0 ? share_sum / shares : NAN;
  }
  return out;
}

}  // namespace kvsim
