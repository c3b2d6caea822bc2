#include "aggregate.hpp"

#include <algorithm>
#include <cmath>

namespace kvsim {

void aggregate_cell(CellResult& cell, std::vector<const GroupRecord*>& records, int n_layers, bool output_error) {
  std::vector<float> retention, errors;
  std::vector<std::vector<float>> layer_retention(static_cast<size_t>(n_layers)),
      layer_errors(static_cast<size_t>(n_layers));
  std::vector<double> layer_occupancy(static_cast<size_t>(n_layers), 0.0);
  std::vector<int64_t> layer_steps(static_cast<size_t>(n_layers), 0);
  double occupancy_sum = 0;
  int64_t occupancy_steps = 0;
  // Sized up front: growing these vectors by doubling copies and faults in fresh pages.
  std::vector<size_t> layer_values(static_cast<size_t>(n_layers), 0);
  size_t values = 0;
  for (const GroupRecord* record : records) {
    values += record->result.retention.size();
    layer_values[static_cast<size_t>(record->layer)] += record->result.retention.size();
  }
  retention.reserve(values);
  if (output_error) errors.reserve(values);
  for (int l = 0; l < n_layers; ++l) {
    layer_retention[static_cast<size_t>(l)].reserve(layer_values[static_cast<size_t>(l)]);
    if (output_error) layer_errors[static_cast<size_t>(l)].reserve(layer_values[static_cast<size_t>(l)]);
  }
  for (const GroupRecord* record : records) {
    const SimulationResult& result = record->result;
    retention.insert(retention.end(), result.retention.begin(), result.retention.end());
    auto& lr = layer_retention[static_cast<size_t>(record->layer)];
    lr.insert(lr.end(), result.retention.begin(), result.retention.end());
    if (output_error) {
      errors.insert(errors.end(), result.output_error.begin(), result.output_error.end());
      auto& le = layer_errors[static_cast<size_t>(record->layer)];
      le.insert(le.end(), result.output_error.begin(), result.output_error.end());
    }
    for (int32_t occupancy : result.occupancy) {
      occupancy_sum += occupancy;
      layer_occupancy[static_cast<size_t>(record->layer)] += occupancy;
      cell.occupancy_peak = std::max<int64_t>(cell.occupancy_peak, occupancy);
    }
    occupancy_steps += result.n_steps;
    layer_steps[static_cast<size_t>(record->layer)] += result.n_steps;
    cell.evictions += result.evictions;
  }
  cell.retention = summarize(retention);
  cell.output_error = summarize(errors);
  cell.occupancy_mean = occupancy_steps ? occupancy_sum / static_cast<double>(occupancy_steps) : NAN;
  for (int l = 0; l < n_layers; ++l) {
    if (layer_steps[static_cast<size_t>(l)] == 0) continue;
    LayerSummary summary;
    summary.layer = l;
    summary.retention = summarize(layer_retention[static_cast<size_t>(l)]);
    summary.output_error = summarize(layer_errors[static_cast<size_t>(l)]);
    summary.occupancy_mean =
        layer_occupancy[static_cast<size_t>(l)] / static_cast<double>(layer_steps[static_cast<size_t>(l)]);
    cell.layers.push_back(summary);
  }
}

}  // namespace kvsim
