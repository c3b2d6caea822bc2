// TraceReader::from_memory (the fuzzer's way in) and the guards the reader applies before it
// lets HDF5 read anything: links, chunk sizes, float layouts, string sizes.
#include <H5Cpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <vector>

#include "../support/small_trace.hpp"
#include "../support/temp_dir.hpp"
#include "../../trace/format/h5io.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/synth.hpp"
#include "kvtrace/validate.hpp"

using namespace kvtrace;

namespace {

class ReaderGuards : public ::testing::Test {
 protected:
  void SetUp() override {
    H5::Exception::dontPrint();
    path_ = kvtest::write_small_trace(dir_);
  }

  std::vector<unsigned char> bytes() const {
    std::ifstream in(path_, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  void mutate(const std::function<void(H5::H5File&)>& change) {
    H5::H5File file(path_, H5F_ACC_RDWR);
    change(file);
  }

  // Expects opening and validating, from the file and from memory, to fail with a message
  // holding every fragment.
  void expect_error(std::initializer_list<std::string> fragments) {
    const std::vector<unsigned char> image = bytes();
    for (const bool in_memory : {false, true}) {
      try {
        if (in_memory)
          validate_trace(TraceReader::from_memory(image, "image.h5"));
        else
          validate_trace(path_);
        FAIL() << "no error, in memory: " << in_memory;
      } catch (const InputError& e) {
        const std::string message = e.what();
        EXPECT_EQ(message.find('\n'), std::string::npos) << message;
        EXPECT_EQ(message.rfind(in_memory ? "image.h5" : path_, 0), 0u) << message;
        for (const auto& fragment : fragments)
          EXPECT_NE(message.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << message;
      }
    }
  }

  kvtest::TempDir dir_;
  std::string path_;
};

}  // namespace

TEST_F(ReaderGuards, FromMemoryReadsWhatTheFileHolds) {
  const TraceReader file(path_);
  const std::vector<unsigned char> image = bytes();
  const TraceReader memory = TraceReader::from_memory(image, "in-memory.h5");
  EXPECT_EQ(memory.path(), "in-memory.h5");
  EXPECT_EQ(memory.file_size(), file.file_size());
  EXPECT_EQ(memory.n_sequences(), 2);
  EXPECT_EQ(memory.meta().n_heads, 4);
  EXPECT_EQ(memory.meta().created, file.meta().created);
  EXPECT_EQ(memory.tokens(1), file.tokens(1));
  EXPECT_EQ(memory.read_head(1, 1, Tensor::k, 1), file.read_head(1, 1, Tensor::k, 1));
  EXPECT_EQ(memory.read_attn_rows(0, 1, 3, 2, 5), file.read_attn_rows(0, 1, 3, 2, 5));
  const ValidationSummary a = validate_trace(memory), b = validate_trace(path_);
  EXPECT_EQ(a.values_checked, b.values_checked);
  EXPECT_EQ(a.heads_checked, b.heads_checked);
}

TEST_F(ReaderGuards, TwoImagesOfTheSameNameStayApart) {
  // HDF5 identifies core-driver files without a backing store by name: two open images must
  // not be taken for one file.
  const std::vector<unsigned char> first = bytes();
  SynthOptions options;
  options.n_layers = 1;
  options.n_heads = 2;
  options.n_kv_heads = 1;
  options.head_dim = 4;
  options.n_tokens = 5;
  options.n_sequences = 1;
  write_synthetic_trace(path_, options);
  const std::vector<unsigned char> second = bytes();
  const TraceReader a = TraceReader::from_memory(first, "same.h5");
  const TraceReader b = TraceReader::from_memory(second, "same.h5");
  EXPECT_EQ(a.meta().n_layers, 2);
  EXPECT_EQ(b.meta().n_layers, 1);
  EXPECT_EQ(b.sequence(0).n_tokens, 5);
  EXPECT_EQ(a.read_head(1, 1, Tensor::k, 1).size(), 12u * 8u);
}

TEST_F(ReaderGuards, FromMemoryRejectsWhatIsNotHdf5) {
  const std::vector<unsigned char> text = {'h', 'e', 'l', 'l', 'o', '\n'};
  for (const auto& image : {std::vector<unsigned char>{}, text}) {
    try {
      TraceReader::from_memory(image, "x.h5");
      FAIL() << "no error";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), "x.h5: not an HDF5 file (no HDF5 signature); expected a kvtrace schema v1 file");
    }
  }
  std::vector<unsigned char> image = bytes();
  image.resize(image.size() / 2);
  try {
    TraceReader::from_memory(image, "half.h5");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("half.h5: cannot open HDF5 file, truncated or corrupt (truncated file"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(ReaderGuards, FromMemoryRefusesAGlobalHeapHdf5WouldLoopOn) {
  // An object of index 0 and size 0 in a global heap collection makes HDF5 1.10's decoder
  // loop forever (found by the fuzzer): the image is checked before HDF5 sees it.
  std::vector<unsigned char> image = bytes();
  const unsigned char magic[4] = {'G', 'C', 'O', 'L'};
  const auto at = std::search(image.begin(), image.end(), magic, magic + 4);
  ASSERT_NE(at, image.end());
  std::fill(at + 16, at + 32, 0);  // the first object's header: index, references, size
  try {
    TraceReader::from_memory(image, "heap.h5");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "heap.h5: corrupt HDF5 global heap (variable-length strings) at byte " +
                                         std::to_string(at - image.begin()) + ": its objects do not fit it");
  }
}

TEST_F(ReaderGuards, EmptyVariableLengthStringAttribute) {
  // HDF5 1.10 leaks the heap object of an empty string read through the file's own type;
  // the reader reads through a memory type (ASan's leak check in the sanitizer build).
  mutate([](H5::H5File& f) {
    H5::Group root = f.openGroup("/");
    root.removeAttr("created");
    H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
    type.setCset(H5T_CSET_UTF8);
    root.createAttribute("created", type, H5::DataSpace(H5S_SCALAR)).write(type, std::string());
  });
  EXPECT_EQ(TraceReader(path_).meta().created, "");
}

TEST_F(ReaderGuards, FixedLengthStringAttribute) {
  mutate([](H5::H5File& f) {
    H5::Group root = f.openGroup("/");
    root.removeAttr("model");
    H5::StrType type(H5::PredType::C_S1, 16);
    type.setStrpad(H5T_STR_NULLPAD);
    const char value[16] = {'t', 'i', 'n', 'y'};
    root.createAttribute("model", type, H5::DataSpace(H5S_SCALAR)).write(type, value);
  });
  EXPECT_EQ(TraceReader(path_).meta().model, "tiny");
}

TEST_F(ReaderGuards, SoftLinkRefused) {
  mutate([](H5::H5File& f) {
    f.unlink("/seqs/0/layers/1");
    f.link(H5L_TYPE_SOFT, "/seqs/0/layers/0", "/seqs/0/layers/1");
  });
  expect_error({"/seqs/0/layers/1: ", "is a soft or external link, not a group"});
}

TEST_F(ReaderGuards, ExternalLinkRefusedWithoutOpeningItsTarget) {
  const std::string other = dir_.file("other.h5");
  std::filesystem::copy_file(path_, other);
  mutate([&](H5::H5File& f) {
    f.unlink("/seqs/1/layers/0/q");
    ASSERT_GE(H5Lcreate_external(other.c_str(), "/seqs/1/layers/0/q", f.getId(), "/seqs/1/layers/0/q", H5P_DEFAULT,
                                 H5P_DEFAULT),
              0);
  });
  expect_error({"/seqs/1/layers/0/q: ", "is a soft or external link, not a dataset"});
}

TEST_F(ReaderGuards, ChunksLargerThanTheShapeRefused) {
  // A chunk is allocated whole on every read: a small file must not make HDF5 allocate more
  // than the dataset's own size.
  mutate([](H5::H5File& f) {
    f.unlink("/seqs/0/layers/1/k");
    const hsize_t shape[3] = {2, 12, 8}, max[3] = {H5S_UNLIMITED, H5S_UNLIMITED, H5S_UNLIMITED},
                  chunk[3] = {1, 100000, 8};
    H5::DSetCreatPropList plist;
    plist.setChunk(3, chunk);
    f.createDataSet("/seqs/0/layers/1/k", H5::PredType::IEEE_F32LE, H5::DataSpace(3, shape, max), plist);
  });
  expect_error({"/seqs/0/layers/1/k: ", "chunks larger than the dataset's shape"});
}

TEST_F(ReaderGuards, NonIeeeFloatLayoutRefused) {
  mutate([](H5::H5File& f) {
    f.unlink("/seqs/1/layers/0/v");
    H5::FloatType odd(H5::PredType::IEEE_F32LE);
    odd.setFields(31, 20, 11, 0, 20);
    odd.setEbias(1023);
    const hsize_t shape[3] = {2, 12, 8};
    f.createDataSet("/seqs/1/layers/0/v", odd, H5::DataSpace(3, shape));
  });
  expect_error({"/seqs/1/layers/0/v: ", "is not a float16/float32 dataset"});
}

TEST_F(ReaderGuards, BigEndianFloatsRead) {
  std::vector<float> k(static_cast<size_t>(2 * 12 * 8));
  for (size_t i = 0; i < k.size(); ++i) k[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  mutate([&](H5::H5File& f) {
    f.unlink("/seqs/1/layers/1/k");
    const hsize_t shape[3] = {2, 12, 8};
    f.createDataSet("/seqs/1/layers/1/k", H5::PredType::IEEE_F32BE, H5::DataSpace(3, shape))
        .write(k.data(), H5::PredType::NATIVE_FLOAT);
  });
  const std::vector<float> head = TraceReader(path_).read_head(1, 1, Tensor::k, 1);
  EXPECT_EQ(head, std::vector<float>(k.begin() + 12 * 8, k.end()));
}

TEST_F(ReaderGuards, AbsurdTokenTextWidthRefused) {
  mutate([](H5::H5File& f) {
    f.unlink("/seqs/0/token_text");
    const hsize_t shape[1] = {12};
    f.createDataSet("/seqs/0/token_text", H5::StrType(H5::PredType::C_S1, size_t{1} << 24), H5::DataSpace(1, shape));
  });
  EXPECT_LT(std::filesystem::file_size(path_), 1000000u);
  expect_error({"/seqs/0/token_text: ", "absurd string width 16777216 bytes"});
}

TEST_F(ReaderGuards, FixedWidthTokenText) {
  mutate([](H5::H5File& f) {
    f.unlink("/seqs/1/token_text");
    const hsize_t shape[1] = {12};
    H5::StrType type(H5::PredType::C_S1, 4);
    type.setStrpad(H5T_STR_NULLPAD);
    std::vector<char> text(12 * 4, '\0');
    for (int i = 0; i < 12; ++i) text[static_cast<size_t>(i) * 4] = static_cast<char>('a' + i);
    text[4 * 11 + 1] = 'b', text[4 * 11 + 2] = 'c', text[4 * 11 + 3] = 'd';  // a full-width string
    f.createDataSet("/seqs/1/token_text", type, H5::DataSpace(1, shape)).write(text.data(), type);
  });
  const std::vector<std::string> text = TraceReader(path_).token_text(1);
  ASSERT_EQ(text.size(), 12u);
  EXPECT_EQ(text[0], "a");
  EXPECT_EQ(text[11], "lbcd");
}

// Heads stored as one chunk each are read raw and inflated outside HDF5's lock; every layout
// the writer and others use must read exactly what HDF5's own path reads.
TEST_F(ReaderGuards, OneChunkPerHeadReadsWhatHdf5Reads) {
  std::vector<float> k(static_cast<size_t>(2 * 12 * 8));
  for (size_t i = 0; i < k.size(); ++i) k[i] = 0.125f * static_cast<float>(i % 11) - 0.625f;  // exact in float16
  struct Layout {
    const char* name;
    bool half, chunked, shuffle, deflate, big_endian;
  };
  const Layout layouts[] = {
      {"f16 shuffle+deflate", true, true, true, true, false},
      {"f32 shuffle+deflate", false, true, true, true, false},
      {"f16 deflate", true, true, false, true, false},
      {"f32 deflate", false, true, false, true, false},
      {"f16 no filter", true, true, false, false, false},
      {"f32 no filter", false, true, false, false, false},
      {"f32 shuffle only", false, true, true, false, false},
      {"f32 big-endian deflate", false, true, false, true, true},
      {"f16 contiguous", true, false, false, false, false},
  };
  for (const Layout& layout : layouts) {
    mutate([&](H5::H5File& f) {
      f.unlink("/seqs/1/layers/1/k");
      const hsize_t shape[3] = {2, 12, 8}, chunk[3] = {1, 12, 8};
      H5::DSetCreatPropList plist;
      if (layout.chunked) plist.setChunk(3, chunk);
      if (layout.shuffle) plist.setShuffle();
      if (layout.deflate) plist.setDeflate(4);
      const H5::FloatType half = kvtrace::h5::half_type();
      const H5::DataType& type = layout.half
                                     ? static_cast<const H5::DataType&>(half)
                                     : (layout.big_endian ? H5::PredType::IEEE_F32BE : H5::PredType::IEEE_F32LE);
      f.createDataSet("/seqs/1/layers/1/k", type, H5::DataSpace(3, shape), plist)
          .write(k.data(), H5::PredType::NATIVE_FLOAT);
    });
    const TraceReader reader(path_);
    EXPECT_EQ(reader.read_head(1, 1, Tensor::k, 0), std::vector<float>(k.begin(), k.begin() + 12 * 8)) << layout.name;
    EXPECT_EQ(reader.read_head(1, 1, Tensor::k, 1), std::vector<float>(k.begin() + 12 * 8, k.end())) << layout.name;
  }
}

TEST_F(ReaderGuards, ChunkThatDoesNotInflateIsOneLine) {
  mutate([](H5::H5File& f) {
    f.unlink("/seqs/1/layers/1/k");
    const hsize_t shape[3] = {2, 12, 8}, chunk[3] = {1, 12, 8};
    H5::DSetCreatPropList plist;
    plist.setChunk(3, chunk);
    plist.setShuffle();
    plist.setDeflate(4);
    H5::DataSet k = f.createDataSet("/seqs/1/layers/1/k", H5::PredType::IEEE_F32LE, H5::DataSpace(3, shape), plist);
    std::vector<unsigned char> garbage(40, 0x5a);
    for (hsize_t head = 0; head < 2; ++head) {
      const hsize_t offset[3] = {head, 0, 0};
      ASSERT_GE(H5Dwrite_chunk(k.getId(), H5P_DEFAULT, 0, offset, garbage.size(), garbage.data()), 0);
    }
  });
  try {
    TraceReader(path_).read_head(1, 1, Tensor::k, 1);
    FAIL() << "no error";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find("/seqs/1/layers/1/k: cannot read head 1"), std::string::npos) << message;
    EXPECT_NE(message.find("deflate"), std::string::npos) << message;
  }
}

// An attribute of the wrong type is named in the message.
TEST_F(ReaderGuards, LayerAttributeErrorsNameTheAttribute) {
  for (const char* name : {"sliding_window", "logit_softcap"}) {
    mutate([name](H5::H5File& f) {
      H5::Group layer = f.openGroup("/seqs/0/layers/0");
      for (const char* other : {"sliding_window", "logit_softcap"})
        if (layer.attrExists(other)) layer.removeAttr(other);
      const H5::StrType type(H5::PredType::C_S1, 4);
      layer.createAttribute(name, type, H5::DataSpace(H5S_SCALAR)).write(type, std::string("four"));
    });
    expect_error({"/seqs/0/layers/0: ", std::string("attribute '") + name + "'"});
  }
}
