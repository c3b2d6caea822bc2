#include "kvtrace/reader.hpp"

#include <H5Cpp.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include "h5io.hpp"
#include "reader_checks.hpp"
#include "rope_attrs.hpp"

namespace kvtrace {

struct TraceReader::Handle {
  H5::H5File file;
  std::optional<H5::Group> seqs;
};

namespace {

constexpr uint64_t kScannedFileBytes = uint64_t{64} << 20;

}  // namespace

TraceReader::TraceReader(const std::string& path) : path_(path), handle_(std::make_unique<Handle>()) {
  h5::quiet();
  std::error_code ec;
  if (struct stat info{}; ::stat(path.c_str(), &info) != 0)
    fail("", errno == ENOENT  ? std::string("no such file")
             : errno == ELOOP ? std::string("too many levels of symbolic links")
                              : std::string("cannot open: ") + std::strerror(errno));
  if (std::filesystem::is_directory(path, ec)) fail("", "is a directory, not a trace file");
  // A FIFO or device would block or never end: HDF5 reads a trace by seeking.
  if (!std::filesystem::is_regular_file(path, ec))
    fail("", "is not a regular file (a FIFO, device or socket); a trace is an HDF5 file");
  {
    std::ifstream probe(path, std::ios::binary);
    if (!probe) fail("", "cannot open for reading (permission denied?)");
  }
  file_size_ = std::filesystem::file_size(path, ec);
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0) {
    modified_ns_ = info.st_mtim.tv_sec * int64_t{1000000000} + info.st_mtim.tv_nsec;
    file_id_ = {static_cast<uint64_t>(info.st_dev), static_cast<uint64_t>(info.st_ino)};
  }
  bool is_hdf5 = false;
  try {
    is_hdf5 = H5::H5File::isHdf5(path);
  } catch (const H5::Exception&) {
    is_hdf5 = false;
  }
  if (!is_hdf5) fail("", "not an HDF5 file (no HDF5 signature); expected a kvtrace schema v1 file");
  // HDF5 1.10 hangs on a corrupt global heap (tests/fuzz/README.md). A file small enough to
  // read whole in a few milliseconds is scanned first, as an image is; a larger one would
  // cost a read of every byte, which opening a trace must not (kvsim info on 50 GB).
  if (file_size_ <= kScannedFileBytes) {
    std::ifstream in(path, std::ios::binary);
    std::vector<unsigned char> image(file_size_);
    in.read(reinterpret_cast<char*>(image.data()), static_cast<std::streamsize>(image.size()));
    refuse_broken_global_heap(std::span<const unsigned char>(image.data(), static_cast<size_t>(in.gcount())));
  }
  try {
    handle_->file.openFile(path, H5F_ACC_RDONLY);
  } catch (const H5::Exception&) {
    fail("", "cannot open HDF5 file, truncated or corrupt (" + h5::error_detail() + ")");
  }
  load();
}

TraceReader::TraceReader(InMemory, const std::string& name) : path_(name), handle_(std::make_unique<Handle>()) {
  h5::quiet();
}

TraceReader TraceReader::from_memory(std::span<const unsigned char> image, const std::string& name) {
  TraceReader reader(InMemory{}, name);
  reader.file_size_ = image.size();
  // HDF5 looks for its superblock at 0, 512, 1024, 2048, ... (a user block may precede it).
  static constexpr unsigned char kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  bool is_hdf5 = false;
  for (size_t offset = 0; !is_hdf5 && offset + sizeof kSignature <= image.size(); offset = offset ? offset * 2 : 512)
    is_hdf5 = std::equal(kSignature, kSignature + sizeof kSignature, image.data() + offset);
  if (!is_hdf5) reader.fail("", "not an HDF5 file (no HDF5 signature); expected a kvtrace schema v1 file");
  reader.refuse_broken_global_heap(image);  // an image is at hand, whatever its size
  // Declared outside the try: its destructor would clear HDF5's error stack before the
  // message is taken from it.
  H5::FileAccPropList access;
  try {
    access.setCore(size_t{1} << 16, false);  // in memory only, never written back
    if (H5Pset_file_image(access.getId(), const_cast<unsigned char*>(image.data()), image.size()) < 0)
      throw H5::FileIException("H5Pset_file_image", "cannot set the file image");
    // HDF5 identifies core-driver files without a backing store by name, so two images
    // open at once must not share one: the name HDF5 sees is made unique.
    static std::atomic<uint64_t> images{0};
    reader.handle_->file.openFile("kvtrace-image-" + std::to_string(++images) + ":" + name, H5F_ACC_RDONLY, access);
  } catch (const H5::Exception&) {
    reader.fail("", "cannot open HDF5 file, truncated or corrupt (" + h5::error_detail() + ")");
  }
  reader.load();
  return reader;
}

