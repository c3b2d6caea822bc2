// kvsim._kvsim, capacity planning: kvsim.plan() is the document `kvsim plan --json` writes,
// computed by the library's make_plan (kvsim/plan/plan_table.hpp), as the CLI computes it.
#include "kvsim/core/data_dir.hpp"
#include "kvsim/plan/plan_table.hpp"
#include "module.hpp"

namespace kvsim::python {
namespace {

py::object plan(PlanRequest request) {
  if (request.cards.empty()) request.cards = data_dir();
  const std::string json = plan_json(make_plan(request));
  return py::module_::import("json").attr("loads")(json);
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
      .def_readwrite("cards", &PlanRequest::cards);
  m.def("_plan", &plan);
}

}  // namespace kvsim::python
