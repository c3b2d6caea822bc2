// Deflated chunks that inflate past their declared size (a "zip bomb"). HDF5's deflate
// filter grows its output buffer for as long as the stream goes on, so one over-compressed
// chunk of a few MB makes a read allocate gigabytes before HDF5 drops the excess, and HDF5
// 1.10 does not let a program replace that filter. So before HDF5 decodes chunks of a
// deflated dataset, each chunk the read touches is inflated here into a small window,
// counting bytes, and refused once it passes one chunk's size. The fast path (one whole
// chunk, read raw and inflated by kvsim into a buffer of exactly its size) needs no check.
#include <zlib.h>

#include <array>

#include "h5io.hpp"

namespace kvtrace::h5 {
namespace {

// Bytes the deflate stream `raw` inflates to, counted up to limit + 1; nullopt if it is corrupt.
std::optional<size_t> inflated_size(const std::vector<unsigned char>& raw, size_t limit) {
  z_stream stream{};
  stream.next_in = const_cast<Bytef*>(raw.data());
  stream.avail_in = static_cast<uInt>(raw.size());
  if (inflateInit(&stream) != Z_OK) return std::nullopt;
  std::array<unsigned char, 1 << 16> window{};
  size_t produced = 0;
  int status = Z_OK;
  while (status == Z_OK && produced <= limit) {
    stream.next_out = window.data();
    stream.avail_out = static_cast<uInt>(window.size());
    status = inflate(&stream, Z_NO_FLUSH);
    produced += window.size() - stream.avail_out;
    if (status == Z_BUF_ERROR && stream.avail_in == 0) break;  // truncated stream
  }
  inflateEnd(&stream);
  if (produced > limit) return produced;
  if (status != Z_STREAM_END) return std::nullopt;
  return produced;
}

}  // namespace

void check_chunks_inflate(const H5::DataSet& dataset, std::span<const hsize_t> start, std::span<const hsize_t> count) {
  const hid_t id = dataset.getId();
  const hid_t plist = H5Dget_create_plist(id);
  if (plist < 0) return;
  bool deflate = false;
  size_t extra = 0;  // fletcher32 appends a 4-byte checksum before later filters
  std::vector<hsize_t> chunk(start.size());
  const bool chunked =
      H5Pget_layout(plist) == H5D_CHUNKED &&
      H5Pget_chunk(plist, static_cast<int>(chunk.size()), chunk.data()) == static_cast<int>(chunk.size());
  if (chunked)
    for (const H5Z_filter_t filter : filter_pipeline(plist)) {
      deflate = deflate || filter == H5Z_FILTER_DEFLATE;
      if (filter == H5Z_FILTER_FLETCHER32) extra += 4;
    }
  H5Pclose(plist);
  if (!deflate) return;
  const hid_t type = H5Dget_type(id);
  size_t limit =
      type >= 0 ? std::max<size_t>(H5Tget_size(type), 16) : 16;  // a vlen element is a 16-byte reference on disk
  if (type >= 0) H5Tclose(type);
  for (hsize_t c : chunk) limit *= static_cast<size_t>(c);
  limit += extra;
  // Every chunk the selection touches, in row-major order of chunk coordinates.
  const size_t rank = chunk.size();
  std::vector<hsize_t> first(rank), last(rank), at(rank);
  for (size_t i = 0; i < rank; ++i) {
    if (count[i] == 0) return;
    first[i] = start[i] / chunk[i] * chunk[i];
    last[i] = (start[i] + count[i] - 1) / chunk[i] * chunk[i];
  }
  at = first;
  std::vector<unsigned char> raw;
  while (true) {
    hsize_t stored = 0;
    if (H5Dget_chunk_storage_size(id, at.data(), &stored) >= 0 && stored > 0) {
      if (stored > compressBound(static_cast<uLong>(limit)) + 64) {
        remember(
            "deflate: a chunk is stored larger than a deflate stream of its declared size can be (a corrupt file)");
        throw H5::DataSetIException("check_chunks_inflate", "oversized chunk");
      }
      raw.resize(static_cast<size_t>(stored));
      uint32_t mask = 0;
      if (H5Dread_chunk(id, H5P_DEFAULT, at.data(), &mask, raw.data()) < 0)
        throw H5::DataSetIException("check_chunks_inflate", "H5Dread_chunk failed");
      const std::optional<size_t> size = inflated_size(raw, limit);
      if (size && *size > limit) {
        remember("deflate: a chunk inflates past its declared size of " + std::to_string(limit) +
                 " bytes (a corrupt or hostile file)");
        throw H5::DataSetIException("check_chunks_inflate", "chunk inflates past its size");
      }
    }
    size_t i = rank;
    while (i > 0) {
      --i;
      if (at[i] < last[i]) {
        at[i] += chunk[i];
        break;
      }
      at[i] = first[i];
      if (i == 0) return;
    }
    if (rank == 0) return;
  }
}

void check_chunks_inflate(const H5::DataSet& dataset) {
  const std::vector<hsize_t> shape = dims(dataset);
  check_chunks_inflate(dataset, std::vector<hsize_t>(shape.size(), 0), shape);
}

}  // namespace kvtrace::h5
