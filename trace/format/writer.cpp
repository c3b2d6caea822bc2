#include "kvtrace/writer.hpp"

#include <H5Cpp.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <optional>

#include "h5io.hpp"
#include "rope_attrs.hpp"
#include "kvtrace/atomic_file.hpp"
#include "kvtrace/error.hpp"

#ifndef KVSIM_VERSION
#define KVSIM_VERSION "dev"
#endif

namespace kvtrace {

std::string tool_string() { return std::string("kvsim ") + KVSIM_VERSION; }

// SOURCE_DATE_EPOCH (reproducible-builds.org) pins the timestamp so the same inputs give
// the same bytes.
std::string now_iso8601() {
  std::time_t when = std::time(nullptr);
  if (const char* epoch = std::getenv("SOURCE_DATE_EPOCH")) {
    char* end = nullptr;
    const long long value = std::strtoll(epoch, &end, 10);
    if (end != epoch && *end == '\0') when = static_cast<std::time_t>(value);
  }
  std::tm utc{};
  gmtime_r(&when, &utc);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buffer;
}

// After a failed write (a full disk) HDF5's file state is broken: closing it a second time
// crashes inside HDF5. So the file is closed once, at most, and when that fails its handle is
// abandoned; the temporary file is removed all the same.
struct TraceWriter::State {
  AtomicFile file;
  std::unique_ptr<H5::H5File> h5;
  std::vector<int64_t> n_tokens;  // per sequence
  bool closed = false;
  bool failed = false;  // a write failed: refuse everything after it
  explicit State(const std::string& path) : file(path) {}

