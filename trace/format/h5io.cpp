#include "h5io.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "kvtrace/half.hpp"

namespace kvtrace::h5 {

namespace {
herr_t keep_innermost(unsigned n, const H5E_error2_t* entry, void* client) {
  auto* out = static_cast<std::string*>(client);
  if (n == 0 && entry->desc && *entry->desc) *out = entry->desc;
  return 0;
}
herr_t keep_outermost_nonempty(unsigned, const H5E_error2_t* entry, void* client) {
  auto* out = static_cast<std::string*>(client);
  if (entry->desc && *entry->desc) *out = entry->desc;
  return 0;
}

// The innermost message of the last failed HDF5 call on this thread: the C++ API's object
// destructors (H5Aclose, H5Dclose, ...) clear the error stack while an exception unwinds,
// before error_detail() gets to it.
thread_local std::string last_failure;

herr_t remember_failure(hid_t stack, void*) {
  std::string innermost;
  H5Ewalk2(stack, H5E_WALK_UPWARD, keep_innermost, &innermost);
  if (innermost.empty()) H5Ewalk2(stack, H5E_WALK_UPWARD, keep_outermost_nonempty, &innermost);
  if (!innermost.empty()) last_failure = innermost;
  return 0;
}
}  // namespace

void remember(const std::string& why) { last_failure = why; }

void quiet() {
  // Nothing is printed; a failure is remembered for error_detail(). Checked at every call,
  // not once: the caller may have replaced the handler since (H5::Exception::dontPrint()).
  H5E_auto2_t current = nullptr;
  void* data = nullptr;
  if (H5Eget_auto2(H5E_DEFAULT, &current, &data) < 0 || current != remember_failure)
    H5Eset_auto2(H5E_DEFAULT, remember_failure, nullptr);
}

std::string error_detail() {
  std::string innermost, outermost;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, &innermost);
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_outermost_nonempty, &outermost);
  H5Eclear2(H5E_DEFAULT);
  // A filter's own reason (last_failure) beats HDF5's "filter returned failure".
  std::string detail = last_failure.rfind("deflate:", 0) == 0 ? last_failure
                       : !innermost.empty()                   ? innermost
                       : !outermost.empty()                   ? outermost
                                                              : last_failure;
  last_failure.clear();
  // A failed system call comes as "file write failed: time = ..., errno = 28, error message
  // = 'No space left on device', ..." over two lines: the system's message is what matters.
  const std::string marker = "error message = '";
  if (const size_t at = detail.find(marker); at != std::string::npos) {
    const size_t end = detail.find('\'', at + marker.size());
    if (end != std::string::npos) detail = detail.substr(at + marker.size(), end - at - marker.size());
  }
  for (char& c : detail)
    if (c == '\n' || c == '\r') c = ' ';
  return detail;
}

H5::FloatType half_type() {
  H5::FloatType type(H5::PredType::IEEE_F32LE);
  type.setFields(15, 10, 5, 0, 10);
  type.setSize(2);
  type.setEbias(15);
  return type;
}

std::optional<DType> float_dtype(const H5::DataType& type) {
  if (type.getClass() != H5T_FLOAT) return std::nullopt;
  // Only the IEEE binary16/32/64 layouts (either byte order): HDF5 can describe floats with
  // any field layout, and converting those is neither needed nor trusted.
  struct Layout {
    size_t size, spos, epos, esize, mpos, msize, ebias;
    DType dtype;
  };
  static constexpr Layout kLayouts[] = {{2, 15, 10, 5, 0, 10, 15, DType::f16},
                                        {4, 31, 23, 8, 0, 23, 127, DType::f32},
                                        {8, 63, 52, 11, 0, 52, 1023, DType::f64}};
  const hid_t id = type.getId();
  const size_t size = H5Tget_size(id);
  size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  if (H5Tget_fields(id, &spos, &epos, &esize, &mpos, &msize) < 0) return std::nullopt;
  const H5T_order_t order = H5Tget_order(id);
  for (const Layout& layout : kLayouts)
    if (size == layout.size && spos == layout.spos && epos == layout.epos && esize == layout.esize &&
        mpos == layout.mpos && msize == layout.msize && H5Tget_ebias(id) == layout.ebias &&
        H5Tget_precision(id) == 8 * size && H5Tget_offset(id) == 0 && H5Tget_norm(id) == H5T_NORM_IMPLIED &&
        (order == H5T_ORDER_LE || order == H5T_ORDER_BE))
      return layout.dtype;
  H5Eclear2(H5E_DEFAULT);
  return std::nullopt;
}

