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

// Start steps of the lagged statistics: first, first + stride, ... up to last (t + min(lag) < n).
struct LagSchedule {
  bool on = false;
  int64_t first = 0, last = -1, stride = 1, max_lag = 0;
  bool starts_at(int64_t t) const { return on && t >= first && t <= last && (t - first) % stride == 0; }
};

LagSchedule lag_schedule(const AnalysisOptions& options, int64_t n) {
  LagSchedule s;
  s.on = options.correlations && !options.lags.empty();
  s.first = options.min_positions - 1;
  s.max_lag = s.on ? options.lags.back() : 0;
  s.last = s.on ? n - 1 - options.lags.front() : -1;
  const int64_t candidates = std::max<int64_t>(0, s.last - s.first + 1);
  s.stride = std::max<int64_t>(1, (candidates + options.max_start_steps - 1) / options.max_start_steps);
  return s;
}

// The sampled later steps of the repetitive-attention pattern, ascending and distinct.
std::vector<int64_t> sample_steps(int repeat_samples, int64_t n, int64_t t_star) {
  std::vector<int64_t> samples;
  for (int j = 1; j <= repeat_samples; ++j) {
    const int64_t s = t_star + j * (n - 1 - t_star) / repeat_samples;
    if (s > t_star && (samples.empty() || s > samples.back())) samples.push_back(s);
  }
  return samples;
}

// Mean over consecutive sampled steps of the share of a step's pivotal positions (those that
// existed at the step before) that were pivotal there too; NaN without such a pair.
double repeat_share(const std::vector<RepeatStep>& repeats) {
  double share_sum = 0;
  int shares = 0;
  for (size_t j = 1; j < repeats.size(); ++j) {
    const RepeatStep& before = repeats[j - 1];
    int64_t existed = 0, again = 0;
    for (int32_t i : repeats[j].positions) {
      if (i > before.step) continue;
      ++existed;
      again += std::binary_search(before.positions.begin(), before.positions.end(), i);
    }
    if (existed > 0) share_sum += static_cast<double>(again) / static_cast<double>(existed), ++shares;
  }
  return shares > 0 ? share_sum / shares : NAN;
}

// The streaming pass of analyze_rows over one layer's rows, step by step.
class LayerPass {
 public:
  LayerPass(const AnalysisOptions& options, int64_t n, int n_heads, LayerAnalysis& out)
      : options_(options),
        n_(n),
        heads_(static_cast<size_t>(n_heads)),
        t_star_(n / 2),
        early_(heads_, std::vector<uint8_t>(static_cast<size_t>(t_star_ + 1), 0)),
        late_(early_),
        schedule_(lag_schedule(options, n)),
        sums_(heads_, std::vector<LagSums>(options.lags.size())),
        samples_(sample_steps(options.repeat_samples, n, t_star_)),
        out_(out) {
    for (auto& head : out_.heads) head.repeats.reserve(samples_.size());
  }

  // Step t of every head, its rows in `block`.
  void step(const kvtrace::RowBlock& block, int64_t t) {
    const double threshold = 1.0 / static_cast<double>(t + 1);
    const bool sampled = next_sample_ < samples_.size() && samples_[next_sample_] == t;
    for (size_t h = 0; h < heads_; ++h) {
      const float* row = block.row(static_cast<int>(h), t);
      mark_pivotal(h, t, row, threshold);
      if (sampled) sample(h, t, row, threshold);
      add_importance(t, row);
      complete_lags(h, t, row);
    }
    if (sampled) ++next_sample_;
    while (!pending_.empty() && t - pending_.front().step >= schedule_.max_lag) pending_.pop_front();
    if (schedule_.starts_at(t)) pending_.push_back(start(block, t));
  }

  // The per-head statistics and the head-averaged importance, after the last step.
  void finish() {
    for (size_t i = 0; i < static_cast<size_t>(n_); ++i) {
      out_.importance[i] /= static_cast<double>(heads_);
      out_.importance_normalised[i] /= static_cast<double>(heads_) * static_cast<double>(n_ - static_cast<int64_t>(i));
    }
    for (size_t h = 0; h < heads_; ++h) summarise_head(h);
  }

 private:
  // Persistence: pivotal positions of the first half, and of the second half that existed at t*.
  void mark_pivotal(size_t h, int64_t t, const float* row, double threshold) {
    if (t <= t_star_) {
      for (int64_t i = 0; i <= t; ++i)
        if (static_cast<double>(row[i]) > threshold) early_[h][static_cast<size_t>(i)] = 1;
    } else {
      for (int64_t i = 0; i <= t_star_; ++i)
        if (static_cast<double>(row[i]) > threshold) late_[h][static_cast<size_t>(i)] = 1;
    }
  }

  void sample(size_t h, int64_t t, const float* row, double threshold) {
    RepeatStep step;
    step.step = t;
    for (int64_t i = 0; i <= t; ++i)
      if (static_cast<double>(row[i]) > threshold) step.positions.push_back(static_cast<int32_t>(i));
    out_.heads[h].repeats.push_back(std::move(step));
  }

