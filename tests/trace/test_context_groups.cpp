// Shared contexts (docs/semantics.md, section 1): the sequences of one context_group hold the
// same tokens before their questions, or the file is refused in one line.
#include <H5Cpp.h>
#include <gtest/gtest.h>

#include <functional>

#include "../support/temp_dir.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/writer.hpp"

using namespace kvtrace;

namespace {

// Three sequences of 8 tokens, a 4-token context, a 2-token question each, group 7.
std::string write_group(const kvtest::TempDir& dir, const std::function<void(int, SequenceMarks&)>& mark = {}) {
  const std::string path = dir.file("group.h5");
  TraceMeta meta;
  meta.model = "tiny";
  meta.source = "test";
  meta.n_layers = 1;
  meta.n_heads = 1;
  meta.n_kv_heads = 1;
  meta.head_dim = 2;
  TraceWriter writer(path, meta);
  for (int s = 0; s < 3; ++s) {
    const std::vector<int32_t> tokens = {1, 5, 6, 7, 20 + s, 30 + s, 40, 41};
    SequenceMarks marks;
    marks.question_len = 2;
    marks.context_group = 7;
    if (mark) mark(s, marks);
    const int seq = writer.add_sequence(6, tokens, {}, marks);
    writer.add_layer(seq, 0, LayerContents{true, true, false, false, 0, 0.0});
    const std::vector<float> data(16, 0.5f);
    writer.write_head(seq, 0, Tensor::q, 0, data);
    writer.write_head(seq, 0, Tensor::k, 0, data);
  }
  writer.close();
  return path;
}

void expect_refused(const std::string& path, const std::string& words) {
  try {
    const TraceReader reader(path);
    ADD_FAILURE() << "read " << path;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

void write_token(const std::string& path, const std::string& dataset, hsize_t at, int32_t token) {
  H5::H5File file(path, H5F_ACC_RDWR);
  H5::DataSet tokens = file.openDataSet(dataset);
  const hsize_t one = 1;
  H5::DataSpace space = tokens.getSpace();
  space.selectHyperslab(H5S_SELECT_SET, &one, &at);
  tokens.write(&token, H5::PredType::NATIVE_INT32, H5::DataSpace(1, &one), space);
}

TEST(ContextGroups, WrittenAndReadBack) {
  kvtest::TempDir dir;
  const TraceReader reader(write_group(dir, [](int s, SequenceMarks& m) { m.context_group = s == 2 ? -1 : 7; }));
  EXPECT_EQ(reader.sequence(0).context_group, 7);
  EXPECT_EQ(reader.sequence(1).context_group, 7);
  EXPECT_EQ(reader.sequence(2).context_group, -1);
}

TEST(ContextGroups, ContextsThatDifferAreRefused) {
  kvtest::TempDir dir;
  // Sequence 1 asks a 3-token question: its context is 3 tokens, the others' 4.
  expect_refused(write_group(dir, [](int s, SequenceMarks& m) { m.question_len += s == 1; }),
                 "/seqs/1: context_group 7: its context holds 3 tokens, sequence 0's 4");
  const std::string path = write_group(dir);
  write_token(path, "/seqs/2/tokens", 3, 99);
  expect_refused(path, "/seqs/2/tokens: context_group 7: token 3 of the context differs from sequence 0's");
  write_token(path, "/seqs/2/tokens", 3, 7);
  EXPECT_NO_THROW(TraceReader{path});
}

TEST(ContextGroups, AGroupNeedsAQuestion) {
  kvtest::TempDir dir;
  EXPECT_THROW(write_group(dir, [](int s, SequenceMarks& m) { m.question_len = s == 2 ? -1 : 2; }), InputError);
  const std::string path = write_group(dir);
  {
    H5::H5File file(path, H5F_ACC_RDWR);
    file.openGroup("/seqs/2").removeAttr("question_len");
  }
  expect_refused(path, "/seqs/2: context_group without a question");
  {
    H5::H5File file(path, H5F_ACC_RDWR);
    H5::Group seq = file.openGroup("/seqs/1");
    seq.removeAttr("context_group");
    const int64_t negative = -3;
    seq.createAttribute("context_group", H5::PredType::NATIVE_INT64, H5::DataSpace()).write(H5::PredType::NATIVE_INT64, &negative);
  }
  expect_refused(path, "/seqs/1: context_group = -3 is outside 0..2147483647");
}

}  // namespace
