// Capture of real traces from the llama2.c model: greedy decoding with a recording hook,
// one sequence at a time, written through TraceWriter. See capture.hpp.
#include "kvsim/model/capture.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "kvtrace/error.hpp"

namespace kvtrace {
namespace {

// Records q, k, v and the attention rows of every position, per layer and head, in the
// layouts TraceWriter::write_head takes: [n_tokens * head_dim] and packed rows.
class RecordingHook final : public AttentionHook {
 public:
  RecordingHook(const Llama2Config& config, bool record_attn, std::function<void(int)> on_position)
      : head_dim_(config.head_dim()), record_attn_(record_attn), on_position_(std::move(on_position)) {
    const auto layers = static_cast<size_t>(config.n_layers);
    q_.assign(layers, std::vector<std::vector<float>>(static_cast<size_t>(config.n_heads)));
    k_.assign(layers, std::vector<std::vector<float>>(static_cast<size_t>(config.n_kv_heads)));
    v_ = k_;
    if (record_attn_) attn_ = q_;
  }

  void on_qkv(int layer, int pos, std::span<const float> q, std::span<const float> k,
              std::span<const float> v) override {
    if (layer == 0) {
      positions_ = pos + 1;
      if (on_position_) on_position_(pos);
    }
    append_heads(q_, layer, q);
    append_heads(k_, layer, k);
    append_heads(v_, layer, v);
  }

  void on_attention(int layer, int head, int pos, std::span<const int> positions,
                    std::span<const float> probs) override {
    if (!record_attn_) return;
    // The model attends to all of 0..pos here (this hook restricts nothing).
    if (positions.size() != static_cast<size_t>(pos) + 1)
      throw std::logic_error("capture: attention row does not cover 0..pos");
    auto& row = attn_[static_cast<size_t>(layer)][static_cast<size_t>(head)];
    row.insert(row.end(), probs.begin(), probs.end());
  }

  int positions() const { return positions_; }
  std::span<const float> head(Tensor tensor, int layer, int head) const {
    const auto& all = tensor == Tensor::q ? q_ : tensor == Tensor::k ? k_ : tensor == Tensor::v ? v_ : attn_;
    return all[static_cast<size_t>(layer)][static_cast<size_t>(head)];
  }

 private:
  using PerLayer = std::vector<std::vector<std::vector<float>>>;  // [layer][head][...]
  void append_heads(PerLayer& store, int layer, std::span<const float> values) {
    auto& heads = store[static_cast<size_t>(layer)];
    for (size_t h = 0; h < heads.size(); ++h) {
      const auto first = values.begin() + static_cast<std::ptrdiff_t>(h * static_cast<size_t>(head_dim_));
      heads[h].insert(heads[h].end(), first, first + head_dim_);
    }
  }

  int head_dim_;
  bool record_attn_;
  std::function<void(int)> on_position_;
  int positions_ = 0;
  PerLayer q_, k_, v_, attn_;
};

}  // namespace

std::vector<int> decode_greedy(const Llama2Model& model, std::vector<int> prompt_ids, int total_tokens,
                               bool continue_after_eos, AttentionHook* hook) {
  if (!continue_after_eos) return generate_greedy(model, std::move(prompt_ids), total_tokens, hook);
  const int seq_len = model.config().seq_len;
  if (prompt_ids.empty()) throw std::invalid_argument("decode_greedy: empty prompt");
  if (static_cast<int>(prompt_ids.size()) > seq_len)
    throw InputError("", "",
                     "prompt has " + std::to_string(prompt_ids.size()) + " tokens, more than the model's seq_len " +
                         std::to_string(seq_len));
  const size_t limit = static_cast<size_t>(
      std::max<std::ptrdiff_t>(std::min(total_tokens, seq_len), static_cast<std::ptrdiff_t>(prompt_ids.size())));
  Llama2Session session(model);
  std::vector<int> tokens = std::move(prompt_ids);
  tokens.reserve(limit);
  for (size_t pos = 0; pos < tokens.size(); ++pos) {
    const std::span<const float> logits = session.forward(tokens[pos], hook);
    if (pos + 1 < tokens.size()) continue;  // still in the prompt
    if (tokens.size() >= limit) break;
    tokens.push_back(argmax(logits));  // a BOS is fed too: the model starts a new story
  }
  return tokens;
}

std::string render_text(const Tokenizer& tokenizer, std::span<const int> tokens) {
  std::string out;
  int prev = -1;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int id = tokens[i];
    if (id == Tokenizer::kBos) {
      if (i > 0) out += "\n<s>\n";
    } else if (id != Tokenizer::kEos) {
      out += tokenizer.decode_piece(prev, id);
    }
    prev = id;
  }
  return out;
}

