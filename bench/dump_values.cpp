// kvsim_dump_values TRACE OUT [THREADS]: replays the 6 x 9 grid of bench/README.md (output error)
// keeping every record and writes each record's per-step output errors, then its
// retentions, as float32, cell after cell: bench/compare_values.py compares two such files
// (an engine change must leave them within 1e-6 relative, or identical).
#include <cstdio>
#include <string>
#include <vector>

#include "kvsim/replay/replay.hpp"
#include "kvtrace/reader.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: kvsim_dump_values TRACE OUT [THREADS]\n");
    return 2;
  }
  kvtrace::TraceReader reader(argv[1]);
  kvsim::ReplayConfig config;
  config.policies = kvsim::choose_policies({"full", "scissorhands", "h2o", "streaming", "tova", "recent"},
                                           std::vector<std::string>{});
  config.budgets = kvsim::parse_budgets("10%,20%,30%,40%,50%,60%,70%,80%,90%");
  config.threads = argc > 3 ? std::stoi(argv[3]) : 1;
  config.keep_records = true;
  const auto results = kvsim::replay_trace(reader, config);
  FILE* out = std::fopen(argv[2], "wb");
  if (!out) return 1;
  size_t count = 0;
  for (const auto& cell : results.cells)
    for (const auto& record : cell.records) {
      std::fwrite(record.result.output_error.data(), 4, record.result.output_error.size(), out);
      std::fwrite(record.result.retention.data(), 4, record.result.retention.size(), out);
      count += record.result.output_error.size();
    }
  std::fclose(out);
  std::printf("%zu output errors, as many retentions\n", count);
}
