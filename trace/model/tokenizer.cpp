// llama2.c's tokenizer: reading tokenizer.bin, BPE encode, decode. See tokenizer.hpp.
#include "kvsim/model/tokenizer.hpp"

#include <cstdint>
#include <cstdio>
#include <queue>
#include <fstream>
#include <stdexcept>

#include "kvtrace/error.hpp"

namespace kvtrace {
namespace {

constexpr int kMaxTokenLength = 1 << 16;  // far above any real vocabulary (llama: 27)
constexpr int kMaxVocab = 1 << 22;

// "<0xHH>" (SentencePiece's byte piece, upper-case hex) -> 0..255, else -1.
int parse_byte_piece(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(piece[3]), lo = hex(piece[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

// chr(b) encoded as UTF-8: how older llama2.c exports wrote byte token b.
std::string latin1_as_utf8(int b) {
  if (b < 0x80) return std::string(1, static_cast<char>(b));
  return {static_cast<char>(0xC0 | (b >> 6)), static_cast<char>(0x80 | (b & 0x3F))};
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& path, int vocab_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open tokenizer file");
  if (vocab_size == 0 || vocab_size < -1 || vocab_size > kMaxVocab)
    throw InputError(path, "", "invalid vocabulary size " + std::to_string(vocab_size));

  Tokenizer t;
  std::int32_t max_len = 0;
  if (!in.read(reinterpret_cast<char*>(&max_len), sizeof max_len))
    throw InputError(path, "", "file too short for a llama2.c tokenizer header");
  if (max_len <= 0 || max_len > kMaxTokenLength)
    throw InputError(path, "",
                     "implausible max_token_length " + std::to_string(max_len) + " (not a llama2.c tokenizer.bin?)");
  t.max_token_length_ = max_len;

  for (int id = 0; vocab_size < 0 || id < vocab_size; ++id) {
    float score = 0;
    std::int32_t len = 0;
    if (!in.read(reinterpret_cast<char*>(&score), sizeof score)) {
      if (vocab_size < 0 && in.gcount() == 0) break;  // clean end of file
      throw InputError(path, "",
                       "file ends at token " + std::to_string(id) + " of " +
                           (vocab_size < 0 ? std::string("?") : std::to_string(vocab_size)));
    }
    if (!in.read(reinterpret_cast<char*>(&len), sizeof len))
      throw InputError(path, "", "file ends inside the entry of token " + std::to_string(id));
    if (len < 0 || len > max_len)
      throw InputError(path, "",
                       "token " + std::to_string(id) + " has length " + std::to_string(len) +
                           ", outside [0, max_token_length=" + std::to_string(max_len) + "]");
    std::string piece(static_cast<std::size_t>(len), '\0');
    if (len > 0 && !in.read(piece.data(), len))
      throw InputError(path, "", "file ends inside the piece of token " + std::to_string(id));
    t.pieces_.push_back(std::move(piece));
    t.scores_.push_back(score);
    if (t.pieces_.size() > static_cast<std::size_t>(kMaxVocab))
      throw InputError(path, "", "more than " + std::to_string(kMaxVocab) + " tokens");
  }
  if (t.vocab_size() < 3 + 256)
    throw InputError(
        path, "",
        "only " + std::to_string(t.vocab_size()) + " tokens; a llama2.c tokenizer needs byte tokens at ids 3..258");

  // Byte tokens at 3..258, in either export layout.
  t.has_byte_tokens_ = true;
  for (int b = 0; b < 256 && t.has_byte_tokens_; ++b) {
    const std::string& p = t.pieces_[3 + b];
    t.has_byte_tokens_ = parse_byte_piece(p) == b || p == latin1_as_utf8(b);
  }
  // The lookup table for codepoints and merges: every ordinary piece. (llama2.c bsearches
  // a sorted copy of the whole vocabulary; with byte and control tokens left out, ordinary
  // pieces are unique in Llama vocabularies. Should one repeat, the lowest id wins.)
  for (int id = 0; id < t.vocab_size(); ++id) {
    if (id <= kEos || t.is_byte_token(id)) continue;
    t.index_.emplace(t.pieces_[id], id);
  }
  return t;
}

Tokenizer Tokenizer::load_for_model(const std::string& path, int vocab_size, const std::string& model_path) {
  Tokenizer t = load(path, -1);
  if (t.vocab_size() != vocab_size)
    throw InputError(model_path, "",
                     "the checkpoint's vocab_size (" + std::to_string(vocab_size) +
                         ") does not match the tokenizer's (" + std::to_string(t.vocab_size()) + " tokens in " + path +
                         ")");
  return t;
}

std::string Tokenizer::piece(int id) const {
  const std::string& p = pieces_.at(static_cast<std::size_t>(id));
  if (!is_byte_token(id)) return p;
  char buf[8];
  std::snprintf(buf, sizeof buf, "<0x%02X>", id - 3);
  return buf;
}

int Tokenizer::lookup(const std::string& piece) const {
  auto it = index_.find(piece);
  return it == index_.end() ? -1 : it->second;
}

std::vector<int> Tokenizer::encode(std::string_view text, bool bos, bool eos) const {
  std::vector<int> tokens;
  tokens.reserve(text.size() + 3);
  if (bos) tokens.push_back(kBos);

  // SentencePiece's add_dummy_prefix: a leading space piece whenever there is text.
  if (!text.empty()) {
    const int space = lookup(" ");
    tokens.push_back(space != -1 ? space : ' ' + 3);
  }

  // One piece per UTF-8 codepoint, byte fallback when the codepoint is not a piece.
  // As llama2.c: a codepoint is a lead byte plus the continuation bytes (10xxxxxx) after
  // it, at most 4 bytes in all.
  std::string cp;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) != 0x80) cp.clear();
    cp.push_back(static_cast<char>(c));
    const bool next_continues = i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80;
    if (next_continues && cp.size() < 4) continue;

    const int id = lookup(cp);
    if (id != -1) {
      tokens.push_back(id);
    } else {
      for (char b : cp) tokens.push_back(static_cast<unsigned char>(b) + 3);
    }
    cp.clear();
  }

  // Merge the best-scoring adjacent pair until no pair forms a piece, the leftmost pair among
  // equal scores first (llama2.c's rule, whose rescan of every pair per merge is quadratic).
  // Here: the symbols as a linked list and the candidate pairs in a heap, stale entries
  // skipped when they surface; n log n, the same merges in the same order.
  // Byte and control tokens never merge (see the header).
  struct Symbol {
    int id, prev, next;
    unsigned version = 0;  // bumped when the symbol changes, to spot stale pairs
  };
  struct Pair {
    float score;
    int left, right, id;
    unsigned left_version, right_version;
    bool operator<(const Pair& other) const {  // the heap's top: highest score, then leftmost
      return score != other.score ? score < other.score : left > other.left;
    }
  };
  std::vector<Symbol> symbols(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i)
    symbols[i] = {tokens[i], static_cast<int>(i) - 1, i + 1 < tokens.size() ? static_cast<int>(i) + 1 : -1};
  std::priority_queue<Pair> candidates;
  std::string pair;
  auto consider = [&](int left) {
    if (left < 0 || symbols[left].next < 0) return;
    const int right = symbols[left].next;
    const int a = symbols[left].id, b = symbols[right].id;
    if (a <= kEos || b <= kEos || is_byte_token(a) || is_byte_token(b)) return;
    pair.assign(pieces_[a]).append(pieces_[b]);
    const int id = lookup(pair);
    if (id != -1 && scores_[id] > -1e10f)
      candidates.push({scores_[id], left, right, id, symbols[left].version, symbols[right].version});
  };
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i) consider(static_cast<int>(i));
  while (!candidates.empty()) {
    const Pair best = candidates.top();
    candidates.pop();
    Symbol& left = symbols[best.left];
    if (left.next != best.right || left.version != best.left_version ||
        symbols[best.right].version != best.right_version)
      continue;  // one of its symbols merged since
    Symbol& right = symbols[best.right];
    left.id = best.id;
    ++left.version;
    ++right.version;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = best.left;
    right.next = right.prev = -1;
    consider(left.prev);
    consider(best.left);
  }
  std::vector<int> merged;
  merged.reserve(symbols.size());
  for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) merged.push_back(symbols[i].id);
  tokens.swap(merged);

  if (eos) tokens.push_back(kEos);
  return tokens;
}

std::string Tokenizer::decode_piece(int prev_token, int token) const {
  if (token < 0 || token >= vocab_size())
    throw std::out_of_range("token id " + std::to_string(token) + " outside the vocabulary");
  if (is_byte_token(token)) return std::string(1, static_cast<char>(token - 3));
  const std::string& p = pieces_[token];
  // Vocabularies without the byte layout at 3..258 may still hold "<0xHH>" pieces.
  if (const int b = parse_byte_piece(p); b >= 0) return std::string(1, static_cast<char>(b));
  if (prev_token == kBos && !p.empty() && p[0] == ' ') return p.substr(1);
  return p;
}

std::string Tokenizer::decode(std::span<const int> ids) const {
  std::string out;
  int prev = -1;
  for (int id : ids) {
    if (id != kBos && id != kEos) out += decode_piece(prev, id);
    prev = id;
  }
  return out;
}

}  // namespace kvtrace
