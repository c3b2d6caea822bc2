// kvsim capture: real attention traces from the built-in llama2.c model on the CPU
// (see kvsim/model/capture.hpp). Prints the generated text of every sequence on stdout.
#include <nlohmann/json.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "../cli_common.hpp"
#include "kvsim/model/capture.hpp"

namespace kvsim::cli {
namespace {

namespace fs = std::filesystem;

// One line of a *.jsonl prompts file: {"prompt": TEXT}, or {"context": TEXT, "question":
// TEXT} or {"context": TEXT, "questions": [TEXT, ...]} (a sequence per question, each with the
// context; two or more share a context_group), every string non-empty.
void add_json_prompts(const nlohmann::json& object, const std::string& path, const std::string& where,
                      std::vector<kvtrace::CapturePrompt>& prompts) {
  const auto text = [&](const nlohmann::json& value) { return value.is_string() && !value.get<std::string>().empty(); };
  if (object.is_object() && object.contains("prompt") && text(object["prompt"]) && !object.contains("context")) {
    prompts.push_back({object["prompt"].get<std::string>(), {}, {}});
    return;
  }
  const bool context = object.is_object() && object.contains("context") && text(object["context"]);
  std::vector<std::string> questions;
  if (context && object.contains("question") && text(object["question"]) && !object.contains("questions"))
    questions.push_back(object["question"].get<std::string>());
  else if (context && object.contains("questions") && object["questions"].is_array() && !object.contains("question"))
    for (const nlohmann::json& q : object["questions"]) questions.push_back(text(q) ? q.get<std::string>() : "");
  if (questions.empty() || std::find(questions.begin(), questions.end(), "") != questions.end())
    throw kvtrace::InputError(path, where,
                              "needs a non-empty string \"prompt\", or a \"context\" with a \"question\" or a list "
                              "\"questions\" of non-empty strings");
  int64_t group = -1;
  if (questions.size() > 1) {
    group = 0;
    for (const kvtrace::CapturePrompt& earlier : prompts) group = std::max(group, earlier.context_group + 1);
  }
  for (std::string& q : questions) prompts.push_back({{}, object["context"].get<std::string>(), std::move(q), group});
}

// A prompts file: one prompt per line, taken literally (blank lines and lines starting with
// '#' are skipped). A file named *.jsonl holds one JSON object per line instead
// (add_json_prompts), whose strings may contain newlines and any character.
std::vector<kvtrace::CapturePrompt> read_prompts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw kvtrace::InputError(path, "", "cannot open the prompts file");
  const bool jsonl = fs::path(path).extension() == ".jsonl";
  std::vector<kvtrace::CapturePrompt> prompts;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = "line " + std::to_string(number);
    if (!jsonl) {
      if (line[0] != '#') prompts.push_back({line, {}, {}});
      continue;
    }
    nlohmann::json object;
    try {
      object = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error&) {
      throw kvtrace::InputError(path, where, "not valid JSON (*.jsonl: one {\"prompt\": ...} object per line)");
    }
    add_json_prompts(object, path, where, prompts);
  }
  if (prompts.empty()) throw kvtrace::InputError(path, "", "no prompts in the file");
  return prompts;
}

}  // namespace