namespace {

struct EncodedPrompt {
  std::vector<int> ids;
  int context_end = 0;     // with a question: where the context's tokens end and the question's begin
  int question_len = -1;   // -1: a plain prompt
  int64_t context_group = -1;
};

EncodedPrompt encode_prompt(const Tokenizer& tokenizer, const CapturePrompt& prompt, size_t index) {
  EncodedPrompt out;
  if (prompt.context.empty() && prompt.question.empty()) {
    out.ids = tokenizer.encode(prompt.text);
    return out;
  }
  const std::string which = "prompt " + std::to_string(index + 1);
  if (prompt.context.empty() || prompt.question.empty())
    throw InputError("", "", which + ": a context needs a question and a question a context, neither empty");
  out.ids = tokenizer.encode(prompt.context);
  out.context_end = static_cast<int>(out.ids.size());
  const std::vector<int> question = tokenizer.encode(prompt.question + "\n", false);
  out.ids.insert(out.ids.end(), question.begin(), question.end());
  out.question_len = static_cast<int>(question.size());
  out.context_group = prompt.context_group;
  return out;
}

SequenceMarks marks_of(const EncodedPrompt& prompt, int64_t n_tokens) {
  SequenceMarks marks;
  if (prompt.question_len < 0) return marks;
  const auto prompt_len = static_cast<int64_t>(prompt.ids.size());
  marks.question_len = prompt.question_len;
  marks.context_group = prompt.context_group;
  marks.spans = {{"context", "context", 1, prompt.context_end}, {"question", "question", prompt.context_end, prompt_len}};
  if (n_tokens > prompt_len) marks.spans.push_back({"answer", "answer", prompt_len, n_tokens});
  return marks;
}

}  // namespace

CaptureSummary capture_trace(const std::string& path, const Llama2Model& model, const Tokenizer& tokenizer,
                             std::span<const std::string> prompts, const CaptureOptions& options,
                             const std::function<void(const CapturedSequence&)>& on_sequence,
                             const std::function<void(int64_t, int64_t)>& progress) {
  std::vector<CapturePrompt> texts;
  for (const std::string& text : prompts) texts.push_back({text, {}, {}});
  return capture_trace(path, model, tokenizer, texts, options, on_sequence, progress);
}

