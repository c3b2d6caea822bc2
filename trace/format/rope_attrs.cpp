#include "rope_attrs.hpp"

#include <H5Cpp.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "h5io.hpp"

namespace kvtrace {
namespace {

std::string shown(double x) {
  std::ostringstream out;
  out << std::setprecision(6) << x;
  return out.str();
}

// The inverse frequencies w_i = theta^(-2i / rotary) of the rotated pairs, and w_i / factor
// (linear scaling divides every one by it; llama3 and yarn divide the low ones): each must be
// positive (a pair with w = 0 never turns, and averaging its rotation divides 0 by 0) and
// turn by a finite angle p w at every position p a trace may hold. Without rope_theta only
// pair 0 is known (w_0 = 1 whatever theta).
std::string frequency_problem(const RopeMeta& rope, int head_dim) {
  const int rotary = rope.rotary_dims > 0 ? rope.rotary_dims : head_dim;
  const int pairs = rope.theta > 0 ? rotary / 2 : std::min(1, rotary / 2);
  const auto positions = static_cast<double>(Limits::max_tokens);
  const std::string factor = rope.scaling_factor > 0
                                 ? "attribute 'rope_scaling_factor' (" + shown(rope.scaling_factor) +
                                       ") with rope_theta " + (rope.theta > 0 ? shown(rope.theta) : "undeclared")
                                 : "";
  for (const bool scaled : {false, true}) {
    if (scaled && rope.scaling_factor <= 0) continue;
    const std::string blamed = scaled ? factor : "attribute 'rope_theta' (" + shown(rope.theta) + ")";
    for (int i = 0; i < pairs; ++i) {
      double w = rope.theta > 0 ? std::pow(rope.theta, -2.0 * i / rotary) : 1.0;
      if (scaled) w /= rope.scaling_factor;
      if (!(w > 0)) return blamed + " makes the RoPE frequency of pair " + std::to_string(i) + " zero";
      if (!std::isfinite(w * positions))
        return blamed + " makes the RoPE angle of pair " + std::to_string(i) + " (frequency " + shown(w) +
               ") infinite within the " + std::to_string(Limits::max_tokens) + " positions a trace may hold";
    }
  }
  return "";
}

}  // namespace

std::string rope_problem(const RopeMeta& rope, int head_dim) {
  auto positive = [](double x) { return std::isfinite(x) && x > 0; };
  if (rope.theta != 0 && !positive(rope.theta)) return "attribute 'rope_theta' must be a positive finite number";
  if (rope.scaling_factor != 0 && !positive(rope.scaling_factor))
    return "attribute 'rope_scaling_factor' must be a positive finite number";
  if (rope.scaling_type.size() > 64) return "attribute 'rope_scaling_type' is longer than 64 characters";
  if (!rope.pairing.empty() && rope.pairing != "interleaved" && rope.pairing != "half")
    return "attribute 'rope_pairing' is '" + rope.pairing.substr(0, 64) + "', not interleaved or half";
  if (rope.rotary_dims != 0 && (rope.rotary_dims < 2 || rope.rotary_dims % 2 != 0 || rope.rotary_dims > head_dim))
    return "attribute 'rotary_dims' must be even and in [2, head_dim = " + std::to_string(head_dim) + "]";
  return frequency_problem(rope, head_dim);
}

RopeMeta read_rope_attrs(const H5::H5Object& root, int head_dim, const std::function<void(const std::string&)>& fail) {
  // Each read names its attribute when the type is wrong (h5io throws "is not a number").
  auto read = [&](const char* name, auto get) {
    try {
      return get(root, name);
    } catch (const std::runtime_error& e) {
      fail(std::string("attribute '") + name + "' " + e.what());
      throw;
    }
  };
  RopeMeta rope;
  // An attribute present with the value 0 is refused, not taken for "not declared".
  if (const auto theta = read("rope_theta", h5::float_attr)) {
    if (!std::isfinite(*theta) || *theta <= 0) fail("attribute 'rope_theta' must be a positive finite number");
    rope.theta = *theta;
  }
  if (const auto factor = read("rope_scaling_factor", h5::float_attr)) {
    if (!std::isfinite(*factor) || *factor <= 0)
      fail("attribute 'rope_scaling_factor' must be a positive finite number");
    rope.scaling_factor = *factor;
  }
  if (const auto type = read("rope_scaling_type", h5::string_attr)) {
    if (type->empty()) fail("attribute 'rope_scaling_type' is empty");
    rope.scaling_type = *type;
  }
  if (const auto pairing = read("rope_pairing", h5::string_attr)) {
    if (pairing->empty()) fail("attribute 'rope_pairing' is empty");
    rope.pairing = *pairing;
  }
  if (const auto dims = read("rotary_dims", h5::int_attr)) {
    if (*dims < 1 || *dims > head_dim)
      rope.rotary_dims = -1;  // rope_problem names it
    else
      rope.rotary_dims = static_cast<int>(*dims);
  }
  if (const std::string problem = rope_problem(rope, head_dim); !problem.empty()) fail(problem);
  return rope;
}

void write_rope_attrs(H5::H5Object& root, const RopeMeta& rope) {
  if (rope.theta > 0) h5::write_attr(root, "rope_theta", rope.theta);
  if (!rope.scaling_type.empty()) h5::write_attr(root, "rope_scaling_type", rope.scaling_type);
  if (rope.scaling_factor > 0) h5::write_attr(root, "rope_scaling_factor", rope.scaling_factor);
  if (rope.rotary_dims > 0) h5::write_attr(root, "rotary_dims", int64_t{rope.rotary_dims});
  if (!rope.pairing.empty()) h5::write_attr(root, "rope_pairing", rope.pairing);
}

}  // namespace kvtrace
