#pragma once
// JSON as kvsim writes it. Text from a trace (token pieces, file names) need not be UTF-8,
// which JSON requires: each byte of a string that is not part of valid UTF-8 is written as
// the four characters \xNN (so "caf\xe9" in Latin-1 becomes "caf\\xe9" in the file).
#include <nlohmann/json.hpp>
#include <string>

namespace kvsim {

std::string json_text(nlohmann::json doc, int indent);
// The same with the keys in the order they were added (a table's columns), not sorted.
std::string json_text(nlohmann::ordered_json doc, int indent);
// `text` with every byte outside valid UTF-8 replaced by "\xNN".
std::string utf8_escaped(const std::string& text);

}  // namespace kvsim
