#pragma once
// The capacity planner (docs/semantics.md, section 7): how many sequences fit on a GPU when
// the KV cache is held to a budget and/or quantized. Pure functions over card structs
// (planner.cpp) and the readers of cards, sweeps and contexts (planner_inputs.cpp);
// kvsim/plan/plan_table.hpp puts them together into the rows kvsim plan prints.
//
//   KV bytes per token  = 2 * n_layers * kv_heads_per_gpu * head_dim * bits_per_element / 8
//                         (bits_per_element from quant.hpp: scales and zero points included)
//   KV memory per GPU   = floor(GPU memory * utilisation) - weights / gpus - activation reserve
//   a sequence of L tokens under budget B holds min(L, B + 1) positions (the attention at a
//   step covers B + 1 entries) in ceil(min(L, B + 1) / block_size) blocks (every layer holds
//   that many blocks of block_size tokens; a block's bytes cover all layers, as vLLM's)
//   maximum concurrency = KV blocks available / blocks per sequence, rounded down.
// With a full-precision residual window of R tokens (kivi2), min(held, R) tokens sit in
// full-precision blocks and the rest in quantized blocks, and concurrency is
// floor(KV memory / bytes of a sequence's blocks) (the same number when all blocks are alike).
// For a mix of context lengths the blocks (bytes) per sequence are the mix's mean: the number
// of sequences of that mix that fit at once, on average.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvsim/core/budget.hpp"
#include "kvsim/quant/quant.hpp"
#include "kvsim/replay/sweep_table.hpp"

namespace kvsim {

// The ranges of a card's numbers (parse_model_card, parse_gpu_card refuse anything outside
// them): wider than any model or GPU there is, and narrow enough that the plan's arithmetic
// stays exact in 64 bits (docs/semantics.md, section 7).
namespace card_limits {
constexpr int64_t kLayers = 1024;                       // n_layers 1..1024
constexpr int64_t kHeads = 4096;                        // n_heads, n_kv_heads 1..4096
constexpr int64_t kHeadDim = 65536;                     // head_dim 1..65536
constexpr int64_t kParameters = 1'000'000'000'000'000;  // parameters 1..10^15
constexpr int64_t kContext = int64_t{1} << 31;          // max_context (and any context) 1..2^31 tokens
constexpr int64_t kGpuBytes = int64_t{1} << 44;         // memory 1 byte..16 TiB (memory_mib 1..2^24)
constexpr int64_t kBlockSize = int64_t{1} << 20;        // --block-size 1..2^20 tokens
constexpr int64_t kExperts = 65536;                     // n_experts 1..65536
constexpr int64_t kVocab = int64_t{1} << 31;            // a config's vocab_size 1..2^31
constexpr int64_t kHidden = int64_t{1} << 20;           // hidden_size, a config's ranks 1..2^20
constexpr int64_t kIntermediate = int64_t{1} << 24;     // intermediate sizes 1..2^24
}  // namespace card_limits

struct ModelCard {
  std::string name;          // the card's id, e.g. "llama-3.1-8b"
  std::string display_name;  // e.g. "Llama-3.1-8B"
  std::string hf_id;         // e.g. "meta-llama/Llama-3.1-8B" (may be empty)
  int n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t parameters = 0;
  int64_t max_context = 0;
  std::string source;  // where the numbers come from
  // Sliding-window layers attend (and so hold) only the last `sliding_window` positions.
  int64_t sliding_window = 0;        // 0: none
  std::vector<bool> sliding_layers;  // per layer, true where it attends the window; empty: none
  // Multi-head latent attention (MLA): one latent of kv_lora_rank + qk_rope_head_dim elements
  // per token and layer, shared by every head, in place of k and v per kv head.
  int kv_lora_rank = 0, qk_rope_head_dim = 0;
  // A mixture of experts: `expert_parameters` are the routed experts' (all of them, every
  // layer, within `parameters`), of which a token uses experts_per_token of n_experts.
  int n_experts = 0, experts_per_token = 0;
  int64_t expert_parameters = 0;

