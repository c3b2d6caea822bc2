// --question and --compress-every (docs/semantics.md, section 2) as a user runs them.
#include <gtest/gtest.h>

#include <H5Cpp.h>

#include <cstdint>

#include "../support/cli_checks.hpp"
#include "../support/model_dir.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

const std::string kTrace = std::string(KVSIM_SOURCE_DIR) + "/data/traces/stories15M-8x256.h5";

// The fields of one CSV line (no quoting in these rows).
std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out(1);
  for (char c : line) {
    if (c == ',')
      out.emplace_back();
    else
      out.back() += c;
  }
  return out;
}

std::string line_at(const std::string& text, int index) {
  size_t begin = 0;
  for (int i = 0; i < index; ++i) begin = text.find('\n', begin) + 1;
  return text.substr(begin, text.find('\n', begin) - begin);
}

}  // namespace

TEST(CliQuestion, RecordsTheQuestionAndTheAnswerApart) {
  kvtest::TempDir dir;
  // Sequence 0 has a prompt of 19 tokens: a context of 11, a question of 8; recorded are the
  // question's 8 steps and the answer's 237: 245 steps x 6 layers x 6 heads.
  const auto result =
      kvtest::run_kvsim("sweep " + kTrace + " --policies h2o,snapkv --budgets 20% --seqs 0" +
                        " --mode prefill --question 8 --csv " + dir.file("q.csv") + " --json " + dir.file("q.json"));
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_NE(result.output.find("mean retention over the question's rows"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("mean retention over the answer's rows"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("mode prefill, question 8;"), std::string::npos) << result.output;
  const std::string csv = kvtest::slurp(dir.file("q.csv"));
  const std::string header = line_at(csv, 0);
  EXPECT_NE(header.find(",occupancy_model_union_peak,question_retention_mean,question_retention_min,answer_retention_mean,"
                        "answer_retention_min"),
            std::string::npos)
      << header;
  const auto names = fields(header), row = fields(line_at(csv, 1));
  ASSERT_EQ(names.size(), row.size());
  std::map<std::string, std::string> cell;
  for (size_t i = 0; i < names.size(); ++i) cell[names[i]] = row[i];
  EXPECT_EQ(cell["samples"], "8820");
  // The mean over all rows lies between the question's and the answer's means.
  const double all = std::stod(cell["retention_mean"]), question = std::stod(cell["question_retention_mean"]),
               answer = std::stod(cell["answer_retention_mean"]);
  EXPECT_LE(std::min(question, answer), all + 1e-9);
  EXPECT_GE(std::max(question, answer), all - 1e-9);
  EXPECT_NEAR((8 * question + 237 * answer) / 245, all, 1e-6);
  const std::string json = kvtest::slurp(dir.file("q.json"));
  EXPECT_NE(json.find("\"question_retention\""), std::string::npos);
  EXPECT_NE(json.find("\"answer_retention\""), std::string::npos);
  EXPECT_NE(json.find("\"question\": 8"), std::string::npos);
}

TEST(CliQuestion, ReplayPrintsAndWritesItPerLayer) {
  kvtest::TempDir dir;
  const auto result = kvtest::run_kvsim("replay " + kTrace + " --policy tova --budget 8 --seqs 0,1 --mode prefill" +
                                        " --question 8 --csv " + dir.file("r.csv"));
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_NE(result.output.find("mode prefill, question 8\n"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("question rows: retention mean "), std::string::npos) << result.output;
  const std::string csv = kvtest::slurp(dir.file("r.csv"));
  EXPECT_NE(line_at(csv, 0).find(",occupancy_mean,question_retention_mean,question_retention_min,"
                                 "answer_retention_mean,answer_retention_min"),
            std::string::npos)
      << csv;
  EXPECT_EQ(kvtest::count_lines(csv), 1 + 6 + 1);  // six layers and "all"
  EXPECT_EQ(fields(line_at(csv, 7)).size(), fields(line_at(csv, 0)).size());
}

TEST(CliQuestion, WithoutItTheColumnsAreThoseOfBefore) {
  kvtest::TempDir dir;
  const auto result = kvtest::run_kvsim("sweep " + kTrace + " --policies h2o --budgets 20% --seqs 0 --mode prefill" +
                                        " --csv " + dir.file("p.csv"));
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_EQ(kvtest::slurp(dir.file("p.csv")).find("question"), std::string::npos);
  EXPECT_EQ(result.output.find("question"), std::string::npos);
}

TEST(CliQuestion, AutoReadsTheSequencesQuestionLen) {
  kvtest::TempDir dir;
  const std::string trace = dir.file("t.h5");
  ASSERT_EQ(
      kvtest::run_kvsim("synth " + trace + " --layers 1 --heads 2 --kv-heads 1 --tokens 64 --seqs 2 --prompt-len 40")
          .code,
      0);
  kvtest::expect_one_line_error("sweep " + trace + " --policies h2o --budgets 8 --mode prefill --question auto");
  {
    H5::H5File file(trace, H5F_ACC_RDWR);
    for (const char* seq : {"/seqs/0", "/seqs/1"}) {
      H5::Group group = file.openGroup(seq);
      const int64_t value = 12;
      group.createAttribute("question_len", H5::PredType::STD_I64LE, H5::DataSpace(H5S_SCALAR))
          .write(H5::PredType::NATIVE_INT64, &value);
    }
  }
  const std::string common = "sweep " + trace + " --policies h2o,snapkv,tova --budgets 8,16 --mode prefill --csv ";
  ASSERT_EQ(kvtest::run_kvsim(common + dir.file("auto.csv") + " --question auto").code, 0);
  ASSERT_EQ(kvtest::run_kvsim(common + dir.file("twelve.csv") + " --question 12").code, 0);
  EXPECT_EQ(kvtest::slurp(dir.file("auto.csv")), kvtest::slurp(dir.file("twelve.csv")));
}

TEST(CliCompressEvery, PeakOccupancyIsBPlusN) {
  kvtest::TempDir dir;
  // B = 20% of 256 = 51; compressed back to 51 every 16 steps: a step attends at most 67.
  for (const char* mode : {"stream", "prefill"}) {
    const auto result = kvtest::run_kvsim("sweep " + kTrace + " --policies recent,h2o,oracle --budgets 20% --seqs 0" +
                                          " --compress-every 16 --mode " + mode + " --csv " + dir.file("c.csv"));
    ASSERT_EQ(result.code, 0) << result.output;
    EXPECT_NE(result.output.find("peak occupancy"), std::string::npos) << result.output;
    EXPECT_NE(result.output.find(", compress every 16;"), std::string::npos) << result.output;
    const std::string csv = kvtest::slurp(dir.file("c.csv"));
    const auto names = fields(line_at(csv, 0));
    for (int r = 1; r <= 3; ++r) {
      const auto row = fields(line_at(csv, r));
      for (size_t i = 0; i < names.size(); ++i) {
        if (names[i] == "occupancy_peak") {
          EXPECT_EQ(row[i], "67") << mode << " " << row[0];
        }
      }
    }
  }
}

TEST(CliProtocols, SameBytesWhateverTheThreadCount) {
  kvtest::TempDir dir;
  const auto one = kvtest::expect_same_whatever_threads(
      "sweep " + kTrace +
          " --policies h2o,snapkv,tova,oracle,scissorhands --budgets 8,20% --seqs 0,4 --mode prefill --question 8"
          " --compress-every 4 ",
      dir, 2, {"csv", "json"});
  ASSERT_EQ(one.code, 0) << one.output;
}

TEST(CliCompressEvery, TheClosedLoopCompressesEveryNToo) {
  if (!kvtest::have_model()) GTEST_SKIP() << "stories15M not found in " << kvtest::model_dir();
  kvtest::TempDir dir;
  // 96 tokens, B = 30% = 28: both runs (closed loop and its replay) attend at most 28 + 8.
  const auto result = kvtest::run_kvsim("eval --trace " + kTrace + " --seqs 0 --tokens 96 --policies h2o" +
                                        " --budgets 30% --compress-every 8 --csv " + dir.file("e.csv"));
  ASSERT_EQ(result.code, 0) << result.output;
  const std::string csv = kvtest::slurp(dir.file("e.csv"));
  const auto names = fields(line_at(csv, 0)), row = fields(line_at(csv, 1));
  ASSERT_EQ(names.size(), row.size());
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == "occupancy_peak") {
      EXPECT_EQ(row[i], "36");
    }
  }
  kvtest::expect_one_line_error("eval --trace " + kTrace + " --seqs 0 --tokens 96 --compress-every 0");
}

TEST(CliProtocols, BadCombinationsAreOneLineExitTwo) {
  const std::string sweep = "sweep " + kTrace + " --policies h2o --budgets 20% --seqs 0 ";
  auto expect = [&](const std::string& args, const std::string& words) {
    const auto result = kvtest::expect_one_line_error(sweep + args);
    EXPECT_NE(result.output.find(words), std::string::npos) << args << "\n" << result.output;
  };
  expect("--question 8", "--question: needs --mode prefill");
  expect("--mode prefill --question 19", "/seqs/0: --question 19 is not shorter than the prompt (prompt_len 19)");
  expect("--mode prefill --question 0", "--question: must be at least 1");
  expect("--mode prefill --question x", "--question: 'x' is not a token count or auto");
  expect("--mode prefill --question auto", "/seqs/0: --question auto: the sequence has no question_len attribute");
  expect("--compress-every 0", "--compress-every: must be at least 1");
  expect("--compress-every -3", "--compress-every");
  const auto replay = kvtest::expect_one_line_error("replay " + kTrace + " --policy h2o --budget 20% --question 4");
  EXPECT_NE(replay.output.find("--mode prefill"), std::string::npos) << replay.output;
}