int cmd_capture(const std::vector<std::string>& args) {
  kvtrace::CaptureOptions o;
  std::string model_path, tokenizer_path, prompts_file, out, dtype = "float16";
  std::vector<std::string> texts, questions;
  std::string context;
  po::options_description options("capture options");
  options.add_options()("model", po::value(&model_path),
                        "llama2.c checkpoint (default: stories15M.bin in $KVSIM_MODEL_DIR or ~/.cache/kvsim/models)")(
      "tokenizer", po::value(&tokenizer_path), "llama2.c tokenizer.bin (default: tokenizer.bin next to the model)")(
      "prompt,p", po::value(&texts)->composing(), "a prompt (repeat for several sequences)")(
      "context", po::value(&context), "a context, asked each --question in a sequence of its own (spans context, "
      "question and answer; the trace's question_len)")(
      "question", po::value(&questions)->composing(), "a question about --context (repeatable)")(
      "prompts", po::value(&prompts_file),
      "file with one prompt per line ('#' lines skipped), or *.jsonl with {\"prompt\": ...} per line")(
      "tokens,n", po::value(&o.n_tokens)->default_value(o.n_tokens),
      "tokens per sequence, prompt and BOS included (at most the model's seq_len)")(
      "out,o", po::value(&out)->required(), "output trace file")(
      "attn", "also store the softmax rows the model used (packed attn)")("no-v", "do not store values (v)")(
      "dtype", po::value(&dtype)->default_value(dtype), "float16 or float32")(
      "compress", po::value(&o.writer.compression)->default_value(0), "gzip level 0-9 (with shuffle)")(
      "continue-after-eos",
      "when the model ends its story (predicts BOS), feed the BOS and go on with a new "
      "story until --tokens; without it a sequence ends there")(
      "model-name", po::value(&o.model_name), "model name stored in the trace (default: the checkpoint's file stem)");
  add_progress_options(options);
  po::positional_options_description positional;
  po::variables_map vm;
  const std::string usage =
      "(--prompt TEXT ... | --prompts FILE | --context TEXT --question TEXT ...) --out FILE.h5 [options]";
  if (!parse_options("capture", usage, args, options, positional, vm)) return 0;

  const bool asked = vm.count("context") || !questions.empty();
  if (texts.empty() && prompts_file.empty() && !asked)
    bad_option("prompt", "no prompt: give --prompt TEXT (repeatable), --prompts FILE or --context and --question");
  if (!texts.empty() && !prompts_file.empty()) bad_option("prompts", "cannot be combined with --prompt");
  if (asked && (!texts.empty() || !prompts_file.empty()))
    bad_option("context", "cannot be combined with --prompt or --prompts");
  if (asked && (context.empty() || questions.empty() ||
                std::find(questions.begin(), questions.end(), "") != questions.end()))
    bad_option("context", "needs a non-empty text and at least one non-empty --question");
  std::vector<kvtrace::CapturePrompt> prompts;
  for (const std::string& text : texts) prompts.push_back({text, {}, {}});
  for (const std::string& question : questions)
    prompts.push_back({{}, context, question, questions.size() > 1 ? 0 : -1});
  o.writer.dtype = parse_dtype("dtype", dtype);
  if (o.writer.compression < 0 || o.writer.compression > 9) bad_option("compress", "must be 0..9");
  o.write_attn = vm.count("attn") > 0;
  o.write_v = vm.count("no-v") == 0;
  o.continue_after_eos = vm.count("continue-after-eos") > 0;
  if (!prompts_file.empty()) prompts = read_prompts(prompts_file);

  const fs::path dir = default_model_dir();
  if (model_path.empty()) model_path = (dir / "stories15M.bin").string();
  if (tokenizer_path.empty())
    tokenizer_path =
        (vm.count("model") ? fs::path(model_path).parent_path() / "tokenizer.bin" : dir / "tokenizer.bin").string();
  require_model_file(model_path, "model checkpoint", "pass --model and --tokenizer");
  require_model_file(tokenizer_path, "tokenizer", "pass --model and --tokenizer");
  prepare_outputs({model_path, tokenizer_path, prompts_file}, {}, {out});
  const kvtrace::Llama2Model model = kvtrace::Llama2Model::load(model_path);
  const kvtrace::Tokenizer tokenizer =
      kvtrace::Tokenizer::load_for_model(tokenizer_path, model.config().vocab_size, model_path);
  if (o.n_tokens < 1 || o.n_tokens > model.config().seq_len)
    bad_option("tokens", "must be 1.." + std::to_string(model.config().seq_len) + " (the model's seq_len)");

  kvtrace::CaptureSummary summary;
  {
    Progress progress("capture");
    auto print = [&](const kvtrace::CapturedSequence& s) {
      const std::string text = kvtrace::render_text(tokenizer, s.tokens);
      std::printf("--- seq %d: %zu tokens (prompt %d, generated %zu%s)\n%s\n\n", s.index, s.tokens.size(), s.prompt_len,
                  s.tokens.size() - static_cast<size_t>(s.prompt_len),
                  s.stories_ended ? (", " + std::to_string(s.stories_ended) + " story end(s) continued").c_str() : "",
                  text.c_str());
      std::fflush(stdout);
    };
    summary = kvtrace::capture_trace(out, model, tokenizer, prompts, o, print, progress.callback());
  }
  std::printf("wrote %s: %d sequences, %lld tokens, model %s, q k%s%s %s\n", out.c_str(), summary.sequences,
              static_cast<long long>(summary.tokens), summary.model.c_str(), o.write_v ? " v" : "",
              o.write_attn ? " attn" : "", kvtrace::dtype_name(o.writer.dtype));
  return 0;
}

}  // namespace kvsim::cli
