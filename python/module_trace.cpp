// kvsim._kvsim, the trace: its metadata, sequences, tokens and text, a layer's attention rows
// as the engine sees them and its q/k/v tensors; and attention rows given as numpy arrays.
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>

#include "kvsim/replay/replay.hpp"
#include "kvtrace/attention_source.hpp"
#include "module.hpp"

namespace kvsim::python {
namespace {

py::dict meta_dict(const kvtrace::TraceReader& reader) {
  const kvtrace::TraceMeta& m = reader.meta();
  py::dict d;
  d["model"] = m.model;
  d["source"] = m.source;
  d["created"] = m.created;
  d["tool"] = m.tool;
  d["version"] = m.version;
  d["n_layers"] = m.n_layers;
  d["n_heads"] = m.n_heads;
  d["n_kv_heads"] = m.n_kv_heads;
  d["head_dim"] = m.head_dim;
  d["attn_scale"] = m.attn_scale;
  d["n_sequences"] = reader.n_sequences();
  d["file"] = reader.path();
  d["file_size"] = reader.file_size();
  if (m.rope.declared()) {  // as `kvsim info --json` writes it: the declared fields only
    py::dict rope;
    m.rope.for_each_declared([&](const char* name, const auto& value) { rope[name] = value; });
    d["rope"] = rope;
  }
  return d;
}

void check_seq(const kvtrace::TraceReader& reader, int seq) {
  if (seq < 0 || seq >= reader.n_sequences())
    reader.fail("", "sequence " + std::to_string(seq) + " out of range (the trace has " +
                        std::to_string(reader.n_sequences()) + ")");
}

void check_layer(const kvtrace::TraceReader& reader, int layer) {
  if (layer < 0 || layer >= reader.meta().n_layers)
    reader.fail("", "layer " + std::to_string(layer) + " out of range (the trace has " +
                        std::to_string(reader.meta().n_layers) + ")");
}

py::dict sequence_dict(const kvtrace::TraceReader& reader, int seq) {
  check_seq(reader, seq);
  const kvtrace::SequenceMeta& s = reader.sequence(seq);
  py::dict d;
  d["index"] = seq;
  d["n_tokens"] = s.n_tokens;
  d["prompt_len"] = s.prompt_len;
  d["has_token_text"] = s.has_token_text;
  d["question_len"] = s.question_len >= 0 ? py::object(py::int_(s.question_len)) : py::object(py::none());
  py::list spans;
  for (const kvtrace::Span& span : s.spans) {
    py::dict one;
    one["name"] = span.name;
    one["kind"] = span.kind;
    one["start"] = span.start;
    one["end"] = span.end;
    spans.append(one);
  }
  d["spans"] = spans;
  py::list layers;
  for (const auto& layer : s.layers) layers.append(layer.describe());
  d["layers"] = layers;
  return d;
}

std::vector<int> head_list(const kvtrace::TraceReader& reader, const std::vector<int>& heads) {
  const int n = reader.meta().n_heads;
  std::vector<int> out = heads;
  if (out.empty())
    for (int h = 0; h < n; ++h) out.push_back(h);
  for (int h : out)
    if (h < 0 || h >= n)
      reader.fail("", "head " + std::to_string(h) + " out of range (the trace has " + std::to_string(n) + ")");
  return out;
}

// Rows of `heads` of one layer as the engine sees them: [heads][n][n] (zeros above the
// diagonal) or packed [heads][n(n+1)/2].
py::array_t<float> attention(const Trace& trace, int seq, int layer, const std::vector<int>& heads_in, bool packed,
                             const std::string& rows) {
  const auto held = trace.hold();
  const kvtrace::TraceReader& reader = *held;
  check_seq(reader, seq);
  check_layer(reader, layer);
  const std::vector<int> heads = head_list(reader, heads_in);
  const kvtrace::RowsFrom from = parse_rows(rows);
  const int64_t n = reader.sequence(seq).n_tokens;
  const size_t per_head = static_cast<size_t>(packed ? kvtrace::packed_length(n) : n * n);
  std::vector<float> out;
  {
    py::gil_scoped_release release;
    out.assign(per_head * heads.size(), 0.0f);
    auto source = kvtrace::open_attention_source(reader, seq, layer, heads, from);
    kvtrace::RowBlock block;
    for (int64_t first = 0; first < n; first += kvtrace::kRowBlockSize) {
      const int64_t count = std::min(kvtrace::kRowBlockSize, n - first);
      source->rows(first, count, block);
      for (size_t h = 0; h < heads.size(); ++h)
        for (int64_t t = first; t < first + count; ++t) {
          const float* row = block.row(static_cast<int>(h), t);
          float* dst = out.data() + h * per_head + static_cast<size_t>(packed ? kvtrace::packed_row_offset(t) : t * n);
          std::copy(row, row + t + 1, dst);
        }
    }
  }
  const auto h = static_cast<py::ssize_t>(heads.size());
  if (packed) return to_numpy(std::move(out), {h, static_cast<py::ssize_t>(per_head)});
  return to_numpy(std::move(out), {h, static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(n)});
}

py::array_t<float> tensor(const Trace& trace, int seq, int layer, const std::string& name, int head) {
  const auto held = trace.hold();
  const kvtrace::TraceReader& reader = *held;
  check_seq(reader, seq);
  check_layer(reader, layer);
  kvtrace::Tensor t;
  if (name == "q")
    t = kvtrace::Tensor::q;
  else if (name == "k")
    t = kvtrace::Tensor::k;
  else if (name == "v")
    t = kvtrace::Tensor::v;
  else
    throw InputError("", "", "tensor '" + name + "' is not q, k or v (attention() reads attn)");
  if (!reader.layer(seq, layer).has(t)) reader.fail(kvtrace::tensor_path(seq, layer, t), "this layer has no " + name);
  const int heads = t == kvtrace::Tensor::q ? reader.meta().n_heads : reader.meta().n_kv_heads;
  if (head < 0 || head >= heads)
    reader.fail(kvtrace::tensor_path(seq, layer, t),
                "head " + std::to_string(head) + " out of range (" + std::to_string(heads) + " heads)");
  std::vector<float> data;
  {
    py::gil_scoped_release release;
    data = reader.read_head(seq, layer, t, head);
  }
  return to_numpy(std::move(data), {static_cast<py::ssize_t>(reader.sequence(seq).n_tokens),
                                    static_cast<py::ssize_t>(reader.meta().head_dim)});
}

// ---- rows given as arrays ----

// n for a packed row set of n(n+1)/2 values.
int64_t tokens_of_packed(int64_t length) {
  int64_t n = static_cast<int64_t>(std::floor((std::sqrt(8.0 * static_cast<double>(length) + 1.0) - 1.0) / 2.0));
  while (n * (n + 1) / 2 < length) ++n;
  while (n > 0 && n * (n + 1) / 2 > length) --n;
  if (n * (n + 1) / 2 != length)
    throw InputError("", "attention",
                     "a packed row set holds n(n+1)/2 values; " + std::to_string(length) + " is not such a number");
  return n;
}

}  // namespace

py::array array_of(const py::handle& object, const char* name) {
  py::array a = py::array::ensure(object);
  if (!a) throw InputError("", name, "not convertible to a float32 array");
  return a;
}

FloatArray float32_of(const py::array& a, const char* name) {
  // The bytes the elements reach, from the first to the last: fewer than the elements' own
  // bytes when some share memory (a stride of 0, as np.broadcast_to makes).
  if (a.size() > 1) {
    __int128 reach = a.itemsize();
    for (py::ssize_t d = 0; d < a.ndim(); ++d)
      reach += static_cast<__int128>(a.strides(d) < 0 ? -a.strides(d) : a.strides(d)) * (a.shape(d) - 1);
    if (reach < static_cast<__int128>(a.size()) * a.itemsize())
      throw InputError("", name,
                       std::string("a broadcast view (elements sharing memory) is not expanded; pass "
                                   "np.ascontiguousarray(") +
                           name + ")");
  }
  FloatArray out = FloatArray::ensure(a);
  if (!out) throw InputError("", name, "not convertible to a float32 array");
  return out;
}

Rows rows_of(const py::handle& object) {
  const py::array a = array_of(object, "attention");
  Rows r;
  py::ssize_t heads = 1;
  if (a.ndim() == 3) {
    if (a.shape(1) != a.shape(2))
      throw InputError("", "attention",
                       "a [heads, n, n] array needs square matrices, got [" + std::to_string(a.shape(0)) + ", " +
                           std::to_string(a.shape(1)) + ", " + std::to_string(a.shape(2)) + "]");
    heads = a.shape(0);
    r.n_tokens = a.shape(1);
  } else if (a.ndim() == 2) {
    heads = a.shape(0);
    r.n_tokens = tokens_of_packed(a.shape(1));
    r.packed = true;
  } else if (a.ndim() == 1) {
    r.n_tokens = tokens_of_packed(a.shape(0));
    r.packed = true;
  } else {
    throw InputError(
        "", "attention",
        "expected [heads, n, n] (full) or [heads, n(n+1)/2] (packed), got " + std::to_string(a.ndim()) + " dimensions");
  }
  if (heads < 1 || heads > kvtrace::Limits::max_heads)
    throw InputError(
        "", "attention",
        std::to_string(heads) + " heads (1 to " + std::to_string(kvtrace::Limits::max_heads) + " supported)");
  if (r.n_tokens > kvtrace::Limits::max_attn_tokens)
    throw InputError("", "attention",
                     std::to_string(r.n_tokens) + " rows is more than the " +
                         std::to_string(kvtrace::Limits::max_attn_tokens) + " supported");
  r.n_heads = static_cast<int>(heads);
  r.array = float32_of(a, "attention");  // only now, the shape checked, may it be copied
  return r;
}

void bind_trace(py::module_& m) {
  py::class_<Trace>(m, "Trace")
      .def(py::init([](const std::string& path) {
             Trace t;
             t.reader = std::make_shared<const kvtrace::TraceReader>(path);
             return t;
           }),
           py::arg("path"))
      .def_property_readonly("path", [](const Trace& t) { return t.get().path(); })
      .def_property_readonly("meta", [](const Trace& t) { return meta_dict(t.get()); })
      .def_property_readonly("n_sequences", [](const Trace& t) { return t.get().n_sequences(); })
      .def_property_readonly("closed", [](const Trace& t) { return !t.reader; })
      .def(
          "sequence", [](const Trace& t, int seq) { return sequence_dict(t.get(), seq); }, py::arg("seq"))
      .def(
          "tokens",
          [](const Trace& t, int seq) {
            check_seq(t.get(), seq);
            return to_numpy(t.get().tokens(seq));
          },
          py::arg("seq"))
      .def(
          "token_text",
          [](const Trace& t, int seq) {
            check_seq(t.get(), seq);
            return t.get().token_text(seq);
          },
          py::arg("seq"))
      .def("_attention", &attention)
      .def("_tensor", &tensor)
      .def("close", [](Trace& t) { t.reader.reset(); });
}

}  // namespace kvsim::python
