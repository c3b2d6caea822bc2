#include "kvsim/replay/sweep_table.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "kvsim/core/text_util.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

using text::csv_field;
using text::number;
using text::trim;

// RFC 4180 records: fields separated by commas, optionally quoted with "" for a quote.
std::vector<std::vector<std::string>> parse_csv(const std::string& text, const std::string& file) {
  std::vector<std::vector<std::string>> records;
  std::vector<std::string> record;
  std::string field;
  bool quoted = false, field_started = false;
  size_t line = 1;
  auto end_record = [&] {
    record.push_back(field);
    field.clear();
    field_started = false;
    if (!(record.size() == 1 && trim(record[0]).empty())) records.push_back(record);
    record.clear();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        if (c == '\n') ++line;
        field += c;
      }
    } else if (c == '"' && !field_started) {
      quoted = field_started = true;
    } else if (c == ',') {
      record.push_back(field);
      field.clear();
      field_started = false;
    } else if (c == '\n') {
      end_record();
      ++line;
    } else if (c != '\r') {
      field += c;
      field_started = true;
    }
  }
  if (quoted) throw kvtrace::InputError(file, "", "line " + std::to_string(line) + ": unterminated quoted field");
  if (!field.empty() || !record.empty()) end_record();
  return records;
}

double csv_number(const std::string& text, const std::string& file, size_t line, const std::string& column) {
  const std::string value = trim(text);
  if (value.empty()) return std::numeric_limits<double>::quiet_NaN();
  char* end = nullptr;
  const double out = std::strtod(value.c_str(), &end);
  if (*end != '\0')
    throw kvtrace::InputError(file, "",
                              "line " + std::to_string(line) + ": " + column + " '" + value + "' is not a number");
  return out;
}

int64_t csv_integer(const std::string& text, const std::string& file, size_t line, const std::string& column) {
  const std::string value = trim(text);
  char* end = nullptr;
  errno = 0;
  const long long out = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE)
    throw kvtrace::InputError(file, "",
                              "line " + std::to_string(line) + ": " + column + " '" + value + "' is not an integer");
  return out;
}

}  // namespace

const std::vector<SweepColumn>& sweep_columns() {
  using R = SweepRow;
  static const std::vector<SweepColumn> columns = {
      {"policy", &R::policy},
      {"params", &R::params},
      {"budget", &R::budget},
      {"quant", &R::quant},
      {"bits_per_element", nullptr, &R::bits_per_element},
      {"budget_tokens_mean", nullptr, &R::budget_tokens_mean},
      {"budget_share_mean", nullptr, &R::budget_share_mean},
      {"mode", &R::mode},
      {"retention_mean", nullptr, &R::retention_mean},
      {"retention_p5", nullptr, &R::retention_p5},
      {"retention_min", nullptr, &R::retention_min},
      {"output_error_mean", nullptr, &R::output_error_mean},
      {"output_error_p95", nullptr, &R::output_error_p95},
      {"output_error_max", nullptr, &R::output_error_max},
      {"occupancy_mean", nullptr, &R::occupancy_mean},
      {"occupancy_peak", nullptr, nullptr, &R::occupancy_peak},
      {"evictions", nullptr, nullptr, &R::evictions},
      {"samples", nullptr, nullptr, &R::samples},
      {"occupancy_dense_mean", nullptr, &R::occupancy_dense_mean},
      {"occupancy_dense_peak", nullptr, &R::occupancy_dense_peak},
      {"occupancy_layer_union_mean", nullptr, &R::occupancy_layer_union_mean},
      {"occupancy_layer_union_peak", nullptr, &R::occupancy_layer_union_peak},
      {"occupancy_model_union_mean", nullptr, &R::occupancy_model_union_mean},
      {"occupancy_model_union_peak", nullptr, &R::occupancy_model_union_peak},
      {"question_retention_mean", nullptr, &R::question_retention_mean, nullptr, SweepColumn::Only::question},
      {"question_retention_min", nullptr, &R::question_retention_min, nullptr, SweepColumn::Only::question},
      {"answer_retention_mean", nullptr, &R::answer_retention_mean, nullptr, SweepColumn::Only::question},
      {"answer_retention_min", nullptr, &R::answer_retention_min, nullptr, SweepColumn::Only::question},
      {"page", nullptr, nullptr, &R::page, SweepColumn::Only::page},
  };
  return columns;
}

