#pragma once
// `kvsim sweep --resume`: the grid is replayed one policy at a time and each policy's rows are
// appended to the CSV as soon as they are done, so an interrupted sweep keeps every finished
// row; run again with --resume, it checks the rows already written and replays only the rest.
// The final CSV is byte for byte the one an uninterrupted sweep writes.
#include "kvsim/replay/replay.hpp"
#include "replay_options.hpp"

namespace kvtrace {
class TraceReader;
}

namespace kvsim::cli {

// Runs the sweep into values.csv, resuming it if the file holds rows of this same grid.
// Returns the whole grid's results (read back from the CSV) for the table and the plot.
ReplayResults resumable_sweep(const kvtrace::TraceReader& reader, const ReplayConfig& config,
                              const ReplayCliOptions& values);

}  // namespace kvsim::cli
