// Hostile checkpoints for kvsim eval and capture: non-finite weights, finite weights whose
// forward pass overflows, weights larger than memory or than the address space allowed, and a
// tokenizer of another vocabulary. Each run builds its tiny checkpoint and byte tokenizer,
// runs the CLI and checks the exit code, the one line and that no output was written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "../support/cli_checks.hpp"
#include "../support/llama2_files.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

// dim 8, hidden 16, 2 layers, 2 heads over 1 kv head, the 259 tokens of the byte tokenizer,
// seq_len 32; a negative vocab adds an unshared classifier.
std::vector<int32_t> tiny_header(int32_t vocab = 259) { return {8, 16, 2, 2, 1, vocab, 32}; }

// Where each tensor the forward pass reads starts among the weights, in llama2.c's order.
int64_t offset_of(const std::vector<int32_t>& header, const std::string& tensor) {
  const int64_t dim = header[0], hidden = header[1], layers = header[2], kv_dim = header[4] * (dim / header[3]);
  const int64_t vocab = header[5] < 0 ? -int64_t{header[5]} : header[5], seq_len = header[6];
  const std::vector<std::pair<std::string, int64_t>> sizes = {{"token_embedding_table", vocab * dim},
                                                              {"rms_att_weight", layers * dim},
                                                              {"wq", layers * dim * dim},
                                                              {"wk", layers * kv_dim * dim},
                                                              {"wv", layers * kv_dim * dim},
                                                              {"wo", layers * dim * dim},
                                                              {"rms_ffn_weight", layers * dim},
                                                              {"w1", layers * hidden * dim},
                                                              {"w2", layers * dim * hidden},
                                                              {"w3", layers * hidden * dim},
                                                              {"rms_final_weight", dim},
                                                              {"freq_cis", seq_len * (dim / header[3])},
                                                              {"wcls", vocab * dim}};
  int64_t offset = 0;
  for (const auto& [name, size] : sizes) {
    if (name == tensor) return offset;
    offset += size;
  }
  ADD_FAILURE() << "no tensor " << tensor;
  return 0;
}

class HostileEval : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = dir_.file("tokenizer.bin");
    kvtest::write_byte_tokenizer(tokenizer_, {});
    text_ = dir_.file("story.txt");
    std::ofstream(text_) << "Once upon a time there was a cat.\n";
    csv_ = dir_.file("out.csv");
    trace_ = dir_.file("out.h5");
  }
  std::vector<float> weights(const std::vector<int32_t>& header) const {
    return kvtest::normal_weights(static_cast<size_t>(kvtest::llama2_floats(header.data())), 11);
  }
  std::string write(const std::string& name, const std::vector<int32_t>& header, const std::vector<float>& w) const {
    const std::string path = dir_.file(name);
    kvtest::write_llama2(path, header.data(), w);
    return path;
  }
  // A checkpoint of `header` whose weights are a hole in a sparse file: its size matches the
  // header, but nothing is written. Empty where the file system cannot make one.
  std::string sparse(const std::string& name, const std::vector<int32_t>& header) const {
    const std::string path = write(name, header, {});
    std::error_code ec;
    fs::resize_file(path, static_cast<uintmax_t>(28 + 4 * kvtest::llama2_floats(header.data())), ec);
    return ec ? std::string() : path;
  }
  std::string eval(const std::string& model) const {
    return "eval " + model + " --tokenizer " + tokenizer_ + " --text " + text_ +
           " --tokens 16 --policies recent --budgets 50% --csv " + csv_;
  }
  std::string capture(const std::string& model) const {
    return "capture --model " + model + " --tokenizer " + tokenizer_ + " --prompt Once --tokens 8 --out " + trace_;
  }
  // Exit 2, one line holding every fragment, no output file left.
  void expect_refused(const std::string& args, const std::vector<std::string>& fragments,
                      const std::string& env = "") const {
    const kvtest::CliResult result = kvtest::expect_one_line_error(args, env);
    for (const std::string& fragment : fragments)
      EXPECT_NE(result.output.find(fragment), std::string::npos) << fragment << "\n" << result.output;
    EXPECT_FALSE(fs::exists(csv_)) << args;
    EXPECT_FALSE(fs::exists(trace_)) << args;
  }
  kvtest::TempDir dir_;
  std::string tokenizer_, text_, csv_, trace_;
};

TEST_F(HostileEval, TheTinyCheckpointRuns) {
  const std::string model = write("ok.bin", tiny_header(), weights(tiny_header()));
  const kvtest::CliResult result = kvtest::run_kvsim(eval(model));
  EXPECT_EQ(result.code, 0) << result.output;
  EXPECT_TRUE(fs::exists(csv_));
}