const SweepColumn* find_sweep_column(const std::string& name) {
  for (const auto& column : sweep_columns())
    if (name == column.name) return &column;
  return nullptr;
}

SweepRow sweep_row(const CellResult& cell, Mode mode, int64_t page) {
  SweepRow row;
  row.page = page;
  row.policy = cell.info ? cell.info->name : cell.policy;
  row.params = cell.params;
  row.budget = cell.budget.text;
  row.quant = cell.quant.name;
  row.mode = mode_name(mode);
  row.bits_per_element = cell.bits_per_element;
  row.budget_tokens_mean = cell.budget_tokens_mean;
  row.budget_share_mean = cell.budget_share_mean;
  row.retention_mean = cell.retention.mean;
  row.retention_p5 = cell.retention.p5;
  row.retention_min = cell.retention.min;
  row.output_error_mean = cell.output_error.mean;
  row.output_error_p95 = cell.output_error.p95;
  row.output_error_max = cell.output_error.max;
  row.occupancy_mean = cell.occupancy_mean;
  row.occupancy_peak = cell.occupancy_peak;
  row.evictions = cell.evictions;
  row.samples = cell.retention.count;
  row.question_retention_mean = cell.question_retention.mean;
  row.question_retention_min = cell.question_retention.min;
  row.answer_retention_mean = cell.answer_retention.mean;
  row.answer_retention_min = cell.answer_retention.min;
  row.occupancy_dense_mean = cell.occupancy_dense_mean;
  row.occupancy_dense_peak = cell.occupancy_dense_peak;
  row.occupancy_layer_union_mean = cell.occupancy_layer_union_mean;
  row.occupancy_layer_union_peak = cell.occupancy_layer_union_peak;
  row.occupancy_model_union_mean = cell.occupancy_model_union_mean;
  row.occupancy_model_union_peak = cell.occupancy_model_union_peak;
  std::vector<std::string> kinds;
  for (const SpanResult& span : cell.spans) add_span_kind(kinds, span.span.kind);
  row.spans = span_columns(cell.spans, kinds);
  return row;
}

CellResult cell_of_sweep_row(const SweepRow& row) {
  CellResult cell;
  cell.info = &find_policy(row.policy);
  cell.params = row.params;
  cell.budget = Budget::parse(row.budget);
  cell.quant = parse_quant(row.quant);
  cell.policy = row.policy + (row.params.empty() ? "" : "(" + row.params + ")") +
                (cell.quant.enabled() ? "+" + cell.quant.name : "");
  cell.bits_per_element = row.bits_per_element;
  cell.budget_tokens_mean = row.budget_tokens_mean;
  cell.budget_share_mean = row.budget_share_mean;
  cell.retention.mean = row.retention_mean, cell.retention.p5 = row.retention_p5,
  cell.retention.min = row.retention_min;
  cell.retention.count = row.samples;
  cell.output_error.mean = row.output_error_mean, cell.output_error.p95 = row.output_error_p95;
  cell.output_error.max = row.output_error_max;
  cell.output_error.count = std::isnan(row.output_error_mean) ? 0 : 1;
  cell.occupancy_mean = row.occupancy_mean;
  cell.occupancy_peak = row.occupancy_peak;
  cell.evictions = row.evictions;
  cell.question_retention.mean = row.question_retention_mean, cell.question_retention.min = row.question_retention_min;
  cell.answer_retention.mean = row.answer_retention_mean, cell.answer_retention.min = row.answer_retention_min;
  cell.occupancy_dense_mean = row.occupancy_dense_mean;
  cell.occupancy_dense_peak = row.occupancy_dense_peak;
  cell.occupancy_layer_union_mean = row.occupancy_layer_union_mean;
  cell.occupancy_layer_union_peak = row.occupancy_layer_union_peak;
  cell.occupancy_model_union_mean = row.occupancy_model_union_mean;
  cell.occupancy_model_union_peak = row.occupancy_model_union_peak;
  return cell;
}

