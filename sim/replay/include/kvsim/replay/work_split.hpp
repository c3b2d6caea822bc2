#pragma once
// Splitting a replay across processes (MPI ranks): each rank replays its share of the
// (sequence, layer) work items, and rank 0 gathers every item's results and aggregates them
// in the same fixed order as a single process, so its output is byte-identical. kvsim's
// library knows nothing of MPI: the CLI supplies an implementation (sim/cli/mpi_split.cpp).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvsim {

class WorkSplit {
 public:
  virtual ~WorkSplit() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  bool mine(size_t item) const { return static_cast<int>(item % static_cast<size_t>(size())) == rank(); }
  // Every rank passes the serialised results of its items (index, bytes); rank 0 gets back
  // every item's bytes indexed by item (total of them), the other ranks an empty vector.
  virtual std::vector<std::string> gather(const std::vector<std::pair<uint64_t, std::string>>& mine, size_t total) = 0;
};

}  // namespace kvsim