const H5::DataType& mem_type(DType dtype) {
  static const H5::FloatType half = half_type();
  switch (dtype) {
    case DType::f16:
      return half;
    case DType::f32:
      return H5::PredType::NATIVE_FLOAT;
    case DType::f64:
      return H5::PredType::NATIVE_DOUBLE;
  }
  return H5::PredType::NATIVE_FLOAT;
}

bool has_attr(const H5::H5Object& object, const std::string& name) { return object.attrExists(name); }

std::optional<std::string> string_attr(const H5::H5Object& object, const std::string& name) {
  if (!object.attrExists(name)) return std::nullopt;
  H5::Attribute attr = object.openAttribute(name);
  H5::DataType type = attr.getDataType();
  if (type.getClass() != H5T_STRING) throw std::runtime_error("is not a string");
  if (attr.getSpace().getSimpleExtentNpoints() != 1) throw std::runtime_error("is not a scalar");
  // Read through a memory string type of its own (not the file's type: with that HDF5 1.10
  // leaks the heap object of an empty variable-length string).
  H5::StrType file_type = attr.getStrType();
  if (file_type.isVariableStr()) {
    H5::StrType mem(H5::PredType::C_S1, H5T_VARIABLE);
    mem.setCset(file_type.getCset());
    char* raw = nullptr;
    attr.read(mem, &raw);
    std::string value = raw ? raw : "";
    H5free_memory(raw);
    return value;
  }
  const size_t width = file_type.getSize();
  if (width > kMaxAttributeBytes)
    throw std::runtime_error("is an absurdly long string (" + std::to_string(width) + " bytes)");
  H5::StrType mem(H5::PredType::C_S1, std::max<size_t>(width, 1));
  mem.setCset(file_type.getCset());
  mem.setStrpad(H5T_STR_NULLPAD);
  std::vector<char> raw(std::max<size_t>(width, 1), '\0');
  attr.read(mem, raw.data());
  return std::string(raw.data(), static_cast<size_t>(std::find(raw.begin(), raw.end(), '\0') - raw.begin()));
}

std::optional<int64_t> int_attr(const H5::H5Object& object, const std::string& name) {
  if (!object.attrExists(name)) return std::nullopt;
  H5::Attribute attr = object.openAttribute(name);
  if (attr.getDataType().getClass() != H5T_INTEGER) throw std::runtime_error("is not an integer");
  if (attr.getSpace().getSimpleExtentNpoints() != 1) throw std::runtime_error("is not a scalar");
  int64_t value = 0;
  attr.read(H5::PredType::NATIVE_INT64, &value);
  return value;
}

std::optional<double> float_attr(const H5::H5Object& object, const std::string& name) {
  if (!object.attrExists(name)) return std::nullopt;
  H5::Attribute attr = object.openAttribute(name);
  const H5T_class_t type_class = attr.getDataType().getClass();
  if (type_class != H5T_FLOAT && type_class != H5T_INTEGER) throw std::runtime_error("is not a number");
  if (attr.getSpace().getSimpleExtentNpoints() != 1) throw std::runtime_error("is not a scalar");
  double value = 0;
  attr.read(H5::PredType::NATIVE_DOUBLE, &value);
  return value;
}

void write_attr(H5::H5Object& object, const std::string& name, const std::string& value) {
  H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
  type.setCset(H5T_CSET_UTF8);
  H5::Attribute attr = object.createAttribute(name, type, H5::DataSpace(H5S_SCALAR));
  attr.write(type, value);
}

void write_attr(H5::H5Object& object, const std::string& name, int64_t value) {
  H5::Attribute attr = object.createAttribute(name, H5::PredType::STD_I64LE, H5::DataSpace(H5S_SCALAR));
  attr.write(H5::PredType::NATIVE_INT64, &value);
}

void write_attr(H5::H5Object& object, const std::string& name, double value) {
  H5::Attribute attr = object.createAttribute(name, H5::PredType::IEEE_F64LE, H5::DataSpace(H5S_SCALAR));
  attr.write(H5::PredType::NATIVE_DOUBLE, &value);
}