  void add_importance(int64_t t, const float* row) {
    const double scale = static_cast<double>(t + 1);
    for (int64_t i = 0; i <= t; ++i) {
      out_.importance[static_cast<size_t>(i)] += row[i];
      out_.importance_normalised[static_cast<size_t>(i)] += scale * row[i];
    }
  }

  // Lagged statistics for the start steps this step completes.
  void complete_lags(size_t h, int64_t t, const float* row) {
    for (const Pending& p : pending_) {
      const auto lag = std::find(options_.lags.begin(), options_.lags.end(), t - p.step);
      if (lag == options_.lags.end()) continue;
      const size_t m = static_cast<size_t>(p.step + 1);
      const std::span<const float> y(row, m);
      const std::vector<int32_t> order = ascending_order(y);
      const std::vector<double> ranks = ranks_from_order(y, order);
      LagSums& s = sums_[h][static_cast<size_t>(lag - options_.lags.begin())];
      const double rho = pearson(p.ranks[h], ranks);
      ++s.pairs;  // a constant row counts as a pair but stays out of the Spearman mean
      if (!std::isnan(rho)) ++s.defined, s.spearman += rho;
      int64_t hits = 0;
      for (size_t r = m - static_cast<size_t>(p.k); r < m; ++r) hits += p.in_top_k[h][static_cast<size_t>(order[r])];
      s.recall += static_cast<double>(hits) / static_cast<double>(p.k);
    }
  }

  // Start step t: every head's ranks of a_t[0..t] and its top-k flags.
  Pending start(const kvtrace::RowBlock& block, int64_t t) const {
    Pending p;
    p.step = t;
    const size_t m = static_cast<size_t>(t + 1);
    p.k = std::clamp<int64_t>(options_.top_k.resolve(t + 1), 1, t + 1);
    for (size_t h = 0; h < heads_; ++h) {
      const std::span<const float> x(block.row(static_cast<int>(h), t), m);
      const std::vector<int32_t> order = ascending_order(x);
      p.ranks.push_back(ranks_from_order(x, order));
      std::vector<uint8_t> flags(m, 0);
      for (size_t r = m - static_cast<size_t>(p.k); r < m; ++r) flags[static_cast<size_t>(order[r])] = 1;
      p.in_top_k.push_back(std::move(flags));
    }
    return p;
  }

  void summarise_head(size_t h) {
    HeadAnalysis& head = out_.heads[h];
    head.head = static_cast<int>(h);
    for (int64_t i = 0; i <= t_star_; ++i) {
      const bool e = early_[h][static_cast<size_t>(i)] != 0, l = late_[h][static_cast<size_t>(i)] != 0;
      head.early += e, head.late += l, head.persistent += e && l;
    }
    head.persistence = head.late > 0 ? static_cast<double>(head.persistent) / static_cast<double>(head.late) : NAN;
    head.ever_pivotal = static_cast<double>(head.early) / static_cast<double>(t_star_ + 1);
    if (schedule_.on)
      for (size_t l = 0; l < options_.lags.size(); ++l) {
        const LagSums& s = sums_[h][l];
        LagStat stat;
        stat.lag = options_.lags[l];
        stat.pairs = s.pairs;
        stat.undefined = s.pairs - s.defined;
        stat.spearman = s.defined > 0 ? s.spearman / static_cast<double>(s.defined) : NAN;
        stat.topk_recall = s.pairs > 0 ? s.recall / static_cast<double>(s.pairs) : NAN;
        head.lags.push_back(stat);
      }
    head.repeat_share = repeat_share(head.repeats);
  }

  const AnalysisOptions& options_;
  const int64_t n_;
  const size_t heads_;
  const int64_t t_star_;
  std::vector<std::vector<uint8_t>> early_, late_;  // [head][t*+1]: pivotal in the first, second half
  const LagSchedule schedule_;
  std::vector<std::vector<LagSums>> sums_;  // [head][lag]
  std::deque<Pending> pending_;             // start steps still waiting for a lag
  const std::vector<int64_t> samples_;
  size_t next_sample_ = 0;
  LayerAnalysis& out_;
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
  LayerAnalysis out;
  out.n_tokens = n;
  out.importance.assign(static_cast<size_t>(n), 0.0);
  out.importance_normalised.assign(static_cast<size_t>(n), 0.0);
  out.heads.resize(static_cast<size_t>(n_heads));
  if (n <= 0 || n_heads <= 0) return out;

  LayerPass pass(options, n, n_heads, out);
  kvtrace::RowBlock block;
  for (int64_t first = 0; first < n; first += kvtrace::kRowBlockSize) {
    const int64_t count = std::min(kvtrace::kRowBlockSize, n - first);
    source.rows(first, count, block);
    for (int64_t t = first; t < first + count; ++t) pass.step(block, t);
  }
  pass.finish();
  return out;
}

}  // namespace kvsim
