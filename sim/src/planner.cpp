#include "kvsim/planner.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

using nlohmann::json;

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

int64_t int_field(const json& card, const std::string& key, const std::string& file) {
  if (!card.contains(key)) bad_card(file, "missing \"" + key + "\"");
  const json& value = card[key];
  if (!value.is_number_integer() && !value.is_number_unsigned())
    bad_card(file, "\"" + key + "\" must be an integer");
  const int64_t out = value.get<int64_t>();
  if (out <= 0) bad_card(file, "\"" + key + "\" must be positive");
  return out;
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string trim(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  const size_t last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

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
    throw kvtrace::InputError(file, "", "line " + std::to_string(line) + ": " + column + " '" + value + "' is not a number");
  return out;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

// ---- cards ----

ModelCard parse_model_card(const std::string& json_text, const std::string& file) {
  const json card = parse_json(json_text, file);
  ModelCard model;
  model.name = text_field(card, "name", file);
  model.display_name = text_field(card, "display_name", file, false);
  if (model.display_name.empty()) model.display_name = model.name;
  model.hf_id = text_field(card, "hf_id", file, false);
  model.source = text_field(card, "source", file);
  model.n_layers = static_cast<int>(int_field(card, "n_layers", file));
  model.n_heads = static_cast<int>(int_field(card, "n_heads", file));
  model.n_kv_heads = static_cast<int>(int_field(card, "n_kv_heads", file));
  model.head_dim = static_cast<int>(int_field(card, "head_dim", file));
  model.parameters = int_field(card, "parameters", file);
  model.max_context = int_field(card, "max_context", file);
  if (model.n_heads % model.n_kv_heads != 0)
    bad_card(file, "n_heads (" + std::to_string(model.n_heads) + ") is not a multiple of n_kv_heads (" +
                       std::to_string(model.n_kv_heads) + ")");
  return model;
}

GpuCard parse_gpu_card(const std::string& json_text, const std::string& file) {
  const json card = parse_json(json_text, file);
  GpuCard gpu;
  gpu.name = text_field(card, "name", file);
  gpu.display_name = text_field(card, "display_name", file, false);
  if (gpu.display_name.empty()) gpu.display_name = gpu.name;
  gpu.source = text_field(card, "source", file);
  if (card.contains("memory_mib")) gpu.memory_bytes = static_cast<uint64_t>(int_field(card, "memory_mib", file)) << 20;
  else if (card.contains("memory_bytes")) gpu.memory_bytes = static_cast<uint64_t>(int_field(card, "memory_bytes", file));
  else bad_card(file, "missing \"memory_mib\" (or \"memory_bytes\")");
  return gpu;
}

uint64_t parse_memory(const std::string& original, const std::string& option) {
  auto fail = [&](const std::string& problem) -> uint64_t {
    throw kvtrace::InputError("", "", "--" + option + ": '" + original + "' " + problem);
  };
  const std::string text = lower(trim(original));
  size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) ++digits;
  if (digits == 0) return fail("is not a size (write e.g. 80GB, 80GiB or 512MiB)");
  char* end = nullptr;
  const std::string number = text.substr(0, digits);
  const double value = std::strtod(number.c_str(), &end);
  if (*end != '\0' || !std::isfinite(value) || value < 0) return fail("is not a size");
  const std::string unit = text.substr(digits);
  static const std::map<std::string, double> units = {
      {"b", 1.0},      {"kb", 1e3},     {"mb", 1e6},     {"gb", 1e9},     {"tb", 1e12},
      {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0}};
  if (unit.empty()) {
    if (value == 0) return 0;
    return fail("needs a unit: GB (10^9 bytes) or GiB (2^30 bytes), e.g. 80GB");
  }
  const auto found = units.find(unit);
  if (found == units.end()) return fail("has an unknown unit '" + unit + "' (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)");
  const double bytes = value * found->second;
  if (bytes > 1e18) return fail("is absurdly large");
  return static_cast<uint64_t>(std::llround(bytes));
}

double weight_bytes_per_param(const std::string& dtype) {
  const std::string d = lower(dtype);
  if (d == "fp32" || d == "float32" || d == "f32") return 4;
  if (d == "fp16" || d == "float16" || d == "f16" || d == "bf16" || d == "bfloat16") return 2;
  if (d == "fp8" || d == "int8" || d == "float8") return 1;
  if (d == "int4" || d == "fp4" || d == "nf4") return 0.5;
  throw kvtrace::InputError("", "", "--weight-dtype: unknown dtype '" + dtype + "' (fp32, bf16, fp16, fp8, int8, int4)");
}

int kv_dtype_bits(const std::string& dtype) {
  const std::string d = lower(dtype);
  if (d == "fp32" || d == "float32" || d == "f32") return 32;
  if (d == "fp16" || d == "float16" || d == "f16" || d == "bf16" || d == "bfloat16") return 16;
  if (d == "fp8" || d == "float8" || d == "fp8_e4m3" || d == "fp8_e5m2") return 8;
  throw kvtrace::InputError("", "", "--kv-dtype: unknown dtype '" + dtype + "' (fp32, fp16, bf16, fp8)");
}

// ---- memory ----

int kv_heads_per_gpu(const ModelCard& model, int gpus) {
  auto fail = [&](const std::string& problem) -> int {
    throw kvtrace::InputError("", "", "--gpus " + std::to_string(gpus) + ": " + problem);
  };
  if (gpus < 1) return fail("must be at least 1");
  if (model.n_heads % gpus != 0)
    return fail(model.display_name + "'s " + std::to_string(model.n_heads) +
                " attention heads do not split evenly (tensor parallelism needs gpus to divide them)");
  if (model.n_kv_heads >= gpus) {
    if (model.n_kv_heads % gpus != 0)
      return fail(model.display_name + "'s " + std::to_string(model.n_kv_heads) + " kv heads do not split evenly");
    return model.n_kv_heads / gpus;
  }
  if (gpus % model.n_kv_heads != 0)
    return fail("more GPUs than kv heads (" + std::to_string(model.n_kv_heads) +
                ") needs gpus to be a multiple of them, so each kv head is replicated evenly");
  return 1;  // each GPU holds one kv head, replicated gpus / n_kv_heads times
}

MemoryPlan plan_memory(const PlanSetup& setup) {
  const ModelCard& model = setup.model;
  if (!(setup.utilization > 0 && setup.utilization <= 1))
    throw kvtrace::InputError("", "", "--utilization must be in (0, 1]");
  if (setup.block_size < 1) throw kvtrace::InputError("", "", "--block-size must be at least 1");
  if (setup.contexts.empty()) throw kvtrace::InputError("", "", "--context: no context lengths");
  for (int64_t context : setup.contexts) {
    if (context < 1) throw kvtrace::InputError("", "", "--context: lengths must be at least 1 token");
    if (context > model.max_context)
      throw kvtrace::InputError("", "", "--context: " + std::to_string(context) + " tokens exceed " +
                                            model.display_name + "'s maximum context of " +
                                            std::to_string(model.max_context));
  }
  MemoryPlan memory;
  memory.kv_heads_per_gpu = kv_heads_per_gpu(model, setup.gpus);
  memory.gpu_bytes = setup.gpu.memory_bytes;
  memory.usable_bytes = static_cast<int64_t>(std::floor(static_cast<double>(setup.gpu.memory_bytes) * setup.utilization));
  const double weights = static_cast<double>(model.parameters) * weight_bytes_per_param(setup.weight_dtype);
  memory.weight_bytes = static_cast<int64_t>(std::ceil(weights / setup.gpus));
  memory.reserve_bytes = static_cast<int64_t>(setup.reserve_bytes);
  memory.kv_bytes = memory.usable_bytes - memory.weight_bytes - memory.reserve_bytes;
  if (memory.kv_bytes <= 0) {
    std::ostringstream problem;
    problem.precision(3);
    problem << model.display_name << " does not fit: " << setup.gpus << " x " << setup.gpu.display_name << " at "
            << setup.utilization << " utilisation give " << memory.usable_bytes / 1e9 << " GB per GPU, the "
            << setup.weight_dtype << " weights take " << memory.weight_bytes / 1e9 << " GB and the reserve "
            << memory.reserve_bytes / 1e9 << " GB, leaving nothing for the KV cache (more --gpus, a smaller "
            << "--weight-dtype or --reserve?)";
    throw kvtrace::InputError("", "", problem.str());
  }
  return memory;
}

KvLayout kv_layout(const PlanSetup& setup, const QuantSpec& quant) {
  const ModelCard& model = setup.model;
  const int heads = kv_heads_per_gpu(model, setup.gpus);
  const int full_bits = kv_dtype_bits(setup.kv_dtype);
  const double elements = static_cast<double>(model.n_layers) * heads * model.head_dim;  // per token, k or v
  KvLayout layout;
  layout.full_bits_per_token = 2 * elements * full_bits;
  layout.bits_per_token = quant.enabled() ? 2 * elements * bits_per_element(quant, model.head_dim, full_bits)
                                          : layout.full_bits_per_token;
  layout.block_bytes = static_cast<int64_t>(std::ceil(setup.block_size * layout.bits_per_token / 8 - 1e-9));
  layout.full_block_bytes = static_cast<int64_t>(std::ceil(setup.block_size * layout.full_bits_per_token / 8 - 1e-9));
  layout.residual = quant.enabled() ? quant.residual : 0;
  return layout;
}

int64_t tokens_held(int64_t context, std::optional<int64_t> budget) {
  if (!budget) return context;
  return std::min(context, *budget + 1);
}

int64_t blocks_for(int64_t tokens, int block_size) { return tokens <= 0 ? 0 : ceil_div(tokens, block_size); }

Footprint footprint(const PlanSetup& setup, const KvLayout& layout, const std::optional<Budget>& budget) {
  Footprint out;
  for (int64_t context : setup.contexts) {
    const std::optional<int64_t> b = budget ? std::optional<int64_t>(budget->resolve(context)) : std::nullopt;
    const int64_t held = tokens_held(context, b);
    const int64_t residual = std::min<int64_t>(held, layout.residual);
    const int64_t full_blocks = blocks_for(residual, setup.block_size);
    const int64_t quant_blocks = blocks_for(held - residual, setup.block_size);
    out.tokens += static_cast<double>(held);
    out.blocks += static_cast<double>(full_blocks + quant_blocks);
    out.bytes += static_cast<double>(full_blocks * layout.full_block_bytes + quant_blocks * layout.block_bytes);
    out.budget_tokens += static_cast<double>(b ? *b : context);
  }
  const double n = static_cast<double>(setup.contexts.size());
  out.tokens /= n;
  out.blocks /= n;
  out.bytes /= n;
  out.budget_tokens /= n;
  return out;
}

int64_t max_sequences(const MemoryPlan& memory, const Footprint& footprint) {
  if (footprint.bytes <= 0) return 0;
  // Exact in integers for one context length (bytes is a whole number of blocks then).
  const double rounded = std::round(footprint.bytes);
  if (std::abs(footprint.bytes - rounded) < 1e-9 && rounded >= 1)
    return memory.kv_bytes / static_cast<int64_t>(rounded);
  return static_cast<int64_t>(std::floor(static_cast<double>(memory.kv_bytes) / footprint.bytes));
}

double compression_factor(const Footprint& full, const Footprint& compressed) {
  return compressed.bytes > 0 ? full.bytes / compressed.bytes : 0.0;
}

void fill_row(const PlanSetup& setup, const MemoryPlan& memory, PlanRow& row, const PlanRow* reference) {
  row.layout = kv_layout(setup, row.quant);
  row.footprint = footprint(setup, row.layout, row.budget);
  row.max_sequences = max_sequences(memory, row.footprint);
  if (reference) {
    row.gain = reference->max_sequences > 0 ? static_cast<double>(row.max_sequences) / reference->max_sequences : 0.0;
    row.compression = compression_factor(reference->footprint, row.footprint);
  } else {
    row.gain = 1;
    row.compression = 1;
  }
}

// ---- targets and sweeps ----

bool Target::met(double metric) const {
  if (std::isnan(metric)) return false;
  return at_least ? metric >= value : metric <= value;
}

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
    throw kvtrace::InputError("", "", "--target '" + original + "': write METRIC>=VALUE or METRIC<=VALUE, e.g. retention>=0.95");
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
    throw kvtrace::InputError("", "", "--target '" + original + "': unknown metric '" + metric +
                                          "' (retention, retention_p5, retention_min with >=; output_error, "
                                          "output_error_p95, output_error_max with <=)");
  if (is_higher != target.at_least)
    throw kvtrace::InputError("", "", "--target '" + original + "': " + metric + " is " +
                                          (is_higher ? "better higher: use >=" : "better lower: use <="));
  target.column = metric;
  return target;
}

