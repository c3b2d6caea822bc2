#include "spans.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "kvsim/core/engine.hpp"

namespace kvgui {

bool SpanKind::covers(int64_t position) const { return std::binary_search(positions.begin(), positions.end(), position); }

std::vector<SpanKind> spanKinds(const std::vector<kvtrace::Span>& spans) {
  std::vector<SpanKind> kinds;
  for (const kvtrace::Span& span : spans) {
    const QString name = QString::fromStdString(span.kind);
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const SpanKind& k) { return k.kind == name; });
    if (it == kinds.end()) it = kinds.insert(kinds.end(), SpanKind{name, {}, {}});
    it->spans.push_back(span);
    for (int64_t p = span.start; p < span.end; ++p) it->positions.push_back(p);
  }
  for (SpanKind& kind : kinds) {
    std::sort(kind.positions.begin(), kind.positions.end());
    kind.positions.erase(std::unique(kind.positions.begin(), kind.positions.end()), kind.positions.end());
  }
  return kinds;
}

QColor spanColour(const QString& kind) {
  // ColorBrewer's Dark2 (categories), not the policies' Tableau 10, so that a span's dotted
  // line does not take a compared policy's colour.
  static const std::array<std::pair<const char*, QRgb>, 6> known = {{{"system", 0x666666},
                                                                     {"context", 0x1b9e77},
                                                                     {"evidence", 0xd95f02},
                                                                     {"needle", 0xe7298a},
                                                                     {"question", 0x7570b3},
                                                                     {"answer", 0xe6ab02}}};
  for (const auto& [name, rgb] : known)
    if (kind == QLatin1String(name)) return QColor(rgb);
  // Any other word: by its name (FNV-1a over UTF-8), the same colour in every run.
  static constexpr std::array<QRgb, 6> others = {0x66a61e, 0xa6761d, 0xb15928, 0x6a3d9a, 0x01665e, 0x8c510a};
  uint32_t hash = 2166136261u;
  for (const char c : kind.toUtf8()) hash = (hash ^ static_cast<uint8_t>(c)) * 16777619u;
  return QColor(others[hash % others.size()]);
}

QColor spanShade(const QString& kind) {
  const QColor c = spanColour(kind);
  auto mix = [](int v) { return (2 * v + 3 * 255) / 5; };  // 60% towards white
  return QColor(mix(c.red()), mix(c.green()), mix(c.blue()));
}

std::vector<SpanShare> spanShares(const std::vector<SpanKind>& kinds, const kvsim::SimulationResult& result) {
  std::vector<SpanShare> shares;
  const std::vector<int32_t>& evicted = result.eviction_step;
  const auto n = static_cast<int64_t>(evicted.size());
  if (n == 0 || result.n_steps <= 0) return shares;
  for (const SpanKind& kind : kinds) {
    // came[t]: the kind's positions p <= t; gone[t]: those evicted before t (0 <= e < t), counted
    // from max(p, e + 1), the first step at which p has come and is no longer held.
    std::vector<int64_t> came(static_cast<size_t>(n) + 1, 0), gone(static_cast<size_t>(n) + 1, 0);
    for (const int64_t p : kind.positions) {
      if (p >= n) continue;
      ++came[static_cast<size_t>(p)];
      const int32_t e = evicted[static_cast<size_t>(p)];
      if (e >= 0) ++gone[static_cast<size_t>(std::min(n, std::max<int64_t>(p, int64_t{e} + 1)))];
    }
    for (size_t t = 1; t < came.size(); ++t) {
      came[t] += came[t - 1];
      gone[t] += gone[t - 1];
    }
    SpanShare share{kind.kind, static_cast<int64_t>(kind.positions.size()), result.first_step,
                    std::vector<double>(static_cast<size_t>(result.n_steps))};
    for (int64_t s = 0; s < result.n_steps; ++s) {
      const int64_t t = std::min(n - 1, result.first_step + s);
      const int64_t c = came[static_cast<size_t>(t)];
      share.share[static_cast<size_t>(s)] = c > 0 ? static_cast<double>(c - gone[static_cast<size_t>(t)]) / static_cast<double>(c)
                                                  : std::numeric_limits<double>::quiet_NaN();
    }
    shares.push_back(std::move(share));
  }
  return shares;
}

}  // namespace kvgui
