// The capacity arithmetic of the planner (kvsim/plan/planner.hpp): memory sizes and dtypes, KV
// bytes per token and per block, a sequence's blocks under a budget, maximum concurrency, and
// choosing each policy's budget from a sweep. Cards, sweep CSV files and contexts are read in
// planner_inputs.cpp.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "kvsim/plan/planner.hpp"
#include "kvsim/plan/roofline.hpp"
#include "kvtrace/error.hpp"
#include "kvsim/core/text_util.hpp"

namespace kvsim {
namespace {

using text::lower;
using text::trim;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A count (bytes, sequences) computed in double, as an int64_t; one line when it does not fit
// (the card ranges keep every count a plan computes well inside: this is the backstop).
int64_t whole_count(double value, const std::string& what) {
  if (!(value >= 0 && value < 0x1p63))
    throw kvtrace::InputError("", "", what + " (" + std::to_string(value) + ") does not fit in 64 bits");
  return static_cast<int64_t>(value);
}

std::string gigabytes(double bytes) {
  char text[48];
  std::snprintf(text, sizeof text, "%.2f GB", bytes / 1e9);
  return text;
}

}  // namespace

// ---- sizes and dtypes ----

uint64_t parse_memory(const std::string& original, const std::string& option) {
  auto fail = [&](const std::string& problem) -> uint64_t {
    throw kvtrace::InputError("", "", "--" + option + ": '" + original + "' " + problem);
  };
  const std::string text = lower(trim(original));
  size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.'))
    ++digits;
  if (digits == 0) return fail("is not a size (write e.g. 80GB, 80GiB or 512MiB)");
  char* end = nullptr;
  const std::string number = text.substr(0, digits);
  const double value = std::strtod(number.c_str(), &end);
  if (*end != '\0' || !std::isfinite(value) || value < 0) return fail("is not a size");
  const std::string unit = text.substr(digits);
  static const std::map<std::string, double> units = {
      {"b", 1.0},         {"kb", 1e3},           {"mb", 1e6},
      {"gb", 1e9},        {"tb", 1e12},          {"kib", 1024.0},
      {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0}};
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
  throw kvtrace::InputError("", "",
                            "--weight-dtype: unknown dtype '" + dtype + "' (fp32, bf16, fp16, fp8, int8, int4)");
}

int kv_dtype_bits(const std::string& dtype) {
  const std::string d = lower(dtype);
  if (d == "fp32" || d == "float32" || d == "f32") return 32;
  if (d == "fp16" || d == "float16" || d == "f16" || d == "bf16" || d == "bfloat16") return 16;
  if (d == "fp8" || d == "float8" || d == "fp8_e4m3" || d == "fp8_e5m2") return 8;
  throw kvtrace::InputError("", "", "--kv-dtype: unknown dtype '" + dtype + "' (fp32, fp16, bf16, fp8)");
}

// ---- memory ----

bool ModelCard::any_sliding() const {
  return sliding_window > 0 && std::find(sliding_layers.begin(), sliding_layers.end(), true) != sliding_layers.end();
}

int kv_heads_per_gpu(const ModelCard& model, int gpus) {
  auto fail = [&](const std::string& problem) -> int {
    throw kvtrace::InputError("", "", "--gpus " + std::to_string(gpus) + ": " + problem);
  };
  if (gpus < 1) return fail("must be at least 1");
  if (model.n_heads % gpus != 0)
    return fail(model.display_name + "'s " + std::to_string(model.n_heads) +
                " attention heads do not split evenly (tensor parallelism needs gpus to divide them)");
  if (model.mla()) return 1;  // the latent serves every head: each GPU holds all of it
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
  if (setup.block_size > card_limits::kBlockSize)
    throw kvtrace::InputError("", "",
                              "--block-size " + std::to_string(setup.block_size) + " is more than " +
                                  std::to_string(card_limits::kBlockSize) + " tokens");
  if (setup.contexts.empty()) throw kvtrace::InputError("", "", "--context: no context lengths");
  for (int64_t context : setup.contexts) {
    if (context < 1) throw kvtrace::InputError("", "", "--context: lengths must be at least 1 token");
    if (context > model.max_context)
      throw kvtrace::InputError("", "",
                                "--context: " + std::to_string(context) + " tokens exceed " + model.display_name +
                                    "'s maximum context of " + std::to_string(model.max_context));
  }
  MemoryPlan memory;
  memory.kv_heads_per_gpu = kv_heads_per_gpu(model, setup.gpus);
  memory.gpu_bytes = setup.gpu.memory_bytes;
  memory.usable_bytes = whole_count(std::floor(static_cast<double>(setup.gpu.memory_bytes) * setup.utilization),
                                    "the usable bytes per GPU");
  const double weights = static_cast<double>(model.parameters) * weight_bytes_per_param(setup.weight_dtype);
  memory.weight_bytes = whole_count(std::ceil(weights / setup.gpus), "the weight bytes per GPU");
  memory.reserve_bytes = whole_count(static_cast<double>(setup.reserve_bytes), "--reserve");
  memory.kv_bytes = memory.usable_bytes - memory.weight_bytes - memory.reserve_bytes;
  if (memory.kv_bytes <= 0) {
    std::ostringstream problem;
    problem << model.display_name << " does not fit: " << setup.gpus << " x " << setup.gpu.display_name << " at "
            << setup.utilization << " utilisation give " << gigabytes(static_cast<double>(memory.usable_bytes))
            << " per GPU, the " << setup.weight_dtype << " weights take "
            << gigabytes(static_cast<double>(memory.weight_bytes)) << " and the reserve "
            << gigabytes(static_cast<double>(memory.reserve_bytes))
            << ", leaving nothing for the KV cache (more --gpus, a smaller --weight-dtype or --reserve?)";
    throw kvtrace::InputError("", "", problem.str());
  }
  return memory;
}

KvLayout kv_layout(const PlanSetup& setup, const QuantSpec& quant) {
  const ModelCard& model = setup.model;
  const int heads = kv_heads_per_gpu(model, setup.gpus);
  const int full_bits = kv_dtype_bits(setup.kv_dtype);
  // Elements per token, all layers: k and v per kv head, or one MLA latent (quantized in
  // groups along it, as a head's k or v along head_dim).
  const int vector = model.mla() ? model.kv_lora_rank + model.qk_rope_head_dim : model.head_dim;
  const double elements = static_cast<double>(model.n_layers) * (model.mla() ? 1 : 2 * heads) * vector;
  KvLayout layout;
  layout.full_bits_per_token = elements * full_bits;
  layout.bits_per_token =
      quant.enabled() ? elements * bits_per_element(quant, vector, full_bits) : layout.full_bits_per_token;
  layout.block_bytes =
      whole_count(std::ceil(setup.block_size * layout.bits_per_token / 8 - 1e-9), "the bytes of a KV block");
  layout.full_block_bytes =
      whole_count(std::ceil(setup.block_size * layout.full_bits_per_token / 8 - 1e-9), "the bytes of a KV block");
  layout.residual = quant.enabled() ? quant.residual : 0;
  return layout;
}

int64_t tokens_held(int64_t context, std::optional<int64_t> budget, HeldBeyond held) {
  if (!budget || *budget >= context - 1) return context;
  const double scaled = std::ceil(static_cast<double>(*budget + 1) * std::max(held.scale, 1.0));
  if (scaled >= static_cast<double>(context)) return context;
  const auto attended = static_cast<int64_t>(scaled);
  const int64_t beyond = std::max<int64_t>(held.beyond, 0);
  return beyond >= context - attended ? context : attended + beyond;
}

int64_t blocks_for(int64_t tokens, int block_size) { return tokens <= 0 ? 0 : ceil_div(tokens, block_size); }

namespace {

// The bytes of `held` positions, `residual` of them at full precision (a block's bytes cover
// every layer, so this is per layer x layers).
double read_bytes(const KvLayout& layout, int64_t held, int64_t residual) {
  return (static_cast<double>(residual) * layout.full_bits_per_token +
          static_cast<double>(held - residual) * layout.bits_per_token) /
         8;
}

// One context under a schedule or head-adaptive budgets: per layer its held positions and
// blocks, the bytes a layer's share of a block (block_bytes covers every layer) times them.
// Adaptive heads each round up to whole blocks of their own: the H heads holding H x held
// positions in all take at most ceil(H held / block) + H - 1 head blocks (each head's last
// block partly filled), and never more than H blocks_for(context).
// A sliding-window layer holds at most its window of them (ModelCard::sliding).
void add_moving(const PlanSetup& setup, const KvLayout& layout, int64_t context, std::optional<int64_t> budget,
                HeldBeyond beyond, Footprint& out) {
  const int layers = setup.model.n_layers;
  const int heads = setup.adaptive_heads ? kv_heads_per_gpu(setup.model, setup.gpus) : 1;
  auto head_blocks = [&](int64_t tokens, int64_t limit) -> double {
    if (heads == 1) return static_cast<double>(blocks_for(tokens, setup.block_size));
    const int64_t bound = blocks_for(heads * tokens, setup.block_size) + (tokens > 0 ? heads - 1 : 0);
    return static_cast<double>(std::min(bound, heads * blocks_for(limit, setup.block_size))) / heads;
  };
  const std::vector<int64_t> layer_budgets =
      budget ? setup.schedule.layer_budgets(*budget, 0, context) : std::vector<int64_t>{};
  for (int l = 0; l < layers; ++l) {
    const std::optional<int64_t> b =
        l < static_cast<int>(layer_budgets.size()) ? layer_budgets[static_cast<size_t>(l)] : budget;
    const int64_t limit = setup.model.sliding(l) ? std::min(context, setup.model.sliding_window) : context;
    const int64_t held = std::min(tokens_held(context, b, beyond), limit);
    const int64_t residual = std::min<int64_t>(held, layout.residual);
    const double full_blocks = head_blocks(residual, std::min<int64_t>(limit, layout.residual));
    const double quant_blocks = head_blocks(held - residual, limit - residual);
    out.tokens += static_cast<double>(held) / layers;
    out.blocks += (full_blocks + quant_blocks) / layers;
    out.bytes += (full_blocks * static_cast<double>(layout.full_block_bytes) +
                  quant_blocks * static_cast<double>(layout.block_bytes)) /
                 layers;
    out.read_bytes += read_bytes(layout, held, residual) / layers;
    out.budget_tokens += static_cast<double>(b ? *b : context) / layers;
  }
}

}  // namespace

Footprint footprint(const PlanSetup& setup, const KvLayout& layout, const std::optional<Budget>& budget,
                    HeldBeyond beyond) {
  Footprint out;
  const bool moving =
      !setup.schedule.weights.empty() || setup.schedule.kind != LayerSchedule::Kind::weights || setup.adaptive_heads;
  for (int64_t context : setup.contexts) {
    const std::optional<int64_t> b = budget ? std::optional<int64_t>(budget->resolve(context)) : std::nullopt;
    if ((b && moving) || setup.model.any_sliding()) {
      add_moving(setup, layout, context, b, beyond, out);
      continue;
    }
    const int64_t held = tokens_held(context, b, beyond);
    const int64_t residual = std::min<int64_t>(held, layout.residual);
    const int64_t full_blocks = blocks_for(residual, setup.block_size);
    const int64_t quant_blocks = blocks_for(held - residual, setup.block_size);
    out.tokens += static_cast<double>(held);
    out.blocks += static_cast<double>(full_blocks + quant_blocks);
    out.bytes += static_cast<double>(full_blocks) * static_cast<double>(layout.full_block_bytes) +
                 static_cast<double>(quant_blocks) * static_cast<double>(layout.block_bytes);
    out.read_bytes += read_bytes(layout, held, residual);
    out.budget_tokens += static_cast<double>(b ? *b : context);
  }
  const double n = static_cast<double>(setup.contexts.size());
  out.tokens /= n;
  out.blocks /= n;
  out.bytes /= n;
  out.read_bytes /= n;
  out.budget_tokens /= n;
  return out;
}

int64_t max_sequences(const MemoryPlan& memory, const Footprint& footprint) {
  if (footprint.bytes <= 0) return 0;
  // Exact in integers for one context length (bytes is a whole number of blocks then).
  const double rounded = std::round(footprint.bytes);
  if (std::abs(footprint.bytes - rounded) < 1e-9 && rounded >= 1 && rounded < 0x1p63)
    return memory.kv_bytes / static_cast<int64_t>(rounded);
  return whole_count(std::floor(static_cast<double>(memory.kv_bytes) / footprint.bytes), "the sequence count");
}

double compression_factor(const Footprint& full, const Footprint& compressed) {
  return compressed.bytes > 0 ? full.bytes / compressed.bytes : 0.0;
}

void fill_row(const PlanSetup& setup, const MemoryPlan& memory, PlanRow& row, const PlanRow* reference) {
  row.layout = kv_layout(setup, row.quant);
  if (row.schedule || row.adaptive_heads) {
    PlanSetup own = setup;
    if (row.schedule) own.schedule = *row.schedule;
    own.adaptive_heads = own.adaptive_heads || row.adaptive_heads;
    row.footprint = footprint(own, row.layout, row.budget, {row.held_beyond, row.held_scale});
  } else {
    row.footprint = footprint(setup, row.layout, row.budget, {row.held_beyond, row.held_scale});
  }
  row.max_sequences = max_sequences(memory, row.footprint);
  row.step = setup.gpu.has_roofline() ? std::optional<DecodeStep>(decode_step(setup, row)) : std::nullopt;
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
    std::stable_sort(choice.rows.begin(), choice.rows.end(), [](const TargetRow& a, const TargetRow& b) {
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

int64_t sweep_row_length(const SweepRow& row) {
  const double length = row.budget_tokens_mean / row.budget_share_mean;
  if (!(length >= 1)) return 1;
  return std::min<int64_t>(std::llround(std::min(length, 0x1p62)), card_limits::kContext);
}

int64_t held_beyond_budget(const SweepRow& row, const LayerSchedule& schedule, int64_t length) {
  const int64_t budget = Budget::parse(row.budget).resolve(length);
  int64_t most = tokens_held(length, budget);
  for (int64_t layer_budget : schedule.layer_budgets(budget, 0, length))
    most = std::max(most, tokens_held(length, layer_budget));
  return std::max<int64_t>(0, row.occupancy_peak - most);
}

CacheLayout parse_cache_layout(const std::string& text) {
  for (CacheLayout layout :
       {CacheLayout::per_head, CacheLayout::dense, CacheLayout::paged_layer, CacheLayout::paged_model})
    if (text == cache_layout_name(layout)) return layout;
  throw kvtrace::InputError("", "",
                            "--layout: '" + text + "' is not per-head, dense, paged-layer or paged-model");
}

const char* cache_layout_name(CacheLayout layout) {
  switch (layout) {
    case CacheLayout::dense: return "dense";
    case CacheLayout::paged_layer: return "paged-layer";
    case CacheLayout::paged_model: return "paged-model";
    default: return "per-head";
  }
}

double layout_peak(const SweepRow& row, CacheLayout layout) {
  switch (layout) {
    case CacheLayout::dense: return row.occupancy_dense_peak;
    case CacheLayout::paged_layer: return row.occupancy_layer_union_peak;
    case CacheLayout::paged_model: return row.occupancy_model_union_peak;
    default:  // each head its own: its peak, and the whole prompt before a prefill's compression
      return std::isnan(row.occupancy_dense_peak)
                 ? static_cast<double>(row.occupancy_peak)
                 : std::max(static_cast<double>(row.occupancy_peak), row.occupancy_dense_peak);
  }
}

}  // namespace kvsim
