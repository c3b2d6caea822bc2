#include "kvsim/quant/quant.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>

#include "kvtrace/error.hpp"
#include "kvtrace/half.hpp"
#include "kvsim/core/text_util.hpp"

namespace kvsim {
namespace {

[[noreturn]] void bad(const std::string& text, const std::string& problem) {
  throw kvtrace::InputError("", "", "quantization '" + text + "': " + problem);
}

QuantSpec make_preset(const std::string& name, int bits, int group, QuantAxis key_axis, QuantAxis value_axis,
                      int residual) {
  QuantSpec spec;
  spec.name = name;
  spec.key = {bits, group, key_axis};
  spec.value = {bits, group, value_axis};
  spec.residual = residual;
  return spec;
}

// A non-negative decimal integer of at most 9 digits, or -1.
int small_number(const std::string& text) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoi(text);
}

int parse_bits(const std::string& text, const std::string& digits, const char* what) {
  const int bits = digits == "f" ? 16 : small_number(digits);
  if (bits == 16) return 0;
  if (bits < 1 || bits > 8)
    bad(text, std::string(what) + " bits '" + digits + "' must be 1..8 (or 16 to keep them at full precision)");
  return bits;
}

using text::lower;

std::string axis_name(QuantAxis axis) { return axis == QuantAxis::per_token ? "per token" : "per channel"; }

// Rounds a stored scale or zero point to its storage format.
float stored(double value, int scale_bits) {
  const float as_float = static_cast<float>(value);
  if (scale_bits != 16) return as_float;
  const float half = kvtrace::half_to_float(kvtrace::float_to_half(as_float));
  return std::isfinite(half) ? half : as_float;  // beyond float16's range: keep float32
}

// Quantizes the elements data[first + k * stride], k = 0..count-1, as one group.
void quantize_group(float* data, int64_t first, int64_t stride, int64_t count, int bits, int scale_bits) {
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  for (int64_t k = 0; k < count; ++k) {
    const float x = data[first + k * stride];
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  if (!(lo <= hi)) return;  // empty or NaN group: left as it is
  const double levels = static_cast<double>((1 << bits) - 1);
  const float zero = stored(lo, scale_bits);
  const float scale = stored((static_cast<double>(hi) - static_cast<double>(lo)) / levels, scale_bits);
  for (int64_t k = 0; k < count; ++k) {
    float& x = data[first + k * stride];
    double q = 0;
    if (scale > 0) q = std::clamp(std::nearbyint((static_cast<double>(x) - zero) / scale), 0.0, levels);
    x = static_cast<float>(static_cast<double>(zero) + q * static_cast<double>(scale));
  }
}

void check_shape(size_t size, int64_t n_tokens, int head_dim) {
  if (n_tokens < 0 || head_dim <= 0 || static_cast<int64_t>(size) != n_tokens * head_dim)
    throw std::invalid_argument("fake_quantize: data size does not match n_tokens x head_dim");
}

}  // namespace

const std::vector<QuantSpec>& quant_presets() {
  static const std::vector<QuantSpec> presets = [] {
    std::vector<QuantSpec> out;
    QuantSpec none;
    none.key.bits = none.value.bits = 0;
    out.push_back(none);
    out.push_back(make_preset("flexgen4", 4, 64, QuantAxis::per_token, QuantAxis::per_token, 0));
    out.push_back(make_preset("kivi2", 2, 32, QuantAxis::per_channel, QuantAxis::per_token, 128));
    return out;
  }();
  return presets;
}

std::string QuantSpec::canonical() const {
  if (!enabled()) return "none";
  std::ostringstream out;
  const int k = key.quantized() ? key.bits : 16, v = value.quantized() ? value.bits : 16;
  if (k == v)
    out << "int" << k;
  else
    out << "k" << k << "v" << v;
  const int group = key.quantized() ? key.group : value.group;
  if (group != 64) out << ":g" << group;
  if (residual != 0) out << ":r" << residual;
  if (key.quantized() && key.axis == QuantAxis::per_channel) out << ":kc";
  if (value.quantized() && value.axis == QuantAxis::per_channel) out << ":vc";
  if (scale_bits != 16) out << ":s" << scale_bits;
  return out.str();
}

std::string QuantSpec::describe() const {
  if (!enabled()) return "no quantization (full precision)";
  std::ostringstream out;
  auto tensor = [&](const char* what, const QuantTensorSpec& t) {
    out << what << " ";
    if (!t.quantized())
      out << "full precision";
    else
      out << t.bits << "-bit " << axis_name(t.axis);
  };
  if (key == value) {
    out << key.bits << "-bit keys and values " << axis_name(key.axis);
  } else {
    tensor("keys", key);
    out << ", ";
    tensor("values", value);
  }
  out << ", groups of " << (key.quantized() ? key.group : value.group) << ", " << (scale_bits == 16 ? "fp16" : "fp32")
      << " scale and zero point";
  if (residual > 0) out << ", the " << residual << " most recent tokens at full precision";
  return out.str();
}

QuantSpec parse_quant(const std::string& original) {
  const std::string text = lower(original);
  if (text.empty()) bad(original, "empty");
  for (const auto& preset : quant_presets())
    if (text == preset.name) return preset;
  if (text == "fp16" || text == "f16" || text == "bf16" || text == "float16") return quant_presets()[0];

  std::vector<std::string> parts;
  {
    std::stringstream stream(text);
    std::string part;
    while (std::getline(stream, part, ':')) parts.push_back(part);
  }
  if (parts.empty() || parts[0].empty())
    bad(original, "no bits given (write e.g. int8, k4v2 or a preset: none, flexgen4, kivi2)");
  QuantSpec spec;
  const std::string& head = parts[0];
  if (head.rfind("int", 0) == 0) {
    spec.key.bits = spec.value.bits = parse_bits(original, head.substr(3), "key and value");
  } else if (head[0] == 'k' && head.find('v') != std::string::npos) {
    const size_t v = head.find('v');
    spec.key.bits = parse_bits(original, head.substr(1, v - 1), "key");
    spec.value.bits = parse_bits(original, head.substr(v + 1), "value");
  } else {
    bad(original,
        "unknown preset or spec (presets: none, flexgen4, kivi2; custom: int<b> or k<b>v<b>, then options "
        ":g<group> :r<residual> :kc|kt :vc|vt :s16|s32, e.g. k4v2:g64)");
  }
  int group = 64;
  for (size_t p = 1; p < parts.size(); ++p) {
    const std::string& option = parts[p];
    if (option == "kc" || option == "kt")
      spec.key.axis = option == "kc" ? QuantAxis::per_channel : QuantAxis::per_token;
    else if (option == "vc" || option == "vt")
      spec.value.axis = option == "vc" ? QuantAxis::per_channel : QuantAxis::per_token;
    else if (option.size() > 1 && option[0] == 'g') {
      group = small_number(option.substr(1));
      if (group < 1 || group > 65536) bad(original, "group size '" + option.substr(1) + "' must be 1..65536");
    } else if (option.size() > 1 && option[0] == 'r') {
      spec.residual = small_number(option.substr(1));
      if (spec.residual < 0 || spec.residual > 1000000)
        bad(original, "residual '" + option.substr(1) + "' must be 0..1000000 tokens");
    } else if (option == "s16" || option == "s32") {
      spec.scale_bits = option == "s16" ? 16 : 32;
    } else {
      bad(original, "unknown option '" + option + "' (options: g<group> r<residual> kc kt vc vt s16 s32)");
    }
  }
  spec.key.group = spec.value.group = group;
  for (const QuantTensorSpec* t : {&spec.key, &spec.value}) {
    if (t->quantized() && t->axis == QuantAxis::per_channel && spec.residual % group != 0)
      bad(original, "per-channel groups run along tokens, so the residual (" + std::to_string(spec.residual) +
                        ") must be a multiple of the group size (" + std::to_string(group) + ")");
  }
  if (!spec.enabled()) return quant_presets()[0];
  spec.name = spec.canonical();
  for (const auto& preset : quant_presets())
    if (preset.key == spec.key && preset.value == spec.value && preset.residual == spec.residual &&
        preset.scale_bits == spec.scale_bits)
      return preset;
  return spec;
}

std::vector<QuantSpec> parse_quant_list(const std::string& text) {
  std::vector<QuantSpec> out;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    if (item.empty()) continue;
    QuantSpec spec = parse_quant(item);
    if (std::none_of(out.begin(), out.end(), [&](const QuantSpec& s) { return s.name == spec.name; }))
      out.push_back(std::move(spec));
  }
  if (out.empty()) bad(text, "no quantization named");
  return out;
}

