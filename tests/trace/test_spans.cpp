// Spans of a sequence (docs/semantics.md, section 1): the rule by hand, the writer's and the
// reader's round trip, and every way a file can break the schema refused in one line.
#include <H5Cpp.h>
#include <gtest/gtest.h>

#include <functional>

#include "../support/small_trace.hpp"
#include "../support/temp_dir.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/synth.hpp"
#include "kvtrace/validate.hpp"
#include "kvtrace/writer.hpp"

using namespace kvtrace;

namespace {

TEST(SpanRule, ByHand) {
  EXPECT_EQ(span_problem({"needle-2", "needle", 3, 5}, 12), "");
  EXPECT_EQ(span_problem({"a", "context", 0, 12}, 12), "");
  EXPECT_EQ(span_problem({"a", "context", 5, 5}, 12), "range [5, 5) is not within 0..n_tokens (12) with start < end");
  EXPECT_EQ(span_problem({"a", "context", -1, 3}, 12), "range [-1, 3) is not within 0..n_tokens (12) with start < end");
  EXPECT_EQ(span_problem({"a", "context", 3, 13}, 12), "range [3, 13) is not within 0..n_tokens (12) with start < end");
  EXPECT_EQ(span_problem({"a", "my kind", 0, 1}, 12), "kind 'my kind' is not 1..64 letters, digits, '_', '-' or '.'");
  EXPECT_EQ(span_problem({"a", "", 0, 1}, 12), "kind '' is not 1..64 letters, digits, '_', '-' or '.'");
  EXPECT_EQ(span_problem({"a", "x\ny", 0, 1}, 12), "a kind of 3 bytes is not 1..64 letters, digits, '_', '-' or '.'");
  EXPECT_EQ(span_problem({"", "context", 0, 1}, 12),
            "a name of 0 bytes is not 1..256 bytes without control characters");
  EXPECT_EQ(span_problem({"tab\there", "context", 0, 1}, 12),
            "a name of 8 bytes is not 1..256 bytes without control characters");
  EXPECT_EQ(span_problem({std::string(257, 'n'), "context", 0, 1}, 12),
            "a name of 257 bytes is not 1..256 bytes without control characters");
}

TraceMeta tiny_meta() {
  TraceMeta meta;
  meta.model = "tiny";
  meta.source = "test";
  meta.n_layers = 1;
  meta.n_heads = 1;
  meta.n_kv_heads = 1;
  meta.head_dim = 2;
  return meta;
}

// One sequence of 6 tokens and `marks`.
void write_marked(const std::string& path, const SequenceMarks& marks) {
  TraceWriter writer(path, tiny_meta());
  const std::vector<int32_t> tokens = {1, 5, 6, 7, 8, 9};
  const int seq = writer.add_sequence(4, tokens, {}, marks);
  writer.add_layer(seq, 0, LayerContents{true, true, false, false, 0, 0.0});
  const std::vector<float> data(12, 0.5f);
  writer.write_head(seq, 0, Tensor::q, 0, data);
  writer.write_head(seq, 0, Tensor::k, 0, data);
  writer.close();
}

TEST(Spans, WrittenAndReadBack) {
  kvtest::TempDir dir;
  const SequenceMarks marks{2, {{"context", "context", 1, 2}, {"question", "question", 2, 4}, {"évidence ✓", "needle", 1, 6}}};
  write_marked(dir.file("s.h5"), marks);
  const TraceReader reader(dir.file("s.h5"));
  EXPECT_EQ(reader.sequence(0).spans, marks.spans);
  EXPECT_EQ(reader.sequence(0).question_len, 2);
  write_marked(dir.file("plain.h5"), {});
  EXPECT_TRUE(TraceReader(dir.file("plain.h5")).sequence(0).spans.empty());
  EXPECT_EQ(TraceReader(dir.file("plain.h5")).sequence(0).question_len, -1);
}

TEST(Spans, WriterRefusesWhatTheSchemaRefuses) {
  kvtest::TempDir dir;
  try {
    write_marked(dir.file("bad.h5"), {-1, {{"a", "answer", 4, 7}}});
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), dir.file("bad.h5") +
                                         ": /seqs/0/spans: span 0: range [4, 7) is not within 0..n_tokens (6) with "
                                         "start < end");
  }
  EXPECT_THROW(write_marked(dir.file("q.h5"), {5, {}}), InputError);  // question_len > prompt_len
  EXPECT_FALSE(std::filesystem::exists(dir.file("bad.h5")));
}

// Replaces dataset `name` of `group` by one of file type `file` and `shape`, written from
// `values` in memory type `memory`.
void replace(H5::Group& group, const char* name, const H5::DataType& file, std::vector<hsize_t> shape,
             const void* values, const H5::DataType& memory) {
  group.unlink(name);
  group.createDataSet(name, file, H5::DataSpace(static_cast<int>(shape.size()), shape.data())).write(values, memory);
}

