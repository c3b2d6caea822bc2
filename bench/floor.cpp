// kvsim_floor TRACE [--threads N] [--seqs 0,1] [--layers 0,1] [--rows auto|attn|qk]
//
// The floor of any replay: stream every attention row of a trace once, exactly as the
// replay engine gets them (kvtrace::open_attention_source, blocks of kRowBlockSize steps of
// all the layer's heads: read q/k, recompute the causal softmax), and sum each row. No
// cache, no policy, no metric. A sweep over the same trace cannot be cheaper than this, so
// sweep time / floor time is the cost of the policies and metrics on top of the rows.
// Work is spread over threads one (sequence, layer) at a time, as `kvsim sweep` does.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kvtrace/attention_source.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"

namespace {

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoi(item));
  return out;
}

int usage() {
  std::cerr
      << "usage: kvsim_floor TRACE [--threads N (0: all cores)] [--seqs 0,1] [--layers 0,1] [--rows auto|attn|qk]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path;
  int threads = 0;
  std::vector<int> seqs, layers;
  kvtrace::RowsFrom from = kvtrace::RowsFrom::automatic;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    try {
      if (arg == "--threads")
        threads = std::stoi(value());
      else if (arg == "--seqs")
        seqs = parse_list(value());
      else if (arg == "--layers")
        layers = parse_list(value());
      else if (arg == "--rows") {
        const std::string rows = value();
        from = rows == "qk"     ? kvtrace::RowsFrom::qk
               : rows == "attn" ? kvtrace::RowsFrom::attn
                                : kvtrace::RowsFrom::automatic;
      } else if (arg == "-h" || arg == "--help")
        return usage(), 0;
      else if (!arg.empty() && arg[0] == '-')
        return usage();
      else
        path = arg;
    } catch (const std::exception& e) {
      std::cerr << "kvsim_floor: " << e.what() << "\n";
      return 2;
    }
  }
  if (path.empty()) return usage();
  try {
    const auto start = std::chrono::steady_clock::now();
    const kvtrace::TraceReader reader(path);
    const kvtrace::TraceMeta& meta = reader.meta();
    if (seqs.empty())
      for (int s = 0; s < reader.n_sequences(); ++s) seqs.push_back(s);
    if (layers.empty())
      for (int l = 0; l < meta.n_layers; ++l) layers.push_back(l);
    std::vector<int> heads(static_cast<size_t>(meta.n_heads));
    for (int h = 0; h < meta.n_heads; ++h) heads[static_cast<size_t>(h)] = h;
    std::vector<std::pair<int, int>> items;
    for (int s : seqs)
      for (int l : layers) items.emplace_back(s, l);
    std::vector<double> checksums(items.size(), 0.0);
    std::vector<int64_t> row_counts(items.size(), 0);
    std::vector<std::exception_ptr> errors(items.size());
    std::atomic<size_t> next{0};
    auto worker = [&]() {
      kvtrace::RowBlock block;
      for (size_t i = next++; i < items.size(); i = next++) {
        try {
          const auto [seq, layer] = items[i];
          auto source = kvtrace::open_attention_source(reader, seq, layer, heads, from);
          const int64_t n = source->n_tokens();
          double total = 0;
          for (int64_t first = 0; first < n; first += kvtrace::kRowBlockSize) {
            const int64_t count = std::min(kvtrace::kRowBlockSize, n - first);
            source->rows(first, count, block);
            for (int h = 0; h < block.n_heads; ++h)
              for (int64_t t = first; t < first + count; ++t) {
                // Eight independent float partial sums (a vector's lanes), so the sum runs at
                // load speed rather than at the latency of one chain of dependent adds: a
                // floor must not be slower than the engine's own use of the rows.
                const float* row = block.row(h, t);
                float lanes[8] = {};
                int64_t j = 0;
                for (; j + 8 <= t + 1; j += 8)
                  for (int k = 0; k < 8; ++k) lanes[k] += row[j + k];
                double sum = 0;
                for (; j <= t; ++j) sum += row[j];
                for (float lane : lanes) sum += lane;
                total += sum;
              }
          }
          checksums[i] = total;
          row_counts[i] = n * block.n_heads;
        } catch (...) {
          errors[i] = std::current_exception();
        }
      }
    };
    const int count =
        std::max(1, std::min<int>(threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency()),
                                  static_cast<int>(items.size())));
    std::vector<std::thread> pool;
    for (int t = 1; t < count; ++t) pool.emplace_back(worker);
    worker();
    for (auto& thread : pool) thread.join();
    for (auto& error : errors)
      if (error) std::rethrow_exception(error);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double checksum = 0;
    int64_t rows = 0;
    for (size_t i = 0; i < items.size(); ++i) checksum += checksums[i], rows += row_counts[i];
    // Every row sums to 1, so the checksum is the number of rows up to rounding.
    std::printf("floor: %lld rows of %zu (sequence, layer) items on %d threads in %.3f s; checksum %.6f\n",
                static_cast<long long>(rows), items.size(), count, seconds, checksum);
    std::printf("seconds %.6f\n", seconds);
    return 0;
  } catch (const kvtrace::InputError& e) {
    std::cerr << "kvsim_floor: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "kvsim_floor: " << e.what() << "\n";
    return 1;
  }
}
