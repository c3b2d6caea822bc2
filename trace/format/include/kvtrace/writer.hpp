#pragma once
// Writer of trace schema v1. The file is built under a temporary name and renamed into
// place by close(); destroying an unclosed writer removes the partial file. Datasets are
// chunked one head per chunk so readers can stream a head at a time.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvtrace/schema.hpp"

namespace kvtrace {

struct WriterOptions {
  DType dtype = DType::f16;
  int compression = 0;  // gzip level 0..9 (0: none; shuffle is added when > 0)
};

struct LayerContents {
  bool q = false, k = false, v = false, attn = false;
  int sliding_window = 0;
  double logit_softcap = 0.0;
};

// What a sequence may say of its tokens besides them (docs/semantics.md, section 1).
struct SequenceMarks {
  int64_t question_len = -1;  // -1: none
  std::vector<Span> spans;
  int64_t context_group = -1;  // -1: none; else >= 0, shared with the sequences of the same context
};

class TraceWriter {
 public:
  // meta.version, created and tool are filled in when empty.
  TraceWriter(const std::string& path, TraceMeta meta, WriterOptions options = {});
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Starts sequence number n_sequences() and returns its index. token_text may be empty.
  // Marks the schema refuses (a span_problem, question_len outside 0..prompt_len) throw
  // InputError.
  int add_sequence(int64_t prompt_len, std::span<const int32_t> tokens, std::span<const std::string> token_text = {},
                   const SequenceMarks& marks = {});
  // Creates the datasets of one layer of a sequence.
  void add_layer(int seq, int layer, const LayerContents& contents);
  // One head: q/k/v as [n_tokens * head_dim]; attn as the packed lower triangle.
  void write_head(int seq, int layer, Tensor tensor, int head, std::span<const float> data);

  int n_sequences() const;
  const TraceMeta& meta() const { return meta_; }
  const std::string& path() const { return path_; }
  void close();

 private:
  struct State;
  std::string path_;
  TraceMeta meta_;
  WriterOptions options_;
  std::unique_ptr<State> state_;
};

std::string now_iso8601();
std::string tool_string();  // "kvsim <version>"

}  // namespace kvtrace