double bits_per_element(const QuantTensorSpec& tensor, int scale_bits, int head_dim, int full_bits) {
  if (!tensor.quantized()) return full_bits;
  const double pair = 2.0 * scale_bits;
  if (tensor.axis == QuantAxis::per_token && head_dim > 0) {
    const int64_t groups = (head_dim + tensor.group - 1) / tensor.group;
    return tensor.bits + pair * static_cast<double>(groups) / head_dim;
  }
  return tensor.bits + pair / tensor.group;
}

double bits_per_element(const QuantSpec& spec, int head_dim, int full_bits) {
  return 0.5 * (bits_per_element(spec.key, spec.scale_bits, head_dim, full_bits) +
                bits_per_element(spec.value, spec.scale_bits, head_dim, full_bits));
}

double stored_bits_per_element(const QuantSpec& spec, int head_dim, int64_t n_tokens, int full_bits) {
  if (n_tokens <= 0) return 0;
  const double residual = spec.enabled() ? static_cast<double>(std::min<int64_t>(n_tokens, spec.residual)) : 0.0;
  const double quantized = static_cast<double>(n_tokens) - residual;
  return (quantized * bits_per_element(spec, head_dim, full_bits) + residual * full_bits) /
         static_cast<double>(n_tokens);
}

bool full_precision(const QuantTensorSpec& tensor, int residual, int64_t position, int64_t step) {
  if (!tensor.quantized() || position >= step) return true;
  if (tensor.axis == QuantAxis::per_token) return step - position <= residual;
  const int64_t chunk = residual > 0 ? residual : tensor.group;
  return position >= chunk * (step / chunk);
}

