#pragma once
// Internal helpers over the HDF5 C++ API: quiet error handling, the float16 type, typed
// attributes and hyperslab reads converted to float32. Not installed; not used outside trace/.
#include <H5Cpp.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtrace/schema.hpp"

namespace kvtrace::h5 {

// HDF5 prints its error stack to stderr by default, per thread; kvsim reports one line instead.
void quiet();
// The innermost message of this thread's HDF5 error stack ("truncated file: eof = ...").
std::string error_detail();
// Keeps `why` as this thread's failure detail (for filters: HDF5 reports them vaguely).
void remember(const std::string& why);

// Before HDF5 decodes the chunks of a deflated dataset that [start, start + count) touches:
// throws H5::Exception (detail: "deflate: a chunk inflates past its declared size ...") if
// one would inflate past one chunk's size (h5_deflate.cpp). Empty spans: the whole dataset.
void check_chunks_inflate(const H5::DataSet& dataset, std::span<const hsize_t> start, std::span<const hsize_t> count);
void check_chunks_inflate(const H5::DataSet& dataset);

H5::FloatType half_type();
// The dtype of a float dataset, or nullopt for anything else.
std::optional<DType> float_dtype(const H5::DataType& type);
const H5::DataType& mem_type(DType dtype);

// String attributes and token strings longer than this are refused before reading.
inline constexpr size_t kMaxAttributeBytes = size_t{1} << 20;

bool has_attr(const H5::H5Object& object, const std::string& name);
// nullopt when the attribute is absent; throws std::runtime_error("...") when it has the wrong type.
std::optional<std::string> string_attr(const H5::H5Object& object, const std::string& name);
std::optional<int64_t> int_attr(const H5::H5Object& object, const std::string& name);
std::optional<double> float_attr(const H5::H5Object& object, const std::string& name);

void write_attr(H5::H5Object& object, const std::string& name, const std::string& value);
void write_attr(H5::H5Object& object, const std::string& name, int64_t value);
void write_attr(H5::H5Object& object, const std::string& name, double value);

std::vector<hsize_t> dims(const H5::DataSet& dataset);
// The n strings of a 1-D string dataset, variable or fixed width (every byte of a fixed-width
// string up to its first NUL). Throws H5::Exception.
std::vector<std::string> read_strings(const H5::DataSet& dataset, size_t n);

// Reads the hyperslab [start, start + count) of a float dataset stored as `dtype` into out
// (as float32). out.size() must equal the product of count.
void read_floats(const H5::DataSet& dataset, DType dtype, std::span<const hsize_t> start,
                 std::span<const hsize_t> count, std::span<float> out);
// Writes float32 data into the hyperslab, converting to the dataset's dtype.
void write_floats(H5::DataSet& dataset, DType dtype, std::span<const hsize_t> start, std::span<const hsize_t> count,
                  std::span<const float> data);

// Names of a group's members that are decimal indices 0..n-1 without padding; nullopt with
// `bad` set to the offending name otherwise, or to "" when there are more than max_members.
std::optional<int> count_indexed_members(const H5::Group& group, int64_t max_members, std::string& bad);

// HDF5 1.10 decodes a global heap collection ("GCOL": where variable-length strings live)
// in a loop that never ends when an object in it says index 0 and size 0, and reads past
// the collection when an object claims more than is left. Returns the byte offset in the
// file image of the first collection whose objects do not tile it exactly, or nullopt.
std::optional<size_t> find_broken_global_heap(std::span<const unsigned char> image);

// Whether `name` in `group` is a hard link (a trace holds no soft or external links; an
// external link would make HDF5 open another file).
bool is_hard_link(const H5::Group& group, const std::string& name);
// False when a chunked dataset's chunks are larger than its shape (HDF5 allocates a whole
// chunk per read, so an absurd chunk in a small file would allocate gigabytes).
bool chunks_within_shape(const H5::DataSet& dataset);
// The first filter of the dataset's pipeline that kvsim does not read, e.g. "szip (filter 4)";
// empty when there is none. kvsim reads deflate (gzip), shuffle and fletcher32 only:
// anything else is refused before HDF5 decodes a chunk with it.
std::string unsupported_filter(const H5::DataSet& dataset);
// The filters of a dataset creation property list, in the order HDF5 applies them on write.
std::vector<H5Z_filter_t> filter_pipeline(hid_t create_plist);
// False when the dataset's storage was never (or only partly) written: HDF5 would read the
// missing chunks as fill values.
bool fully_written(const H5::DataSet& dataset);
// The names of a group's members, in one pass (by index, each lookup is linear in the
// group's size for the newer link storage).
std::vector<std::string> member_names(const H5::Group& group);

}  // namespace kvtrace::h5