  // Closes the file once; false if HDF5 could not (its handle is then abandoned).
  bool close_once() {
    if (closed) return true;
    closed = true;
    try {
      h5->close();
      return true;
    } catch (const H5::Exception&) {
      static_cast<void>(h5.release());
      return false;
    }
  }
  [[noreturn]] void fail(const std::string& file_path, const std::string& where, const std::string& problem) {
    failed = true;
    throw InputError(file_path, where, problem);
  }
  void check(const std::string& file_path) const {
    if (failed || closed) throw InputError(file_path, "", failed ? "an earlier write failed" : "already closed");
  }
};

namespace {

// Object modification times would make two runs of the same command differ byte for byte.
H5::DSetCreatPropList untimed_dataset_plist() {
  H5::DSetCreatPropList plist;
  H5Pset_obj_track_times(plist.getId(), false);
  return plist;
}

H5::Group create_group(H5::H5Location& parent, const std::string& name) {
  hid_t plist = H5Pcreate(H5P_GROUP_CREATE);
  H5Pset_obj_track_times(plist, false);
  hid_t id = H5Gcreate2(parent.getId(), name.c_str(), H5P_DEFAULT, plist, H5P_DEFAULT);
  H5Pclose(plist);
  if (id < 0) throw H5::GroupIException("create_group", "H5Gcreate2 failed");
  H5::Group group(id);
  H5Gclose(id);  // the Group holds its own reference
  return group;
}

// A 1-D dataset of UTF-8 variable-length strings.
void write_strings(H5::Group& group, const char* name, std::span<const std::string> strings) {
  H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
  type.setCset(H5T_CSET_UTF8);
  const auto length = static_cast<hsize_t>(strings.size());
  H5::DataSpace space(1, &length);
  std::vector<const char*> raw(strings.size());
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = strings[i].c_str();
  H5::DataSet dataset = group.createDataSet(name, type, space, untimed_dataset_plist());
  dataset.write(raw.data(), type);
}

void write_spans(H5::Group group, std::span<const Span> spans) {
  const auto length = static_cast<hsize_t>(spans.size());
  H5::DataSpace space(1, &length);
  std::vector<int64_t> starts, ends;
  std::vector<std::string> kinds, names;
  for (const Span& span : spans) {
    starts.push_back(span.start);
    ends.push_back(span.end);
    kinds.push_back(span.kind);
    names.push_back(span.name);
  }
  group.createDataSet("start", H5::PredType::STD_I64LE, space, untimed_dataset_plist())
      .write(starts.data(), H5::PredType::NATIVE_INT64);
  group.createDataSet("end", H5::PredType::STD_I64LE, space, untimed_dataset_plist())
      .write(ends.data(), H5::PredType::NATIVE_INT64);
  write_strings(group, "kind", kinds);
  write_strings(group, "name", names);
}

}  // namespace

TraceWriter::TraceWriter(const std::string& path, TraceMeta meta, WriterOptions options)
    : path_(path), meta_(std::move(meta)), options_(options), state_(std::make_unique<State>(path)) {
  h5::quiet();
  if (meta_.n_layers < 1 || meta_.n_heads < 1 || meta_.n_kv_heads < 1 || meta_.head_dim < 1 ||
      meta_.n_heads % meta_.n_kv_heads != 0)
    throw InputError(
        path, "/",
        "invalid shape: layers, heads, kv heads and head_dim must be positive and heads a multiple of kv heads");
  if (meta_.attn_scale <= 0) meta_.attn_scale = 1.0 / std::sqrt(static_cast<double>(meta_.head_dim));
  if (const std::string problem = rope_problem(meta_.rope, meta_.head_dim); !problem.empty())
    throw InputError(path, "/", problem);
  if (meta_.created.empty()) meta_.created = now_iso8601();
  if (meta_.tool.empty()) meta_.tool = tool_string();
  meta_.version = kSchemaVersion;
  try {
    H5::FileAccPropList access;
    access.setLibverBounds(H5F_LIBVER_EARLIEST, H5F_LIBVER_V18);  // readable by h5py and HDF5 1.8+
    state_->h5 =
        std::make_unique<H5::H5File>(state_->file.temp_path(), H5F_ACC_TRUNC, H5::FileCreatPropList::DEFAULT, access);
    H5::Group root = state_->h5->openGroup("/");
    h5::write_attr(root, "format", std::string(kFormatName));
    h5::write_attr(root, "version", int64_t{kSchemaVersion});
    h5::write_attr(root, "model", meta_.model);
    h5::write_attr(root, "source", meta_.source);
    h5::write_attr(root, "n_layers", int64_t{meta_.n_layers});
    h5::write_attr(root, "n_heads", int64_t{meta_.n_heads});
    h5::write_attr(root, "n_kv_heads", int64_t{meta_.n_kv_heads});
    h5::write_attr(root, "head_dim", int64_t{meta_.head_dim});
    h5::write_attr(root, "attn_scale", meta_.attn_scale);
    write_rope_attrs(root, meta_.rope);
    h5::write_attr(root, "created", meta_.created);
    h5::write_attr(root, "tool", meta_.tool);
    create_group(*state_->h5, "seqs");
  } catch (const H5::Exception&) {
    throw InputError(path, "", "cannot create HDF5 file (" + h5::error_detail() + ")");
  }
}

TraceWriter::~TraceWriter() {
  if (state_ && state_->h5) state_->close_once();
}

int TraceWriter::n_sequences() const { return static_cast<int>(state_->n_tokens.size()); }

int TraceWriter::add_sequence(int64_t prompt_len, std::span<const int32_t> tokens,
                              std::span<const std::string> token_text, const SequenceMarks& marks) {
  state_->check(path_);
  const int seq = n_sequences();
  const auto n = static_cast<int64_t>(tokens.size());
  if (n < 1) throw InputError(path_, seq_path(seq), "a sequence needs at least one token");
  if (prompt_len < 0 || prompt_len > n) throw InputError(path_, seq_path(seq), "prompt_len outside 0..n_tokens");
  if (!token_text.empty() && static_cast<int64_t>(token_text.size()) != n)
    throw InputError(path_, seq_path(seq), "token_text length differs from tokens");
  if (marks.question_len < -1 || marks.question_len > prompt_len)
    throw InputError(path_, seq_path(seq), "question_len outside 0..prompt_len");
  if (marks.context_group < -1 || (marks.context_group >= 0 && marks.question_len < 1))
    throw InputError(path_, seq_path(seq), "a context_group needs a question (question_len >= 1) and a value >= 0");
  if (static_cast<int64_t>(marks.spans.size()) > Limits::max_spans)
    throw InputError(path_, seq_path(seq) + "/spans", "more than " + std::to_string(Limits::max_spans) + " spans");
  for (size_t i = 0; i < marks.spans.size(); ++i)
    if (const std::string problem = span_problem(marks.spans[i], n); !problem.empty())
      throw InputError(path_, seq_path(seq) + "/spans", "span " + std::to_string(i) + ": " + problem);
  try {
    H5::Group seqs = state_->h5->openGroup("/seqs");
    H5::Group group = create_group(seqs, std::to_string(seq));
    h5::write_attr(group, "n_tokens", n);
    h5::write_attr(group, "prompt_len", prompt_len);
    if (marks.question_len >= 0) h5::write_attr(group, "question_len", marks.question_len);
    if (marks.context_group >= 0) h5::write_attr(group, "context_group", marks.context_group);
    const hsize_t length = static_cast<hsize_t>(n);
    H5::DataSpace space(1, &length);
    H5::DataSet ids = group.createDataSet("tokens", H5::PredType::STD_I32LE, space, untimed_dataset_plist());
    ids.write(tokens.data(), H5::PredType::NATIVE_INT32);
    ids.close();
    if (!token_text.empty()) write_strings(group, "token_text", token_text);
    if (!marks.spans.empty()) write_spans(create_group(group, "spans"), marks.spans);
    create_group(group, "layers");
  } catch (const H5::Exception&) {
    state_->fail(path_, seq_path(seq), "cannot write (" + h5::error_detail() + ")");
  }
  state_->n_tokens.push_back(n);
  return seq;
}

void TraceWriter::add_layer(int seq, int layer, const LayerContents& contents) {
  state_->check(path_);
  if (seq < 0 || seq >= n_sequences()) throw InputError(path_, seq_path(seq), "no such sequence");
  if (layer < 0 || layer >= meta_.n_layers) throw InputError(path_, layer_path(seq, layer), "no such layer");
  const auto n = static_cast<hsize_t>(state_->n_tokens[static_cast<size_t>(seq)]);
  const auto d = static_cast<hsize_t>(meta_.head_dim);
  try {
    H5::Group layers = state_->h5->openGroup(seq_path(seq) + "/layers");
    H5::Group group = create_group(layers, std::to_string(layer));
    if (contents.sliding_window > 0) h5::write_attr(group, "sliding_window", int64_t{contents.sliding_window});
    if (contents.logit_softcap > 0) h5::write_attr(group, "logit_softcap", contents.logit_softcap);
    const H5::DataType& file_type =
        options_.dtype == DType::f16
            ? static_cast<const H5::DataType&>(h5::mem_type(DType::f16))
            : (options_.dtype == DType::f32 ? H5::PredType::IEEE_F32LE : H5::PredType::IEEE_F64LE);
    auto create = [&](const char* name, std::vector<hsize_t> shape) {
      H5::DataSpace space(static_cast<int>(shape.size()), shape.data());
      H5::DSetCreatPropList plist = untimed_dataset_plist();
      std::vector<hsize_t> chunk = shape;
      chunk[0] = 1;
      plist.setChunk(static_cast<int>(chunk.size()), chunk.data());
      if (options_.compression > 0) {
        plist.setShuffle();
        plist.setDeflate(options_.compression);
      }
      group.createDataSet(name, file_type, space, plist).close();
    };
    const auto heads = static_cast<hsize_t>(meta_.n_heads);
    const auto kv_heads = static_cast<hsize_t>(meta_.n_kv_heads);
    if (contents.q) create("q", {heads, n, d});
    if (contents.k) create("k", {kv_heads, n, d});
    if (contents.v) create("v", {kv_heads, n, d});
    if (contents.attn) create("attn", {heads, static_cast<hsize_t>(packed_length(static_cast<int64_t>(n)))});
  } catch (const H5::Exception&) {
    state_->fail(path_, layer_path(seq, layer), "cannot write (" + h5::error_detail() + ")");
  }
}

void TraceWriter::write_head(int seq, int layer, Tensor tensor, int head, std::span<const float> data) {
  state_->check(path_);
  const std::string path = tensor_path(seq, layer, tensor);
  if (seq < 0 || seq >= n_sequences()) throw InputError(path_, path, "no such sequence");
  const auto n = static_cast<hsize_t>(state_->n_tokens[static_cast<size_t>(seq)]);
  const auto d = static_cast<hsize_t>(meta_.head_dim);
  try {
    H5::DataSet dataset = state_->h5->openDataSet(path);
    if (tensor == Tensor::attn) {
      const hsize_t length = static_cast<hsize_t>(packed_length(static_cast<int64_t>(n)));
      if (data.size() != length) throw InputError(path_, path, "packed attention has the wrong length");
      const hsize_t start[2] = {static_cast<hsize_t>(head), 0};
      const hsize_t count[2] = {1, length};
      h5::write_floats(dataset, options_.dtype, start, count, data);
    } else {
      if (data.size() != n * d) throw InputError(path_, path, "head data has the wrong length");
      const hsize_t start[3] = {static_cast<hsize_t>(head), 0, 0};
      const hsize_t count[3] = {1, n, d};
      h5::write_floats(dataset, options_.dtype, start, count, data);
    }
    dataset.close();  // flushes the chunk cache: a full disk shows here
  } catch (const H5::Exception&) {
    state_->fail(path_, path, "cannot write head " + std::to_string(head) + " (" + h5::error_detail() + ")");
  }
}

void TraceWriter::close() {
  if (state_->closed && !state_->failed) return;
  state_->check(path_);
  if (!state_->close_once()) state_->fail(path_, "", "cannot finish writing (" + h5::error_detail() + ")");
  state_->file.commit();
}

}  // namespace kvtrace
