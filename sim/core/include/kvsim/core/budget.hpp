#pragma once
// Budgets (docs/semantics.md, section 2): an absolute token count ("64") or a fraction of each sequence's
// length ("20%": B = max(1, floor(0.20 * n_tokens)), computed exactly in integers), and an
// optional per-layer schedule that scales the budget of each layer.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvsim {

struct Budget {
  std::string text;  // as the user wrote it
  bool fraction = false;
  int64_t tokens = 0;                      // absolute budget
  int64_t numerator = 0, denominator = 1;  // fraction of the sequence length; ratio: R
  // kvpress's compression ratio R (docs/semantics.md, section 2): B = max(1, floor((1 - R) c))
  // of the compressed length c, the prompt (the context with a question). Text "ratio R".
  bool ratio = false;

  // Throws InputError for anything but a positive integer, a percentage in (0, 100] or
  // "ratio R" (as a sweep's CSV writes it back).
  static Budget parse(const std::string& text);
  // R as --compression-ratio takes it: a decimal in [0, 1).
  static Budget parse_ratio(const std::string& r);
  // A ratio resolves on n_tokens as the compressed length.
  int64_t resolve(int64_t n_tokens) const;
  // A ratio resolves on `compressed`, the others on n_tokens.
  int64_t resolve(int64_t n_tokens, int64_t compressed) const;
  // The budget as a fraction of n tokens (for plots and tables); a ratio: 1 - R.
  double share(int64_t n_tokens) const;
};

std::vector<Budget> parse_budgets(const std::string& comma_separated);
// --compression-ratio's comma-separated list of R.
std::vector<Budget> parse_ratios(const std::string& comma_separated);

// The per-layer budgets B_l a schedule gives for budget B (docs/semantics.md, section 2).
// "uniform"; a list of weights w_l, normalised to mean 1: B_l = max(1, floor(B * w_l));
// "pyramid" (PyramidKV's linear schedule) and "cake" (CAKE's preference allocation), which
// also depend on the sequence (cake's measured preferences) and on T, the tokens the
// allocation sees (the prompt in prefill mode, the sequence in stream mode), and hold the
// layers' total at n_layers * B (layer_budgets.cpp).
struct LayerSchedule {
  enum class Kind { weights, pyramid, cake };
  std::string name = "uniform";
  Kind kind = Kind::weights;
  std::vector<double> weights;  // Kind::weights; empty: uniform
  int n_layers = 0;             // pyramid and cake
  int64_t window = 32;          // pyramid and cake: W, the recent positions every layer keeps
  int64_t beta = 20;            // pyramid: the smallest layer gets (B - W) / beta
  // cake: per sequence, per layer, the preference P_l (cake_preference); a sequence not
  // measured falls back to uniform.
  std::vector<std::vector<double>> preference;

  // "uniform", "pyramid[:beta=N][:window=N]", or a comma-separated list of one positive weight
  // per layer.
  static LayerSchedule parse(const std::string& text, int n_layers);
  static LayerSchedule from_weights(std::string name, std::vector<double> weights);
  // Kind::weights only: B_l for budget B.
  int64_t apply(int64_t budget, int layer) const;
  // B_l of every kind: sequence `seq` (cake), T = `tokens`.
  int64_t apply(int64_t budget, int layer, int seq, int64_t tokens) const;
  // Every layer's B_l.
  std::vector<int64_t> layer_budgets(int64_t budget, int seq, int64_t tokens) const;
};

// "pyramid[:beta=N][:window=N]" (LayerSchedule::parse takes it too).
LayerSchedule pyramid_schedule(const std::string& text, int n_layers);
// PyramidKV's budgets of the non-window positions, for layer budget B = C (window included),
// T tokens, L layers (layer_budgets.cpp): empty when the authors keep C in every layer.
std::vector<int64_t> pyramid_budgets(int64_t budget, int64_t tokens, int n_layers, int64_t beta, int64_t window);
// CAKE's budgets of the non-window positions from the layers' preferences: empty when the
// authors keep C in every layer.
std::vector<int64_t> cake_budgets(std::span<const double> preference, int64_t budget, int64_t tokens, int64_t window);
// CAKE's adjust_budgets (antgroup/cakekv cake/utils.py L21-67) on budgets already truncated to
// integers: caps each at `cap`, spreads the excess, then makes the total `total`.
std::vector<int64_t> cake_adjust_budgets(std::vector<int64_t> budgets, int64_t total, int64_t cap);

}  // namespace kvsim
