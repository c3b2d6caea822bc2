// The leaderboard of kvsim rank (rank.hpp) as text, Markdown, LaTeX and CSV: one set of cells,
// four ways of writing them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "kvsim/core/text_util.hpp"
#include "kvsim/plan/rank.hpp"
#include "kvsim/replay/report.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

std::string decimals(double value, int places) {
  if (std::isnan(value)) return "-";
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "%.*f", places, value);
  return buffer;
}

std::string op(const Ranking& r) { return r.higher_is_better ? ">=" : "<="; }
std::string target_text(const Ranking& r) { return text::number(r.target, "%.10g"); }

bool any_bound(const Ranking& r) {
  for (const auto& entry : r.ranked)
    if (entry.bound) return true;
  return false;
}

// The table: a header and a row per ranked entry, every cell as text writes it; each format
// escapes the cells and marks an upper bound after its name (column 1) its own way.
struct Cells {
  std::vector<std::string> header;
  std::vector<bool> right;  // numbers align right
  std::vector<std::vector<std::string>> rows;
  std::vector<bool> bound;
};

Cells cells(const Ranking& r) {
  Cells out;
  out.header = {"rank", "policy"};
  out.right = {true, false};
  if (r.has_quant) out.header.push_back("quant"), out.right.push_back(false);
  if (r.mixed_modes) out.header.push_back("mode"), out.right.push_back(false);
  out.header.push_back("mean");
  out.right.push_back(true);
  out.header.push_back("smallest budget");
  out.right.push_back(false);
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    const RankEntry& entry = r.ranked[i];
    std::vector<std::string> row = {std::to_string(i + 1), entry.name()};
    out.bound.push_back(entry.bound);
    if (r.has_quant) row.push_back(entry.quant.empty() ? "none" : entry.quant);
    if (r.mixed_modes) row.push_back(entry.mode);
    row.push_back(decimals(entry.mean, 4));
    if (entry.smallest) {
      const RankPoint& point = entry.points[*entry.smallest];
      row.push_back(point.budget + " (" + decimals(point.share, 4) + ")");
    } else {
      row.push_back("-");
    }
    out.rows.push_back(std::move(row));
  }
  return out;
}

std::string title(const Ranking& r) {
  return r.sweep + ": " + std::to_string(r.ranked.size()) + (r.ranked.size() == 1 ? " policy" : " policies") +
         " ranked by " + r.metric + " over " + std::to_string(r.budgets.size()) + " budgets, shares " +
         decimals(r.share_low, 4) + " to " + decimals(r.share_high, 4);
}

// What the columns mean, then the notes: what text, Markdown and LaTeX print below the table.
std::vector<std::string> explanations(const Ranking& r) {
  std::vector<std::string> out = {
      "mean: the area under " + r.metric + " against budget_share_mean (trapezoid rule) over the span of shares; " +
          (r.higher_is_better ? "higher is better, ranked descending" : "lower is better, ranked ascending"),
      "smallest budget: the least budget share whose " + r.metric + " " + op(r) + " " + target_text(r) +
          " ('-': none)"};
  if (any_bound(r)) out.push_back("* an upper bound, not a policy");
  for (const auto& entry : r.apart)
    out.push_back(entry.name() + (r.has_quant ? " (" + (entry.quant.empty() ? "none" : entry.quant) + ")" : "") +
                  (entry.reads_budget ? ": may hold more than the budget" : ": ignores the budget") + ", not ranked (" +
                  r.metric + " " + decimals(entry.mean, 4) + ", the mean of its rows)");
  out.insert(out.end(), r.notes.begin(), r.notes.end());
  return out;
}