SweepTable parse_sweep_csv(const std::string& text, const std::string& file, const std::string& metric_column) {
  const auto records = parse_csv(text, file);
  if (records.empty()) throw kvtrace::InputError(file, "", "empty: expected the CSV kvsim sweep --csv writes");
  std::map<std::string, size_t> columns;
  for (size_t c = 0; c < records[0].size(); ++c) columns[trim(records[0][c])] = c;
  auto column = [&](const std::string& name, bool required) -> std::optional<size_t> {
    const auto found = columns.find(name);
    if (found != columns.end()) return found->second;
    if (required)
      throw kvtrace::InputError(file, "", "no '" + name + "' column (expected the CSV kvsim sweep --csv writes)");
    return std::nullopt;
  };
  const size_t policy = *column("policy", true), budget = *column("budget", true);
  const size_t share = *column("budget_share_mean", true), retention = *column("retention_mean", true);
  const size_t metric = *column(metric_column, true);
  const auto params = column("params", false), tokens = column("budget_tokens_mean", false);
  const auto mode = column("mode", false), quant = column("quant", false);
  SweepTable table;
  table.has_quant = quant.has_value();
  for (size_t r = 1; r < records.size(); ++r) {
    const auto& record = records[r];
    const size_t line = r + 1;
    if (record.size() < records[0].size())
      throw kvtrace::InputError(file, "", "line " + std::to_string(line) + ": " + std::to_string(record.size()) +
                                              " fields, the header has " + std::to_string(records[0].size()));
    SweepRow row;
    row.policy = trim(record[policy]);
    if (row.policy.empty()) throw kvtrace::InputError(file, "", "line " + std::to_string(line) + ": empty policy");
    row.params = params ? trim(record[*params]) : "";
    row.budget = trim(record[budget]);
    row.mode = mode ? trim(record[*mode]) : "";
    row.quant = quant ? trim(record[*quant]) : "";
    row.budget_share_mean = csv_number(record[share], file, line, "budget_share_mean");
    row.budget_tokens_mean = tokens ? csv_number(record[*tokens], file, line, "budget_tokens_mean") : 0.0;
    row.retention_mean = csv_number(record[retention], file, line, "retention_mean");
    row.metric = csv_number(record[metric], file, line, metric_column);
    if (!table.rows.empty() && row.mode != table.rows.front().mode) table.mixed_modes = true;
    table.rows.push_back(std::move(row));
  }
  if (table.rows.empty()) throw kvtrace::InputError(file, "", "no rows after the header");
  return table;
}