TEST_F(HostileEval, NonFiniteWeightIsRefusedWhenTheCheckpointLoads) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    const char* tensor;
    int64_t index;  // in the tensor, layers one after the other
    float value;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"rms_att_weight", 3, inf, "tensor rms_att_weight (layer 0) holds inf at index 3"},
      {"rms_final_weight", 7, inf, "tensor rms_final_weight holds inf at index 7"},
      {"token_embedding_table", 8 * 100 + 5, -inf, "tensor token_embedding_table holds -inf at index 805"},
      {"w2", 128 + 9, nan, "tensor w2 (layer 1) holds nan at index 9"},
  };
  for (const Case& c : cases) {
    std::vector<float> w = weights(tiny_header());
    w[static_cast<size_t>(offset_of(tiny_header(), c.tensor) + c.index)] = c.value;
    const std::string model = write(std::string(c.tensor) + ".bin", tiny_header(), w);
    expect_refused(eval(model), {model + ": ", c.expected});
    expect_refused(capture(model), {model + ": ", c.expected});
  }
  // The unused RoPE tables of the format are not read, so not checked.
  std::vector<float> w = weights(tiny_header());
  w[static_cast<size_t>(offset_of(tiny_header(), "freq_cis"))] = nan;
  EXPECT_EQ(kvtest::run_kvsim(eval(write("freq.bin", tiny_header(), w))).code, 0);
}

TEST_F(HostileEval, FiniteWeightsWhoseForwardPassOverflowsStopTheRun) {
  std::vector<float> huge_embeddings = weights(tiny_header());
  for (int64_t i = 0; i < 259 * 8; ++i) huge_embeddings[static_cast<size_t>(i)] *= 1e30f;
  const std::string embeddings = write("embeddings.bin", tiny_header(), huge_embeddings);
  // BOS (id 1) first: its embedding's squares overflow before the first norm.
  const std::vector<std::string> expected = {embeddings + ": sequence 0: position 0 (token 1): ",
                                             "layer 0's attention RMSNorm has mean square inf"};
  expect_refused(eval(embeddings), expected);
  expect_refused(capture(embeddings), {embeddings + ": sequence 0: position 0 (token 1): ", expected[1]});

  // An unshared classifier of huge weights: the hidden state is fine, the logits are not.
  const std::vector<int32_t> unshared = tiny_header(-259);
  std::vector<float> huge_classifier = weights(unshared);
  const auto final_norm = static_cast<size_t>(offset_of(unshared, "rms_final_weight"));
  for (size_t i = final_norm; i < final_norm + 8; ++i) huge_classifier[i] = 1e10f;
  for (size_t i = static_cast<size_t>(offset_of(unshared, "wcls")); i < huge_classifier.size(); ++i)
    huge_classifier[i] = 3e38f;
  const std::string classifier = write("classifier.bin", unshared, huge_classifier);
  expect_refused(eval(classifier), {classifier + ": sequence 0: position 0 (token 1): logit 0 is "});
}

// A sparse file: its size matches the header, but the weights could never be held.
TEST_F(HostileEval, CheckpointLargerThanMemoryIsRefusedBeforeAllocating) {
  const std::vector<int32_t> header = {8192, 32768, 1024, 64, 8, 32000, 4096};  // 3.9 TB of weights
  const int64_t bytes = 28 + 4 * kvtest::llama2_floats(header.data());
  const std::string model = sparse("huge.bin", header);
  if (model.empty()) GTEST_SKIP() << "no sparse file of " << bytes << " bytes here";
  const std::string asked = "cannot hold the weights: " + std::to_string(bytes - 28) + " bytes";
  expect_refused(eval(model), {model + ": ", asked, "more than this machine's"});
  expect_refused(capture(model), {model + ": ", asked});
}

// Under an address-space limit, a checkpoint that fits in memory still cannot be allocated.
TEST_F(HostileEval, WeightsBeyondTheAddressSpaceLimitAreOneLine) {
  const std::vector<int32_t> header = {1024, 4096, 64, 16, 16, 32000, 256};  // 4.4 GB of weights
  const int64_t bytes = 28 + 4 * kvtest::llama2_floats(header.data());
  const std::string model = sparse("big.bin", header);
  if (model.empty()) GTEST_SKIP() << "no sparse file of " << bytes << " bytes here";
  // run_kvsim's shell sets the limit (2 GB) for the kvsim it then starts.
  auto run_limited = [](const std::string& args) { return kvtest::run_kvsim(args, "ulimit -v 2000000;"); };
  const std::string asked = "cannot hold the weights: " + std::to_string(bytes - 28) + " bytes";
  for (const std::string& args : {eval(model), capture(model)}) {
    const kvtest::CliResult result = run_limited(args);
    EXPECT_EQ(result.code, 2) << result.output;
    EXPECT_EQ(kvtest::count_lines(result.output), 1) << result.output;
    EXPECT_NE(result.output.find(model + ": " + asked), std::string::npos) << result.output;
    EXPECT_FALSE(fs::exists(csv_));
    EXPECT_FALSE(fs::exists(trace_));
  }
}

TEST_F(HostileEval, CheckpointAndTokenizerOfDifferentVocabulariesNameBoth) {
  std::vector<std::pair<std::string, float>> pieces;
  for (int i = 259; i < 32000; ++i) pieces.emplace_back(std::to_string(i), -1.0f);
  kvtest::write_byte_tokenizer(tokenizer_, pieces);
  const std::string model = write("vocab100.bin", tiny_header(100), weights(tiny_header(100)));
  const std::vector<std::string> expected = {
      model + ": the checkpoint's vocab_size (100) does not match the tokenizer's (32000 tokens in " + tokenizer_ +
      ")"};
  expect_refused(eval(model), expected);
  expect_refused(capture(model), expected);
}

}  // namespace
