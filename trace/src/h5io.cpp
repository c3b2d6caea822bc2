#include "h5io.hpp"

#include <algorithm>
#include <stdexcept>

#include "kvtrace/half.hpp"

namespace kvtrace::h5 {

void quiet() {
  thread_local bool done = false;
  if (!done) {
    H5::Exception::dontPrint();
    done = true;
  }
}

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
}  // namespace

std::string error_detail() {
  std::string innermost, outermost;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, &innermost);
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_outermost_nonempty, &outermost);
  H5Eclear2(H5E_DEFAULT);
  if (!innermost.empty()) return innermost;
  return outermost;
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
  switch (type.getSize()) {
    case 2: return DType::f16;
    case 4: return DType::f32;
    case 8: return DType::f64;
    default: return std::nullopt;
  }
}

const H5::DataType& mem_type(DType dtype) {
  static const H5::FloatType half = half_type();
  switch (dtype) {
    case DType::f16: return half;
    case DType::f32: return H5::PredType::NATIVE_FLOAT;
    case DType::f64: return H5::PredType::NATIVE_DOUBLE;
  }
  return H5::PredType::NATIVE_FLOAT;
}

bool has_attr(const H5::H5Object& object, const std::string& name) {
  return object.attrExists(name);
}

std::optional<std::string> string_attr(const H5::H5Object& object, const std::string& name) {
  if (!object.attrExists(name)) return std::nullopt;
  H5::Attribute attr = object.openAttribute(name);
  H5::DataType type = attr.getDataType();
  if (type.getClass() != H5T_STRING) throw std::runtime_error("is not a string");
  if (attr.getSpace().getSimpleExtentNpoints() != 1) throw std::runtime_error("is not a scalar");
  H5::StrType str_type = attr.getStrType();
  std::string value;
  attr.read(str_type, value);
  return value;
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
  if (type_class != H5T_FLOAT && type_class != H5T_INTEGER)
    throw std::runtime_error("is not a number");
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
  H5::Attribute attr =
      object.createAttribute(name, H5::PredType::STD_I64LE, H5::DataSpace(H5S_SCALAR));
  attr.write(H5::PredType::NATIVE_INT64, &value);
}

void write_attr(H5::H5Object& object, const std::string& name, double value) {
  H5::Attribute attr =
      object.createAttribute(name, H5::PredType::IEEE_F64LE, H5::DataSpace(H5S_SCALAR));
  attr.write(H5::PredType::NATIVE_DOUBLE, &value);
}

std::vector<hsize_t> dims(const H5::DataSet& dataset) {
  H5::DataSpace space = dataset.getSpace();
  const int rank = space.getSimpleExtentNdims();
  std::vector<hsize_t> out(static_cast<size_t>(std::max(rank, 0)));
  if (rank > 0) space.getSimpleExtentDims(out.data());
  return out;
}

namespace {
H5::DataSpace select(const H5::DataSet& dataset, std::span<const hsize_t> start,
                     std::span<const hsize_t> count) {
  H5::DataSpace space = dataset.getSpace();
  space.selectHyperslab(H5S_SELECT_SET, count.data(), start.data());
  return space;
}
}  // namespace

void read_floats(const H5::DataSet& dataset, DType dtype, std::span<const hsize_t> start,
                 std::span<const hsize_t> count, std::span<float> out) {
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
      std::transform(raw.begin(), raw.end(), out.begin(),
                     [](double x) { return static_cast<float>(x); });
      return;
    }
  }
}

void write_floats(H5::DataSet& dataset, DType dtype, std::span<const hsize_t> start,
                  std::span<const hsize_t> count, std::span<const float> data) {
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

std::optional<int> count_indexed_members(const H5::Group& group, std::string& bad) {
  const hsize_t n = group.getNumObjs();
  std::vector<bool> seen(n, false);
  for (hsize_t i = 0; i < n; ++i) {
    const std::string name = group.getObjnameByIdx(i);
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