// The characters that would break a table cell or start a list or code; an underscore inside
// a word (retention_mean) is never emphasis in CommonMark.
std::string markdown_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\' || c == '|' || c == '*' || c == '`') out += '\\';
    out += c;
  }
  return out;
}

std::string latex_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\')
      out += "\\textbackslash{}";
    else if (c == '~')
      out += "\\textasciitilde{}";
    else if (c == '^')
      out += "\\textasciicircum{}";
    else if (std::string("&%$#_{}").find(c) != std::string::npos)
      out.append(1, '\\').append(1, c);
    else
      out += c;
  }
  return out;
}

}  // namespace

std::string rank_text(const Ranking& r) {
  Cells table = cells(r);
  for (size_t i = 0; i < table.rows.size(); ++i)
    if (table.bound[i]) table.rows[i][1] += "*";
  std::vector<size_t> width(table.header.size());
  for (size_t c = 0; c < width.size(); ++c) {
    width[c] = table.header[c].size();
    for (const auto& row : table.rows) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& row) {
    std::string out;
    for (size_t c = 0; c < row.size(); ++c) {
      const bool last = c + 1 == row.size();
      const std::string cell =
          table.right[c] ? text::right(row[c], width[c]) : (last ? row[c] : text::left(row[c], width[c]));
      out.append(c == 0 ? "" : "  ").append(cell);
    }
    return out + "\n";
  };
  std::string out = wrap_text(title(r)) + "\n" + line(table.header);
  for (const auto& row : table.rows) out += line(row);
  out += "\n";
  for (const auto& note : explanations(r)) out += wrap_text(note, 100, 2) + "\n";
  return out;
}

std::string rank_markdown(const Ranking& r) {
  const Cells table = cells(r);
  std::string out = markdown_escaped(title(r)) + "\n\n|";
  for (const auto& cell : table.header) out += " " + cell + " |";
  out += "\n|";
  for (bool right : table.right) out += right ? " ---: |" : " --- |";
  out += "\n";
  for (size_t i = 0; i < table.rows.size(); ++i) {
    out += "|";
    for (size_t c = 0; c < table.rows[i].size(); ++c)
      out.append(" ")
          .append(markdown_escaped(table.rows[i][c]))
          .append(c == 1 && table.bound[i] ? "\\*" : "")
          .append(" |");
    out += "\n";
  }
  out += "\n";
  for (const auto& note : explanations(r)) out.append("- ").append(markdown_escaped(note)).append("\n");
  return out;
}

std::string rank_latex(const Ranking& r) {
  const Cells table = cells(r);
  std::string out = "% " + title(r) + "\n\\begin{tabular}{";
  for (bool right : table.right) out += right ? "r" : "l";
  out += "}\n\\hline\n";
  auto line = [&](const std::vector<std::string>& row, bool bound) {
    std::string text;
    for (size_t c = 0; c < row.size(); ++c)
      text.append(c == 0 ? "" : " & ").append(latex_escaped(row[c])).append(c == 1 && bound ? "$^*$" : "");
    return text + " \\\\\n";
  };
  out += line(table.header, false) + "\\hline\n";
  for (size_t i = 0; i < table.rows.size(); ++i) out += line(table.rows[i], table.bound[i]);
  out += "\\hline\n\\end{tabular}\n";
  for (const auto& note : explanations(r)) out += "% " + note + "\n";
  return out;
}

std::string rank_csv(const Ranking& r) {
  std::ostringstream out;
  out << "rank,policy,params,quant,mode,upper_bound,metric,better,mean,share_low,share_high,budgets,target,"
         "smallest_budget,smallest_budget_share\n";
  const std::string common = std::string(",") + r.metric + "," + (r.higher_is_better ? "higher" : "lower") + ",";
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    const RankEntry& e = r.ranked[i];
    out << i + 1 << "," << text::csv_field(e.policy) << "," << text::csv_field(e.params) << ","
        << text::csv_field(e.quant) << "," << text::csv_field(e.mode) << "," << (e.bound ? "true" : "false") << common
        << text::number(e.mean) << "," << text::number(e.points.front().share) << ","
        << text::number(e.points.back().share) << "," << e.points.size() << "," << text::number(r.target) << ",";
    if (e.smallest)
      out << text::csv_field(e.points[*e.smallest].budget) << "," << text::number(e.points[*e.smallest].share);
    else
      out << ",";
    out << "\n";
  }
  // Policies apart (ignoring the budget or holding more): no rank, the mean of their rows, no curve.
  for (const auto& e : r.apart)
    out << "," << text::csv_field(e.policy) << "," << text::csv_field(e.params) << "," << text::csv_field(e.quant)
        << "," << text::csv_field(e.mode) << ",false" << common << text::number(e.mean) << ",,," << e.points.size()
        << "," << text::number(r.target) << ",,\n";
  return out.str();
}

void check_rank_format(const std::string& format) {
  if (format != "text" && format != "markdown" && format != "latex" && format != "csv")
    throw kvtrace::InputError("", "", "--format: '" + format + "' is not text, markdown, latex or csv");
}

std::string rank_format(const Ranking& ranking, const std::string& format) {
  check_rank_format(format);
  if (format == "markdown") return rank_markdown(ranking);
  if (format == "latex") return rank_latex(ranking);
  if (format == "csv") return rank_csv(ranking);
  return rank_text(ranking);
}

}  // namespace kvsim
