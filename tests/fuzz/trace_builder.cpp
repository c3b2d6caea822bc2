#include "trace_builder.hpp"

#include <H5Cpp.h>

#include <cmath>
#include <limits>
#include <string>

#include "../../trace/format/h5io.hpp"

namespace kvfuzz {

namespace {

float special(uint8_t which) {
  switch (which % 8) {
    case 0:
      return std::numeric_limits<float>::quiet_NaN();
    case 1:
      return std::numeric_limits<float>::infinity();
    case 2:
      return -std::numeric_limits<float>::infinity();
    case 3:
      return 1e30f;
    case 4:
      return -1e30f;
    case 5:
      return 65504.0f;  // float16's largest
    case 6:
      return 1e-40f;  // a float32 denormal
    default:
      return -0.0f;
  }
}

// A dtype for a tensor: mostly the ones kvsim reads, sometimes ones it must refuse.
H5::DataType tensor_type(Recipe& in) {
  switch (in.byte() % 16) {
    case 15:
      return H5::PredType::IEEE_F64LE;
    case 14:
      return H5::PredType::IEEE_F32BE;
    case 13:
      return H5::PredType::STD_I32LE;
    case 12: {
      H5::FloatType odd(H5::PredType::IEEE_F32LE);
      odd.setFields(31, 20, 11, 0, 20);
      odd.setEbias(1023);
      return odd;
    }
    case 1:
    case 3:
    case 5:
    case 7:
    case 9:
    case 11:
      return H5::PredType::IEEE_F32LE;
    default:
      return kvtrace::h5::half_type();
  }
}

void int_attr(Recipe& in, H5::H5Object& object, const char* name, int64_t value) {
  const int fault = in.fault();
  if (fault == 1) return;  // missing
  if (fault == 2) value = static_cast<int64_t>(in.byte()) - 128;
  if (fault == 3) value = int64_t{1} << in.range(16, 62);
  if (fault == 4) {  // wrong type: a string
    H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
    object.createAttribute(name, type, H5::DataSpace(H5S_SCALAR)).write(type, std::to_string(value));
    return;
  }
  if (fault == 5) {  // not a scalar
    const hsize_t two = 2;
    const int64_t values[2] = {value, value};
    object.createAttribute(name, H5::PredType::STD_I64LE, H5::DataSpace(1, &two))
        .write(H5::PredType::NATIVE_INT64, values);
    return;
  }
  const H5::PredType& type = fault == 6   ? H5::PredType::STD_I8LE
                             : fault == 7 ? H5::PredType::STD_U32BE
                             : fault == 8 ? H5::PredType::IEEE_F64LE
                                          : H5::PredType::STD_I64LE;
  object.createAttribute(name, type, H5::DataSpace(H5S_SCALAR)).write(H5::PredType::NATIVE_INT64, &value);
}

void string_attr(Recipe& in, H5::H5Object& object, const char* name, std::string value) {
  const int fault = in.fault();
  if (fault == 1) return;  // missing
  if (fault == 2) value = "other";
  if (fault == 3) value.clear();
  if (fault == 4) {  // wrong type
    const int64_t number = 7;
    object.createAttribute(name, H5::PredType::STD_I64LE, H5::DataSpace(H5S_SCALAR))
        .write(H5::PredType::NATIVE_INT64, &number);
    return;
  }
  if (fault == 5) {  // fixed width, null padded (well-formed too)
    H5::StrType type(H5::PredType::C_S1, value.size() + static_cast<size_t>(in.range(1, 4)));
    type.setStrpad(H5T_STR_NULLPAD);
    std::string padded = value;
    padded.resize(type.getSize(), '\0');
    object.createAttribute(name, type, H5::DataSpace(H5S_SCALAR)).write(type, padded.data());
    return;
  }
  H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
  type.setCset(fault == 6 ? H5T_CSET_ASCII : H5T_CSET_UTF8);
  object.createAttribute(name, type, H5::DataSpace(H5S_SCALAR)).write(type, value);
}

void float_attr(Recipe& in, H5::H5Object& object, const char* name, double value, bool usually_missing) {
  const int fault = in.fault();
  if (usually_missing ? in.byte() % 4 != 3 : fault == 1) return;
  if (fault >= 2) value = in.value();
  object.createAttribute(name, H5::PredType::IEEE_F64LE, H5::DataSpace(H5S_SCALAR))
      .write(H5::PredType::NATIVE_DOUBLE, &value);
}

// A dataset of `shape` (sometimes off by one, or of another rank), filled by `fill`.
template <typename Fill>
void dataset(Recipe& in, H5::Group& group, const char* name, std::vector<hsize_t> shape, const H5::DataType& type,
             Fill fill) {
  if (in.one_in(24)) shape.back() += 1;
  if (in.one_in(48)) shape.pop_back();
  if (shape.empty()) shape.push_back(1);
  hsize_t count = 1;
  for (hsize_t d : shape) count *= d;
  H5::DSetCreatPropList plist;
  const uint8_t layout = in.byte();
  if (layout % 3 != 1) {  // chunked: one head per chunk, like kvsim's writer, or in small pieces
    std::vector<hsize_t> chunk = shape;
    if (chunk.size() > 1) chunk[0] = 1;
    if (layout % 3 == 2) chunk.back() = std::max<hsize_t>(1, chunk.back() / 2);
    plist.setChunk(static_cast<int>(chunk.size()), chunk.data());
    if (layout % 7 == 0) {
      plist.setShuffle();
      plist.setDeflate(1);
    }
  }
  H5::DataSet set = group.createDataSet(name, type, H5::DataSpace(static_cast<int>(shape.size()), shape.data()), plist);
  if (in.one_in(32)) return;  // never written: fill values
  std::vector<float> values(count);
  fill(values);
  if (type.getClass() == H5T_INTEGER) {
    std::vector<int32_t> ints(values.size());
    for (size_t i = 0; i < values.size(); ++i)
      ints[i] = std::isfinite(values[i]) && std::abs(values[i]) < 1e9f ? static_cast<int32_t>(values[i]) : 0;
    set.write(ints.data(), H5::PredType::NATIVE_INT32);
  } else {
    set.write(values.data(), H5::PredType::NATIVE_FLOAT);
  }
}

}  // namespace

float Recipe::value() {
  const uint8_t b = byte();
  if (b == 0xff) return special(byte());
  return static_cast<float>(static_cast<int8_t>(b)) / 16.0f;
}

std::vector<unsigned char> build_trace(Recipe& in, Choices& choices) {
  H5::Exception::dontPrint();
  const int n_layers = in.range(1, 3);  // range(): a zero byte gives the low end
  const int n_kv_heads = in.range(1, 3);
  const int group = in.range(1, 3);
  const int n_heads = n_kv_heads * group + (in.one_in(32) ? 1 : 0);  // sometimes not a multiple
  const int head_dim = in.range(1, 8);
  int n_seqs = in.one_in(32) ? 0 : in.range(1, 2);
  if (in.one_in(32)) n_seqs += 1;

  H5::FileAccPropList access;
  access.setCore(size_t{1} << 16, false);  // in memory only
  H5::H5File file("kvfuzz-built.h5", H5F_ACC_TRUNC, H5::FileCreatPropList::DEFAULT, access);
  H5::Group root = file.openGroup("/");
  string_attr(in, root, "format", "kvtrace");
  int_attr(in, root, "version", 1);
  string_attr(in, root, "model", "fuzz");
  string_attr(in, root, "source", "synthetic");
  int_attr(in, root, "n_layers", n_layers);
  int_attr(in, root, "n_heads", n_heads);
  int_attr(in, root, "n_kv_heads", n_kv_heads);
  int_attr(in, root, "head_dim", head_dim);
  float_attr(in, root, "attn_scale", 1.0 / std::sqrt(head_dim), false);
  string_attr(in, root, "created", "2024-01-01T00:00:00Z");
  string_attr(in, root, "tool", "kvfuzz");

  H5::Group seqs = file.createGroup("seqs");
  for (int s = 0; s < n_seqs; ++s) {
    const std::string seq_name = in.one_in(64) ? std::string("0").append(std::to_string(s)) : std::to_string(s);
    H5::Group seq = seqs.createGroup(seq_name);
    const int n = in.range(1, 24);
    int_attr(in, seq, "n_tokens", n);
    int_attr(in, seq, "prompt_len", in.range(0, n));
    if (!in.one_in(32))
      dataset(in, seq, "tokens", {static_cast<hsize_t>(n)},
              in.one_in(32) ? H5::DataType(H5::PredType::IEEE_F32LE) : H5::DataType(H5::PredType::STD_I32LE),
              [&](std::vector<float>& v) {
                for (float& x : v) x = in.byte();
              });
    if (in.one_in(3)) {
      const hsize_t count = static_cast<hsize_t>(n) + (in.one_in(16) ? 1 : 0);
      if (in.one_in(2)) {
        H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
        type.setCset(H5T_CSET_UTF8);
        std::vector<std::string> text(count);
        std::vector<const char*> pointers;
        for (auto& t : text) {
          const auto length = static_cast<size_t>(in.range(0, 3));
          t.assign(length, static_cast<char>('a' + in.range(0, 25)));
        }
        for (auto& t : text) pointers.push_back(t.c_str());
        seq.createDataSet("token_text", type, H5::DataSpace(1, &count)).write(pointers.data(), type);
      } else {
        H5::StrType type(H5::PredType::C_S1, static_cast<size_t>(in.range(1, 6)));
        std::vector<char> text(type.getSize() * count);
        for (char& c : text) c = static_cast<char>(in.range(0, 3) ? 'a' + in.range(0, 25) : 0);
        seq.createDataSet("token_text", type, H5::DataSpace(1, &count)).write(text.data(), type);
      }
    }
    if (in.one_in(32)) continue;  // no layers group
    H5::Group layers = seq.createGroup("layers");
    const int layer_groups = n_layers + (in.one_in(32) ? 1 : 0);  // sometimes more than n_layers
    for (int l = 0; l < layer_groups; ++l) {
      H5::Group layer = layers.createGroup(std::to_string(l));
      // Which of q, k, v, attn: mostly q+k+v; attn when q or k is missing, sometimes besides.
      const uint8_t form = in.byte();
      const bool q = (form & 0x11) != 0x11, k = (form & 0x22) != 0x22, v = (form & 0x44) != 0x44,
                 attn = (form & 0x88) == 0x88 || !(q && k);
      const auto N = static_cast<hsize_t>(n), D = static_cast<hsize_t>(head_dim);
      auto values = [&](std::vector<float>& out) {
        for (float& x : out) x = in.value();
      };
      if (q) dataset(in, layer, "q", {static_cast<hsize_t>(n_heads), N, D}, tensor_type(in), values);
      if (k) dataset(in, layer, "k", {static_cast<hsize_t>(n_kv_heads), N, D}, tensor_type(in), values);
      if (v) dataset(in, layer, "v", {static_cast<hsize_t>(n_kv_heads), N, D}, tensor_type(in), values);
      if (attn) {
        const bool valid = !in.one_in(8);
        dataset(in, layer, "attn", {static_cast<hsize_t>(n_heads), N * (N + 1) / 2}, tensor_type(in),
                [&](std::vector<float>& out) {
                  if (!valid) return values(out);
                  // Causal softmax rows: positive weights normalised per row (row t holds t+1).
                  const size_t rows_per_head = static_cast<size_t>(n);
                  size_t at = 0;
                  while (at < out.size())
                    for (size_t t = 0; t < rows_per_head && at < out.size(); ++t) {
                      double sum = 0;
                      for (size_t i = 0; i <= t && at + i < out.size(); ++i) sum += out[at + i] = 1.0f + in.byte();
                      for (size_t i = 0; i <= t && at < out.size(); ++i, ++at)
                        out[at] = static_cast<float>(out[at] / sum);
                    }
                });
      }
      if (in.one_in(6)) int_attr(in, layer, "sliding_window", in.range(0, n + 1));
      float_attr(in, layer, "logit_softcap", in.range(1, 50), true);
    }
  }
  choices.policy = in.byte();
  choices.options = in.byte();
  choices.budget = in.byte();

  file.flush(H5F_SCOPE_GLOBAL);
  const ssize_t size = H5Fget_file_image(file.getId(), nullptr, 0);
  std::vector<unsigned char> image(size > 0 ? static_cast<size_t>(size) : 0);
  if (size > 0) H5Fget_file_image(file.getId(), image.data(), image.size());
  return image;
}

}  // namespace kvfuzz
