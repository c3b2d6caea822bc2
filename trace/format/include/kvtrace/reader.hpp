#pragma once
// Streaming reader of trace schema v1. Opening checks the whole structure (attributes,
// shapes, dtypes, head counts, sizes) without reading tensor data; reads then fetch one head
// of one layer of one sequence at a time, converted to float32 and checked for NaN/Inf
// (and, for attn, for negative entries and rows that do not sum to 1 within 1e-3).
// Every problem is thrown as InputError naming the file, the dataset and what is wrong.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvtrace/error.hpp"
#include "kvtrace/schema.hpp"

namespace H5 {
class Group;
}

namespace kvtrace {

// Fixed-width token_text strings wider than this, or larger than the total, are refused
// before reading.
inline constexpr size_t kMaxTokenTextBytes = size_t{1} << 16;
inline constexpr size_t kMaxTokenTextTotal = size_t{1} << 28;

class TraceReader {
 public:
  explicit TraceReader(const std::string& path);
  // A trace held in memory (an HDF5 file image, e.g. a fuzzer's input), read through HDF5's
  // core driver without a temporary file; `name` stands for the path in messages. The image
  // is copied; the same checks and errors as opening a file.
  static TraceReader from_memory(std::span<const unsigned char> image, const std::string& name);
  ~TraceReader();
  TraceReader(TraceReader&&) noexcept;
  TraceReader& operator=(TraceReader&&) noexcept;

  const std::string& path() const { return path_; }
  const TraceMeta& meta() const { return meta_; }
  int n_sequences() const { return static_cast<int>(sequences_.size()); }
  const SequenceMeta& sequence(int seq) const;
  const LayerForm& layer(int seq, int layer) const;
  uint64_t file_size() const { return file_size_; }

  std::vector<int32_t> tokens(int seq) const;
  // Empty when the sequence has no token_text.
  std::vector<std::string> token_text(int seq) const;

  // One head as [n_tokens * head_dim] row-major; `head` is a query head for q and a kv head
  // for k and v.
  std::vector<float> read_head(int seq, int layer, Tensor tensor, int head) const;
  // Rows [first_row, first_row + n_rows) of one query head's stored attention, packed
  // (row t holds t+1 entries), each row checked and renormalised to sum to exactly 1.
  std::vector<float> read_attn_rows(int seq, int layer, int head, int64_t first_row, int64_t n_rows) const;

  // Throws InputError with this file and `dataset` in the message.
  [[noreturn]] void fail(const std::string& dataset, const std::string& problem) const;

 private:
  struct InMemory {};
  TraceReader(InMemory, const std::string& name);
  void load();
  void load_root();
  void load_sequence(int seq);
  LayerForm load_layer(const H5::Group& layers, int seq, int layer, int64_t n_tokens);
  void check_index(int seq, int layer) const;
  // After every read: HDF5 reads bytes past the end of a file shrunk since it was opened as
  // zeros, silently. A file whose size, modification time or inode changed is refused.
  void check_unchanged() const;
  // HDF5 1.10 hangs on a corrupt global heap (tests/fuzz/README.md): refused before it reads.
  void refuse_broken_global_heap(std::span<const unsigned char> image) const;

  struct Handle;
  std::string path_;
  uint64_t file_size_ = 0;
  int64_t modified_ns_ = -1;  // -1: an image in memory, which cannot change
  std::pair<uint64_t, uint64_t> file_id_;  // device and inode
  std::unique_ptr<Handle> handle_;
  TraceMeta meta_;
  std::vector<SequenceMeta> sequences_;
};

// Attention-row sums stored in a trace must be 1 within this tolerance.
inline constexpr double kRowSumTolerance = 1e-3;

}  // namespace kvtrace
