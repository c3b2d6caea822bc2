#pragma once
// MPI for `mpirun -np N kvsim sweep|replay ...`: started only when the process was launched
// by an MPI launcher (Open MPI's mpirun or Slurm's srun set their variables), so a plain
// `kvsim` never initialises MPI.
#include <memory>

#include "kvsim/replay/work_split.hpp"

namespace kvsim::cli {

// nullptr when not launched by MPI (or kvsim was built without it).
std::unique_ptr<WorkSplit> start_mpi(int& argc, char**& argv);

// The split main started, for the verbs that distribute work; nullptr without MPI.
WorkSplit* work_split();
void set_work_split(WorkSplit* split);

}  // namespace kvsim::cli