std::vector<SweepChoice> choose_budgets(const SweepTable& table, const Target& target) {
  std::vector<SweepChoice> out;
  for (const auto& row : table.rows) {
    auto found = std::find_if(out.begin(), out.end(), [&](const SweepChoice& c) {
      return c.policy == row.policy && c.params == row.params && c.mode == row.mode && c.quant == row.quant;
    });
    if (found == out.end()) {
      out.push_back({row.policy, row.params, row.mode, row.quant, {}, std::nullopt});
      found = out.end() - 1;
    }
    found->rows.push_back(row);
  }
  for (auto& choice : out) {
    std::stable_sort(choice.rows.begin(), choice.rows.end(), [](const SweepRow& a, const SweepRow& b) {
      if (a.budget_share_mean != b.budget_share_mean) return a.budget_share_mean < b.budget_share_mean;
      return a.budget_tokens_mean < b.budget_tokens_mean;
    });
    for (size_t r = 0; r < choice.rows.size(); ++r)
      if (target.met(choice.rows[r].metric)) {
        choice.chosen = r;
        break;
      }
  }
  return out;
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
      throw kvtrace::InputError("", "", "--context '" + original + "': write TOKENS or PROMPT+GENERATION, e.g. 4096 or 3072+1024");
    total += std::stoll(part);
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
      const auto generation = find({"generation", "output_tokens", "completion_tokens", "max_tokens", "output_len", "generation_tokens"});
      if (!prompt || !generation)
        throw kvtrace::InputError(file, "", "header names no length column (context, length, tokens, n_tokens, or "
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
    if (total < 1) throw kvtrace::InputError(file, "", "line " + std::to_string(r + 1) + ": a length must be at least 1");
    out.push_back(total);
  }
  if (out.empty()) throw kvtrace::InputError(file, "", "no context lengths");
  return out;
}

}  // namespace kvsim
