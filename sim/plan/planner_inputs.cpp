// The planner's inputs (kvsim/plan/planner.hpp): model and GPU cards (JSON files, found by name),
// quality targets, sweep CSV files and context lengths. The capacity arithmetic is in
// planner.cpp.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "card_fields.hpp"
#include "kvsim/plan/planner.hpp"
#include "kvtrace/error.hpp"
#include "kvsim/core/text_util.hpp"

namespace kvsim {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using text::lower;
using text::trim;

[[noreturn]] void bad_card(const std::string& file, const std::string& problem) {
  throw kvtrace::InputError(file, "", problem);
}

json parse_json(const std::string& text, const std::string& file) {
  try {
    json document = json::parse(text);
    if (!document.is_object()) bad_card(file, "not a JSON object");
    return document;
  } catch (const json::parse_error& e) {
    bad_card(file, std::string("not valid JSON: ") + e.what());
  }
}

std::string text_field(const json& card, const std::string& key, const std::string& file, bool required = true) {
  if (!card.contains(key)) {
    if (required) bad_card(file, "missing \"" + key + "\"");
    return "";
  }
  if (!card[key].is_string()) bad_card(file, "\"" + key + "\" must be a string");
  return card[key].get<std::string>();
}

// An integer field of a card, checked in its own range before it is stored anywhere
// narrower: `n_layers` 4294967297 must not become 1.
int64_t int_field(const json& card, const std::string& key, const std::string& file, int64_t lowest, int64_t highest) {
  if (!card.contains(key)) bad_card(file, "missing \"" + key + "\"");
  const json& value = card[key];
  if (!value.is_number_integer()) bad_card(file, "\"" + key + "\" must be an integer");
  // Unsigned JSON numbers may exceed int64_t: compare them as they are.
  const bool in_range = value.is_number_unsigned() ? value.get<uint64_t>() >= static_cast<uint64_t>(lowest) &&
                                                         value.get<uint64_t>() <= static_cast<uint64_t>(highest)
                                                   : value.get<int64_t>() >= lowest && value.get<int64_t>() <= highest;
  if (!in_range)
    throw kvtrace::InputError(file, key,
                              value.dump() + " is outside " + std::to_string(lowest) + ".." + std::to_string(highest));
  return value.get<int64_t>();
}

// A card by path (anything ending in .json), by file name in `dir`, or by display name or
// Hugging Face id (case-insensitive).
template <typename Card, typename Parse>
Card find_card(const std::string& value, const std::string& dir, const std::string& option, Parse parse) {
  if (value.size() > 5 && value.substr(value.size() - 5) == ".json")
    return parse(read_text_file(value, "the card"), value);
  const std::string wanted = lower(value);
  const fs::path direct = fs::path(dir) / (wanted + ".json");
  if (fs::exists(direct)) return parse(read_text_file(direct.string(), "the card"), direct.string());
  std::string known;
  for (const auto& path : card_files(dir)) {
    const Card card = parse(read_text_file(path, "the card"), path);
    if (lower(card.display_name) == wanted || lower(card.name) == wanted) return card;
    if constexpr (requires { card.hf_id; }) {
      if (!card.hf_id.empty() && lower(card.hf_id) == wanted) return card;
    }
    known += (known.empty() ? "" : ", ") + card.name;
  }
  if (known.empty())
    throw kvtrace::InputError(dir, "", "no cards here (--cards names the folder holding models/ and gpus/)");
  throw kvtrace::InputError("", "",
                            "--" + option + ": no card '" + value + "' (known: " + known + "; or give a card file)");
}

// How a row is named in errors.
std::string row_name(size_t index, SweepRowNames names) {
  return names == SweepRowNames::csv_lines ? "line " + std::to_string(index + 2) : "row " + std::to_string(index);
}

// The range of values a sweep writes in a numeric column: a retention is a share of attention,
// the others are counts or sizes. NaN (an empty field) is a metric not measured.
struct ColumnRange {
  double lowest, highest;
  bool lowest_open;
  bool empty_allowed;
  const char* text;
};
ColumnRange column_range(const std::string& name) {
  constexpr double kHuge = std::numeric_limits<double>::max();
  constexpr double kRetentionSlack = 1e-6;  // a sum of rounded attention weights
  if (name.find("retention") != std::string::npos) return {0, 1 + kRetentionSlack, false, true, "in [0, 1]"};
  if (name == "budget_tokens_mean") return {1, kHuge, false, false, "at least 1"};
  if (name == "budget_share_mean") return {0, kHuge, true, false, "above 0"};
  if (name == "bits_per_element") return {0, kHuge, false, false, "at least 0"};
  return {0, kHuge, false, true, "at least 0"};
}

// One row's values, each in its column's range (the columns the rows came with).
void check_sweep_values(const SweepRow& row, const std::vector<std::string>& columns, const std::string& source,
                        const std::string& where) {
  auto fail = [&](const std::string& problem) { throw kvtrace::InputError(source, "", where + ": " + problem); };
  for (const std::string& name : columns) {
    const SweepColumn* column = find_sweep_column(name);
    if (column && column->integer && row.*column->integer < 0)
      fail(name + " " + std::to_string(row.*column->integer) + " is negative");
    if (!column || !column->real) continue;
    const double value = row.*column->real;
    const ColumnRange range = column_range(name);
    if (std::isnan(value)) {
      if (!range.empty_allowed) fail(name + " is empty or not a number");
      continue;
    }
    const bool below = range.lowest_open ? value <= range.lowest : value < range.lowest;
    if (!std::isfinite(value) || below || value > range.highest) {
      std::ostringstream problem;
      problem.precision(10);
      problem << name << " " << value << " is not " << range.text;
      fail(problem.str());
    }
  }
  try {
    Budget::parse(row.budget);
    if (!row.quant.empty()) parse_quant(row.quant);
  } catch (const kvtrace::InputError& e) {
    fail(e.problem());
  }
}

// What makes two rows the same cell: policy, params, budget (20% and 20.0% alike), quant,
// mode and page.
std::string cell_key(const SweepRow& row) {
  return row.policy + '\n' + row.params + '\n' + budget_key(row.budget) + '\n' + lower(row.quant) + '\n' + row.mode +
         '\n' + std::to_string(row.page);
}

}  // namespace

