// Span metrics as people and programs read them (report.hpp, span_report.hpp).
#include "span_report.hpp"

#include <cstdio>
#include <sstream>

#include "kvsim/core/text_util.hpp"
#include "kvsim/replay/report.hpp"

namespace kvsim {
namespace {

void add_measures(nlohmann::json& out, const SpanMeasures& measures, const std::string& prefix) {
  for (size_t m = 0; m < kSpanMeasures.size(); ++m) out[prefix + kSpanMeasureNames[m]] = measures.*kSpanMeasures[m];
}

std::string measures_text(const SpanMeasures& measures) {
  std::string out;
  for (double SpanMeasures::*measure : kSpanMeasures) out += text::fixed(measures.*measure, 6, 3);
  return out;
}

// "[start,end)"; snprintf, as gcc 12's -Wrestrict misreads the same string concatenated.
std::string range_text(const kvtrace::Span& span) {
  char text[48];
  std::snprintf(text, sizeof text, "[%lld,%lld)", static_cast<long long>(span.start), static_cast<long long>(span.end));
  return text;
}

}  // namespace

nlohmann::json spans_json(const CellResult& cell) {
  nlohmann::json spans = nlohmann::json::array();
  for (const SpanResult& span : cell.spans) {
    nlohmann::json out = {{"seq", span.seq},     {"name", span.span.name}, {"kind", span.span.kind},
                          {"start", span.span.start}, {"end", span.span.end}, {"step", span.step}};
    add_measures(out, span.at_step, "");
    out["answer_rows"] = span.answer_rows;
    add_measures(out, span.answer, "answer_");
    spans.push_back(std::move(out));
  }
  return spans;
}

std::string span_table(const CellResult& cell) {
  if (cell.spans.empty()) return "";
  std::ostringstream out;
  out << "spans: the share of each span's positions held by every cache of every layer (all), by any\n"
         "(any), by none (gone), and the attention mass the rows put on it (mass) and on what the caches\n"
         "hold (held), at the step row and as means over the answer rows\n"
      << "seq  span        positions    step   all   any  gone  mass  held  rows   all   any  gone  mass  held\n";
  for (const SpanResult& span : cell.spans) {
    const std::string name = span.span.name == span.span.kind ? span.span.name : span.span.kind + ":" + span.span.name;
    out << text::left(std::to_string(span.seq), 5) << text::left(name.size() > 11 ? name.substr(0, 10) + "~" : name, 12)
        << text::left(range_text(span.span), 12)
        << text::right(span.step >= 0 ? std::to_string(span.step) : "-", 5) << measures_text(span.at_step)
        << text::right(std::to_string(span.answer_rows), 6) << measures_text(span.answer) << "\n";
  }
  return out.str();
}

}  // namespace kvsim