std::vector<std::string> read_strings(const H5::DataSet& dataset, size_t n) {
  std::vector<std::string> out(n);
  H5::StrType file_type = dataset.getStrType();
  if (file_type.isVariableStr()) {
    H5::StrType mem(H5::PredType::C_S1, H5T_VARIABLE);
    mem.setCset(file_type.getCset());
    std::vector<char*> raw(out.size(), nullptr);
    dataset.read(raw.data(), mem);
    for (size_t i = 0; i < raw.size(); ++i) out[i] = raw[i] ? raw[i] : "";
    H5::DataSet::vlenReclaim(raw.data(), mem, dataset.getSpace());
  } else {
    // Through a memory type of the same width, null-padded, so every byte comes back.
    const size_t width = std::max<size_t>(file_type.getSize(), 1);
    H5::StrType mem(H5::PredType::C_S1, width);
    mem.setCset(file_type.getCset());
    mem.setStrpad(H5T_STR_NULLPAD);
    std::vector<char> raw(width * out.size(), '\0');
    dataset.read(raw.data(), mem);
    for (size_t i = 0; i < out.size(); ++i) {
      const char* begin = raw.data() + i * width;
      size_t len = 0;
      while (len < width && begin[len] != '\0') ++len;
      out[i].assign(begin, len);
    }
  }
  return out;
}

std::vector<hsize_t> dims(const H5::DataSet& dataset) {
  H5::DataSpace space = dataset.getSpace();
  const int rank = space.getSimpleExtentNdims();
  std::vector<hsize_t> out(static_cast<size_t>(std::max(rank, 0)));
  if (rank > 0) space.getSimpleExtentDims(out.data());
  return out;
}

namespace {
H5::DataSpace select(const H5::DataSet& dataset, std::span<const hsize_t> start, std::span<const hsize_t> count) {
  H5::DataSpace space = dataset.getSpace();
  space.selectHyperslab(H5S_SELECT_SET, count.data(), start.data());
  return space;
}

// HDF5 (Debian's thread-safe build) runs every call under one global lock, inflating chunks
// included, so threads reading a trace wait for each other. When a hyperslab is exactly one
// chunk, stored with no filters, deflate, or shuffle then deflate, its raw bytes are read
// under the lock (H5Dread_chunk) and inflated, unshuffled and converted outside it. Returns
// false, having read nothing, whenever that does not apply; HDF5's own path then reads.
bool read_one_chunk(const H5::DataSet& dataset, DType dtype, std::span<const hsize_t> start,
                    std::span<const hsize_t> count, std::span<float> out) {
  if (dtype == DType::f64) return false;
  const size_t element = dtype == DType::f16 ? 2 : 4;
  const hid_t id = dataset.getId();
  const hid_t plist = H5Dget_create_plist(id);
  if (plist < 0) return false;
  bool shuffle = false, deflate = false, usable = H5Pget_layout(plist) == H5D_CHUNKED;
  std::vector<hsize_t> chunk(count.size());
  usable =
      usable && H5Pget_chunk(plist, static_cast<int>(chunk.size()), chunk.data()) == static_cast<int>(count.size());
  for (size_t i = 0; usable && i < count.size(); ++i) usable = chunk[i] == count[i] && start[i] % chunk[i] == 0;
  const std::vector<H5Z_filter_t> filters = usable ? filter_pipeline(plist) : std::vector<H5Z_filter_t>{};
  usable = usable && filters.size() <= 2;
  for (size_t f = 0; usable && f < filters.size(); ++f) {
    if (filters[f] == H5Z_FILTER_SHUFFLE && f == 0 && filters.size() == 2)
      shuffle = true;
    else if (filters[f] == H5Z_FILTER_DEFLATE && f + 1 == filters.size())
      deflate = true;
    else
      usable = false;
  }
  H5Pclose(plist);
  const hid_t type = usable ? H5Dget_type(id) : -1;
  if (type >= 0) {
    usable = H5Tget_order(type) == H5T_ORDER_LE && H5Tget_size(type) == element;
    H5Tclose(type);
  }
  if (!usable) return false;

  const size_t expected = out.size() * element;
  hsize_t stored = 0;
  if (H5Dget_chunk_storage_size(id, start.data(), &stored) < 0 || stored == 0) return false;
  if (stored > (deflate ? compressBound(expected) : expected)) return false;
  std::vector<unsigned char> raw(static_cast<size_t>(stored));
  uint32_t skipped_filters = 0;
  if (H5Dread_chunk(id, H5P_DEFAULT, start.data(), &skipped_filters, raw.data()) < 0)
    throw H5::DataSetIException("read_floats", "H5Dread_chunk failed");
  if (skipped_filters != 0) return false;  // a filter was not applied to this chunk: let HDF5 decide
  // From here on, no HDF5 call: this runs alongside other threads' reads.
  std::vector<unsigned char> bytes;
  if (deflate) {
    bytes.resize(expected);
    uLongf inflated = expected;
    const int status = uncompress(bytes.data(), &inflated, raw.data(), static_cast<uLong>(raw.size()));
    if (status != Z_OK || inflated != expected) {
      last_failure = status == Z_BUF_ERROR && inflated == expected
                         ? "deflate: a chunk inflates past its declared size of " + std::to_string(expected) + " bytes"
                         : "deflate: chunk does not inflate to its size";
      throw H5::DataSetIException("read_floats", "inflate failed");
    }
  } else {
    if (raw.size() != expected) {
      last_failure = "chunk has the wrong size";
      throw H5::DataSetIException("read_floats", "wrong chunk size");
    }
    bytes.swap(raw);
  }
  const size_t n = out.size();
  if (dtype == DType::f16) {
    const unsigned char* low = bytes.data();
    const unsigned char* high = shuffle ? bytes.data() + n : bytes.data() + 1;
    const size_t step = shuffle ? 1 : 2;
    for (size_t i = 0; i < n; ++i) out[i] = half_to_float(static_cast<uint16_t>(low[i * step] | high[i * step] << 8));
  } else {
    for (size_t i = 0; i < n; ++i) {
      uint32_t bits = 0;
      for (size_t b = 0; b < 4; ++b) bits |= uint32_t{bytes[shuffle ? b * n + i : i * 4 + b]} << (8 * b);
      std::memcpy(&out[i], &bits, sizeof bits);
    }
  }
  return true;
}

}  // namespace