void fake_quantize(std::span<float> data, int64_t n_tokens, int head_dim, const QuantTensorSpec& tensor,
                   int scale_bits) {
  check_shape(data.size(), n_tokens, head_dim);
  if (!tensor.quantized()) return;
  if (tensor.bits < 1 || tensor.bits > 8 || tensor.group < 1) throw std::invalid_argument("fake_quantize: bad spec");
  float* base = data.data();
  const int64_t group = tensor.group;
  if (tensor.axis == QuantAxis::per_token) {
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t c = 0; c < head_dim; c += group)
        quantize_group(base, t * head_dim + c, 1, std::min<int64_t>(group, head_dim - c), tensor.bits, scale_bits);
  } else {
    for (int64_t c = 0; c < head_dim; ++c)
      for (int64_t t = 0; t < n_tokens; t += group)
        quantize_group(base, t * head_dim + c, head_dim, std::min(group, n_tokens - t), tensor.bits, scale_bits);
  }
}

void fake_quantize(std::vector<float>& data, int64_t n_tokens, int head_dim, int bits, int group, QuantAxis axis,
                   int residual, int scale_bits) {
  check_shape(data.size(), n_tokens, head_dim);
  const QuantTensorSpec tensor{bits, group, axis};
  const std::vector<float> original = data;
  fake_quantize(std::span<float>(data), n_tokens, head_dim, tensor, scale_bits);
  const int64_t last = n_tokens - 1;
  for (int64_t t = 0; t < n_tokens; ++t)
    if (full_precision(tensor, residual, t, last))
      std::copy_n(original.begin() + t * head_dim, head_dim, data.begin() + t * head_dim);
}

double relative_error(std::span<const float> original, std::span<const float> quantized) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < original.size() && i < quantized.size(); ++i) {
    const double d = static_cast<double>(original[i]) - quantized[i];
    diff += d * d;
    norm += static_cast<double>(original[i]) * original[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : 0.0;
}

QuantizedHead::QuantizedHead(std::span<const float> data, int64_t n_tokens, int head_dim, const QuantTensorSpec& tensor,
                             int residual, int scale_bits)
    : tensor_(tensor),
      residual_(residual),
      n_tokens_(n_tokens),
      head_dim_(head_dim),
      original_(data.begin(), data.end()),
      quantized_(data.begin(), data.end()) {
  fake_quantize(std::span<float>(quantized_), n_tokens, head_dim, tensor, scale_bits);
}

std::span<const float> QuantizedHead::row(int64_t position, int64_t step) const {
  return full_precision(tensor_, residual_, position, step) ? original_row(position) : quantized_row(position);
}

std::span<const float> QuantizedHead::original_row(int64_t position) const {
  return std::span<const float>(original_).subspan(static_cast<size_t>(position * head_dim_),
                                                   static_cast<size_t>(head_dim_));
}

std::span<const float> QuantizedHead::quantized_row(int64_t position) const {
  return std::span<const float>(quantized_)
      .subspan(static_cast<size_t>(position * head_dim_), static_cast<size_t>(head_dim_));
}

}  // namespace kvsim
