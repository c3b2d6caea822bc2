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

void Rope::mean_rotation(int64_t first, int64_t count, std::vector<double>& cos, std::vector<double>& sin) const {
  cos.resize(pair.size());
  sin.resize(pair.size());
  const auto f = static_cast<double>(count);
  for (size_t i = 0; i < pair.size(); ++i) {
    const double w = frequency[i];
    const double kernel = std::sin(f * w / 2) / std::sin(w / 2) / f;
    const double middle = (static_cast<double>(first) + (f - 1) / 2) * w;
    cos[i] = kernel * std::cos(middle);
    sin[i] = kernel * std::sin(middle);
  }
}

void Rope::rotate(double* x, size_t stride, const std::vector<double>& cos, const std::vector<double>& sin) const {
  for (size_t i = 0; i < pair.size(); ++i) {
    const auto [a, b] = pair[i];
    const double u = x[a * stride], v = x[b * stride];
    x[a * stride] = cos[i] * u - sin[i] * v;
    x[b * stride] = sin[i] * u + cos[i] * v;
  }
}

}  // namespace kvsim