void TraceReader::load() {
  try {
    load_root();
  } catch (const H5::Exception&) {
    fail("/", "corrupt HDF5 structure (" + h5::error_detail() + ")");
  }
}

TraceReader::~TraceReader() = default;
TraceReader::TraceReader(TraceReader&&) noexcept = default;
TraceReader& TraceReader::operator=(TraceReader&&) noexcept = default;

void TraceReader::fail(const std::string& dataset, const std::string& problem) const {
  throw InputError(path_, dataset, problem);
}

void TraceReader::refuse_broken_global_heap(std::span<const unsigned char> image) const {
  if (const auto at = h5::find_broken_global_heap(image))
    fail("", "corrupt HDF5 global heap (variable-length strings) at byte " + std::to_string(*at) +
                 ": its objects do not fit it");
}

void TraceReader::check_unchanged() const {
  if (modified_ns_ < 0) return;
  struct stat info {};
  if (::stat(path_.c_str(), &info) != 0) fail("", "was removed while being read");
  std::vector<std::string> changes;
  if (static_cast<uint64_t>(info.st_size) != file_size_)
    changes.push_back("size now " + std::to_string(info.st_size) + " bytes, was " + std::to_string(file_size_));
  if (info.st_mtim.tv_sec * int64_t{1000000000} + info.st_mtim.tv_nsec != modified_ns_)
    changes.push_back("modification time changed");
  if (std::pair<uint64_t, uint64_t>(info.st_dev, info.st_ino) != file_id_)
    changes.push_back("inode changed: another file now has its name");
  if (changes.empty()) return;
  std::string what = changes[0];
  for (size_t i = 1; i < changes.size(); ++i) what.append("; ").append(changes[i]);
  fail("", "changed while being read (" + what + "): the results would mix two files");
}