  bool mla() const { return kv_lora_rank > 0; }
  bool sliding(int layer) const {
    return sliding_window > 0 && layer < static_cast<int>(sliding_layers.size()) &&
           sliding_layers[static_cast<size_t>(layer)];
  }
  bool any_sliding() const;
  // The parameters one token's forward pass multiplies: all but the experts it is not routed to.
  double active_parameters() const;
};

struct GpuCard {
  std::string name;           // e.g. "h100-80gb"
  std::string display_name;   // e.g. "H100-80GB"
  uint64_t memory_bytes = 0;  // total device memory as the driver reports it (nvidia-smi)
  std::string source;
  // The roofline's two ceilings (vendor datasheets); 0 when the card has none.
  double bandwidth_bytes_per_s = 0;  // memory bandwidth
  double peak_flops = 0;             // dense bf16/fp16 tensor FLOP/s
  bool has_roofline() const { return bandwidth_bytes_per_s > 0 && peak_flops > 0; }
};

// Parse card JSON; `file` names the file in errors (InputError). A model card may also be a
// Hugging Face config.json (hf_config.cpp reads it).
ModelCard parse_model_card(const std::string& json_text, const std::string& file);
// A Hugging Face config.json as a model card: the attention layout from its fields and the
// parameters counted from its sizes (docs/semantics.md, section 7). Throws InputError naming
// the file and the field. (hf_config.cpp)
ModelCard model_card_from_hf_config(const std::string& json_text, const std::string& file);
bool is_hf_config(const std::string& json_text);
GpuCard parse_gpu_card(const std::string& json_text, const std::string& file);

// The card files of a folder (*.json), in name order; none when it cannot be read.
std::vector<std::string> card_files(const std::string& dir);
// A card by path (anything ending in .json), by file name in `dir`, or by display name or
// Hugging Face id (case-insensitive). Throws InputError naming --model / --gpu.
ModelCard find_model_card(const std::string& value, const std::string& dir);
GpuCard find_gpu_card(const std::string& value, const std::string& dir);
// A whole file as text; throws InputError naming it ("cannot read " + what).
std::string read_text_file(const std::string& path, const std::string& what);

// "48GB" (10^9 bytes), "48GiB" (2^30), "512MB", "512MiB", "0"; throws InputError naming `option`.
uint64_t parse_memory(const std::string& text, const std::string& option);
// Weight storage per parameter: fp32 4, fp16/bf16 2, fp8/int8 1, int4 0.5 bytes.
double weight_bytes_per_param(const std::string& dtype);
// Full-precision KV element bits: fp32 32, fp16/bf16 16, fp8 8.
int kv_dtype_bits(const std::string& dtype);

// How a serving engine lays out the KV cache, and so which of a sweep's peaks a sequence
// holds (docs/semantics.md, section 7): per kv head (each head its own positions), dense (per
// layer, its fullest kv head's), paged per layer (a slot per position any kv head of the
// layer holds: vLLM, SGLang) or paged per sequence (a slot per position any layer holds: one
// block table across layers).
enum class CacheLayout { per_head, dense, paged_layer, paged_model };
CacheLayout parse_cache_layout(const std::string& text);  // per-head, dense, paged-layer, paged-model
const char* cache_layout_name(CacheLayout layout);
// The peak a row's cache held under `layout` (the sweep's occupancy columns), in positions;
// NaN when the row lacks it. Per head and dense count a prefill's whole prompt, as the
// layout columns do.
double layout_peak(const SweepRow& row, CacheLayout layout);

struct PlanSetup {
  ModelCard model;
  GpuCard gpu;
  int gpus = 1;  // tensor parallel: weights and kv heads split across them
  std::string weight_dtype = "bf16";
  std::string kv_dtype = "fp16";
  double utilization = 0.90;
  uint64_t reserve_bytes = 2ull << 30;  // activations, CUDA graphs, allocator slack, per GPU
  int block_size = 16;
  std::vector<int64_t> contexts;  // prompt + generation tokens per sequence (one, or a mix)
  // Budgets that move (docs/semantics.md, section 2): layer l holds min(context, B_l + 1),
  // B_l from the schedule with T = the context; with head-adaptive budgets the kv heads of a
  // layer hold their H x that in all, in blocks of their own (footprint).
  LayerSchedule schedule;
  bool adaptive_heads = false;
  CacheLayout layout = CacheLayout::per_head;  // with a sweep: whose peak each sequence holds
};

struct MemoryPlan {
  uint64_t gpu_bytes = 0;
  int64_t usable_bytes = 0;  // floor(gpu_bytes * utilization)
  int64_t weight_bytes = 0;  // per GPU
  int64_t reserve_bytes = 0;
  int64_t kv_bytes = 0;  // per GPU: usable - weights - reserve (> 0)
  int kv_heads_per_gpu = 0;
};

// kv heads each GPU holds: n_kv / gpus when gpus divides n_kv; one (replicated) when n_kv is
// smaller and divides gpus. Throws InputError otherwise, or when gpus does not divide n_heads.
int kv_heads_per_gpu(const ModelCard& model, int gpus);
// Throws InputError when the weights and the reserve leave no room for the KV cache, or the
// setup is inconsistent (no contexts, context beyond the model's, utilisation outside (0, 1]).
MemoryPlan plan_memory(const PlanSetup& setup);

// The cache format of one plan row: the full-precision dtype and an optional quantization.
struct KvLayout {
  double bits_per_token = 0;       // per GPU, keys and values of every layer, quantized part
  double full_bits_per_token = 0;  // the same at full precision (the residual window)
  int64_t block_bytes = 0;         // ceil(block_size * bits_per_token / 8)
  int64_t full_block_bytes = 0;
  int residual = 0;  // tokens kept at full precision
  double bytes_per_token() const { return bits_per_token / 8; }
};
KvLayout kv_layout(const PlanSetup& setup, const QuantSpec& quant);

// What a sweep measured a cache holding beyond B + 1: `beyond` positions more (a per-head
// cache's peak), or `scale` x (B + 1) (a layout's union over heads or layers, which grows with
// the budget; CacheLayout).
struct HeldBeyond {
  int64_t beyond = 0;
  double scale = 1;
  HeldBeyond(int64_t positions = 0, double times = 1) : beyond(positions), scale(times) {}  // NOLINT: from a count
};
// Positions a sequence of `context` tokens holds under budget B (nullopt: the full cache):
// min(context, ceil(scale (B + 1)) + beyond).
int64_t tokens_held(int64_t context, std::optional<int64_t> budget, HeldBeyond held = {});
int64_t blocks_for(int64_t tokens, int block_size);

struct Footprint {
  double tokens = 0;         // positions held, mean over the contexts
  double blocks = 0;         // blocks per sequence (per layer), mean
  double bytes = 0;          // bytes of those blocks per GPU, mean
  double budget_tokens = 0;  // B resolved per context, mean (the context for the full cache)
  double read_bytes = 0;     // bytes of the positions held per GPU (what a decode step reads), mean
};
// The budget (nullopt: full cache) resolved against each context as Budget::resolve does;
// every layer holds tokens_held(context, B_l, held) positions (up to the context).
Footprint footprint(const PlanSetup& setup, const KvLayout& layout, const std::optional<Budget>& budget,
                    HeldBeyond held = {});
// floor(KV memory / bytes per sequence); with uniform blocks this is
// floor(floor(kv_bytes / block_bytes) / blocks_per_sequence) for one context length.
int64_t max_sequences(const MemoryPlan& memory, const Footprint& footprint);
// How many times smaller a sequence's cache is than the full cache at full precision
// (bytes of blocks per sequence): eviction x quantization.
double compression_factor(const Footprint& full, const Footprint& compressed);

// A decode step of a row's planned batch on the roofline (roofline.cpp, docs/semantics.md,
// section 7), per GPU.
struct DecodeStep {
  int64_t batch = 0;           // the sequences that fit (the row's max_sequences)
  double weight_bytes = 0;     // weights read (the experts the batch routes to, for a MoE)
  double kv_bytes = 0;         // the batch's held KV positions, read once
  double flops = 0;            // matrix products of the weights and attention
  double memory_seconds = 0;   // (weight_bytes + kv_bytes) / bandwidth
  double compute_seconds = 0;  // flops / peak FLOPs
  double seconds = 0;          // the larger of the two
  double tokens_per_second_per_gpu = 0;
  bool compute_bound() const { return compute_seconds > memory_seconds; }
};

// One line of the plan: a policy at a budget with a cache format.
struct PlanRow {
  std::string policy;            // label: "full", "scissorhands", "h2o(recent=32)", "any policy" (--budget)
  std::string mode;              // the sweep's mode when the sweep mixes modes, else ""
  bool bound = false;            // oracle / lookahead: upper bounds, not policies
  std::optional<Budget> budget;  // nullopt: the full cache
  QuantSpec quant;
  bool quant_measured = false;   // the sweep replayed this quantization (its metric includes it)
  std::optional<double> metric;  // the target's metric at this budget (sweep plans)
  bool met = true;               // false: no budget of the sweep meets the target
  KvLayout layout;
  Footprint footprint;
  int64_t max_sequences = 0;
  double gain = 0;         // max_sequences / the full fp cache's
  double compression = 0;  // bytes per sequence of the full fp cache / this row's
  // A policy that runs under its own budget mechanism (PolicyInfo::layer_budget, head_floor):
  // its layer schedule and head-adaptive budgets, in place of the setup's.
  std::optional<LayerSchedule> schedule;
  bool adaptive_heads = false;
  // Positions the sweep's cache held at its peak beyond what the budget explains
  // (held_beyond_budget): each layer holds min(L, B_l + 1 + held_beyond); under a layout
  // other than per head, held_scale x (B_l + 1), the ratio the sweep's peak had to it.
  int64_t held_beyond = 0;
  double held_scale = 1;
  // The decode step of the planned batch (kvsim/plan/roofline.hpp); set when the GPU card
  // carries bandwidth and peak FLOPs.
  std::optional<DecodeStep> step;
};
// Fills layout, footprint, max_sequences, gain and compression of `row` (policy, budget,
// quant set); `reference` is the full cache at full precision (its own gain is 1).
void fill_row(const PlanSetup& setup, const MemoryPlan& memory, PlanRow& row, const PlanRow* reference);

// ---- choosing a budget from a sweep ----

// "retention>=0.95", "retention_p5>=0.9", "output_error<=0.05": a column of the sweep CSV
// (metric, or metric_mean) and a bound. Throws InputError.
struct Target {
  std::string text;
  std::string column;  // e.g. retention_mean
  bool at_least = true;
  double value = 0;
  bool met(double metric) const;
};
Target parse_target(const std::string& text);

// A sweep's rows (kvsim/replay/sweep_table.hpp) with the target's column picked out.
struct TargetRow : SweepRow {
  double metric = 0;  // the target's column; NaN when empty
};
struct SweepTable {
  std::vector<TargetRow> rows;
  bool has_quant = false;  // a quant column holding more than "none"
  bool mixed_modes = false;
  bool has_peak = false;  // an occupancy_peak column: held_beyond_budget compares with it
  bool has_layouts = false;  // the occupancy columns of every layout (layout_peak)
};
// How errors name a row: a CSV's line (the header is line 1), or a row of rows given as they
// are (Python's sweep(), counted from 0).
enum class SweepRowNames { csv_lines, rows };
// `columns`: those the rows came with (SweepCsv::columns); they must hold policy, budget,
// budget_share_mean, retention_mean and the target's column (and budget_tokens_mean with
// occupancy_peak). Every value must be one a sweep writes (budgets and quantizations that
// parse, finite numbers in their column's range; an empty metric is NaN, not measured), and
// no two rows may share policy, params, budget, quant, mode and page. `source` names them in
// errors, one line naming the row and the column.
SweepTable sweep_table(const std::vector<SweepRow>& rows, const std::vector<std::string>& columns,
                       const std::string& source, const std::string& metric_column,
                       SweepRowNames names = SweepRowNames::rows);
// The same from a sweep CSV's text (read_sweep_csv). `file` names it in errors.
SweepTable parse_sweep_csv(const std::string& text, const std::string& file, const std::string& metric_column);

// A budget as one key whatever its spelling: "20%" and "20.0%" are one (a reduced fraction),
// a token count its number. Throws InputError when it does not parse.
std::string budget_key(const std::string& budget);

// One policy's choice: the smallest budget (by budget_share_mean, then budget_tokens_mean)
// whose metric meets the target, or none.
struct SweepChoice {
  std::string policy, params, mode, quant;  // quant "" = the CSV has no quant column
  std::vector<TargetRow> rows;              // every budget of this policy, ascending
  std::optional<size_t> chosen;             // index into rows
};
// Groups the rows per (policy, params, mode, quant) in order of first appearance.
std::vector<SweepChoice> choose_budgets(const SweepTable& table, const Target& target);

// The sweep's sequence length a row tells: budget_tokens_mean / budget_share_mean (their mean
// length; exact when they are all as long).
int64_t sweep_row_length(const SweepRow& row);
// How many positions a row's cache held at its peak (occupancy_peak) beyond the most the plan's
// rule lets a cache group attend at that budget on the sweep's sequences, `length` tokens long:
// max over layers of min(length, B_l + 1), B_l from `schedule` (uniform: B). What
// --compress-every (B + N), a question (B + its tokens + the answer) or pages that could not go
// added; 0 when the peak is within the rule.
int64_t held_beyond_budget(const SweepRow& row, const LayerSchedule& schedule, int64_t length);

// ---- contexts ----
// "4096", "3000+1096" (prompt + generation); throws InputError. Not a file.
std::optional<int64_t> parse_context_number(const std::string& text);
// A CSV of lengths: one integer per line, or a header naming a column context, length,
// tokens or n_tokens, or prompt (prompt_tokens, input_tokens) plus generation
// (output_tokens, completion_tokens, max_tokens) columns to add. Blank and # lines skipped.
std::vector<int64_t> parse_context_csv(const std::string& text, const std::string& file);

}  // namespace kvsim
