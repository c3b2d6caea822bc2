#pragma once
// A fixture holding the real stories15M model and its tokenizer (scripts/fetch-model.sh),
// loaded once per test suite; without them its tests are skipped, saying where they were
// looked for.
#include <gtest/gtest.h>

#include <memory>

#include "kvsim/model/llama2.hpp"
#include "kvsim/model/tokenizer.hpp"
#include "model_dir.hpp"

namespace kvtest {

class Stories15MTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_model()) return;
    model_ =
        std::make_unique<kvtrace::Llama2Model>(kvtrace::Llama2Model::load((model_dir() / "stories15M.bin").string()));
    tok_ = std::make_unique<kvtrace::Tokenizer>(
        kvtrace::Tokenizer::load((model_dir() / "tokenizer.bin").string(), model_->config().vocab_size));
  }
  static void TearDownTestSuite() {
    model_.reset();
    tok_.reset();
  }
  void SetUp() override {
    if (!model_)
      GTEST_SKIP() << "stories15M not found in " << model_dir()
                   << " (run scripts/fetch-model.sh or set KVSIM_MODEL_DIR)";
  }
  static inline std::unique_ptr<kvtrace::Llama2Model> model_;
  static inline std::unique_ptr<kvtrace::Tokenizer> tok_;
};

}  // namespace kvtest
