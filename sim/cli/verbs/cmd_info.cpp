// kvsim info FILE: what a trace holds, from its structure alone (no tensor data is read).
#include <nlohmann/json.hpp>
#include <cstdio>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "../cli_common.hpp"
#include "kvsim/core/text_util.hpp"
#include "kvsim/core/json_text.hpp"
#include "kvtrace/atomic_file.hpp"
#include "kvtrace/reader.hpp"

namespace kvsim::cli {
namespace {

// The prompt as text, on one line, shortened to `width` characters.
std::string preview(const std::vector<std::string>& text, int64_t count, size_t width) {
  std::string out;
  for (int64_t i = 0; i < count && i < static_cast<int64_t>(text.size()); ++i) out += text[static_cast<size_t>(i)];
  for (char& c : out)
    if (c == '\n' || c == '\t' || c == '\r') c = ' ';
  const size_t start = out.find_first_not_of(' ');
  out = start == std::string::npos ? "" : out.substr(start);
  if (out.size() > width) {
    size_t cut = width;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xc0) == 0x80) --cut;  // keep UTF-8 whole
    out = out.substr(0, cut) + "...";
  }
  return out;
}

// The sequences' spans, a line each: "kind [start, end)", "kind name [start, end)" when the
// name is not the kind.
void print_spans(const kvtrace::TraceReader& reader) {
  bool first = true;
  for (int s = 0; s < reader.n_sequences(); ++s) {
    const auto& spans = reader.sequence(s).spans;
    if (spans.empty()) continue;
    if (first) std::printf("\n  seq  spans: kind [start, end) of the positions\n");
    first = false;
    std::string line;
    for (const kvtrace::Span& span : spans) {
      if (!line.empty()) line += ", ";
      line += span.kind + (span.name == span.kind ? "" : " " + span.name) + " [" + std::to_string(span.start) + ", " +
              std::to_string(span.end) + ")";
    }
    std::printf("  %3d  %s\n", s, line.c_str());
  }
}

// Sequences sharing a context, a line per context_group: "group 0: sequences 0, 1, 2 share
// their first 57 tokens".
void print_context_groups(const kvtrace::TraceReader& reader) {
  std::map<int64_t, std::vector<int>> groups;
  for (int s = 0; s < reader.n_sequences(); ++s)
    if (reader.sequence(s).context_group >= 0) groups[reader.sequence(s).context_group].push_back(s);
  if (groups.empty()) return;
  std::printf("\n  context groups: sequences asking questions of one context\n");
  for (const auto& [group, members] : groups) {
    const kvtrace::SequenceMeta& first = reader.sequence(members.front());
    std::string line;
    for (int s : members) line += (line.empty() ? "" : ", ") + std::to_string(s);
    std::printf("  group %lld: sequences %s share their first %lld tokens\n", static_cast<long long>(group),
                line.c_str(), static_cast<long long>(first.prompt_len - first.question_len));
  }
}

}  // namespace

int cmd_info(const std::vector<std::string>& args) {
  po::options_description options("info options");
  options.add_options()("trace", po::value<std::string>()->required(), "trace file (HDF5, schema v1)")(
      "json", po::value<std::string>(), "also write the description as JSON to this file");
  po::positional_options_description positional;
  positional.add("trace", 1);
  po::variables_map vm;
  if (!parse_options("info", "TRACE [--json FILE]", args, options, positional, vm)) return 0;

  const kvtrace::TraceReader reader = open_trace(vm["trace"].as<std::string>());
  // Checked before the table is printed, so a bad path is one line and nothing else.
  if (vm.count("json")) prepare_outputs({vm["trace"].as<std::string>()}, {vm["json"].as<std::string>()});
  const kvtrace::TraceMeta& meta = reader.meta();
  int64_t total_tokens = 0;
  std::set<std::string> forms;
  for (int s = 0; s < reader.n_sequences(); ++s) {
    total_tokens += reader.sequence(s).n_tokens;
    for (const auto& layer : reader.sequence(s).layers) forms.insert(layer.describe());
  }
  const std::string attention =
      meta.n_kv_heads == meta.n_heads
          ? "MHA"
          : (meta.n_kv_heads == 1 ? "MQA" : "GQA, " + std::to_string(meta.group_size()) + " query heads per kv head");
  std::printf("file       %s (%s)\n", reader.path().c_str(), text::human_bytes(reader.file_size()).c_str());
  std::printf("model      %s\n", meta.model.c_str());
  std::printf("source     %s   created %s   by %s\n", meta.source.c_str(), meta.created.c_str(), meta.tool.c_str());
  std::printf("shape      %d layers x %d heads, %d kv heads (%s), head_dim %d, attn_scale %.6g\n", meta.n_layers,
              meta.n_heads, meta.n_kv_heads, attention.c_str(), meta.head_dim, meta.attn_scale);
  if (meta.rope.declared()) std::printf("rope       %s\n", meta.rope.describe().c_str());
  std::printf("sequences  %d, %lld tokens in all\n", reader.n_sequences(), static_cast<long long>(total_tokens));
  std::printf("forms      %s\n", forms.size() == 1 ? forms.begin()->c_str() : "mixed (see per layer in --json)");
  std::printf("\n  seq  tokens  prompt  prompt text\n");
  nlohmann::json sequences = nlohmann::json::array();
  for (int s = 0; s < reader.n_sequences(); ++s) {
    const auto& sequence = reader.sequence(s);
    const std::vector<std::string> text = reader.token_text(s);
    const std::string prompt = text.empty() ? "(no token_text)" : preview(text, sequence.prompt_len, 60);
    std::printf("  %3d  %6lld  %6lld  %s\n", s, static_cast<long long>(sequence.n_tokens),
                static_cast<long long>(sequence.prompt_len), prompt.c_str());
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& layer : sequence.layers) layers.push_back(layer.describe());
    sequences.push_back({{"index", s},
                         {"n_tokens", sequence.n_tokens},
                         {"prompt_len", sequence.prompt_len},
                         {"prompt_text", text.empty() ? "" : preview(text, sequence.prompt_len, 100000)},
                         {"layers", layers}});
    if (sequence.question_len >= 0) sequences.back()["question_len"] = sequence.question_len;
    if (sequence.context_group >= 0) sequences.back()["context_group"] = sequence.context_group;
    if (!sequence.spans.empty()) {
      nlohmann::json spans = nlohmann::json::array();
      for (const kvtrace::Span& span : sequence.spans)
        spans.push_back({{"name", span.name}, {"kind", span.kind}, {"start", span.start}, {"end", span.end}});
      sequences.back()["spans"] = spans;
    }
  }
  print_spans(reader);
  print_context_groups(reader);
  if (vm.count("json")) {
    nlohmann::json out = {
        {"file", reader.path()},         {"file_size", reader.file_size()}, {"model", meta.model},
        {"source", meta.source},         {"created", meta.created},         {"tool", meta.tool},
        {"version", meta.version},       {"n_layers", meta.n_layers},       {"n_heads", meta.n_heads},
        {"n_kv_heads", meta.n_kv_heads}, {"head_dim", meta.head_dim},       {"attn_scale", meta.attn_scale},
        {"sequences", sequences}};
    if (meta.rope.declared()) {
      nlohmann::json rope = nlohmann::json::object();
      meta.rope.for_each_declared([&](const char* name, const auto& value) { rope[name] = value; });
      out["rope"] = rope;
    }
    kvtrace::write_file_atomically(vm["json"].as<std::string>(), json_text(std::move(out), 1));
  }
  return 0;
}

}  // namespace kvsim::cli
