// kvsim._kvsim: the Python binding of the kvtrace and kvsim libraries (pybind11). The public,
// documented API is kvsim/_api.py, which normalises arguments and calls the functions here.
// Numbers come out as numpy arrays that own the library's vectors (no copies); attention
// given as a numpy array is read in place. Every kvtrace::InputError becomes kvsim.InputError,
// a ValueError carrying the same one-line message the CLI prints.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "array_source.hpp"
#include "kvsim/analysis.hpp"
#include "kvsim/data_dir.hpp"
#include "kvsim/replay.hpp"
#include "kvsim/report.hpp"
#include "kvsim/summary.hpp"
#include "kvsim/version.hpp"
#include "kvtrace/attention_source.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "plan_rows.hpp"

namespace py = pybind11;
using kvtrace::InputError;

namespace kvsim::python {
namespace {

[[noreturn]] void bad_option(const std::string& option, const std::string& problem) {
  throw InputError("", "", "--" + option + ": " + problem);
}

// Runs replay_trace off the calling thread with the GIL released. Ctrl-C (KeyboardInterrupt
// in the main thread) cancels it: the replay stops at its next work item and the interrupt is
// raised; otherwise its result or exception comes back.
ReplayResults interruptible_replay(const kvtrace::TraceReader& reader, ReplayConfig& config) {
  std::atomic<bool> cancel{false};
  config.cancel = &cancel;
  std::packaged_task<ReplayResults()> task([&] { return replay_trace(reader, config); });
  std::future<ReplayResults> result = task.get_future();
  bool interrupted = false;
  {
    py::gil_scoped_release release;
    std::thread worker(std::move(task));
    while (result.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      py::gil_scoped_acquire acquire;
      if (PyErr_CheckSignals() != 0) {  // leaves the KeyboardInterrupt set
        interrupted = true;
        cancel = true;
        break;
      }
    }
    worker.join();
  }
  config.cancel = nullptr;
  if (interrupted) {
    try {
      result.get();
    } catch (...) {
    }
    throw py::error_already_set();
  }
  return result.get();
}

// ---- numpy arrays that own a vector ----

template <typename T>
py::array_t<T> to_numpy(std::vector<T>&& values, std::vector<py::ssize_t> shape) {
  auto* owner = new std::vector<T>(std::move(values));
  py::capsule base(owner, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(std::move(shape), owner->data(), base);
}

template <typename T>
py::array_t<T> to_numpy(std::vector<T>&& values) {
  const auto n = static_cast<py::ssize_t>(values.size());
  return to_numpy(std::move(values), {n});
}

// ---- the trace ----

struct Trace {
  std::shared_ptr<const kvtrace::TraceReader> reader;

  const kvtrace::TraceReader& get() const {
    if (!reader) throw InputError("", "", "the trace is closed");
    return *reader;
  }
  // A reference that outlives a close() from another Python thread while the GIL is released.
  std::shared_ptr<const kvtrace::TraceReader> hold() const {
    if (!reader) throw InputError("", "", "the trace is closed");
    return reader;
  }
};

const char* grouping_name(Grouping g) { return g == Grouping::layer ? "layer" : "kv_head"; }

std::string forms_of(const kvtrace::LayerForm& form) {
  std::string out;
  for (kvtrace::Tensor tensor : {kvtrace::Tensor::q, kvtrace::Tensor::k, kvtrace::Tensor::v, kvtrace::Tensor::attn}) {
    if (!form.has(tensor)) continue;
    if (!out.empty()) out += " ";
    out += std::string(kvtrace::tensor_name(tensor)) + ":" + kvtrace::dtype_name(form.dtype(tensor));
  }
  if (form.sliding_window) out += " window=" + std::to_string(form.sliding_window);
  if (form.logit_softcap > 0) out += " softcap=" + std::to_string(form.logit_softcap);
  return out;
}

py::dict meta_dict(const kvtrace::TraceReader& reader) {
  const kvtrace::TraceMeta& m = reader.meta();
  py::dict d;
  d["model"] = m.model;
  d["source"] = m.source;
  d["created"] = m.created;
  d["tool"] = m.tool;
  d["version"] = m.version;
  d["n_layers"] = m.n_layers;
  d["n_heads"] = m.n_heads;
  d["n_kv_heads"] = m.n_kv_heads;
  d["head_dim"] = m.head_dim;
  d["attn_scale"] = m.attn_scale;
  d["n_sequences"] = reader.n_sequences();
  d["file"] = reader.path();
  d["file_size"] = reader.file_size();
  return d;
}

void check_seq(const kvtrace::TraceReader& reader, int seq) {
  if (seq < 0 || seq >= reader.n_sequences())
    reader.fail("", "sequence " + std::to_string(seq) + " out of range (the trace has " +
                        std::to_string(reader.n_sequences()) + ")");
}

void check_layer(const kvtrace::TraceReader& reader, int layer) {
  if (layer < 0 || layer >= reader.meta().n_layers)
    reader.fail("", "layer " + std::to_string(layer) + " out of range (the trace has " +
                        std::to_string(reader.meta().n_layers) + ")");
}

py::dict sequence_dict(const kvtrace::TraceReader& reader, int seq) {
  check_seq(reader, seq);
  const kvtrace::SequenceMeta& s = reader.sequence(seq);
  py::dict d;
  d["index"] = seq;
  d["n_tokens"] = s.n_tokens;
  d["prompt_len"] = s.prompt_len;
  d["has_token_text"] = s.has_token_text;
  py::list layers;
  for (const auto& layer : s.layers) layers.append(forms_of(layer));
  d["layers"] = layers;
  return d;
}

std::vector<int> head_list(const kvtrace::TraceReader& reader, const std::vector<int>& heads) {
  const int n = reader.meta().n_heads;
  std::vector<int> out = heads;
  if (out.empty())
    for (int h = 0; h < n; ++h) out.push_back(h);
  for (int h : out)
    if (h < 0 || h >= n)
      reader.fail("", "head " + std::to_string(h) + " out of range (the trace has " + std::to_string(n) + ")");
  return out;
}

// Rows of `heads` of one layer as the engine sees them: [heads][n][n] (zeros above the
// diagonal) or packed [heads][n(n+1)/2].
py::array_t<float> attention(const Trace& trace, int seq, int layer, const std::vector<int>& heads_in, bool packed,
                             const std::string& rows) {
  const auto held = trace.hold();
  const kvtrace::TraceReader& reader = *held;
  check_seq(reader, seq);
  check_layer(reader, layer);
  const std::vector<int> heads = head_list(reader, heads_in);
  const kvtrace::RowsFrom from = parse_rows(rows);
  const int64_t n = reader.sequence(seq).n_tokens;
  const size_t per_head = static_cast<size_t>(packed ? kvtrace::packed_length(n) : n * n);
  std::vector<float> out;
  {
    py::gil_scoped_release release;
    out.assign(per_head * heads.size(), 0.0f);
    auto source = kvtrace::open_attention_source(reader, seq, layer, heads, from);
    kvtrace::RowBlock block;
    for (int64_t first = 0; first < n; first += kvtrace::kRowBlockSize) {
      const int64_t count = std::min(kvtrace::kRowBlockSize, n - first);
      source->rows(first, count, block);
      for (size_t h = 0; h < heads.size(); ++h)
        for (int64_t t = first; t < first + count; ++t) {
          const float* row = block.row(static_cast<int>(h), t);
          float* dst = out.data() + h * per_head +
                       static_cast<size_t>(packed ? kvtrace::packed_row_offset(t) : t * n);
          std::copy(row, row + t + 1, dst);
        }
    }
  }
  const auto h = static_cast<py::ssize_t>(heads.size());
  if (packed) return to_numpy(std::move(out), {h, static_cast<py::ssize_t>(per_head)});
  return to_numpy(std::move(out), {h, static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(n)});
}

py::array_t<float> tensor(const Trace& trace, int seq, int layer, const std::string& name, int head) {
  const auto held = trace.hold();
  const kvtrace::TraceReader& reader = *held;
  check_seq(reader, seq);
  check_layer(reader, layer);
  kvtrace::Tensor t;
  if (name == "q") t = kvtrace::Tensor::q;
  else if (name == "k") t = kvtrace::Tensor::k;
  else if (name == "v") t = kvtrace::Tensor::v;
  else throw InputError("", "", "tensor '" + name + "' is not q, k or v (attention() reads attn)");
  if (!reader.layer(seq, layer).has(t))
    reader.fail(kvtrace::tensor_path(seq, layer, t), "this layer has no " + name);
  const int heads = t == kvtrace::Tensor::q ? reader.meta().n_heads : reader.meta().n_kv_heads;
  if (head < 0 || head >= heads)
    reader.fail(kvtrace::tensor_path(seq, layer, t), "head " + std::to_string(head) + " out of range (" +
                                                         std::to_string(heads) + " heads)");
  std::vector<float> data;
  {
    py::gil_scoped_release release;
    data = reader.read_head(seq, layer, t, head);
  }
  return to_numpy(std::move(data), {static_cast<py::ssize_t>(reader.sequence(seq).n_tokens),
                                    static_cast<py::ssize_t>(reader.meta().head_dim)});
}

// ---- policies ----

py::list policies_list() {
  py::list out;
  for (const PolicyInfo& info : policies()) {
    py::list params;
    for (const ParamSpec& spec : info.params) {
      py::dict p;
      p["name"] = spec.name;
      p["type"] = spec.type == ParamType::integer ? "integer" : spec.type == ParamType::real ? "real" : "choice";
      p["default"] = spec.default_value.empty() ? py::object(py::none()) : py::object(py::str(spec.default_value));
      p["help"] = spec.help;
      if (spec.type == ParamType::choice) {
        p["choices"] = spec.choices;
      } else {
        p["min"] = spec.min;
        p["max"] = spec.max;
      }
      params.append(p);
    }
    py::dict d;
    d["name"] = info.name;
    d["summary"] = info.summary;
    d["grouping"] = grouping_name(info.grouping);
    d["budgeted"] = info.budgeted;
    d["bound"] = info.engine == Engine::bound;
    d["cross_layer"] = info.engine == Engine::cross_layer;
    d["params"] = params;
    out.append(d);
  }
  return out;
}

// ---- replay and sweep ----

struct ReplayOptions {
  std::string mode = "stream", aggregate = "mean", rows = "auto", output_error = "auto", quant, layer_budget = "uniform";
  std::vector<int> sequences, layers;
  int threads = 0;
};

void apply_options(const ReplayOptions& o, const kvtrace::TraceReader& reader, ReplayConfig& config) {
  config.mode = parse_mode(o.mode);
  config.aggregate = parse_aggregate(o.aggregate);
  config.rows = parse_rows(o.rows);
  if (o.output_error == "auto") config.output_error = OutputErrorMode::automatic;
  else if (o.output_error == "on") config.output_error = OutputErrorMode::on;
  else if (o.output_error == "off") config.output_error = OutputErrorMode::off;
  else bad_option("output-error", "'" + o.output_error + "' is not auto, on or off");
  for (int i : o.sequences)
    if (i < 0) bad_option("seqs", "'" + std::to_string(i) + "' is not an index");
  for (int i : o.layers)
    if (i < 0) bad_option("layers", "'" + std::to_string(i) + "' is not an index");
  config.sequences = o.sequences;
  config.layers = o.layers;
  if (o.threads < 0) bad_option("threads", "must be >= 0");
  config.threads = o.threads;
  config.schedule = o.layer_budget == "persistence"
                        ? persistence_schedule(reader, config.sequences, config.rows, config.threads)
                        : LayerSchedule::parse(o.layer_budget, reader.meta().n_layers);
  if (!o.quant.empty()) config.quant = parse_quant_list(o.quant);
}

// As the CLI's --param: key=value goes to every chosen policy that takes key; policy.key=value
// to that policy only.
std::vector<PolicyChoice> choose_policies(const std::vector<std::string>& names,
                                          const std::vector<std::pair<std::string, std::string>>& params) {
  if (names.empty()) bad_option("policies", "no policy given");
  std::vector<std::map<std::string, std::string>> overrides(names.size());
  for (const auto& [raw_key, value] : params) {
    std::string key = raw_key, target;
    if (key.empty()) bad_option("param", "'=" + value + "' is not key=value");
    const size_t dot = key.find('.');
    if (dot != std::string::npos) {
      target = key.substr(0, dot);
      key = key.substr(dot + 1);
    }
    bool used = false;
    for (size_t p = 0; p < names.size(); ++p) {
      const PolicyInfo& info = find_policy(names[p]);
      const bool takes =
          std::any_of(info.params.begin(), info.params.end(), [&](const ParamSpec& s) { return s.name == key; });
      // With one policy every plain key goes to it (an unknown one is then named with the
      // parameters it takes), as the CLI's --param.
      if (target.empty() ? takes || names.size() == 1 : names[p] == target) {
        overrides[p][key] = value;
        used = true;
      }
    }
    if (!used)
      bad_option("param", target.empty() ? "no chosen policy takes '" + key + "'"
                                         : "policy '" + target + "' is not among those chosen");
  }
  std::vector<PolicyChoice> out;
  for (size_t p = 0; p < names.size(); ++p) out.push_back(choose_policy(names[p], overrides[p]));
  return out;
}

py::dict summary_dict(const CellResult& cell, Mode mode) {
  py::dict d;
  d["policy"] = cell.info ? cell.info->name : cell.policy;
  d["label"] = cell.policy;
  d["params"] = cell.params;
  d["budget"] = cell.budget.text;
  d["quant"] = cell.quant.name;
  d["bits_per_element"] = cell.bits_per_element;
  d["budget_tokens_mean"] = cell.budget_tokens_mean;
  d["budget_share_mean"] = cell.budget_share_mean;
  d["mode"] = mode_name(mode);
  d["retention_mean"] = cell.retention.mean;
  d["retention_p5"] = cell.retention.p5;
  d["retention_min"] = cell.retention.min;
  d["output_error_mean"] = cell.output_error.mean;
  d["output_error_p95"] = cell.output_error.p95;
  d["output_error_max"] = cell.output_error.max;
  d["occupancy_mean"] = cell.occupancy_mean;
  d["occupancy_peak"] = cell.occupancy_peak;
  d["evictions"] = cell.evictions;
  d["samples"] = cell.retention.count;
  return d;
}

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
  std::vector<int64_t> steps(static_cast<size_t>(r.n_steps));
  for (int64_t s = 0; s < r.n_steps; ++s) steps[static_cast<size_t>(s)] = r.first_step + s;
  d["steps"] = to_numpy(std::move(steps));
  const auto heads = static_cast<py::ssize_t>(r.n_heads), n_steps = static_cast<py::ssize_t>(r.n_steps);
  d["retention"] = to_numpy(std::move(r.retention), {heads, n_steps});
  if (r.output_error.empty()) d["output_error"] = py::none();
  else d["output_error"] = to_numpy(std::move(r.output_error), {heads, n_steps});
  d["occupancy"] = to_numpy(std::move(r.occupancy));
  d["eviction_step"] = to_numpy(std::move(r.eviction_step));
  d["evictions"] = r.evictions;
  d["budget"] = r.budget;
  return d;
}

py::dict replay(const Trace& trace, const std::string& policy, const std::string& budget,
                const std::vector<std::pair<std::string, std::string>>& params, const ReplayOptions& options,
                bool records) {
  const auto held = trace.hold();
  const kvtrace::TraceReader& reader = *held;
  ReplayConfig config;
  config.policies = choose_policies({policy}, params);
  config.budgets = {Budget::parse(budget)};
  {
    py::gil_scoped_release release;
    apply_options(options, reader, config);
    if (config.quant.size() > 1) bad_option("quant", "replay takes one quantization spec (sweep takes a list)");
  }
  config.keep_records = records;
  ReplayResults results = interruptible_replay(reader, config);
  CellResult& cell = results.cells.front();
  py::dict out = summary_dict(cell, results.mode);
  out["output_error"] = results.output_error;
  out["sequences"] = results.sequences;
  out["n_layers"] = results.layers;
  out["n_heads"] = results.heads;
  // Per layer: layers_csv's columns without the "all" row (that is the summary above).
  const size_t n = cell.layers.size();
  std::vector<int64_t> layer(n);
  std::vector<double> rmean(n), rp5(n), rmin(n), emean(n), ep95(n), occupancy(n);
  for (size_t i = 0; i < n; ++i) {
    const LayerSummary& l = cell.layers[i];
    layer[i] = l.layer;
    rmean[i] = l.retention.mean;
    rp5[i] = l.retention.p5;
    rmin[i] = l.retention.min;
    emean[i] = l.output_error.mean;
    ep95[i] = l.output_error.p95;
    occupancy[i] = l.occupancy_mean;
  }
  py::dict layers;
  layers["layer"] = to_numpy(std::move(layer));
  layers["retention_mean"] = to_numpy(std::move(rmean));
  layers["retention_p5"] = to_numpy(std::move(rp5));
  layers["retention_min"] = to_numpy(std::move(rmin));
  layers["output_error_mean"] = to_numpy(std::move(emean));
  layers["output_error_p95"] = to_numpy(std::move(ep95));
  layers["occupancy_mean"] = to_numpy(std::move(occupancy));
  out["layers"] = layers;
  py::dict groups;
  for (GroupRecord& record : cell.records) {
    const py::tuple key = py::make_tuple(record.seq, record.layer, record.group);
    groups[key] = group_dict(std::move(record), true);
  }
  out["groups"] = groups;
  out["note"] = kTeacherForcedNote;
  return out;
}

py::dict sweep(const Trace& trace, const std::vector<std::string>& policy_names, const std::vector<std::string>& budgets,
               const std::vector<std::pair<std::string, std::string>>& params, const ReplayOptions& options) {
  const auto held = trace.hold();
  const kvtrace::TraceReader& reader = *held;
  ReplayConfig config;
  config.policies = choose_policies(policy_names, params);
  if (budgets.empty()) bad_option("budgets", "no budget given");
  for (const auto& b : budgets) config.budgets.push_back(Budget::parse(b));
  {
    py::gil_scoped_release release;
    apply_options(options, reader, config);
    if (!config.quant.empty()) config.quant = parse_quant_list("none," + options.quant);  // added to the plain grid
  }
  ReplayResults results = interruptible_replay(reader, config);
  // sweep_csv's columns, in its order.
  const size_t n = results.cells.size();
  py::list policy, label, params_col, budget, quant, mode;
  std::vector<double> bits(n), tokens(n), share(n), rmean(n), rp5(n), rmin(n), emean(n), ep95(n), emax(n), occupancy(n);
  std::vector<int64_t> peak(n), evictions(n), samples(n);
  for (size_t i = 0; i < n; ++i) {
    const CellResult& c = results.cells[i];
    policy.append(c.info ? c.info->name : c.policy);
    label.append(c.policy);
    params_col.append(c.params);
    budget.append(c.budget.text);
    quant.append(c.quant.name);
    mode.append(mode_name(results.mode));
    bits[i] = c.bits_per_element;
    tokens[i] = c.budget_tokens_mean;
    share[i] = c.budget_share_mean;
    rmean[i] = c.retention.mean;
    rp5[i] = c.retention.p5;
    rmin[i] = c.retention.min;
    emean[i] = c.output_error.mean;
    ep95[i] = c.output_error.p95;
    emax[i] = c.output_error.max;
    occupancy[i] = c.occupancy_mean;
    peak[i] = c.occupancy_peak;
    evictions[i] = c.evictions;
    samples[i] = c.retention.count;
  }
  py::dict out;
  out["policy"] = policy;
  out["params"] = params_col;
  out["budget"] = budget;
  out["quant"] = quant;
  out["bits_per_element"] = to_numpy(std::move(bits));
  out["budget_tokens_mean"] = to_numpy(std::move(tokens));
  out["budget_share_mean"] = to_numpy(std::move(share));
  out["mode"] = mode;
  out["retention_mean"] = to_numpy(std::move(rmean));
  out["retention_p5"] = to_numpy(std::move(rp5));
  out["retention_min"] = to_numpy(std::move(rmin));
  out["output_error_mean"] = to_numpy(std::move(emean));
  out["output_error_p95"] = to_numpy(std::move(ep95));
  out["output_error_max"] = to_numpy(std::move(emax));
  out["occupancy_mean"] = to_numpy(std::move(occupancy));
  out["occupancy_peak"] = to_numpy(std::move(peak));
  out["evictions"] = to_numpy(std::move(evictions));
  out["samples"] = to_numpy(std::move(samples));
  out["label"] = label;
  return out;
}

// ---- rows given as arrays ----

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

struct Rows {
  FloatArray array;  // keeps the buffer alive
  int n_heads = 0;
  int64_t n_tokens = 0;
  bool packed = false;
};

int64_t tokens_of_packed(int64_t length) {
  int64_t n = static_cast<int64_t>(std::floor((std::sqrt(8.0 * static_cast<double>(length) + 1.0) - 1.0) / 2.0));
  while (n * (n + 1) / 2 < length) ++n;
  while (n > 0 && n * (n + 1) / 2 > length) --n;
  if (n * (n + 1) / 2 != length)
    throw InputError("", "attention", "a packed row set holds n(n+1)/2 values; " + std::to_string(length) +
                                          " is not such a number");
  return n;
}

// [heads, n, n] full matrices, [heads, n(n+1)/2] packed, or [n(n+1)/2] one packed head.
Rows rows_of(const py::handle& object) {
  Rows r;
  r.array = FloatArray::ensure(object);
  if (!r.array) throw InputError("", "attention", "not convertible to a float32 array");
  const auto& a = r.array;
  if (a.ndim() == 3) {
    if (a.shape(1) != a.shape(2))
      throw InputError("", "attention", "a [heads, n, n] array needs square matrices, got [" + std::to_string(a.shape(0)) +
                                            ", " + std::to_string(a.shape(1)) + ", " + std::to_string(a.shape(2)) + "]");
    r.n_heads = static_cast<int>(a.shape(0));
    r.n_tokens = a.shape(1);
  } else if (a.ndim() == 2) {
    r.n_heads = static_cast<int>(a.shape(0));
    r.n_tokens = tokens_of_packed(a.shape(1));
    r.packed = true;
  } else if (a.ndim() == 1) {
    r.n_heads = 1;
    r.n_tokens = tokens_of_packed(a.shape(0));
    r.packed = true;
  } else {
    throw InputError("", "attention", "expected [heads, n, n] (full) or [heads, n(n+1)/2] (packed), got " +
                                          std::to_string(a.ndim()) + " dimensions");
  }
  if (r.n_heads < 1 || r.n_heads > kvtrace::Limits::max_heads)
    throw InputError("", "attention", std::to_string(r.n_heads) + " heads (1 to " +
                                          std::to_string(kvtrace::Limits::max_heads) + " supported)");
  return r;
}

py::dict replay_rows(const py::object& attention, const std::string& policy_name, const std::string& budget_text,
                     int n_kv_heads, const std::vector<std::pair<std::string, std::string>>& params,
                     const std::string& mode, int64_t prompt_len, const std::string& aggregate,
                     const py::object& values_object, const std::vector<int>& origin_in) {
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
      bad_option("prompt-len", "prefill needs a prompt length from 1 to the " + std::to_string(rows.n_tokens) + " rows");
    options.prompt_len = prompt_len;
  } else if (prompt_len < 0) {
    bad_option("prompt-len", "must be >= 0");
  }
  std::vector<std::vector<float>> values;
  int head_dim = 0;
  if (!values_object.is_none()) {
    FloatArray v = FloatArray::ensure(values_object);
    if (!v || v.ndim() != 3 || v.shape(0) != n_kv_heads || v.shape(1) != rows.n_tokens)
      throw InputError("", "values", "expected a float array [n_kv_heads = " + std::to_string(n_kv_heads) +
                                         ", n = " + std::to_string(rows.n_tokens) + ", head_dim]");
    head_dim = static_cast<int>(v.shape(2));
    if (head_dim < 1) throw InputError("", "values", "head_dim must be at least 1");
    const size_t size = static_cast<size_t>(rows.n_tokens) * static_cast<size_t>(head_dim);
    for (int g = 0; g < n_kv_heads; ++g) {
      const float* begin = v.data() + static_cast<size_t>(g) * size;
      for (size_t i = 0; i < size; ++i)
        if (!std::isfinite(begin[i]))
          throw InputError("", "values", std::string(std::isnan(begin[i]) ? "NaN" : "Inf") + " at kv head " +
                                             std::to_string(g) + ", row " + std::to_string(i / static_cast<size_t>(head_dim)));
      values.emplace_back(begin, begin + size);
    }
  }
  RowsOrigin origin;
  if (origin_in.size() != 3 || origin_in[0] < 0 || origin_in[1] < 0 || origin_in[2] < 0)
    throw InputError("", "", "origin: (sequence, layer, first kv head), each >= 0");
  origin.seq = origin_in[0];
  origin.layer = origin_in[1];
  origin.first_kv_head = origin_in[2];
  const int64_t b = budget.resolve(rows.n_tokens);
  std::vector<GroupRecord> records;
  {
    py::gil_scoped_release release;
    ArrayAttentionSource source(rows.array.data(), rows.n_heads, rows.n_tokens, rows.packed);
    records = replay_rows(source, n_kv_heads, policy, b, options, values, head_dim, origin);
  }
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

// ---- analysis ----

struct AnalyzeOptions {
  std::vector<int64_t> lags = {1, 4, 16, 64};
  std::string top_k = "10%";
  int64_t min_positions = 8, max_steps = 256;
  int samples = 4;
  bool correlations = true;
};

AnalysisOptions analysis_options(const AnalyzeOptions& o) {
  AnalysisOptions options;
  options.lags = o.lags;
  for (int64_t lag : options.lags)
    if (lag < 1 || lag > (int64_t{1} << 30)) bad_option("lags", "'" + std::to_string(lag) + "' is not an integer >= 1");
  if (options.lags.empty()) bad_option("lags", "nothing given");
  std::sort(options.lags.begin(), options.lags.end());
  options.lags.erase(std::unique(options.lags.begin(), options.lags.end()), options.lags.end());
  try {
    options.top_k = Budget::parse(o.top_k);
  } catch (const InputError&) {
    bad_option("topk", "'" + o.top_k + "' is not a token count or a percentage (write e.g. 8 or 10%)");
  }
  options.min_positions = o.min_positions;
  options.max_start_steps = o.max_steps;
  options.repeat_samples = o.samples;
  options.correlations = o.correlations;
  check_options(options);
  return options;
}

// Columns of StatRows (analysis_csv's columns; layer -1 = every layer, head -1 = the mean over heads).
py::dict stat_columns(const std::vector<const StatRow*>& rows, const AnalysisOptions& options) {
  const size_t n = rows.size();
  std::vector<int64_t> layer(n), head(n), count(n), defined(n);
  std::vector<double> persistence(n), ever(n), repeat(n);
  const bool correlations = !rows.empty() && !rows.front()->spearman.empty();
  const size_t lags = correlations ? options.lags.size() : 0;
  std::vector<std::vector<double>> spearman(lags, std::vector<double>(n)), recall(lags, std::vector<double>(n));
  for (size_t i = 0; i < n; ++i) {
    const StatRow& r = *rows[i];
    layer[i] = r.layer;
    head[i] = r.head;
    count[i] = r.count;
    defined[i] = r.persistence_defined;
    persistence[i] = r.persistence;
    ever[i] = r.ever_pivotal;
    repeat[i] = r.repeat_share;
    for (size_t l = 0; l < lags; ++l) {
      spearman[l][i] = r.spearman[l];
      recall[l][i] = r.topk_recall[l];
    }
  }
  py::dict d;
  d["layer"] = to_numpy(std::move(layer));
  d["head"] = to_numpy(std::move(head));
  d["count"] = to_numpy(std::move(count));
  d["persistence"] = to_numpy(std::move(persistence));
  d["persistence_defined"] = to_numpy(std::move(defined));
  d["ever_pivotal"] = to_numpy(std::move(ever));
  d["repeat_share"] = to_numpy(std::move(repeat));
  for (size_t l = 0; l < lags; ++l)
    d[py::str("spearman_lag" + std::to_string(options.lags[l]))] = to_numpy(std::move(spearman[l]));
  for (size_t l = 0; l < lags; ++l)
    d[py::str("topk_recall_lag" + std::to_string(options.lags[l]))] = to_numpy(std::move(recall[l]));
  return d;
}

// Per (sequence, layer, head) columns of the items.
py::dict item_columns(std::vector<LayerAnalysis>& items, const AnalysisOptions& options) {
  std::vector<int64_t> seq, layer, head, n_tokens, early, late, persistent;
  std::vector<double> persistence, ever, repeat;
  const size_t lags = options.correlations ? options.lags.size() : 0;
  std::vector<std::vector<double>> spearman(lags), recall(lags);
  py::list repeats;
  for (const LayerAnalysis& item : items)
    for (const HeadAnalysis& h : item.heads) {
      seq.push_back(item.seq);
      layer.push_back(item.layer);
      head.push_back(h.head);
      n_tokens.push_back(item.n_tokens);
      early.push_back(h.early);
      late.push_back(h.late);
      persistent.push_back(h.persistent);
      persistence.push_back(h.persistence);
      ever.push_back(h.ever_pivotal);
      repeat.push_back(h.repeat_share);
      for (size_t l = 0; l < lags; ++l) {
        spearman[l].push_back(l < h.lags.size() ? h.lags[l].spearman : NAN);
        recall[l].push_back(l < h.lags.size() ? h.lags[l].topk_recall : NAN);
      }
      py::dict steps;
      for (const RepeatStep& r : h.repeats)
        steps[py::int_(r.step)] = to_numpy(std::vector<int32_t>(r.positions));
      repeats.append(steps);
    }
  py::dict d;
  d["seq"] = to_numpy(std::move(seq));
  d["layer"] = to_numpy(std::move(layer));
  d["head"] = to_numpy(std::move(head));
  d["n_tokens"] = to_numpy(std::move(n_tokens));
  d["early"] = to_numpy(std::move(early));
  d["late"] = to_numpy(std::move(late));
  d["persistent"] = to_numpy(std::move(persistent));
  d["persistence"] = to_numpy(std::move(persistence));
  d["ever_pivotal"] = to_numpy(std::move(ever));
  d["repeat_share"] = to_numpy(std::move(repeat));
  for (size_t l = 0; l < lags; ++l)
    d[py::str("spearman_lag" + std::to_string(options.lags[l]))] = to_numpy(std::move(spearman[l]));
  for (size_t l = 0; l < lags; ++l)
    d[py::str("topk_recall_lag" + std::to_string(options.lags[l]))] = to_numpy(std::move(recall[l]));
  d["repeats"] = repeats;
  return d;
}

py::dict analyze(const Trace& trace, const AnalyzeOptions& o, const std::string& rows, const std::vector<int>& sequences,
                 const std::vector<int>& layers, int threads) {
  const auto held = trace.hold();
  const kvtrace::TraceReader& reader = *held;
  AnalysisConfig config;
  config.rows = parse_rows(rows);
  for (int i : sequences)
    if (i < 0) bad_option("seqs", "'" + std::to_string(i) + "' is not an integer >= 0");
  for (int i : layers)
    if (i < 0) bad_option("layers", "'" + std::to_string(i) + "' is not an integer >= 0");
  config.sequences = sequences;
  config.layers = layers;
  config.options = analysis_options(o);
  if (threads < 0) bad_option("threads", "must be >= 0");
  config.threads = threads;
  TraceAnalysis a;
  {
    py::gil_scoped_release release;
    a = analyze_trace(reader, config);
  }
  std::vector<const StatRow*> heads, layer_means;
  for (const StatRow& r : a.heads) heads.push_back(&r);
  for (const StatRow& r : a.layer_means) layer_means.push_back(&r);
  py::dict out;
  out["lags"] = a.options.lags;
  out["sequences"] = a.sequences;
  out["layers"] = a.layers;
  out["heads"] = stat_columns(heads, a.options);
  out["layer_means"] = stat_columns(layer_means, a.options);
  py::dict overall = stat_columns({&a.overall}, a.options);
  py::dict overall_scalars;
  for (auto item : overall) overall_scalars[item.first] = item.second.attr("item")(0);
  out["overall"] = overall_scalars;
  std::vector<int64_t> la, lb;
  std::vector<double> sp, spn;
  for (const CrossLayerPair& p : a.cross_layer) {
    la.push_back(p.layer_a);
    lb.push_back(p.layer_b);
    sp.push_back(p.spearman);
    spn.push_back(p.spearman_normalised);
  }
  py::dict cross;
  cross["layer_a"] = to_numpy(std::move(la));
  cross["layer_b"] = to_numpy(std::move(lb));
  cross["spearman"] = to_numpy(std::move(sp));
  cross["spearman_normalised"] = to_numpy(std::move(spn));
  out["cross_layer"] = cross;
  out["per_sequence"] = item_columns(a.items, a.options);
  std::vector<double> persistence;
  for (const StatRow& r : a.layer_means) persistence.push_back(r.persistence);
  out["persistence_weights"] = to_numpy(persistence_weights(persistence));
  return out;
}

py::dict analyze_rows(const py::object& attention, const AnalyzeOptions& o) {
  Rows rows = rows_of(attention);
  const AnalysisOptions options = analysis_options(o);
  std::vector<LayerAnalysis> items(1);
  {
    py::gil_scoped_release release;
    ArrayAttentionSource source(rows.array.data(), rows.n_heads, rows.n_tokens, rows.packed);
    items[0] = kvsim::analyze_rows(source, options);
  }
  py::dict out;
  out["lags"] = options.lags;
  out["n_tokens"] = rows.n_tokens;
  out["importance"] = to_numpy(std::move(items[0].importance));
  out["importance_normalised"] = to_numpy(std::move(items[0].importance_normalised));
  py::dict heads = item_columns(items, options);
  heads.attr("pop")("seq");
  heads.attr("pop")("layer");
  out["heads"] = heads;
  return out;
}

// ---- planning ----

py::object plan(const PlanArgs& args) {
  const std::string json = plan_json(args);
  return py::module_::import("json").attr("loads")(json);
}

}  // namespace
}  // namespace kvsim::python