void replace_strings(H5::Group& group, const char* name, std::vector<const char*> text) {
  const H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
  replace(group, name, type, {text.size()}, text.data(), type);
}

const H5::PredType& kI64 = H5::PredType::STD_I64LE;
const H5::PredType& kNativeI64 = H5::PredType::NATIVE_INT64;

class HostileSpans : public ::testing::Test {
 protected:
  void SetUp() override {
    H5::Exception::dontPrint();
    path_ = kvtest::write_small_trace(dir_);  // 2 sequences of 12 tokens
  }
  // Writes /seqs/0/spans with `n` spans of [0, 3), kind and name "context", then `change`.
  void spans(hsize_t n, const std::function<void(H5::Group&)>& change = {}) {
    H5::H5File file(path_, H5F_ACC_RDWR);
    H5::Group group = file.createGroup("/seqs/0/spans");
    H5::DataSpace space(1, &n);
    const std::vector<int64_t> starts(n, 0), ends(n, 3);
    group.createDataSet("start", H5::PredType::STD_I64LE, space).write(starts.data(), H5::PredType::NATIVE_INT64);
    group.createDataSet("end", H5::PredType::STD_I64LE, space).write(ends.data(), H5::PredType::NATIVE_INT64);
    H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
    const std::vector<const char*> text(n, "context");
    group.createDataSet("kind", type, space).write(text.data(), type);
    group.createDataSet("name", type, space).write(text.data(), type);
    if (change) change(group);
  }
  void expect_refused(const std::string& message) {
    try {
      validate_trace(path_);
      FAIL() << "no error";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), path_ + ": " + message);
    }
  }
  kvtest::TempDir dir_;
  std::string path_;
};

TEST_F(HostileSpans, ValidSpansRead) {
  spans(2);
  EXPECT_EQ(TraceReader(path_).sequence(0).spans.size(), 2u);
  EXPECT_TRUE(TraceReader(path_).sequence(1).spans.empty());
}

TEST_F(HostileSpans, NoSpansInTheGroupIsNone) {
  spans(0);
  EXPECT_TRUE(TraceReader(path_).sequence(0).spans.empty());
}

TEST_F(HostileSpans, EndPastTheSequence) {
  spans(1, [](H5::Group& g) {
    const int64_t end = 13;
    replace(g, "end", kI64, {1}, &end, kNativeI64);
  });
  expect_refused("/seqs/0/spans: span 0: range [0, 13) is not within 0..n_tokens (12) with start < end");
}

TEST_F(HostileSpans, LengthsDiffer) {
  spans(2, [](H5::Group& g) {
    replace_strings(g, "name", {"a", "b", "c"});
  });
  expect_refused("/seqs/0/spans/name: holds 3 spans, /seqs/0/spans/start 2");
}

TEST_F(HostileSpans, StartIsNotAnInteger) {
  spans(1, [](H5::Group& g) {
    const float start = 0;
    replace(g, "start", H5::PredType::IEEE_F32LE, {1}, &start, H5::PredType::NATIVE_FLOAT);
  });
  expect_refused("/seqs/0/spans/start: is not an integer dataset");
}

TEST_F(HostileSpans, KindIsNotAString) {
  spans(1, [](H5::Group& g) {
    const int64_t kind = 7;
    replace(g, "kind", kI64, {1}, &kind, kNativeI64);
  });
  expect_refused("/seqs/0/spans/kind: is not a string dataset");
}

TEST_F(HostileSpans, TwoDimensional) {
  spans(1, [](H5::Group& g) {
    const int64_t end = 3;
    replace(g, "end", kI64, {1, 1}, &end, kNativeI64);
  });
  expect_refused("/seqs/0/spans/end: shape [1, 1], expected [n] with n at most 4096");
}

TEST_F(HostileSpans, TooMany) {
  spans(4097);
  expect_refused("/seqs/0/spans/start: shape [4097], expected [n] with n at most 4096");
}

TEST_F(HostileSpans, MissingDataset) {
  spans(1, [](H5::Group& g) { g.unlink("kind"); });
  expect_refused("/seqs/0/spans/kind: missing dataset");
}

TEST_F(HostileSpans, SpansIsNotAGroup) {
  {
    H5::H5File file(path_, H5F_ACC_RDWR);
    const hsize_t n = 1;
    file.createDataSet("/seqs/1/spans", H5::PredType::STD_I64LE, H5::DataSpace(1, &n));
  }
  expect_refused("/seqs/1/spans: is not a group");
}

TEST_F(HostileSpans, KindWithASpace) {
  spans(1, [](H5::Group& g) {
    replace_strings(g, "kind", {"two words"});
  });
  expect_refused("/seqs/0/spans: span 0: kind 'two words' is not 1..64 letters, digits, '_', '-' or '.'");
}

}  // namespace
