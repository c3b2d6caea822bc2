#include "kvtrace/schema.hpp"

#include <algorithm>
#include <cctype>

namespace kvtrace {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return "float16";
    case DType::f32:
      return "float32";
    case DType::f64:
      return "float64";
  }
  return "?";
}

const char* tensor_name(Tensor tensor) {
  switch (tensor) {
    case Tensor::q:
      return "q";
    case Tensor::k:
      return "k";
    case Tensor::v:
      return "v";
    case Tensor::attn:
      return "attn";
  }
  return "?";
}

bool LayerForm::has(Tensor tensor) const {
  switch (tensor) {
    case Tensor::q:
      return has_q;
    case Tensor::k:
      return has_k;
    case Tensor::v:
      return has_v;
    case Tensor::attn:
      return has_attn;
  }
  return false;
}

DType LayerForm::dtype(Tensor tensor) const {
  switch (tensor) {
    case Tensor::q:
      return q_dtype;
    case Tensor::k:
      return k_dtype;
    case Tensor::v:
      return v_dtype;
    case Tensor::attn:
      return attn_dtype;
  }
  return DType::f32;
}

std::string LayerForm::describe() const {
  std::string out;
  for (Tensor tensor : {Tensor::q, Tensor::k, Tensor::v, Tensor::attn}) {
    if (!has(tensor)) continue;
    if (!out.empty()) out += " ";
    out += std::string(tensor_name(tensor)) + ":" + dtype_name(dtype(tensor));
  }
  if (sliding_window) out += " window=" + std::to_string(sliding_window);
  if (logit_softcap > 0) out += " softcap=" + std::to_string(logit_softcap);
  return out;
}

std::string RopeMeta::describe() const {
  auto number = [](double x) {
    std::string text = std::to_string(x);
    text.erase(text.find_last_not_of('0') + 1);
    if (!text.empty() && text.back() == '.') text.pop_back();
    return text;
  };
  std::string out;
  auto add = [&](const std::string& field) { out += (out.empty() ? "" : " ") + field; };
  if (theta > 0) add("theta=" + number(theta));
  if (!scaling_type.empty()) add("scaling=" + scaling_type);
  if (scaling_factor > 0) add("factor=" + number(scaling_factor));
  if (rotary_dims > 0) add("rotary_dims=" + std::to_string(rotary_dims));
  if (!pairing.empty()) add("pairing=" + pairing);
  return out;
}

std::string seq_path(int seq) { return "/seqs/" + std::to_string(seq); }
std::string layer_path(int seq, int layer) { return seq_path(seq) + "/layers/" + std::to_string(layer); }
std::string tensor_path(int seq, int layer, Tensor tensor) {
  return layer_path(seq, layer) + "/" + tensor_name(tensor);
}

std::string span_problem(const Span& span, int64_t n_tokens) {
  // Built by append: gcc 12 warns falsely (-Wrestrict) on chains of operator+ here.
  std::string problem;
  if (span.start < 0 || span.start >= span.end || span.end > n_tokens)
    return problem.append("range [")
        .append(std::to_string(span.start))
        .append(", ")
        .append(std::to_string(span.end))
        .append(") is not within 0..n_tokens (")
        .append(std::to_string(n_tokens))
        .append(") with start < end");
  const auto word = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  };
  const auto control = [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; };
  if (span.kind.empty() || span.kind.size() > 64 || !std::all_of(span.kind.begin(), span.kind.end(), word)) {
    if (span.kind.size() <= 64 && std::none_of(span.kind.begin(), span.kind.end(), control))
      problem.append("kind '").append(span.kind).append("'");
    else
      problem.append("a kind of ").append(std::to_string(span.kind.size())).append(" bytes");
    return problem.append(" is not 1..64 letters, digits, '_', '-' or '.'");
  }
  if (span.name.empty() || static_cast<int64_t>(span.name.size()) > Limits::max_span_name_bytes ||
      std::any_of(span.name.begin(), span.name.end(), control))
    return problem.append("a name of ")
        .append(std::to_string(span.name.size()))
        .append(" bytes is not 1..")
        .append(std::to_string(Limits::max_span_name_bytes))
        .append(" bytes without control characters");
  return problem;
}

}  // namespace kvtrace