std::string budget_key(const std::string& text) {
  const Budget budget = Budget::parse(text);
  if (!budget.fraction && !budget.ratio) return std::to_string(budget.tokens);
  const int64_t divisor = std::gcd(budget.numerator, budget.denominator);
  return (budget.ratio ? "ratio " : "") + std::to_string(budget.numerator / divisor) + "/" +
         std::to_string(budget.denominator / divisor);
}

// ---- cards ----

ModelCard parse_model_card(const std::string& json_text, const std::string& file) {
  const json card = parse_json(json_text, file);
  if (is_hf_config(json_text)) return model_card_from_hf_config(json_text, file);
  ModelCard model;
  model.name = text_field(card, "name", file);
  model.display_name = text_field(card, "display_name", file, false);
  if (model.display_name.empty()) model.display_name = model.name;
  model.hf_id = text_field(card, "hf_id", file, false);
  model.source = text_field(card, "source", file);
  model.n_layers = static_cast<int>(int_field(card, "n_layers", file, 1, card_limits::kLayers));
  model.n_heads = static_cast<int>(int_field(card, "n_heads", file, 1, card_limits::kHeads));
  model.n_kv_heads = static_cast<int>(int_field(card, "n_kv_heads", file, 1, card_limits::kHeads));
  model.head_dim = static_cast<int>(int_field(card, "head_dim", file, 1, card_limits::kHeadDim));
  model.parameters = int_field(card, "parameters", file, 1, card_limits::kParameters);
  model.max_context = int_field(card, "max_context", file, 1, card_limits::kContext);
  if (model.n_heads % model.n_kv_heads != 0)
    bad_card(file, "n_heads (" + std::to_string(model.n_heads) + ") is not a multiple of n_kv_heads (" +
                       std::to_string(model.n_kv_heads) + ")");
  card_fields::read_card_extensions({card, file, ""}, model);
  return model;
}

GpuCard parse_gpu_card(const std::string& json_text, const std::string& file) {
  const json card = parse_json(json_text, file);
  GpuCard gpu;
  gpu.name = text_field(card, "name", file);
  gpu.display_name = text_field(card, "display_name", file, false);
  if (gpu.display_name.empty()) gpu.display_name = gpu.name;
  gpu.source = text_field(card, "source", file);
  if (card.contains("memory_mib"))
    gpu.memory_bytes = static_cast<uint64_t>(int_field(card, "memory_mib", file, 1, card_limits::kGpuBytes >> 20))
                       << 20;
  else if (card.contains("memory_bytes"))
    gpu.memory_bytes = static_cast<uint64_t>(int_field(card, "memory_bytes", file, 1, card_limits::kGpuBytes));
  else
    bad_card(file, "missing \"memory_mib\" (or \"memory_bytes\")");
  card_fields::read_gpu_roofline({card, file, ""}, gpu);
  return gpu;
}

