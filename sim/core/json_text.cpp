#include "kvsim/core/json_text.hpp"

#include <cstdio>

namespace kvsim {
namespace {

// Length of the valid UTF-8 sequence starting at text[i], or 0.
size_t sequence_length(const std::string& text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t length = lead >= 0xF0 && lead <= 0xF4 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC2 && lead <= 0xDF ? 2 : 0;
  if (length == 0 || lead > 0xF4 || i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k)
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  const unsigned char second = byte(i + 1);
  if ((lead == 0xE0 && second < 0xA0) || (lead == 0xED && second > 0x9F) ||  // overlong, surrogates
      (lead == 0xF0 && second < 0x90) || (lead == 0xF4 && second > 0x8F))    // overlong, above U+10FFFF
    return 0;
  return length;
}

template <class Json>
void escape_strings(Json& node) {
  if (node.is_string()) {
    node = utf8_escaped(node.template get<std::string>());
  } else if (node.is_array()) {
    for (auto& item : node) escape_strings(item);
  } else if (node.is_object()) {
    Json out = Json::object();
    for (auto& [key, value] : node.items()) {
      escape_strings(value);
      out[utf8_escaped(key)] = std::move(value);
    }
    node = std::move(out);
  }
}

}  // namespace

std::string utf8_escaped(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (const size_t length = sequence_length(text, i)) {
      out.append(text, i, length);
      i += length;
    } else {
      char escaped[5];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", static_cast<unsigned char>(text[i]));
      out += escaped;
      ++i;
    }
  }
  return out;
}

std::string json_text(nlohmann::json doc, int indent) {
  escape_strings(doc);
  return doc.dump(indent) + "\n";
}

std::string json_text(nlohmann::ordered_json doc, int indent) {
  escape_strings(doc);
  return doc.dump(indent) + "\n";
}

}  // namespace kvsim
