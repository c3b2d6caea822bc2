// The optional RoPE attributes of the root group (docs/traces.md): written when declared,
// read back as written, absent as zero, and refused with one line when out of range.
#include <gtest/gtest.h>

#include <H5Cpp.h>

#include <string>
#include <vector>

#include "../support/temp_dir.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/writer.hpp"

using namespace kvtrace;

namespace {

std::string write_trace(const kvtest::TempDir& dir, const RopeMeta& rope) {
  TraceMeta meta;
  meta.model = "rope-test";
  meta.n_layers = meta.n_heads = meta.n_kv_heads = 1;
  meta.head_dim = 4;
  meta.rope = rope;
  const std::string path = dir.file("rope.h5");
  TraceWriter writer(path, meta, WriterOptions{DType::f32, 0});
  const std::vector<int32_t> tokens = {1, 2};
  writer.add_sequence(1, tokens);
  writer.add_layer(0, 0, LayerContents{true, true, false, false});
  const std::vector<float> head = {1, 0, 0, 1, 0, 1, 1, 0};
  writer.write_head(0, 0, Tensor::q, 0, head);
  writer.write_head(0, 0, Tensor::k, 0, head);
  writer.close();
  return path;
}

template <class T>
void replace_root_attr(const std::string& path, const std::string& name, const H5::PredType& type, T value) {
  H5::H5File file(path, H5F_ACC_RDWR);
  H5::Group root = file.openGroup("/");
  if (root.attrExists(name)) root.removeAttr(name);
  root.createAttribute(name, type, H5::DataSpace(H5S_SCALAR)).write(type, &value);
}

std::string open_error(const std::string& path) {
  try {
    TraceReader reader(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(RopeAttrs, RoundTripAndAbsent) {
  kvtest::TempDir dir;
  RopeMeta rope;
  rope.theta = 500000;
  rope.scaling_type = "llama3";
  rope.scaling_factor = 8;
  rope.rotary_dims = 4;
  rope.pairing = "half";
  const RopeMeta read = TraceReader(write_trace(dir, rope)).meta().rope;
  EXPECT_EQ(read.theta, 500000);
  EXPECT_EQ(read.scaling_type, "llama3");
  EXPECT_EQ(read.scaling_factor, 8);
  EXPECT_EQ(read.rotary_dims, 4);
  EXPECT_EQ(read.pairing, "half");
  EXPECT_EQ(read.describe(), "theta=500000 scaling=llama3 factor=8 rotary_dims=4 pairing=half");

  kvtest::TempDir bare;
  const RopeMeta none = TraceReader(write_trace(bare, {})).meta().rope;
  EXPECT_FALSE(none.declared());
  EXPECT_EQ(none.describe(), "");
}

TEST(RopeAttrs, OutOfRangeIsOneLine) {
  kvtest::TempDir dir;
  const std::string path = write_trace(dir, {});
  replace_root_attr(path, "rotary_dims", H5::PredType::NATIVE_INT64, int64_t{3});
  EXPECT_NE(open_error(path).find("/: attribute 'rotary_dims' must be even and in [2, head_dim = 4]"),
            std::string::npos)
      << open_error(path);
  replace_root_attr(path, "rotary_dims", H5::PredType::NATIVE_INT64, int64_t{6});
  EXPECT_NE(open_error(path).find("'rotary_dims' must be even"), std::string::npos) << open_error(path);
  replace_root_attr(path, "rotary_dims", H5::PredType::NATIVE_INT64, int64_t{2});
  EXPECT_EQ(open_error(path), "");
  replace_root_attr(path, "rope_theta", H5::PredType::NATIVE_DOUBLE, -1.0);
  EXPECT_NE(open_error(path).find("'rope_theta' must be a positive finite number"), std::string::npos);
  replace_root_attr(path, "rope_theta", H5::PredType::NATIVE_DOUBLE, 1e4);
  replace_root_attr(path, "rope_scaling_factor", H5::PredType::NATIVE_DOUBLE, 0.0);
  EXPECT_NE(open_error(path).find("'rope_scaling_factor' must be a positive finite number"), std::string::npos);
}

TEST(RopeAttrs, FrequenciesMustTurnByFiniteNonZeroAngles) {
  // Positive and finite is not enough: w_0 = 1 / factor = 1e306 turns position 180 by an
  // infinite angle; w_1 = 1e300^(-1/2) / 1e300 underflows to 0 (head_dim 4: pairs 0 and 1).
  kvtest::TempDir dir;
  const std::string path = write_trace(dir, {});
  replace_root_attr(path, "rope_theta", H5::PredType::NATIVE_DOUBLE, 1e4);
  replace_root_attr(path, "rope_scaling_factor", H5::PredType::NATIVE_DOUBLE, 1e-306);
  EXPECT_NE(open_error(path).find("/: attribute 'rope_scaling_factor' (1e-306) with rope_theta 10000 makes the RoPE "
                                  "angle of pair 0 (frequency 1e+306) infinite within the 1048576 positions"),
            std::string::npos)
      << open_error(path);
  replace_root_attr(path, "rope_theta", H5::PredType::NATIVE_DOUBLE, 1e300);
  replace_root_attr(path, "rope_scaling_factor", H5::PredType::NATIVE_DOUBLE, 1e300);
  EXPECT_NE(open_error(path).find("'rope_scaling_factor' (1e+300) with rope_theta 1e+300 makes the RoPE frequency of "
                                  "pair 1 zero"),
            std::string::npos)
      << open_error(path);
  // theta below 1 makes the higher pairs the fast ones: 1e-300^(-1/2) = 1e150 is still finite.
  replace_root_attr(path, "rope_scaling_factor", H5::PredType::NATIVE_DOUBLE, 8.0);
  replace_root_attr(path, "rope_theta", H5::PredType::NATIVE_DOUBLE, 1e-300);
  EXPECT_EQ(open_error(path), "");
  replace_root_attr(path, "rope_theta", H5::PredType::NATIVE_DOUBLE, 5e5);
  EXPECT_EQ(open_error(path), "");
  // Without rope_theta pair 0 still turns by 1 / factor; the writer refuses what the reader would.
  kvtest::TempDir other;
  RopeMeta rope;
  rope.scaling_factor = 1e-306;
  try {
    write_trace(other, rope);
    ADD_FAILURE() << "written";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("with rope_theta undeclared makes the RoPE angle of pair 0"),
              std::string::npos)
        << e.what();
  }
}

TEST(RopeAttrs, WriterRefusesWhatTheReaderWould) {
  kvtest::TempDir dir;
  RopeMeta rope;
  rope.rotary_dims = 5;
  EXPECT_THROW(write_trace(dir, rope), InputError);
}

}  // namespace
