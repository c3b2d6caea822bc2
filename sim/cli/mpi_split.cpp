#include "mpi_split.hpp"

#include <cstdlib>

#ifdef KVSIM_HAVE_MPI
#include <boost/mpi/collectives.hpp>
#include <boost/mpi/communicator.hpp>
#include <boost/mpi/environment.hpp>
#include <boost/serialization/string.hpp>
#include <boost/serialization/utility.hpp>
#include <boost/serialization/vector.hpp>
#endif

namespace kvsim::cli {
namespace {

WorkSplit* current = nullptr;

#ifdef KVSIM_HAVE_MPI
class MpiSplit final : public WorkSplit {
 public:
  MpiSplit(int& argc, char**& argv) : environment_(argc, argv) {}
  int rank() const override { return world_.rank(); }
  int size() const override { return world_.size(); }
  std::vector<std::string> gather(const std::vector<std::pair<uint64_t, std::string>>& mine, size_t total) override {
    std::vector<std::vector<std::pair<uint64_t, std::string>>> parts;
    boost::mpi::gather(world_, mine, parts, 0);
    std::vector<std::string> all;
    if (rank() != 0) return all;
    all.resize(total);
    for (auto& part : parts)
      for (auto& [index, bytes] : part) all[index] = std::move(bytes);
    return all;
  }

 private:
  boost::mpi::environment environment_;
  boost::mpi::communicator world_;
};
#endif

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name)) return true;
  return false;
}

}  // namespace

std::unique_ptr<WorkSplit> start_mpi([[maybe_unused]] int& argc, [[maybe_unused]] char**& argv) {
#ifdef KVSIM_HAVE_MPI
  if (launched_by_mpi()) return std::make_unique<MpiSplit>(argc, argv);
#else
  (void)launched_by_mpi;
#endif
  return nullptr;
}

WorkSplit* work_split() { return current; }
void set_work_split(WorkSplit* split) { current = split; }

}  // namespace kvsim::cli
