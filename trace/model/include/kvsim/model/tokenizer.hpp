#pragma once
// The tokenizer of Karpathy's llama2.c: its tokenizer.bin format and its BPE encode/decode.
//
// File format (little-endian): int32 max_token_length, then for every token id in order:
// float32 score, int32 byte length, the piece's bytes (no terminator). The file does not say
// how many tokens it holds; pass the model's vocab_size, or -1 to read entries up to the end.
//
// encode() is llama2.c's encode(): optional BOS (id 1), a dummy-prefix " " piece when the text
// is not empty, one piece per UTF-8 codepoint (a codepoint missing from the vocabulary falls
// back to byte tokens, id = byte + 3), then repeatedly merge the adjacent pair whose
// concatenation is the best-scoring piece (ties: the leftmost pair), optional EOS (id 2).
// decode() is llama2.c's decode(): a piece following BOS loses its leading space, and byte
// tokens turn into their raw byte.
//
// Byte tokens: Llama-style vocabularies hold the 256 byte-fallback tokens at ids 3..258.
// Current llama2.c exports write them as "<0xHH>"; older exports (like the one bundled with
// stories15M) wrote chr(byte) UTF-8-encoded, which collides with ordinary pieces such as "!"
// and mangles bytes >= 0x80. Both layouts are recognised at load time, and byte tokens are
// then handled as SentencePiece does: they decode to their raw byte, they are never the
// result of a codepoint lookup or of a merge, and they never merge. With a current-format
// file this gives exactly llama2.c's ids (it only differs on text that literally spells
// "<0xHH>"); with the older file it gives the ids SentencePiece gives. The control pieces
// <unk>, BOS and EOS (ids 0..2) are likewise never produced from text.
// Text is taken as raw bytes; it may contain NUL (which then falls back to byte token 3).
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvtrace {

class Tokenizer {
 public:
  static constexpr int kUnk = 0;
  static constexpr int kBos = 1;
  static constexpr int kEos = 2;

  // Reads tokenizer.bin. vocab_size: the model's (the file must hold at least that many
  // entries; extra entries are ignored), or -1 to read every entry in the file.
  // Throws InputError(path, "", problem) for a missing, short or malformed file.
  static Tokenizer load(const std::string& path, int vocab_size = -1);
  // Reads every entry of tokenizer.bin for the checkpoint at model_path, whose vocabulary has
  // vocab_size tokens. The two must agree: a different count throws InputError(model_path,
  // "", problem) naming both files and both counts (a malformed file still throws as load).
  static Tokenizer load_for_model(const std::string& path, int vocab_size, const std::string& model_path);

  int vocab_size() const { return static_cast<int>(pieces_.size()); }
  int max_token_length() const { return max_token_length_; }
  float score(int id) const { return scores_.at(static_cast<std::size_t>(id)); }

  // Display text of a token: the stored piece (SentencePiece's '▁' already a space), or
  // "<0xHH>" for byte tokens, so every piece is valid UTF-8 when the vocabulary is.
  // Throws std::out_of_range for an id outside [0, vocab_size).
  std::string piece(int id) const;
  bool is_byte_token(int id) const { return has_byte_tokens_ && id >= 3 && id < 3 + 256; }

  std::vector<int> encode(std::string_view text, bool bos = true, bool eos = false) const;

  // llama2.c's decode(prev_token, token): the bytes that token adds after prev_token.
  std::string decode_piece(int prev_token, int token) const;
  // Concatenation of decode_piece over ids (the first id has no predecessor). BOS and EOS
  // add no text of their own (run.c never prints the BOS it starts from and stops at BOS),
  // but a piece after BOS still loses its leading space, so decode(encode(s)) == s.
  std::string decode(std::span<const int> ids) const;

 private:
  Tokenizer() = default;
  int lookup(const std::string& piece) const;  // -1 when absent

  int max_token_length_ = 0;
  bool has_byte_tokens_ = false;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int> index_;  // ordinary pieces (not byte/control) -> id
};

}  // namespace kvtrace
