#include "kvtrace/schema.hpp"

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

}  // namespace kvtrace
