// kvsim._kvsim, capacity planning: kvsim.plan() is the document `kvsim plan --json` writes,
// computed by the library's make_plan (kvsim/plan/plan_table.hpp), as the CLI computes it.
#include <cmath>

#include "kvsim/core/data_dir.hpp"
#include "kvsim/plan/plan_table.hpp"
#include "kvsim/replay/sweep_table.hpp"
#include "kvtrace/error.hpp"
#include "module.hpp"

namespace kvsim::python {
namespace {

py::object plan(PlanRequest request) {
  if (request.cards.empty()) request.cards = data_dir();
  const std::string json = plan_json(make_plan(request));
  return py::module_::import("json").attr("loads")(json);
}

// plan(sweep=...) given kvsim.sweep()'s result (or any mapping of the sweep table's columns):
// the rows themselves, with no CSV text in between.
void set_sweep_columns(PlanRequest& request, const py::dict& columns) {
  std::vector<std::string> missing;
  for (const char* name : {"policy", "params", "budget", "budget_share_mean", "retention_mean"})
    if (!columns.contains(name)) missing.push_back(name);
  if (!missing.empty()) {
    std::string list;
    for (const auto& name : missing) list += (list.empty() ? "" : ", ") + name;
    throw kvtrace::InputError(
        "", "", "--sweep: the columns " + list + " are missing (pass kvsim.sweep()'s result or a sweep CSV file)");
  }
  SweepCsv table;
  size_t length = 0;
  bool first = true;
  for (const auto& column : sweep_columns()) {
    if (!columns.contains(column.name)) continue;
    const py::sequence values = py::reinterpret_borrow<py::sequence>(columns[column.name]);
    if (!first && py::len(values) != length)
      throw kvtrace::InputError("", "", "--sweep: the columns have different lengths");
    if (first) table.rows.resize(length = py::len(values));
    first = false;
    table.columns.push_back(column.name);
    for (size_t i = 0; i < length; ++i) {
      const py::object value = values[i];
      SweepRow& row = table.rows[i];
      if (column.text)  // an empty field that pandas read as NaN stays empty
        row.*column.text = py::isinstance<py::float_>(value) && std::isnan(value.cast<double>())
                               ? std::string()
                               : py::str(value).cast<std::string>();
      else if (column.real)
        row.*column.real = py::float_(value).cast<double>();
      else
        row.*column.integer = py::int_(value).cast<int64_t>();
    }
  }
  request.sweep_rows = std::move(table);
  request.sweep = "sweep()";
}

std::string plan_table_text(PlanRequest request) {
  if (request.cards.empty()) request.cards = data_dir();
  return plan_text(make_plan(request));
}

}  // namespace

void bind_plan(py::module_& m) {
  py::class_<PlanRequest>(m, "_PlanArgs")
      .def(py::init<>())
      .def_readwrite("model", &PlanRequest::model)
      .def_readwrite("gpu", &PlanRequest::gpu)
      .def_readwrite("gpus", &PlanRequest::gpus)
      .def_readwrite("weight_dtype", &PlanRequest::weight_dtype)
      .def_readwrite("kv_dtype", &PlanRequest::kv_dtype)
      .def_readwrite("kv_quant", &PlanRequest::kv_quant)
      .def_readwrite("utilization", &PlanRequest::utilization)
      .def_readwrite("reserve", &PlanRequest::reserve)
      .def_readwrite("block_size", &PlanRequest::block_size)
      .def_readwrite("context", &PlanRequest::context)
      .def_readwrite("budget", &PlanRequest::budget)
      .def_readwrite("sweep_text", &PlanRequest::sweep_text)
      .def_readwrite("sweep_name", &PlanRequest::sweep)
      .def_readwrite("context_text", &PlanRequest::context_text)
      .def_readwrite("target", &PlanRequest::target)
      .def_readwrite("cards", &PlanRequest::cards)
      .def_readwrite("layer_budget", &PlanRequest::layer_budget)
      .def_readwrite("head_budget", &PlanRequest::head_budget)
      .def_readwrite("layout", &PlanRequest::layout)
      .def("set_sweep_columns", &set_sweep_columns);
  m.def("_plan", &plan);
  m.def("_plan_text", &plan_table_text);
  py::list names;  // a plain sweep's (a question's columns and page mode's page follow them)
  for (const auto& column : sweep_columns())
    if (written(column, {})) names.append(column.name);
  m.attr("SWEEP_COLUMNS") = py::tuple(names);
  m.attr("DEFAULT_SWEEP_POLICIES") = list_tuple(kDefaultSweepPolicies);
  m.attr("DEFAULT_SWEEP_BUDGETS") = list_tuple(kDefaultSweepBudgets);
}

}  // namespace kvsim::python
