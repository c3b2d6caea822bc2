// RoPE as a trace declares it: rope.hpp.
#include "rope.hpp"

#include <cmath>

namespace kvsim {

std::string rope_problem(const kvtrace::RopeMeta& rope, const std::string& what) {
  if (rope.theta <= 0 || rope.pairing.empty())
    return "needs the trace's RoPE attributes rope_theta and rope_pairing to un-rotate " + what +
           "; the trace declares " + (rope.declared() ? rope.describe() : std::string("none"));
  if (!rope.scaling_type.empty() && rope.scaling_type != "none" && rope.scaling_type != "linear")
    return "supports RoPE scaling none or linear, not " + rope.scaling_type;
  return "";
}

Rope::Rope(const kvtrace::RopeMeta& rope, int head_dim) {
  const auto rotary = static_cast<size_t>(rope.rotary_dims > 0 ? rope.rotary_dims : head_dim);
  const double scale = rope.scaling_type == "linear" ? rope.scaling_factor : 1.0;
  frequency.resize(rotary / 2);
  pair.resize(rotary / 2);
  for (size_t i = 0; i < rotary / 2; ++i) {
    frequency[i] = std::pow(rope.theta, -static_cast<double>(2 * i) / static_cast<double>(rotary)) / scale;
    pair[i] = rope.pairing == "interleaved" ? std::pair{2 * i, 2 * i + 1} : std::pair{i, i + rotary / 2};
  }
}

void Rope::unrotate(double* x, int64_t position) const {
  for (size_t i = 0; i < pair.size(); ++i) {
    const double angle = static_cast<double>(position) * frequency[i], c = std::cos(angle), s = std::sin(angle);
    const auto [a, b] = pair[i];
    const double u = x[a], v = x[b];
    x[a] = c * u + s * v;
    x[b] = c * v - s * u;
  }
}

}  // namespace kvsim
