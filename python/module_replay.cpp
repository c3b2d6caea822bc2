// kvsim._kvsim, replaying: the policies, replay and sweep over a trace, and replay_rows over
// attention given as a numpy array; each off the calling thread, so Ctrl-C stops it
// (run_interruptibly).
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "array_source.hpp"
#include "kvsim/analysis/analysis.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvsim/replay/report.hpp"
#include "kvsim/core/summary.hpp"
#include "module.hpp"

namespace kvsim::python {
namespace {

// replay_trace off the calling thread, stopped by Ctrl-C (run_interruptibly); the Python
// policies among config.policies stay registered as they are until it ends.
ReplayResults interruptible_replay(const kvtrace::TraceReader& reader, ReplayConfig& config) {
  const PoliciesInUse in_use(config.policies);
  ReplayResults results;
  run_interruptibly([&](const std::atomic<bool>& cancel) {
    config.cancel = &cancel;
    results = replay_trace(reader, config);
  });
  config.cancel = nullptr;
  return results;
}

// ---- replay and sweep ----

// A ReplayRequest and the layer schedule, as the Python keywords give them.
struct ReplayOptions : ReplayRequest {
  std::string layer_budget = "uniform";
};

void apply_options(const ReplayOptions& o, const kvtrace::TraceReader& reader, ReplayConfig& config) {
  apply_replay_request(o, config);
  set_layer_schedules(o.layer_budget, reader, config);
}

// As the CLI's --policies and --param (kvsim::choose_policies): at least one policy, none twice.
std::vector<PolicyChoice> chosen_policies(const std::vector<std::string>& names,
                                          const std::vector<std::pair<std::string, std::string>>& params) {
  if (names.empty()) bad_option("policies", "no policy given");
  refuse_repeats("--policies", names);
  return choose_policies(names, params);
}

// One sweep row's columns (kvsim/replay/sweep_table.hpp), with "label" after the policy.
// The columns only some sweeps have as the CSV has them.
py::dict summary_dict(const CellResult& cell, Mode mode, const Paging& paging, SweepExtras extras) {
  const SweepRow row = sweep_row(cell, mode, paging.page);
  py::dict d;
  for (const auto& column : sweep_columns()) {
    if (!written(column, extras)) continue;
    if (column.text)
      d[column.name] = row.*column.text;
    else if (column.real)
      d[column.name] = row.*column.real;
    else
      d[column.name] = row.*column.integer;
    if (column.text == &SweepRow::policy) d["label"] = cell.policy;
  }
  return d;
}

}  // namespace

py::dict group_dict(GroupRecord&& record, bool with_position) {
  SimulationResult& r = record.result;
  py::dict d;
  if (with_position) {
    d["seq"] = record.seq;
    d["layer"] = record.layer;
  }
  d["group"] = record.group;
  d["layer_wide"] = record.layer_wide;
  d["heads"] = to_numpy(std::vector<int32_t>(record.heads.begin(), record.heads.end()));
  d["first_step"] = r.first_step;
  d["question_steps"] = r.question_steps;
  std::vector<int64_t> steps(static_cast<size_t>(r.n_steps));
  for (int64_t s = 0; s < r.n_steps; ++s) steps[static_cast<size_t>(s)] = r.first_step + s;
  d["steps"] = to_numpy(std::move(steps));
  const auto heads = static_cast<py::ssize_t>(r.n_heads), n_steps = static_cast<py::ssize_t>(r.n_steps);
  d["retention"] = to_numpy(std::move(r.retention), {heads, n_steps});
  if (r.output_error.empty())
    d["output_error"] = py::none();
  else
    d["output_error"] = to_numpy(std::move(r.output_error), {heads, n_steps});
  d["occupancy"] = to_numpy(std::move(r.occupancy));
  d["eviction_step"] = to_numpy(std::move(r.eviction_step));
  d["evictions"] = r.evictions;
  d["budget"] = r.budget;
  return d;
}

namespace {

py::dict replay(const Trace& trace, const std::string& policy, const std::string& budget,
                const std::vector<std::pair<std::string, std::string>>& params, const ReplayOptions& options,
                bool records) {
  const auto held = trace.hold();
  const kvtrace::TraceReader& reader = *held;
  ReplayConfig config;
  config.policies = chosen_policies({policy}, params);
  config.budgets = {Budget::parse(budget)};
  {
    py::gil_scoped_release release;
    apply_options(options, reader, config);
    if (config.quant.size() > 1) bad_option("quant", "replay takes one quantization spec (sweep takes a list)");
  }
  config.keep_records = records;
  ReplayResults results = interruptible_replay(reader, config);
  CellResult& cell = results.cells.front();
  py::dict out = summary_dict(cell, results.mode, results.paging, sweep_extras(results));
  out["output_error"] = results.output_error;
  out["sequences"] = results.sequences;
  out["n_layers"] = results.layers;
  out["n_heads"] = results.heads;
  // Per layer: layers_csv's columns without the "all" row (that is the summary above).
  const size_t n = cell.layers.size();
  std::vector<int64_t> layer(n);
  std::vector<double> rmean(n), rp5(n), rmin(n), emean(n), ep95(n), occupancy(n);
  std::vector<double> dense_mean(n), dense_peak(n), union_mean(n), union_peak(n), model(n, NAN);
  for (size_t i = 0; i < n; ++i) {
    const LayerSummary& l = cell.layers[i];
    layer[i] = l.layer;
    rmean[i] = l.retention.mean;
    rp5[i] = l.retention.p5;
    rmin[i] = l.retention.min;
    emean[i] = l.output_error.mean;
    ep95[i] = l.output_error.p95;
    occupancy[i] = l.occupancy_mean;
    dense_mean[i] = l.occupancy_dense_mean, dense_peak[i] = l.occupancy_dense_peak;
    union_mean[i] = l.occupancy_layer_union_mean, union_peak[i] = l.occupancy_layer_union_peak;
  }
  py::dict layers;
  layers["layer"] = to_numpy(std::move(layer));
  layers["retention_mean"] = to_numpy(std::move(rmean));
  layers["retention_p5"] = to_numpy(std::move(rp5));
  layers["retention_min"] = to_numpy(std::move(rmin));
  layers["output_error_mean"] = to_numpy(std::move(emean));
  layers["output_error_p95"] = to_numpy(std::move(ep95));
  layers["occupancy_mean"] = to_numpy(std::move(occupancy));
  layers["occupancy_dense_mean"] = to_numpy(std::move(dense_mean));
  layers["occupancy_dense_peak"] = to_numpy(std::move(dense_peak));
  layers["occupancy_layer_union_mean"] = to_numpy(std::move(union_mean));
  layers["occupancy_layer_union_peak"] = to_numpy(std::move(union_peak));
  layers["occupancy_model_union_mean"] = to_numpy(std::vector<double>(model));  // the sequence's, not a layer's
  layers["occupancy_model_union_peak"] = to_numpy(std::move(model));
  out["layers"] = layers;
  py::dict groups;
  for (GroupRecord& record : cell.records) {
    const py::tuple key = py::make_tuple(record.seq, record.layer, record.group);
    groups[key] = group_dict(std::move(record), true);
  }
  out["groups"] = groups;
  if (!cell.sequences.empty()) out["per_sequence"] = per_sequence_dict(cell);
  if (!cell.spans.empty()) out["spans"] = span_list(cell);
  out["note"] = kTeacherForcedNote;
  return out;
}

py::dict sweep(const Trace& trace, const std::vector<std::string>& policy_names,
               const std::vector<std::string>& budgets, const std::vector<std::pair<std::string, std::string>>& params,
               const ReplayOptions& options) {
  const auto held = trace.hold();
  const kvtrace::TraceReader& reader = *held;
  ReplayConfig config;
  config.policies = chosen_policies(policy_names, params);
  if (budgets.empty()) bad_option("budgets", "no budget given");
  refuse_repeats("--budgets", budgets);
  for (const auto& b : budgets) config.budgets.push_back(Budget::parse(b));
  {
    py::gil_scoped_release release;
    apply_options(options, reader, config);
    if (!config.quant.empty()) config.quant = parse_quant_list("none," + options.quant);  // added to the plain grid
  }
  ReplayResults results = interruptible_replay(reader, config);
  // The sweep table's columns, in its order, then "label".
  std::vector<SweepRow> rows;
  for (const CellResult& cell : results.cells) rows.push_back(sweep_row(cell, results.mode, results.paging.page));
  py::dict out;
  for (const auto& column : sweep_columns()) {
    if (!written(column, sweep_extras(results))) continue;
    if (column.text) {
      py::list values;
      for (const SweepRow& row : rows) values.append(row.*column.text);
      out[column.name] = values;
    } else if (column.real) {
      std::vector<double> values;
      for (const SweepRow& row : rows) values.push_back(row.*column.real);
      out[column.name] = to_numpy(std::move(values));
    } else {
      std::vector<int64_t> values;
      for (const SweepRow& row : rows) values.push_back(row.*column.integer);
      out[column.name] = to_numpy(std::move(values));
    }
  }
  for (const std::string& name : span_column_names(results.span_kinds)) {  // after the others, as the CSV
    std::vector<double> values;
    for (const SweepRow& row : rows) values.push_back(span_column_value(row.spans, name));
    out[py::str(name)] = to_numpy(std::move(values));
  }
  py::list label;
  for (const CellResult& cell : results.cells) label.append(cell.policy);
  out["label"] = label;
  return out;
}

// values [n_kv_heads, n_tokens, head_dim] as one vector per kv head; its head_dim. The shape is
// checked before anything is copied.
int values_of(const py::object& object, int n_kv_heads, int64_t n_tokens, std::vector<std::vector<float>>& values) {
  const py::array a = array_of(object, "values");
  if (a.ndim() != 3 || a.shape(0) != n_kv_heads || a.shape(1) != n_tokens)
    throw InputError("", "values",
                     "expected a float array [n_kv_heads = " + std::to_string(n_kv_heads) +
                         ", n = " + std::to_string(n_tokens) + ", head_dim]");
  if (a.shape(2) < 1) throw InputError("", "values", "head_dim must be at least 1");
  if (a.shape(2) > kvtrace::Limits::max_head_dim)
    throw InputError("", "values",
                     "head_dim " + std::to_string(a.shape(2)) + " is more than the " +
                         std::to_string(kvtrace::Limits::max_head_dim) + " supported");
  const FloatArray v = float32_of(a, "values");
  const int head_dim = static_cast<int>(v.shape(2));
  const size_t size = static_cast<size_t>(n_tokens) * static_cast<size_t>(head_dim);
  for (int g = 0; g < n_kv_heads; ++g) {
    const float* begin = v.data() + static_cast<size_t>(g) * size;
    for (size_t i = 0; i < size; ++i)
      if (!std::isfinite(begin[i]))
        throw InputError("", "values",
                         std::string(std::isnan(begin[i]) ? "NaN" : "Inf") + " at kv head " + std::to_string(g) +
                             ", row " + std::to_string(i / static_cast<size_t>(head_dim)));
    values.emplace_back(begin, begin + size);
  }
  return head_dim;
}

py::dict replay_rows(const py::object& attention, const std::string& policy_name, const std::string& budget_text,
                     int n_kv_heads, const std::vector<std::pair<std::string, std::string>>& params,
                     const std::string& mode, int64_t prompt_len, int64_t question, int64_t compress_every,
                     const std::string& aggregate, const py::object& values_object, const std::vector<int>& origin_in) {
  Rows rows = rows_of(attention);
  std::map<std::string, std::string> overrides(params.begin(), params.end());
  const PolicyChoice policy = choose_policy(policy_name, overrides);
  const Budget budget = Budget::parse(budget_text);
  EngineOptions options;
  options.mode = parse_mode(mode);
  options.aggregate = parse_aggregate(aggregate);
  if (n_kv_heads == 0) n_kv_heads = rows.n_heads;
  if (options.mode == Mode::prefill) {
    if (prompt_len < 1 || prompt_len > rows.n_tokens)
      bad_option("prompt-len",
                 "prefill needs a prompt length from 1 to the " + std::to_string(rows.n_tokens) + " rows");
    options.prompt_len = prompt_len;
  } else if (prompt_len < 0) {
    bad_option("prompt-len", "must be >= 0");
  }
  if (question < 0) bad_option("question", "must be >= 0");
  if (compress_every < 0) bad_option("compress-every", "must be >= 0");
  options.protocol.question = question;  // the engine refuses one the prompt cannot hold
  options.protocol.compress_every = compress_every;
  std::vector<std::vector<float>> values;
  const int head_dim = values_object.is_none() ? 0 : values_of(values_object, n_kv_heads, rows.n_tokens, values);
  RowsOrigin origin;
  if (origin_in.size() != 3 || origin_in[0] < 0 || origin_in[1] < 0 || origin_in[2] < 0)
    throw InputError("", "", "origin: (sequence, layer, first kv head), each >= 0");
  origin.seq = origin_in[0];
  origin.layer = origin_in[1];
  origin.first_kv_head = origin_in[2];
  check_ratio_mode({budget}, options.mode);  // a ratio resolves on the prompt, less a question
  const int64_t b = budget.resolve(rows.n_tokens, options.prompt_len - question);
  const PoliciesInUse in_use({policy});
  std::vector<GroupRecord> records;
  run_interruptibly([&](const std::atomic<bool>& cancel) {
    ArrayAttentionSource source(rows.array.data(), rows.n_heads, rows.n_tokens, rows.packed);
    options.cancel = &cancel;
    records = replay_rows(source, n_kv_heads, policy, b, options, values, head_dim, origin);
  });
  // Per query head [heads, steps], in the array's head order, besides the groups.
  int64_t n_steps = records.empty() ? 0 : records.front().result.n_steps;
  const bool with_error = !records.empty() && !records.front().result.output_error.empty();
  std::vector<float> retention(static_cast<size_t>(rows.n_heads) * static_cast<size_t>(n_steps));
  std::vector<float> error(with_error ? retention.size() : 0);
  std::vector<float> all;
  for (const GroupRecord& record : records)
    for (size_t i = 0; i < record.heads.size(); ++i) {
      const auto src = static_cast<size_t>(i) * static_cast<size_t>(n_steps);
      const auto dst = static_cast<size_t>(record.heads[i]) * static_cast<size_t>(n_steps);
      std::copy_n(record.result.retention.begin() + static_cast<std::ptrdiff_t>(src), n_steps,
                  retention.begin() + static_cast<std::ptrdiff_t>(dst));
      if (with_error)
        std::copy_n(record.result.output_error.begin() + static_cast<std::ptrdiff_t>(src), n_steps,
                    error.begin() + static_cast<std::ptrdiff_t>(dst));
    }
  const Summary retention_summary = summarize(retention);
  const Summary error_summary = summarize(error);
  py::dict out;
  out["policy"] = policy.info->name;
  out["label"] = policy.label;
  out["params"] = policy.changed;
  out["budget"] = b;
  out["mode"] = mode;
  out["n_tokens"] = rows.n_tokens;
  out["n_heads"] = rows.n_heads;
  out["n_kv_heads"] = n_kv_heads;
  out["retention_mean"] = retention_summary.mean;
  out["retention_p5"] = retention_summary.p5;
  out["retention_min"] = retention_summary.min;
  out["output_error_mean"] = error_summary.mean;
  out["output_error_p95"] = error_summary.p95;
  out["output_error_max"] = error_summary.max;
  const py::ssize_t h = rows.n_heads, s = static_cast<py::ssize_t>(n_steps);
  out["retention"] = to_numpy(std::move(retention), {h, s});
  out["output_error"] = with_error ? py::object(to_numpy(std::move(error), {h, s})) : py::object(py::none());
  py::list groups;
  for (GroupRecord& record : records) groups.append(group_dict(std::move(record), false));
  out["groups"] = groups;
  out["note"] = kTeacherForcedNote;
  return out;
}

}  // namespace

void bind_replay(py::module_& m) {
  py::class_<ReplayOptions>(m, "_ReplayOptions")
      .def(py::init<>())
      .def_readwrite("mode", &ReplayOptions::mode)
      .def_readwrite("aggregate", &ReplayOptions::aggregate)
      .def_readwrite("rows", &ReplayOptions::rows)
      .def_readwrite("output_error", &ReplayOptions::output_error)
      .def_readwrite("quant", &ReplayOptions::quant)
      .def_readwrite("question", &ReplayOptions::question)
      .def_readwrite("compress_every", &ReplayOptions::compress_every)
      .def_readwrite("threshold", &ReplayOptions::threshold)
      .def_readwrite("window", &ReplayOptions::window)
      .def_readwrite("protect", &ReplayOptions::protect)
      .def_readwrite("span_step", &ReplayOptions::span_step)
      .def_readwrite("page", &ReplayOptions::page)
      .def_readwrite("page_score", &ReplayOptions::page_score)
      .def_readwrite("layer_budget", &ReplayOptions::layer_budget)
      .def_readwrite("head_budget", &ReplayOptions::head_budget)
      .def_readwrite("head_floor", &ReplayOptions::head_floor)
      .def_readwrite("share", &ReplayOptions::share)
      .def_readwrite("share_score", &ReplayOptions::share_score)
      .def_readwrite("pool", &ReplayOptions::pool)
      .def_readwrite("sequences", &ReplayOptions::sequences)
      .def_readwrite("layers", &ReplayOptions::layers)
      .def_readwrite("threads", &ReplayOptions::threads);
  m.def("_replay", &replay);
  m.def("_sweep", &sweep);
  m.def("_replay_rows", &replay_rows);
  // The columns of `kvsim replay --csv`, in its order: the header report.cpp's layers_csv writes.
  const std::string header = layers_csv(ReplayResults{});
  py::list names;
  for (size_t begin = 0, end; begin < header.size(); begin = end + 1) {
    end = header.find_first_of(",\n", begin);
    if (end == std::string::npos) end = header.size();
    if (end > begin) names.append(header.substr(begin, end - begin));
  }
  m.attr("REPLAY_COLUMNS") = py::tuple(names);
}

}  // namespace kvsim::python