void read_floats(const H5::DataSet& dataset, DType dtype, std::span<const hsize_t> start,
                 std::span<const hsize_t> count, std::span<float> out) {
  quiet();  // worker threads too: HDF5's error printing and handler are per thread
  if (read_one_chunk(dataset, dtype, start, count, out)) return;
  check_chunks_inflate(dataset, start, count);
  H5::DataSpace file_space = select(dataset, start, count);
  // A memory space of the selection's own shape lets HDF5 copy whole runs instead of
  // walking the selection element by element.
  H5::DataSpace mem_space(static_cast<int>(count.size()), count.data());
  switch (dtype) {
    case DType::f32:
      dataset.read(out.data(), H5::PredType::NATIVE_FLOAT, mem_space, file_space);
      return;
    case DType::f16: {
      std::vector<uint16_t> raw(out.size());
      dataset.read(raw.data(), mem_type(DType::f16), mem_space, file_space);
      std::transform(raw.begin(), raw.end(), out.begin(), half_to_float);
      return;
    }
    case DType::f64: {
      std::vector<double> raw(out.size());
      dataset.read(raw.data(), H5::PredType::NATIVE_DOUBLE, mem_space, file_space);
      std::transform(raw.begin(), raw.end(), out.begin(), [](double x) { return static_cast<float>(x); });
      return;
    }
  }
}

void write_floats(H5::DataSet& dataset, DType dtype, std::span<const hsize_t> start, std::span<const hsize_t> count,
                  std::span<const float> data) {
  H5::DataSpace file_space = select(dataset, start, count);
  H5::DataSpace mem_space(static_cast<int>(count.size()), count.data());
  switch (dtype) {
    case DType::f32:
      dataset.write(data.data(), H5::PredType::NATIVE_FLOAT, mem_space, file_space);
      return;
    case DType::f16: {
      std::vector<uint16_t> raw(data.size());
      std::transform(data.begin(), data.end(), raw.begin(), float_to_half);
      dataset.write(raw.data(), mem_type(DType::f16), mem_space, file_space);
      return;
    }
    case DType::f64: {
      std::vector<double> raw(data.begin(), data.end());
      dataset.write(raw.data(), H5::PredType::NATIVE_DOUBLE, mem_space, file_space);
      return;
    }
  }
}

bool is_hard_link(const H5::Group& group, const std::string& name) {
  H5L_info_t info;
  if (H5Lget_info(group.getId(), name.c_str(), &info, H5P_DEFAULT) < 0) {
    H5Eclear2(H5E_DEFAULT);
    return false;
  }
  return info.type == H5L_TYPE_HARD;
}

bool chunks_within_shape(const H5::DataSet& dataset) {
  H5::DSetCreatPropList create = dataset.getCreatePlist();
  if (create.getLayout() != H5D_CHUNKED) return true;
  const std::vector<hsize_t> shape = dims(dataset);
  if (shape.empty()) return false;
  std::vector<hsize_t> chunk(shape.size(), 0);
  if (create.getChunk(static_cast<int>(chunk.size()), chunk.data()) != static_cast<int>(shape.size())) return false;
  for (size_t i = 0; i < shape.size(); ++i)
    if (chunk[i] == 0 || chunk[i] > std::max<hsize_t>(shape[i], 1)) return false;
  return true;
}