CaptureSummary capture_trace(const std::string& path, const Llama2Model& model, const Tokenizer& tokenizer,
                             std::span<const CapturePrompt> prompts, const CaptureOptions& options,
                             const std::function<void(const CapturedSequence&)>& on_sequence,
                             const std::function<void(int64_t, int64_t)>& progress) {
  const Llama2Config& config = model.config();
  if (prompts.empty()) throw InputError("", "", "no prompts to capture");
  if (options.n_tokens < 1 || options.n_tokens > config.seq_len)
    throw InputError("", "",
                     "tokens per sequence must be in 1.." + std::to_string(config.seq_len) +
                         " (the model's seq_len), not " + std::to_string(options.n_tokens));
  if (tokenizer.vocab_size() < config.vocab_size)
    throw InputError("", "",
                     "the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                         " tokens, fewer than the model's vocabulary of " + std::to_string(config.vocab_size));

  // Encode every prompt first, so a bad one fails before any work is done.
  std::vector<EncodedPrompt> encoded;
  for (size_t i = 0; i < prompts.size(); ++i) {
    encoded.push_back(encode_prompt(tokenizer, prompts[i], i));
    if (static_cast<int>(encoded.back().ids.size()) > options.n_tokens)
      throw InputError("", "",
                       "prompt " + std::to_string(i + 1) + " has " + std::to_string(encoded.back().ids.size()) +
                           " tokens (BOS included), more than the " + std::to_string(options.n_tokens) +
                           " tokens per sequence");
  }

  TraceMeta meta;
  meta.model = options.model_name.empty() ? std::filesystem::path(model.path()).stem().string() : options.model_name;
  meta.source = "capture";
  meta.n_layers = config.n_layers;
  meta.n_heads = config.n_heads;
  meta.n_kv_heads = config.n_kv_heads;
  meta.head_dim = config.head_dim();
  meta.attn_scale = 1.0 / std::sqrt(static_cast<double>(config.head_dim()));
  meta.rope = llama2_rope(config);
  TraceWriter writer(path, meta, options.writer);

  const int64_t total = static_cast<int64_t>(prompts.size()) * options.n_tokens;  // at most
  CaptureSummary summary;
  summary.model = meta.model;
  for (size_t i = 0; i < prompts.size(); ++i) {
    CapturedSequence captured;
    captured.index = static_cast<int>(i);
    captured.prompt = prompts[i].context.empty() ? prompts[i].text : prompts[i].context + "\n" + prompts[i].question;
    captured.prompt_len = static_cast<int>(encoded[i].ids.size());
    const int64_t done = static_cast<int64_t>(i) * options.n_tokens;
    RecordingHook hook(config, options.write_attn, [&](int pos) {
      if (progress) progress(done + pos, total);
    });
    try {
      captured.tokens =
          decode_greedy(model, encoded[i].ids, options.n_tokens, options.continue_after_eos, &hook);
    } catch (const InputError& e) {  // a step that overflows: say which sequence
      throw InputError(e.file(), "sequence " + std::to_string(i), e.problem());
    }
    if (hook.positions() != static_cast<int>(captured.tokens.size()))
      throw std::logic_error("capture: recorded positions differ from the tokens");
    captured.stories_ended = static_cast<int>(
        std::count(captured.tokens.begin() + captured.prompt_len, captured.tokens.end(), Tokenizer::kBos));

    const std::vector<int32_t> ids(captured.tokens.begin(), captured.tokens.end());
    std::vector<std::string> text;
    text.reserve(ids.size());
    for (int32_t id : ids) text.push_back(tokenizer.piece(id));
    const int seq =
        writer.add_sequence(captured.prompt_len, ids, text, marks_of(encoded[i], static_cast<int64_t>(ids.size())));
    LayerContents contents;
    contents.q = contents.k = true;
    contents.v = options.write_v;
    contents.attn = options.write_attn;
    for (int layer = 0; layer < config.n_layers; ++layer) {
      writer.add_layer(seq, layer, contents);
      for (int h = 0; h < config.n_heads; ++h)
        writer.write_head(seq, layer, Tensor::q, h, hook.head(Tensor::q, layer, h));
      for (int h = 0; h < config.n_kv_heads; ++h) {
        writer.write_head(seq, layer, Tensor::k, h, hook.head(Tensor::k, layer, h));
        if (contents.v) writer.write_head(seq, layer, Tensor::v, h, hook.head(Tensor::v, layer, h));
      }
      if (contents.attn)
        for (int h = 0; h < config.n_heads; ++h)
          writer.write_head(seq, layer, Tensor::attn, h, hook.head(Tensor::attn, layer, h));
    }
    ++summary.sequences;
    summary.tokens += static_cast<int64_t>(ids.size());
    if (progress) progress(done + options.n_tokens, total);  // written; a story that ended early counts whole
    if (on_sequence) on_sequence(captured);
  }
  writer.close();
  return summary;
}

}  // namespace kvtrace
