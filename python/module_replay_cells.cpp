// A replay cell's per-sequence and per-span results as Python dicts (module.hpp).
#include <pybind11/stl.h>

#include "kvsim/replay/replay.hpp"
#include "module.hpp"

namespace kvsim::python {

// With pools or shared contexts: per sequence, the columns of pool_table and
// shared_context_table (kvsim/replay/report.hpp).
py::dict per_sequence_dict(const CellResult& cell) {
  std::vector<int64_t> seq, pool, compressed_by, peak;
  std::vector<double> budget, rmean, rmin, occupancy;
  for (const SequenceSummary& sequence : cell.sequences) {
    seq.push_back(sequence.seq);
    pool.push_back(sequence.pool);
    compressed_by.push_back(sequence.compressed_by);
    budget.push_back(sequence.budget_tokens_mean);
    rmean.push_back(sequence.retention.mean);
    rmin.push_back(sequence.retention.min);
    occupancy.push_back(sequence.occupancy_mean);
    peak.push_back(sequence.occupancy_peak);
  }
  py::dict out;
  out["seq"] = to_numpy(std::move(seq));
  out["pool"] = to_numpy(std::move(pool));
  out["compressed_by"] = to_numpy(std::move(compressed_by));
  out["budget_tokens_mean"] = to_numpy(std::move(budget));
  out["retention_mean"] = to_numpy(std::move(rmean));
  out["retention_min"] = to_numpy(std::move(rmin));
  out["occupancy_mean"] = to_numpy(std::move(occupancy));
  out["occupancy_peak"] = to_numpy(std::move(peak));
  return out;
}

// CellResult::spans: a dict per span, the keys of the replay JSON's cells[i].spans.
py::list span_list(const CellResult& cell) {
  py::list out;
  for (const SpanResult& span : cell.spans) {
    py::dict d;
    d["seq"] = span.seq, d["name"] = span.span.name, d["kind"] = span.span.kind;
    d["start"] = span.span.start, d["end"] = span.span.end, d["step"] = span.step;
    for (size_t m = 0; m < kSpanMeasures.size(); ++m) d[kSpanMeasureNames[m]] = span.at_step.*kSpanMeasures[m];
    d["answer_rows"] = span.answer_rows;
    for (size_t m = 0; m < kSpanMeasures.size(); ++m)
      d[py::str(std::string("answer_") + kSpanMeasureNames[m])] = span.answer.*kSpanMeasures[m];
    out.append(d);
  }
  return out;
}

}  // namespace kvsim::python