std::string read_text_file(const std::string& path, const std::string& what) {
  std::error_code error;
  // A folder opens as a stream of no text, which would read as an empty file.
  if (fs::is_directory(path, error)) throw kvtrace::InputError(path, "", "cannot read " + what + ": it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw kvtrace::InputError(path, "", "cannot read " + what);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> card_files(const std::string& dir) {
  std::vector<fs::path> paths;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error))
    if (entry.path().extension() == ".json") paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  return {paths.begin(), paths.end()};
}

ModelCard find_model_card(const std::string& value, const std::string& dir) {
  return find_card<ModelCard>(value, dir, "model", parse_model_card);
}

GpuCard find_gpu_card(const std::string& value, const std::string& dir) {
  return find_card<GpuCard>(value, dir, "gpu", parse_gpu_card);
}

// ---- targets and sweeps ----

Target parse_target(const std::string& original) {
  Target target;
  target.text = original;
  std::string text;
  for (char c : original)
    if (!std::isspace(static_cast<unsigned char>(c))) text += c;
  size_t op = text.find(">=");
  target.at_least = op != std::string::npos;
  if (op == std::string::npos) op = text.find("<=");
  if (op == std::string::npos || op == 0)
    throw kvtrace::InputError(
        "", "", "--target '" + original + "': write METRIC>=VALUE or METRIC<=VALUE, e.g. retention>=0.95");
  std::string metric = lower(text.substr(0, op));
  const std::string number = text.substr(op + 2);
  char* end = nullptr;
  target.value = std::strtod(number.c_str(), &end);
  if (number.empty() || *end != '\0' || !std::isfinite(target.value))
    throw kvtrace::InputError("", "", "--target '" + original + "': '" + number + "' is not a number");
  if (metric == "retention" || metric == "output_error") metric += "_mean";
  static const std::vector<std::string> higher = {"retention_mean", "retention_p5", "retention_min"};
  static const std::vector<std::string> lower_better = {"output_error_mean", "output_error_p95", "output_error_max"};
  const bool is_higher = std::find(higher.begin(), higher.end(), metric) != higher.end();
  const bool is_lower = std::find(lower_better.begin(), lower_better.end(), metric) != lower_better.end();
  if (!is_higher && !is_lower)
    throw kvtrace::InputError("", "",
                              "--target '" + original + "': unknown metric '" + metric +
                                  "' (retention, retention_p5, retention_min with >=; output_error, "
                                  "output_error_p95, output_error_max with <=)");
  if (is_higher != target.at_least)
    throw kvtrace::InputError("", "",
                              "--target '" + original + "': " + metric + " is " +
                                  (is_higher ? "better higher: use >=" : "better lower: use <="));
  target.column = metric;
  return target;
}

SweepTable sweep_table(const std::vector<SweepRow>& rows, const std::vector<std::string>& columns,
                       const std::string& source, const std::string& metric_column, SweepRowNames names) {
  auto has = [&](const std::string& name) { return std::find(columns.begin(), columns.end(), name) != columns.end(); };
  for (const std::string name : {"policy", "budget", "budget_share_mean", "retention_mean", metric_column.c_str()})
    if (!has(name))
      throw kvtrace::InputError(source, "", "no '" + name + "' column (expected the CSV kvsim sweep --csv writes)");
  const SweepColumn* metric = find_sweep_column(metric_column);
  if (!metric || !metric->real) throw kvtrace::InputError(source, "", "'" + metric_column + "' is not a metric");
  SweepTable table;
  table.has_peak = has("occupancy_peak");
  table.has_layouts = has("occupancy_dense_peak") && has("occupancy_layer_union_peak") &&
                      has("occupancy_model_union_peak");
  if (table.has_peak && !has("budget_tokens_mean"))
    throw kvtrace::InputError(source, "",
                              "occupancy_peak without budget_tokens_mean: the plan cannot tell what the peak held "
                              "beyond the budget");
  std::map<std::string, size_t> seen;  // cell key -> the first row with it
  for (size_t index = 0; index < rows.size(); ++index) {
    const SweepRow& row = rows[index];
    check_sweep_values(row, columns, source, row_name(index, names));
    const auto [first, added] = seen.emplace(cell_key(row), index);
    if (!added)
      throw kvtrace::InputError(source, "",
                                row_name(index, names) + ": " + row.policy +
                                    (row.params.empty() ? "" : "(" + row.params + ")") + " at budget " + row.budget +
                                    " again (" + row_name(first->second, names) +
                                    "): one row per policy, params, budget, quant, mode and page");
    TargetRow target;
    static_cast<SweepRow&>(target) = row;
    target.metric = row.*metric->real;
    if (!table.rows.empty() && row.mode != table.rows.front().mode) table.mixed_modes = true;
    table.rows.push_back(std::move(target));
  }
  if (table.rows.empty()) throw kvtrace::InputError(source, "", "no rows after the header");
  // `sweep --csv` always writes the column: a sweep that quantized nothing is unquantized.
  table.has_quant = std::any_of(table.rows.begin(), table.rows.end(),
                                [](const SweepRow& row) { return !row.quant.empty() && row.quant != "none"; });
  return table;
}