void TraceReader::load_root() {
  H5::Group root = handle_->file.openGroup("/");
  auto str = [&](const char* name) -> std::string {
    try {
      return h5::string_attr(root, name).value_or("");
    } catch (const std::runtime_error& e) {
      fail("/", std::string("attribute '") + name + "' " + e.what());
    }
  };
  auto integer = [&](const char* name, int64_t lo, int64_t hi) -> int64_t {
    std::optional<int64_t> value;
    try {
      value = h5::int_attr(root, name);
    } catch (const std::runtime_error& e) {
      fail("/", std::string("attribute '") + name + "' " + e.what());
    }
    if (!value) fail("/", std::string("missing attribute '") + name + "'");
    if (*value < lo || *value > hi)
      fail("/", std::string("attribute '") + name + "' = " + std::to_string(*value) + " is out of range [" +
                    std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return *value;
  };

  if (!h5::has_attr(root, "format")) fail("/", "missing attribute 'format': not a kvtrace file");
  const std::string format = str("format");
  if (format != kFormatName)
    fail("/", "attribute 'format' is '" + format + "', expected 'kvtrace': not a kvtrace file");
  {
    std::optional<int64_t> version;
    try {
      version = h5::int_attr(root, "version");
    } catch (const std::runtime_error& e) {
      fail("/", std::string("attribute 'version' ") + e.what());
    }
    if (!version) fail("/", "missing attribute 'version'");
    if (*version != kSchemaVersion)
      fail("/", "unsupported schema version " + std::to_string(*version) + " (this kvsim reads version " +
                    std::to_string(kSchemaVersion) + ")");
    meta_.version = static_cast<int>(*version);
  }
  meta_.model = str("model");
  meta_.source = str("source");
  meta_.created = str("created");
  meta_.tool = str("tool");
  meta_.n_layers = static_cast<int>(integer("n_layers", 1, Limits::max_layers));
  meta_.n_heads = static_cast<int>(integer("n_heads", 1, Limits::max_heads));
  meta_.n_kv_heads = static_cast<int>(integer("n_kv_heads", 1, Limits::max_heads));
  meta_.head_dim = static_cast<int>(integer("head_dim", 1, Limits::max_head_dim));
  if (meta_.n_heads % meta_.n_kv_heads != 0)
    fail("/", "inconsistent head counts: n_heads = " + std::to_string(meta_.n_heads) +
                  " is not a multiple of n_kv_heads = " + std::to_string(meta_.n_kv_heads));
  std::optional<double> scale;
  try {
    scale = h5::float_attr(root, "attn_scale");
  } catch (const std::runtime_error& e) {
    fail("/", std::string("attribute 'attn_scale' ") + e.what());
  }
  meta_.attn_scale = scale.value_or(1.0 / std::sqrt(static_cast<double>(meta_.head_dim)));
  if (!std::isfinite(meta_.attn_scale) || meta_.attn_scale <= 0)
    fail("/", "attribute 'attn_scale' must be a positive finite number");
  meta_.rope = read_rope_attrs(root, meta_.head_dim, [&](const std::string& problem) { fail("/", problem); });

  if (!root.nameExists("seqs")) fail("/seqs", "missing group (the trace holds no sequences)");
  handle_->seqs.emplace(child_group(*this, root, "seqs", "/seqs"));
  std::string bad;
  std::optional<int> n = h5::count_indexed_members(*handle_->seqs, Limits::max_sequences, bad);
  if (!n && bad.empty())
    fail("/seqs", "absurd number of sequences (more than " + std::to_string(Limits::max_sequences) + ")");
  if (!n) fail("/seqs", "member '" + bad + "' is not a sequence index (expected 0, 1, ... without gaps)");
  if (*n == 0) fail("/seqs", "the trace holds no sequences");
  sequences_.resize(static_cast<size_t>(*n));
  for (int i = 0; i < *n; ++i) load_sequence(i);
  check_context_groups(*this);
}

void TraceReader::load_sequence(int seq) {
  const std::string path = seq_path(seq);
  H5::Group group = child_group(*this, *handle_->seqs, std::to_string(seq), path);
  auto integer = [&](const char* name) -> int64_t {
    std::optional<int64_t> value;
    try {
      value = h5::int_attr(group, name);
    } catch (const std::runtime_error& e) {
      fail(path, std::string("attribute '") + name + "' " + e.what());
    }
    if (!value) fail(path, std::string("missing attribute '") + name + "'");
    return *value;
  };
  SequenceMeta& meta = sequences_[static_cast<size_t>(seq)];
  meta.n_tokens = integer("n_tokens");
  meta.prompt_len = integer("prompt_len");
  if (meta.n_tokens < 1 || meta.n_tokens > Limits::max_tokens)
    fail(path, "absurd n_tokens = " + std::to_string(meta.n_tokens) + " (allowed 1.." +
                   std::to_string(Limits::max_tokens) + ")");
  if (meta.n_tokens * meta_.head_dim > Limits::max_head_elements)
    fail(path, "absurd size: n_tokens * head_dim = " + std::to_string(meta.n_tokens * meta_.head_dim) +
                   " per head exceeds " + std::to_string(Limits::max_head_elements));
  if (meta.prompt_len < 0 || meta.prompt_len > meta.n_tokens)
    fail(path, "prompt_len = " + std::to_string(meta.prompt_len) + " is outside 0..n_tokens (" +
                   std::to_string(meta.n_tokens) + ")");
  if (h5::has_attr(group, "question_len")) {
    meta.question_len = integer("question_len");
    if (meta.question_len < 0 || meta.question_len > meta.prompt_len)
      fail(path, "question_len = " + std::to_string(meta.question_len) + " is outside 0..prompt_len (" +
                     std::to_string(meta.prompt_len) + ")");
  }
  if (h5::has_attr(group, "context_group")) {
    meta.context_group = integer("context_group");
    if (meta.context_group < 0 || meta.context_group > INT32_MAX)
      fail(path, "context_group = " + std::to_string(meta.context_group) + " is outside 0.." +
                     std::to_string(INT32_MAX));
    if (meta.question_len < 1)
      fail(path, "context_group without a question: sequences share a context before their questions "
                 "(question_len >= 1)");
  }

  const std::string tokens_path = path + "/tokens", text_path = path + "/token_text";
  H5::DataSet tokens = child_dataset(*this, group, "tokens", tokens_path);
  if (tokens.getDataType().getClass() != H5T_INTEGER) fail(tokens_path, "is not an integer dataset");
  if (const auto shape = h5::dims(tokens); shape.size() != 1 || static_cast<int64_t>(shape[0]) != meta.n_tokens)
    fail(tokens_path, "shape " + shape_string(shape) + ", expected [" + std::to_string(meta.n_tokens) + "] (n_tokens)");
  std::optional<H5::DataSet> text;
  if (group.nameExists("token_text")) {
    text.emplace(child_dataset(*this, group, "token_text", text_path));
    if (text->getDataType().getClass() != H5T_STRING) fail(text_path, "is not a string dataset");
    const auto shape = h5::dims(*text);
    if (shape.size() != 1 || static_cast<int64_t>(shape[0]) != meta.n_tokens)
      fail(text_path, "shape " + shape_string(shape) + ", expected [" + std::to_string(meta.n_tokens) + "] (n_tokens)");
    const H5::StrType type = text->getStrType();
    if (!type.isVariableStr() && (type.getSize() > kMaxTokenTextBytes ||
                                  type.getSize() * static_cast<size_t>(meta.n_tokens) > kMaxTokenTextTotal))
      fail(text_path, "absurd string width " + std::to_string(type.getSize()) + " bytes (at most " +
                          std::to_string(kMaxTokenTextBytes) + ", and " + std::to_string(kMaxTokenTextTotal) +
                          " bytes in all)");
    meta.has_token_text = true;
  }

  meta.spans = load_spans(*this, group, seq, meta.n_tokens);

  const std::string layers_path = path + "/layers";
  H5::Group layers = child_group(*this, group, "layers", layers_path);
  std::string bad;
  std::optional<int> n = h5::count_indexed_members(layers, Limits::max_layers, bad);
  if (!n && bad.empty())
    fail(layers_path, "holds more layers than the root's n_layers = " + std::to_string(meta_.n_layers));
  if (!n) fail(layers_path, "member '" + bad + "' is not a layer index (expected 0, 1, ... without gaps)");
  if (*n != meta_.n_layers)
    fail(layers_path,
         "holds " + std::to_string(*n) + " layers but the root says n_layers = " + std::to_string(meta_.n_layers));
  meta.layers.resize(static_cast<size_t>(*n));
  for (int l = 0; l < *n; ++l) meta.layers[static_cast<size_t>(l)] = load_layer(layers, seq, l, meta.n_tokens);
  check_storage(*this, tokens, tokens_path);
  if (text) check_storage(*this, *text, text_path);
}

LayerForm TraceReader::load_layer(const H5::Group& layers, int seq, int layer, int64_t n_tokens) {
  const std::string path = layer_path(seq, layer);
  H5::Group group = child_group(*this, layers, std::to_string(layer), path);
  LayerForm form;
  auto check = [&](Tensor tensor, std::vector<hsize_t> expected, bool& present, DType& dtype) {
    const char* name = tensor_name(tensor);
    if (!group.nameExists(name)) return;
    const std::string dataset_path = path + "/" + name;
    check_member(*this, group, name, H5O_TYPE_DATASET, dataset_path);
    H5::DataSet dataset = group.openDataSet(name);
    std::optional<DType> type = h5::float_dtype(dataset.getDataType());
    if (!type) fail(dataset_path, "is not a float16/float32 dataset");
    const auto shape = h5::dims(dataset);
    if (shape != expected) fail(dataset_path, "shape " + shape_string(shape) + ", expected " + shape_string(expected));
    if (!h5::chunks_within_shape(dataset)) fail(dataset_path, "chunks larger than the dataset's shape");
    check_storage(*this, dataset, dataset_path);
    present = true;
    dtype = *type;
  };
  const auto n = static_cast<hsize_t>(n_tokens);
  const auto d = static_cast<hsize_t>(meta_.head_dim);
  const auto heads = static_cast<hsize_t>(meta_.n_heads);
  const auto kv_heads = static_cast<hsize_t>(meta_.n_kv_heads);
  if (group.nameExists("attn") && n_tokens > Limits::max_attn_tokens)
    fail(path + "/attn", "absurd size: packed attention for " + std::to_string(n_tokens) + " tokens (at most " +
                             std::to_string(Limits::max_attn_tokens) + ")");
  check(Tensor::q, {heads, n, d}, form.has_q, form.q_dtype);
  check(Tensor::k, {kv_heads, n, d}, form.has_k, form.k_dtype);
  check(Tensor::v, {kv_heads, n, d}, form.has_v, form.v_dtype);
  check(Tensor::attn, {heads, static_cast<hsize_t>(packed_length(n_tokens))}, form.has_attn, form.attn_dtype);
  if (form.has_q != form.has_k && !form.has_attn)
    fail(path, std::string("has ") + (form.has_q ? "q but no k" : "k but no q") + " and no attn");
  if (!form.has_qk() && !form.has_attn) fail(path, "missing datasets: a layer needs q and k, or attn");
  std::optional<int64_t> window;
  std::optional<double> cap;
  try {
    window = h5::int_attr(group, "sliding_window");
  } catch (const std::runtime_error& e) {
    fail(path, std::string("attribute 'sliding_window' ") + e.what());
  }
  try {
    cap = h5::float_attr(group, "logit_softcap");
  } catch (const std::runtime_error& e) {
    fail(path, std::string("attribute 'logit_softcap' ") + e.what());
  }
  if (window) {
    if (*window < 0 || *window > Limits::max_tokens) fail(path, "attribute 'sliding_window' out of range");
    form.sliding_window = static_cast<int>(*window);
  }
  if (cap) {
    if (!std::isfinite(*cap) || *cap < 0) fail(path, "attribute 'logit_softcap' must be >= 0");
    form.logit_softcap = *cap;
  }
  return form;
}

const SequenceMeta& TraceReader::sequence(int seq) const {
  if (seq < 0 || seq >= n_sequences())
    fail("", "sequence " + std::to_string(seq) + " out of range (the trace has " + std::to_string(n_sequences()) + ")");
  return sequences_[static_cast<size_t>(seq)];
}

void TraceReader::check_index(int seq, int layer) const {
  sequence(seq);
  if (layer < 0 || layer >= meta_.n_layers)
    fail(seq_path(seq),
         "layer " + std::to_string(layer) + " out of range (the trace has " + std::to_string(meta_.n_layers) + ")");
}

const LayerForm& TraceReader::layer(int seq, int layer) const {
  check_index(seq, layer);
  return sequences_[static_cast<size_t>(seq)].layers[static_cast<size_t>(layer)];
}

std::vector<int32_t> TraceReader::tokens(int seq) const {
  const SequenceMeta& meta = sequence(seq);
  const std::string path = seq_path(seq) + "/tokens";
  // Read as int64, so that an id outside int32 is refused instead of clamped by HDF5.
  std::vector<int64_t> wide(static_cast<size_t>(meta.n_tokens));
  try {
    H5::DataSet dataset = handle_->file.openDataSet(path);
    h5::check_chunks_inflate(dataset);
    dataset.read(wide.data(), H5::PredType::NATIVE_INT64);
  } catch (const H5::Exception&) {
    fail(path, "cannot read, file truncated or corrupt (" + h5::error_detail() + ")");
  }
  std::vector<int32_t> out(wide.size());
  for (size_t i = 0; i < wide.size(); ++i) {
    if (wide[i] < 0 || wide[i] > INT32_MAX)
      fail(path, "token id " + std::to_string(wide[i]) + " at position " + std::to_string(i) + " is outside 0.." +
                     std::to_string(INT32_MAX));
    out[i] = static_cast<int32_t>(wide[i]);
  }
  return out;
}

std::vector<std::string> TraceReader::token_text(int seq) const {
  const SequenceMeta& meta = sequence(seq);
  if (!meta.has_token_text) return {};
  const std::string path = seq_path(seq) + "/token_text";
  std::vector<std::string> out(static_cast<size_t>(meta.n_tokens));
  try {
    H5::DataSet dataset = handle_->file.openDataSet(path);
    h5::check_chunks_inflate(dataset);
    out = h5::read_strings(dataset, out.size());
  } catch (const H5::Exception&) {
    fail(path, "cannot read, file truncated or corrupt (" + h5::error_detail() + ")");
  }
  return out;
}

std::vector<float> TraceReader::read_head(int seq, int layer, Tensor tensor, int head) const {
  const LayerForm& form = this->layer(seq, layer);
  const std::string path = tensor_path(seq, layer, tensor);
  if (tensor == Tensor::attn) fail(path, "use read_attn_rows for attention");
  if (!form.has(tensor)) fail(path, "missing dataset");
  const int heads = tensor == Tensor::q ? meta_.n_heads : meta_.n_kv_heads;
  if (head < 0 || head >= heads)
    fail(path, "head " + std::to_string(head) + " out of range (the dataset has " + std::to_string(heads) + ")");
  const auto n = static_cast<hsize_t>(sequences_[static_cast<size_t>(seq)].n_tokens);
  const auto d = static_cast<hsize_t>(meta_.head_dim);
  std::vector<float> out(n * d);
  const hsize_t start[3] = {static_cast<hsize_t>(head), 0, 0};
  const hsize_t count[3] = {1, n, d};
  try {
    H5::DataSet dataset = handle_->file.openDataSet(path);
    h5::read_floats(dataset, form.dtype(tensor), start, count, out);
    check_unchanged();
  } catch (const H5::Exception&) {
    fail(path, "cannot read head " + std::to_string(head) + ", file truncated or corrupt (" + h5::error_detail() + ")");
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i]))
      fail(path, std::string(std::isnan(out[i]) ? "NaN" : "Inf") + " at head " + std::to_string(head) + ", token " +
                     std::to_string(i / d) + ", dim " + std::to_string(i % d));
  }
  return out;
}