PYBIND11_MODULE(_kvsim, m) {
  using namespace kvsim::python;
  namespace ks = kvsim;
  m.doc() = "kvsim's compiled core (kvtrace + kvsim libraries); use the functions of the kvsim package";

  py::register_exception<InputError>(m, "InputError", PyExc_ValueError);

  m.def("version", [] { return std::string(ks::version()); });
  m.def("data_dir", &ks::data_dir, "the folder holding the model and GPU cards and the bundled traces");
  m.def("policies", &policies_list);

  py::class_<Trace>(m, "Trace")
      .def(py::init([](const std::string& path) {
             Trace t;
             t.reader = std::make_shared<const kvtrace::TraceReader>(path);
             return t;
           }),
           py::arg("path"))
      .def_property_readonly("path", [](const Trace& t) { return t.get().path(); })
      .def_property_readonly("meta", [](const Trace& t) { return meta_dict(t.get()); })
      .def_property_readonly("n_sequences", [](const Trace& t) { return t.get().n_sequences(); })
      .def_property_readonly("closed", [](const Trace& t) { return !t.reader; })
      .def("sequence", [](const Trace& t, int seq) { return sequence_dict(t.get(), seq); }, py::arg("seq"))
      .def("tokens", [](const Trace& t, int seq) {
             check_seq(t.get(), seq);
             return to_numpy(t.get().tokens(seq));
           }, py::arg("seq"))
      .def("token_text", [](const Trace& t, int seq) {
             check_seq(t.get(), seq);
             return t.get().token_text(seq);
           }, py::arg("seq"))
      .def("_attention", &attention)
      .def("_tensor", &tensor)
      .def("close", [](Trace& t) { t.reader.reset(); });

  py::class_<ReplayOptions>(m, "_ReplayOptions")
      .def(py::init<>())
      .def_readwrite("mode", &ReplayOptions::mode)
      .def_readwrite("aggregate", &ReplayOptions::aggregate)
      .def_readwrite("rows", &ReplayOptions::rows)
      .def_readwrite("output_error", &ReplayOptions::output_error)
      .def_readwrite("quant", &ReplayOptions::quant)
      .def_readwrite("layer_budget", &ReplayOptions::layer_budget)
      .def_readwrite("sequences", &ReplayOptions::sequences)
      .def_readwrite("layers", &ReplayOptions::layers)
      .def_readwrite("threads", &ReplayOptions::threads);
  py::class_<AnalyzeOptions>(m, "_AnalyzeOptions")
      .def(py::init<>())
      .def_readwrite("lags", &AnalyzeOptions::lags)
      .def_readwrite("top_k", &AnalyzeOptions::top_k)
      .def_readwrite("min_positions", &AnalyzeOptions::min_positions)
      .def_readwrite("max_steps", &AnalyzeOptions::max_steps)
      .def_readwrite("samples", &AnalyzeOptions::samples)
      .def_readwrite("correlations", &AnalyzeOptions::correlations);
  py::class_<PlanArgs>(m, "_PlanArgs")
      .def(py::init<>())
      .def_readwrite("model", &PlanArgs::model)
      .def_readwrite("gpu", &PlanArgs::gpu)
      .def_readwrite("gpus", &PlanArgs::gpus)
      .def_readwrite("weight_dtype", &PlanArgs::weight_dtype)
      .def_readwrite("kv_dtype", &PlanArgs::kv_dtype)
      .def_readwrite("kv_quant", &PlanArgs::kv_quant)
      .def_readwrite("utilization", &PlanArgs::utilization)
      .def_readwrite("reserve", &PlanArgs::reserve)
      .def_readwrite("block_size", &PlanArgs::block_size)
      .def_readwrite("context", &PlanArgs::context)
      .def_readwrite("budget", &PlanArgs::budget)
      .def_readwrite("sweep_text", &PlanArgs::sweep_text)
      .def_readwrite("sweep_name", &PlanArgs::sweep_name)
      .def_readwrite("context_text", &PlanArgs::context_text)
      .def_readwrite("target", &PlanArgs::target)
      .def_readwrite("cards", &PlanArgs::cards);

  m.def("_replay", &replay);
  m.def("_sweep", &sweep);
  m.def("_replay_rows", &replay_rows);
  m.def("_analyze", &analyze);
  m.def("_analyze_rows", &analyze_rows);
  m.def("_plan", &plan);
}
