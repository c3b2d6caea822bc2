#pragma once
// Capture of real attention traces from the built-in llama2.c model (`kvsim capture`).
//
// For every prompt: encode it with BOS, decode greedily (argmax, as llama2.c's run.c at
// temperature 0) up to a total number of tokens, and record at every position of prompt and
// generation, through an AttentionHook, each layer's post-RoPE q and k, v, and optionally the
// softmax rows the model used (packed causal `attn`). Each prompt becomes one schema-v1
// sequence with its token ids and token text (Tokenizer::piece). One sequence is held in
// memory at a time; the file is written under a temporary name and renamed when complete.
//
// End of story: llama2.c models mark the start of every training story with BOS (id 1) and
// run.c stops when the model predicts BOS. With continue_after_eos the predicted BOS is fed
// like any other token (the training data concatenates stories, so the model then starts a
// new story) and decoding goes on until the sequence holds n_tokens tokens.
//
// Deterministic: the same model, prompts and options give the same tokens and, with
// SOURCE_DATE_EPOCH set (it pins the `created` attribute), the same file bytes.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kvsim/model/llama2.hpp"
#include "kvsim/model/tokenizer.hpp"
#include "kvtrace/writer.hpp"

namespace kvtrace {

struct CaptureOptions {
  int n_tokens = 256;               // tokens per sequence, prompt (with BOS) included; at most seq_len
  bool continue_after_eos = false;  // feed a predicted BOS and keep decoding (see above)
  bool write_v = true;              // values
  bool write_attn = false;          // the softmax rows the model used, packed
  WriterOptions writer;             // dtype (float16/float32) and gzip level
  std::string model_name;           // root attr `model`; empty: the checkpoint's file stem
};

// One sequence's prompt: its text, or a context and a question. A context and a question are
// tokenized apart and joined as kvpress's pipeline joins them for a model without a chat
// template (kvpress/pipeline.py, KVPressTextGenerationPipeline.preprocess): BOS and the
// context, then the question with "\n" appended, without BOS. The sequence then has
// question_len (the question's tokens) and the spans "context" (its tokens after BOS),
// "question" and "answer" (the generated tokens).
struct CapturePrompt {
  std::string text;  // when context is empty
  std::string context, question;
  int64_t context_group = -1;  // the prompts of one context asked several questions share one (>= 0)
};

struct CapturedSequence {
  int index = 0;
  std::string prompt;        // the text, or the context, a newline and the question
  std::vector<int> tokens;  // BOS, the prompt's tokens, then the generated ones
  int prompt_len = 0;       // prompt tokens, BOS included
  int stories_ended = 0;    // BOS predicted after the prompt (each one ends a story)
};

struct CaptureSummary {
  int sequences = 0;
  int64_t tokens = 0;
  std::string model;
};

// Greedy decoding with an optional continuation past the end of a story. Without
// continue_after_eos this is exactly generate_greedy(). Returns the fed tokens; the hook has
// seen positions 0..result.size()-1. Throws like generate_greedy().
std::vector<int> decode_greedy(const Llama2Model& model, std::vector<int> prompt_ids, int total_tokens,
                               bool continue_after_eos, AttentionHook* hook = nullptr);

// The text of a token sequence as run.c prints it, except that a BOS after the first token
// (the model starting a new story) is shown as "\n<s>\n" so story boundaries stay visible.
std::string render_text(const Tokenizer& tokenizer, std::span<const int> tokens);

// Writes one sequence per prompt to `path`. on_sequence is called after each sequence is
// written (for printing the generated text); progress(done, total) counts tokens decoded.
// Throws InputError for an empty prompt list, a prompt longer than n_tokens or seq_len,
// bad options, or a file that cannot be written; nothing is left at `path` on failure.
CaptureSummary capture_trace(const std::string& path, const Llama2Model& model, const Tokenizer& tokenizer,
                             std::span<const CapturePrompt> prompts, const CaptureOptions& options,
                             const std::function<void(const CapturedSequence&)>& on_sequence = {},
                             const std::function<void(int64_t, int64_t)>& progress = {});
// Each prompt as its text.
CaptureSummary capture_trace(const std::string& path, const Llama2Model& model, const Tokenizer& tokenizer,
                             std::span<const std::string> prompts, const CaptureOptions& options,
                             const std::function<void(const CapturedSequence&)>& on_sequence = {},
                             const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace kvtrace
