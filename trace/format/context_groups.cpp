// Shared contexts (docs/semantics.md, section 1): the sequences of one context_group hold the
// same context, so that a replay may compress it once and answer every question from it.
#include <map>
#include <string>
#include <vector>

#include "reader_checks.hpp"

namespace kvtrace {

void check_context_groups(const TraceReader& reader) {
  std::map<int64_t, int> first_of_group;
  for (int seq = 0; seq < reader.n_sequences(); ++seq) {
    const SequenceMeta& meta = reader.sequence(seq);
    if (meta.context_group < 0) continue;
    const auto [found, fresh] = first_of_group.emplace(meta.context_group, seq);
    if (fresh) continue;
    const SequenceMeta& first = reader.sequence(found->second);
    const int64_t context = meta.prompt_len - meta.question_len;
    const int64_t first_context = first.prompt_len - first.question_len;
    const std::string group = "context_group " + std::to_string(meta.context_group);
    if (context != first_context)
      reader.fail(seq_path(seq), group + ": its context holds " + std::to_string(context) + " tokens, sequence " +
                                     std::to_string(found->second) + "'s " + std::to_string(first_context));
    const std::vector<int32_t> tokens = reader.tokens(seq), shared = reader.tokens(found->second);
    for (int64_t p = 0; p < context; ++p)
      if (tokens[static_cast<size_t>(p)] != shared[static_cast<size_t>(p)])
        reader.fail(seq_path(seq) + "/tokens", group + ": token " + std::to_string(p) + " of the context differs from sequence " +
                                                   std::to_string(found->second) + "'s");
  }
}

}  // namespace kvtrace