std::vector<float> TraceReader::read_attn_rows(int seq, int layer, int head, int64_t first_row, int64_t n_rows) const {
  const LayerForm& form = this->layer(seq, layer);
  const std::string path = tensor_path(seq, layer, Tensor::attn);
  if (!form.has_attn) fail(path, "missing dataset");
  const int64_t n = sequences_[static_cast<size_t>(seq)].n_tokens;
  if (head < 0 || head >= meta_.n_heads)
    fail(path,
         "head " + std::to_string(head) + " out of range (the dataset has " + std::to_string(meta_.n_heads) + ")");
  if (first_row < 0 || n_rows < 0 || first_row + n_rows > n) fail(path, "rows out of range");
  const int64_t begin = packed_row_offset(first_row);
  const int64_t end = packed_row_offset(first_row + n_rows);
  std::vector<float> out(static_cast<size_t>(end - begin));
  if (out.empty()) return out;
  const hsize_t start[2] = {static_cast<hsize_t>(head), static_cast<hsize_t>(begin)};
  const hsize_t count[2] = {1, static_cast<hsize_t>(end - begin)};
  try {
    H5::DataSet dataset = handle_->file.openDataSet(path);
    h5::read_floats(dataset, form.attn_dtype, start, count, out);
    check_unchanged();
  } catch (const H5::Exception&) {
    fail(path, "cannot read head " + std::to_string(head) + ", file truncated or corrupt (" + h5::error_detail() + ")");
  }
  float* row = out.data();
  for (int64_t t = first_row; t < first_row + n_rows; ++t) {
    double sum = 0;
    for (int64_t i = 0; i <= t; ++i) {
      const float p = row[i];
      if (!std::isfinite(p))
        fail(path, std::string(std::isnan(p) ? "NaN" : "Inf") + " at head " + std::to_string(head) + ", row " +
                       std::to_string(t) + ", position " + std::to_string(i));
      if (p < 0)
        fail(path, "negative probability " + std::to_string(p) + " at head " + std::to_string(head) + ", row " +
                       std::to_string(t) + ", position " + std::to_string(i));
      sum += p;
    }
    if (std::abs(sum - 1.0) > kRowSumTolerance)
      fail(path, "row " + std::to_string(t) + " of head " + std::to_string(head) + " sums to " + std::to_string(sum) +
                     " (expected 1 within 1e-3)");
    for (int64_t i = 0; i <= t; ++i) row[i] = static_cast<float>(row[i] / sum);
    row += t + 1;
  }
  return out;
}

}  // namespace kvtrace