SweepExtras sweep_extras(const ReplayResults& results) {
  return {results.question, results.paging.on(), results.span_kinds};
}

bool written(const SweepColumn& column, SweepExtras extras) {
  switch (column.only) {
    case SweepColumn::Only::question: return extras.question;
    case SweepColumn::Only::page: return extras.paged;
    default: return true;
  }
}

std::string sweep_csv_header(SweepExtras extras) {
  std::string out;
  for (const auto& column : sweep_columns()) {
    if (!written(column, extras)) continue;
    if (!out.empty()) out += ',';
    out += column.name;
  }
  for (const std::string& name : span_column_names(extras.span_kinds)) out += ',' + name;
  out += '\n';
  return out;
}

std::string sweep_csv_line(const SweepRow& row, SweepExtras extras) {
  std::string out;
  for (const auto& column : sweep_columns()) {
    if (!written(column, extras)) continue;
    if (!out.empty()) out += ',';
    if (column.text)
      out += csv_field(row.*column.text);
    else if (column.real)
      out += number(row.*column.real);
    else
      out += std::to_string(row.*column.integer);
  }
  for (const std::string& name : span_column_names(extras.span_kinds))
    out += ',' + number(span_column_value(row.spans, name));
  out += '\n';
  return out;
}

std::string sweep_csv(const ReplayResults& results) {
  const SweepExtras extras = sweep_extras(results);
  std::string out = sweep_csv_header(extras);
  for (const auto& cell : results.cells)
    out += sweep_csv_line(sweep_row(cell, results.mode, results.paging.page), extras);
  return out;
}

SweepCsv read_sweep_csv(const std::string& text, const std::string& file, const std::vector<std::string>& required) {
  const auto records = parse_csv(text, file);
  if (records.empty()) throw kvtrace::InputError(file, "", "empty: expected the CSV kvsim sweep --csv writes");
  std::map<std::string, size_t> index;
  for (size_t c = 0; c < records[0].size(); ++c) index[trim(records[0][c])] = c;
  for (const auto& name : required)
    if (!index.count(name))
      throw kvtrace::InputError(file, "", "no '" + name + "' column (expected the CSV kvsim sweep --csv writes)");
  SweepCsv out;
  std::vector<std::pair<const SweepColumn*, size_t>> present;
  for (const auto& column : sweep_columns()) {
    const auto found = index.find(column.name);
    if (found == index.end()) continue;
    present.emplace_back(&column, found->second);
    out.columns.push_back(column.name);
  }
  for (size_t r = 1; r < records.size(); ++r) {
    const auto& record = records[r];
    const size_t line = r + 1;
    if (record.size() < records[0].size())
      throw kvtrace::InputError(file, "",
                                "line " + std::to_string(line) + ": " + std::to_string(record.size()) +
                                    " fields, the header has " + std::to_string(records[0].size()));
    SweepRow row;
    for (const auto& [column, c] : present) {
      if (column->text)
        row.*column->text = trim(record[c]);
      else if (column->real)
        row.*column->real = csv_number(record[c], file, line, column->name);
      else
        row.*column->integer = csv_integer(record[c], file, line, column->name);
    }
    if (row.policy.empty()) throw kvtrace::InputError(file, "", "line " + std::to_string(line) + ": empty policy");
    out.rows.push_back(std::move(row));
  }
  if (out.rows.empty()) throw kvtrace::InputError(file, "", "no rows after the header");
  return out;
}

}  // namespace kvsim
