#include "kvsim/core/pages.hpp"

#include <algorithm>
#include <cmath>

#include "kvtrace/error.hpp"

namespace kvsim {

PageScore parse_page_score(const std::string& text) {
  if (text == "mean") return PageScore::mean;
  if (text == "max") return PageScore::max;
  throw kvtrace::InputError("", "", "--page-score: '" + text + "' is not mean or max");
}

const char* page_score_name(PageScore how) { return how == PageScore::max ? "max" : "mean"; }

namespace {

struct Candidate {
  double score;
  int64_t page;
  size_t first, count;  // its entries in the cache
};

// (score, page) ascending, NaN after every number: a strict weak order.
bool before(const Candidate& a, const Candidate& b) {
  const bool a_nan = std::isnan(a.score), b_nan = std::isnan(b.score);
  if (a_nan != b_nan) return b_nan;
  if (!a_nan && a.score != b.score) return a.score < b.score;
  return a.page < b.page;
}

}  // namespace

void choose_pages(std::span<const int32_t> cache, std::span<const double> scores, const Paging& paging, int64_t t,
                  int64_t budget, std::vector<size_t>& indices) {
  indices.clear();
  const int64_t p = paging.page;
  const int64_t partial = (t + 1) % p != 0 ? t / p : -1;  // the newest page while it is partial
  thread_local std::vector<Candidate> candidates;
  candidates.clear();
  for (size_t j = 0; j < cache.size();) {
    const int64_t page = cache[j] / p;
    size_t end = j;
    double sum = 0, largest = -INFINITY;
    bool protects = false;
    for (; end < cache.size() && cache[end] / p == page; ++end) {
      protects = protects || scores[end] == INFINITY;
      sum += scores[end];
      largest = std::max(largest, scores[end]);
      if (std::isnan(scores[end])) largest = NAN;  // std::max keeps the first of a NaN pair
    }
    const double score = paging.score == PageScore::max ? largest : sum / static_cast<double>(end - j);
    if (page != partial && !protects) candidates.push_back({score, page, j, end - j});
    j = end;
  }
  std::sort(candidates.begin(), candidates.end(), before);
  auto held = static_cast<int64_t>(cache.size());
  for (const Candidate& c : candidates) {
    if (held <= budget) break;
    for (size_t j = c.first; j < c.first + c.count; ++j) indices.push_back(j);
    held -= static_cast<int64_t>(c.count);
  }
  std::sort(indices.begin(), indices.end());
}

}  // namespace kvsim