std::vector<H5Z_filter_t> filter_pipeline(hid_t create_plist) {
  std::vector<H5Z_filter_t> filters;
  const int count = H5Pget_nfilters(create_plist);
  for (int f = 0; f < count; ++f) {
    unsigned flags = 0, config = 0;
    size_t values = 0;
    filters.push_back(
        H5Pget_filter2(create_plist, static_cast<unsigned>(f), &flags, &values, nullptr, 0, nullptr, &config));
  }
  return filters;
}

std::string unsupported_filter(const H5::DataSet& dataset) {
  const hid_t plist = H5Dget_create_plist(dataset.getId());
  if (plist < 0) throw H5::DataSetIException("unsupported_filter", "H5Dget_create_plist failed");
  const std::vector<H5Z_filter_t> filters = filter_pipeline(plist);
  H5Pclose(plist);
  std::string found;
  for (const H5Z_filter_t filter : filters) {
    if (!found.empty()) break;
    if (filter == H5Z_FILTER_DEFLATE || filter == H5Z_FILTER_SHUFFLE || filter == H5Z_FILTER_FLETCHER32) continue;
    static const std::pair<H5Z_filter_t, const char*> kKnown[] = {{H5Z_FILTER_SZIP, "szip"},
                                                                  {H5Z_FILTER_NBIT, "nbit"},
                                                                  {H5Z_FILTER_SCALEOFFSET, "scaleoffset"},
                                                                  {32000, "lzf"},
                                                                  {32001, "blosc"},
                                                                  {32004, "lz4"},
                                                                  {32008, "bitshuffle"},
                                                                  {32015, "zstd"}};
    std::string label = filter < 0 ? "an unreadable filter" : "filter " + std::to_string(filter);
    for (const auto& [id, known] : kKnown)
      if (id == filter) label = std::string(known) + " (filter " + std::to_string(filter) + ")";
    found = label;
  }
  return found;
}

bool fully_written(const H5::DataSet& dataset) {
  if (dataset.getSpace().getSimpleExtentNpoints() == 0) return true;
  const hid_t id = dataset.getId();
  H5::DSetCreatPropList create = dataset.getCreatePlist();
  if (create.getLayout() == H5D_CHUNKED) {  // every chunk allocated (compressed ones are smaller)
    const std::vector<hsize_t> shape = dims(dataset);
    std::vector<hsize_t> chunk(shape.size(), 1);
    create.getChunk(static_cast<int>(chunk.size()), chunk.data());
    hsize_t expected = 1, allocated = 0;
    for (size_t i = 0; i < shape.size(); ++i) expected *= (shape[i] + chunk[i] - 1) / chunk[i];
    const H5::DataSpace space = dataset.getSpace();
    if (H5Dget_num_chunks(id, space.getId(), &allocated) < 0)
      throw H5::DataSetIException("fully_written", "H5Dget_num_chunks failed");
    return allocated == expected;
  }
  H5D_space_status_t status{};
  if (H5Dget_space_status(id, &status) < 0) throw H5::DataSetIException("fully_written", "H5Dget_space_status failed");
  return status == H5D_SPACE_STATUS_ALLOCATED;
}

namespace {
herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->emplace_back(name);
  return 0;
}
}  // namespace

std::vector<std::string> member_names(const H5::Group& group) {
  std::vector<std::string> names;
  hsize_t index = 0;
  if (H5Literate(group.getId(), H5_INDEX_NAME, H5_ITER_NATIVE, &index, collect_name, &names) < 0)
    throw H5::GroupIException("member_names", "H5Literate failed");
  return names;
}

std::optional<int> count_indexed_members(const H5::Group& group, int64_t max_members, std::string& bad) {
  const hsize_t n = group.getNumObjs();
  if (n > static_cast<hsize_t>(max_members)) {
    bad = "";
    return std::nullopt;
  }
  const std::vector<std::string> names = member_names(group);
  if (names.size() != n) throw H5::GroupIException("count_indexed_members", "members changed while listed");
  std::vector<bool> seen(n, false);
  for (hsize_t i = 0; i < n; ++i) {
    const std::string& name = names[i];
    const bool decimal = !name.empty() && name.size() <= 9 &&
                         std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
                         (name == "0" || name[0] != '0');
    const long index = decimal ? std::stol(name) : -1;
    if (index < 0 || static_cast<hsize_t>(index) >= n || seen[index]) {
      bad = name;
      return std::nullopt;
    }
    seen[index] = true;
  }
  return static_cast<int>(n);
}

}  // namespace kvtrace::h5
