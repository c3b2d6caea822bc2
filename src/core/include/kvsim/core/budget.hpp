#pragma once
// Budgets (docs/semantics.md, section 2): an absolute token count ("64") or a fraction of each sequence's
// length ("20%": B = max(1, floor(0.20 * n_tokens)), computed exactly in integers), and an
// optional per-layer schedule that scales the budget of each layer.
#include <cstdint>
#include <string>
#include <vector>

namespace kvsim {

struct Budget {
  std::string text;  // as the user wrote it
  bool fraction = false;
  int64_t tokens = 0;                      // absolute budget
  int64_t numerator = 0, denominator = 1;  // fraction of the sequence length

  // Throws InputError for anything but a positive integer or a percentage in (0, 100].
  static Budget parse(const std::string& text);
  int64_t resolve(int64_t n_tokens) const;
  // The budget as a fraction of n tokens (for plots and tables).
  double share(int64_t n_tokens) const;
};

std::vector<Budget> parse_budgets(const std::string& comma_separated);

// Per-layer weights w_l, normalised to mean 1: layer l gets max(1, floor(B * w_l)).
struct LayerSchedule {
  std::string name = "uniform";
  std::vector<double> weights;  // empty: uniform

  // "uniform", or a comma-separated list of one positive weight per layer.
  static LayerSchedule parse(const std::string& text, int n_layers);
  static LayerSchedule from_weights(std::string name, std::vector<double> weights);
  int64_t apply(int64_t budget, int layer) const;
};

}  // namespace kvsim
