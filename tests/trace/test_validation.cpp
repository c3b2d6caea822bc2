// Every kind of bad input gives one InputError naming the file, the dataset and the problem.
#include <H5Cpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "../support/small_trace.hpp"
#include "../support/temp_dir.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/synth.hpp"
#include "kvtrace/validate.hpp"
#include "kvtrace/writer.hpp"

using namespace kvtrace;

namespace {

class Validation : public ::testing::Test {
 protected:
  void SetUp() override {
    H5::Exception::dontPrint();
    path_ = kvtest::write_small_trace(dir_);
  }

  void mutate(const std::function<void(H5::H5File&)>& change) {
    H5::H5File file(path_, H5F_ACC_RDWR);
    change(file);
  }

  // Expects validate_trace to fail with a message holding every fragment.
  void expect_error(std::initializer_list<std::string> fragments) {
    try {
      validate_trace(path_);
      FAIL() << "no error";
    } catch (const InputError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      EXPECT_EQ(message.rfind(path_, 0), 0u) << "message must start with the file: " << message;
      for (const auto& fragment : fragments)
        EXPECT_NE(message.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << message;
    }
  }

  static void set_int_attr(H5::H5Object& object, const std::string& name, int64_t value) {
    if (object.attrExists(name)) object.removeAttr(name);
    H5::Attribute attr = object.createAttribute(name, H5::PredType::STD_I64LE, H5::DataSpace(H5S_SCALAR));
    attr.write(H5::PredType::NATIVE_INT64, &value);
  }

  // Overwrites one value at `start` (a full index).
  static void overwrite_value(H5::H5File& file, const std::string& dataset_path, std::vector<hsize_t> start,
                              float value) {
    H5::DataSet dataset = file.openDataSet(dataset_path);
    H5::DataSpace space = dataset.getSpace();
    std::vector<hsize_t> count(start.size(), 1);
    space.selectHyperslab(H5S_SELECT_SET, count.data(), start.data());
    const hsize_t one = 1;
    H5::DataSpace mem(1, &one);
    dataset.write(&value, H5::PredType::NATIVE_FLOAT, mem, space);
  }

  kvtest::TempDir dir_;
  std::string path_;
};

}  // namespace

TEST_F(Validation, GoodTracePasses) {
  const ValidationSummary summary = validate_trace(path_);
  EXPECT_EQ(summary.sequences, 2);
  EXPECT_EQ(summary.tokens, 24);
  // per sequence and layer: 4 q + 2 k + 2 v + 4 attn heads
  EXPECT_EQ(summary.heads_checked, 2 * 2 * 12);
}

TEST_F(Validation, MissingFile) {
  path_ = dir_.file("nope.h5");
  expect_error({"no such file"});
}

TEST_F(Validation, NotHdf5) {
  std::ofstream(path_, std::ios::trunc) << "id,value\n1,2\n";
  expect_error({"not an HDF5 file"});
}

TEST_F(Validation, Truncated) {
  std::filesystem::resize_file(path_, std::filesystem::file_size(path_) / 2);
  expect_error({"truncated or corrupt"});
}

TEST_F(Validation, WrongFormat) {
  mutate([](H5::H5File& f) {
    H5::Group root = f.openGroup("/");
    root.removeAttr("format");
    H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
    root.createAttribute("format", type, H5::DataSpace(H5S_SCALAR)).write(type, std::string("other"));
  });
  expect_error({"/: ", "'format' is 'other'"});
}

TEST_F(Validation, NotAKvtraceFile) {
  { H5::H5File(path_, H5F_ACC_TRUNC).createGroup("data"); }
  expect_error({"/: ", "missing attribute 'format'"});
}

TEST_F(Validation, WrongVersion) {
  mutate([](H5::H5File& f) {
    H5::Group root = f.openGroup("/");
    set_int_attr(root, "version", 2);
  });
  expect_error({"unsupported schema version 2"});
}

TEST_F(Validation, MissingDataset) {
  mutate([](H5::H5File& f) {
    f.unlink("/seqs/1/layers/1/q");
    f.unlink("/seqs/1/layers/1/attn");
  });
  expect_error({"/seqs/1/layers/1: ", "has k but no q"});
}

TEST_F(Validation, MissingLayers) {
  mutate([](H5::H5File& f) { f.unlink("/seqs/0/layers/1"); });
  expect_error({"/seqs/0/layers: ", "holds 1 layers", "n_layers = 2"});
}

TEST_F(Validation, MissingTokens) {
  mutate([](H5::H5File& f) { f.unlink("/seqs/0/tokens"); });
  expect_error({"/seqs/0/tokens: ", "missing dataset"});
}

TEST_F(Validation, MisShapedDataset) {
  mutate([](H5::H5File& f) {
    f.unlink("/seqs/0/layers/0/k");
    hsize_t shape[3] = {2, 11, 8};
    f.createDataSet("/seqs/0/layers/0/k", H5::PredType::IEEE_F32LE, H5::DataSpace(3, shape));
  });
  expect_error({"/seqs/0/layers/0/k: ", "shape [2, 11, 8], expected [2, 12, 8]"});
}

TEST_F(Validation, InconsistentHeadCounts) {
  mutate([](H5::H5File& f) {
    H5::Group root = f.openGroup("/");
    set_int_attr(root, "n_kv_heads", 3);
  });
  expect_error({"inconsistent head counts", "n_heads = 4", "n_kv_heads = 3"});
}

TEST_F(Validation, KvHeadCountDisagreesWithDataset) {
  mutate([](H5::H5File& f) {
    H5::Group root = f.openGroup("/");
    set_int_attr(root, "n_kv_heads", 4);
  });
  expect_error({"/seqs/0/layers/0/k: ", "expected [4, 12, 8]"});
}

TEST_F(Validation, NaN) {
  mutate([](H5::H5File& f) { overwrite_value(f, "/seqs/1/layers/0/q", {0, 0, 5}, std::nanf("")); });
  expect_error({"/seqs/1/layers/0/q: ", "NaN at head 0, token 0, dim 5"});
}

TEST_F(Validation, Inf) {
  mutate([](H5::H5File& f) { overwrite_value(f, "/seqs/0/layers/1/v", {0, 1, 1}, INFINITY); });
  expect_error({"/seqs/0/layers/1/v: ", "Inf at head 0, token 1, dim 1"});
}

TEST_F(Validation, NegativeProbability) {
  mutate([](H5::H5File& f) { overwrite_value(f, "/seqs/0/layers/0/attn", {0, 4}, -0.25f); });
  expect_error({"/seqs/0/layers/0/attn: ", "negative probability", "row 2"});
}

TEST_F(Validation, RowNotSummingToOne) {
  mutate([](H5::H5File& f) { overwrite_value(f, "/seqs/0/layers/1/attn", {0, 0}, 0.9f); });
  expect_error({"/seqs/0/layers/1/attn: ", "row 0 of head 0 sums to 0.9", "within 1e-3"});
}

TEST_F(Validation, AbsurdTokenCountRefusedBeforeAllocating) {
  mutate([](H5::H5File& f) {
    H5::Group seq = f.openGroup("/seqs/0");
    set_int_attr(seq, "n_tokens", int64_t{1} << 40);
  });
  expect_error({"/seqs/0: ", "absurd n_tokens"});
}

TEST_F(Validation, AbsurdDatasetRefusedBeforeAllocating) {
  // A small file that declares 200k tokens: tokens is chunked and never written, and the
  // packed attention would need 2e10 values per head.
  mutate([](H5::H5File& f) {
    H5::Group seq = f.openGroup("/seqs/1");
    set_int_attr(seq, "n_tokens", 200000);
    f.unlink("/seqs/1/tokens");
    hsize_t shape[1] = {200000}, chunk[1] = {1024};
    H5::DSetCreatPropList plist;
    plist.setChunk(1, chunk);
    f.createDataSet("/seqs/1/tokens", H5::PredType::STD_I32LE, H5::DataSpace(1, shape), plist);
    f.unlink("/seqs/1/token_text");
  });
  EXPECT_LT(std::filesystem::file_size(path_), 100000u);
  expect_error({"/seqs/1/layers/0/attn: ", "absurd size"});
}

TEST_F(Validation, AbsurdHeadCount) {
  mutate([](H5::H5File& f) {
    H5::Group root = f.openGroup("/");
    set_int_attr(root, "n_heads", 1 << 20);
  });
  expect_error({"/: ", "'n_heads' = 1048576 is out of range"});
}

TEST_F(Validation, SequenceNamesMustBeIndices) {
  mutate([](H5::H5File& f) { f.move("/seqs/1", "/seqs/01"); });
  expect_error({"/seqs: ", "'01' is not a sequence index"});
}

TEST_F(Validation, NonFloatDataset) {
  mutate([](H5::H5File& f) {
    f.unlink("/seqs/0/layers/0/q");
    hsize_t shape[3] = {4, 12, 8};
    f.createDataSet("/seqs/0/layers/0/q", H5::PredType::STD_I32LE, H5::DataSpace(3, shape));
  });
  expect_error({"/seqs/0/layers/0/q: ", "is not a float16/float32 dataset"});
}

TEST_F(Validation, PromptLongerThanSequence) {
  mutate([](H5::H5File& f) {
    H5::Group seq = f.openGroup("/seqs/1");
    set_int_attr(seq, "prompt_len", 13);
  });
  expect_error({"/seqs/1: ", "prompt_len = 13"});
}
