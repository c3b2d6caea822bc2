// Reads the bundled trace's description through kvsim::trace and replays one layer of one
// sequence through kvsim::sim, as an installed kvsim's user would.
#include <cstdio>
#include <string>

#include "kvsim/core/data_dir.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvsim/core/version.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : std::string(CONSUMER_DATA_DIR) + "/traces/stories15M-8x256.h5";
  try {
    const kvtrace::TraceReader reader(path);
    const kvtrace::TraceMeta& meta = reader.meta();
    std::printf("kvsim %s\nmodel %s: %d layers x %d heads, %d kv heads, head_dim %d, %d sequences\n", kvsim::version(),
                meta.model.c_str(), meta.n_layers, meta.n_heads, meta.n_kv_heads, meta.head_dim, reader.n_sequences());
    kvsim::ReplayConfig config;
    config.policies = {kvsim::choose_policy("scissorhands")};
    config.budgets = {kvsim::Budget::parse("20%")};
    config.sequences = {0};
    config.layers = {0};
    config.threads = 1;
    const kvsim::ReplayResults results = kvsim::replay_trace(reader, config);
    std::printf("scissorhands 20%% on sequence 0, layer 0: mean retention %.4f\n",
                results.cells.front().retention.mean);
    std::printf("data %s\n", kvsim::data_dir().c_str());
  } catch (const kvtrace::InputError& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 2;
  }
  return 0;
}
