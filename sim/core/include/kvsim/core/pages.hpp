#pragma once
// Page mode (docs/semantics.md, section 2): the engine evicts whole pages of P consecutive
// positions (page k = positions [kP, (k+1)P)), ranked by the policy's scores
// (Policy::scores) aggregated per page, instead of asking the policy's evict().
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvsim {

enum class PageScore { mean, max };                   // how a page's scores combine
PageScore parse_page_score(const std::string& text);  // throws InputError naming --page-score
const char* page_score_name(PageScore how);

struct Paging {
  int64_t page = 0;  // P; 0: token mode (the policy's evict() decides)
  PageScore score = PageScore::mean;
  bool on() const { return page > 0; }
};

// At step t, with `cache` ascending (the newest, t, last) and `scores` aligned with it: the
// indices into `cache` of the pages to evict, ascending. A page may go when it is not the
// newest page while that page is partial ((t + 1) % P != 0), and none of its scores is
// +infinity. Such pages go lowest aggregate first (ties: the lower page; a NaN aggregate
// ranks above every number) until the cache holds at most `budget` positions, or none is
// left. Page mode's pages are whole but the newest, so the aggregate is over P scores.
void choose_pages(std::span<const int32_t> cache, std::span<const double> scores, const Paging& paging, int64_t t,
                  int64_t budget, std::vector<size_t>& indices);

}  // namespace kvsim