SweepTable parse_sweep_csv(const std::string& text, const std::string& file, const std::string& metric_column) {
  const SweepCsv csv = read_sweep_csv(text, file, {"policy", "budget", "budget_share_mean", "retention_mean", metric_column});
  return sweep_table(csv.rows, csv.columns, file, metric_column, SweepRowNames::csv_lines);
}

// ---- contexts ----

std::optional<int64_t> parse_context_number(const std::string& original) {
  const std::string text = trim(original);
  if (text.empty() || text.find_first_not_of("0123456789+ ") != std::string::npos) return std::nullopt;
  int64_t total = 0;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, '+')) {
    part = trim(part);
    if (part.empty() || part.size() > 12)
      throw kvtrace::InputError(
          "", "", "--context '" + original + "': write TOKENS or PROMPT+GENERATION, e.g. 4096 or 3072+1024");
    total += std::stoll(part);
    if (total > card_limits::kContext)
      throw kvtrace::InputError("", "",
                                "--context '" + original + "': more than " + std::to_string(card_limits::kContext) +
                                    " tokens (no model card goes beyond)");
  }
  if (total < 1) throw kvtrace::InputError("", "", "--context '" + original + "': must be at least 1 token");
  return total;
}

std::vector<int64_t> parse_context_csv(const std::string& text, const std::string& file) {
  std::vector<std::vector<std::string>> records;
  {
    std::stringstream stream(text);
    std::string line;
    while (std::getline(stream, line)) {
      const std::string t = trim(line);
      if (t.empty() || t[0] == '#') {
        records.push_back({});  // keeps line numbers
        continue;
      }
      std::vector<std::string> fields;
      std::stringstream fs(t);
      std::string field;
      while (std::getline(fs, field, ',')) fields.push_back(lower(trim(field)));
      records.push_back(fields);
    }
  }
  auto is_number = [](const std::string& s) {
    return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
  };
  size_t header = 0;
  while (header < records.size() && records[header].empty()) ++header;
  if (header == records.size()) throw kvtrace::InputError(file, "", "no context lengths");
  std::vector<size_t> sum_columns;
  size_t first_data = header;
  if (!is_number(records[header][0])) {
    const auto& names = records[header];
    auto find = [&](std::initializer_list<const char*> candidates) -> std::optional<size_t> {
      for (const char* name : candidates)
        for (size_t c = 0; c < names.size(); ++c)
          if (names[c] == name) return c;
      return std::nullopt;
    };
    if (const auto total = find({"context", "length", "tokens", "n_tokens", "total_tokens"})) {
      sum_columns = {*total};
    } else {
      const auto prompt = find({"prompt", "prompt_tokens", "prompt_len", "input_tokens", "input_len"});
      const auto generation =
          find({"generation", "output_tokens", "completion_tokens", "max_tokens", "output_len", "generation_tokens"});
      if (!prompt || !generation)
        throw kvtrace::InputError(file, "",
                                  "header names no length column (context, length, tokens, n_tokens, or "
                                  "prompt_tokens + output_tokens)");
      sum_columns = {*prompt, *generation};
    }
    first_data = header + 1;
  } else {
    sum_columns = {0};
  }
  std::vector<int64_t> out;
  for (size_t r = first_data; r < records.size(); ++r) {
    if (records[r].empty()) continue;
    int64_t total = 0;
    for (size_t column : sum_columns) {
      if (column >= records[r].size() || !is_number(records[r][column]) || records[r][column].size() > 12)
        throw kvtrace::InputError(file, "", "line " + std::to_string(r + 1) + ": not a token count");
      total += std::stoll(records[r][column]);
    }
    if (total < 1)
      throw kvtrace::InputError(file, "", "line " + std::to_string(r + 1) + ": a length must be at least 1");
    out.push_back(total);
  }
  if (out.empty()) throw kvtrace::InputError(file, "", "no context lengths");
  return out;
}

}  // namespace kvsim
