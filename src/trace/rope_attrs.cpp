#include "rope_attrs.hpp"

#include <H5Cpp.h>

#include <cmath>
#include <optional>
#include <stdexcept>

#include "h5io.hpp"

namespace kvtrace {

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
  return "";
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
