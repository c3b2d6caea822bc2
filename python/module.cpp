// kvsim._kvsim: the Python binding of the kvtrace and kvsim libraries (pybind11). The public,
// documented API is kvsim/_api.py, which normalises arguments and calls the functions here.
// Numbers come out as numpy arrays that own the library's vectors (no copies); attention
// given as a numpy array is read in place. Every kvtrace::InputError becomes kvsim.InputError,
// a ValueError carrying the same one-line message the CLI prints.
//
// This file holds the module's general functions; each area is in its own file (module.hpp).
#include <pybind11/stl.h>

#include <chrono>
#include <exception>
#include <future>
#include <thread>

#include "kvsim/core/data_dir.hpp"
#include "kvsim/core/lists.hpp"
#include "kvsim/core/policy.hpp"
#include "kvsim/core/version.hpp"
#include "kvsim/policies/registry.hpp"
#include "module.hpp"

namespace kvsim::python {
namespace {

const char* grouping_name(Grouping g) { return g == Grouping::layer ? "layer" : "kv_head"; }

// ---- policies ----

py::list policies_list() {
  py::list out;
  for (const PolicyInfo& info : policies()) {
    py::list params;
    for (const ParamSpec& spec : info.params) {
      py::dict p;
      p["name"] = spec.name;
      p["type"] = param_type_name(spec.type);
      p["default"] = spec.default_value.empty() ? py::object(py::none()) : py::object(py::str(spec.default_value));
      p["help"] = spec.help;
      if (spec.type == ParamType::choice) {
        p["choices"] = spec.choices;
      } else if (spec.type != ParamType::index_set) {
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
    d["bound"] = info.upper_bound();
    d["selects"] = info.selects;
    d["cross_layer"] = info.engine == Engine::cross_layer;
    py::list reads;  // the stored tensors it reads: "k", "v", "q"
    if (info.needs_keys) reads.append("k");
    if (info.needs_values) reads.append("v");
    if (info.needs_queries) reads.append("q");
    d["reads"] = reads;
    // Its own budget mechanisms (PolicyInfo::layer_budget at the defaults, head_floor), or None.
    d["layer_budget"] =
        info.layer_budget ? py::object(py::str(info.layer_budget(resolve_params(info, {})))) : py::object(py::none());
    d["head_floor"] = info.head_floor >= 0 ? py::object(py::float_(info.head_floor)) : py::object(py::none());
    const PressAlias* alias = kvpress_alias(info.name);  // the kvpress names it answers to, or None
    d["kvpress"] = alias ? py::object(py::make_tuple(alias->press, alias->module)) : py::object(py::none());
    d["python"] = is_python_policy(info.name);
    d["params"] = params;
    out.append(d);
  }
  return out;
}

}  // namespace

void refuse_repeats(const std::string& option, const std::vector<std::string>& items) {
  std::string list;
  for (size_t i = 0; i < items.size(); ++i) list.append(i > 0 ? "," : "").append(items[i]);
  parse_name_list(option, list);
}

py::tuple list_tuple(const std::string& list) { return py::tuple(py::cast(split_list("list", list))); }

void run_interruptibly(const std::function<void(const std::atomic<bool>& cancel)>& work) {
  std::atomic<bool> cancel{false};
  std::exception_ptr failure;
  bool interrupted = false;
  {
    py::gil_scoped_release release;
    std::promise<void> done;
    std::future<void> finished = done.get_future();
    std::thread worker([&] {
      try {
        work(cancel);
      } catch (...) {
        failure = std::current_exception();
      }
      done.set_value();
    });
    while (finished.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      py::gil_scoped_acquire acquire;
      if (PyErr_CheckSignals() != 0) {  // the handler's exception stays set until raised below
        interrupted = true;
        cancel = true;
        break;
      }
    }
    worker.join();  // without the GIL: the work's Python policies may need it to finish
  }
  if (interrupted) throw py::error_already_set();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace kvsim::python

PYBIND11_MODULE(_kvsim, m) {
  using namespace kvsim::python;
  namespace ks = kvsim;
  m.doc() = "kvsim's compiled core (kvtrace + kvsim libraries); use the functions of the kvsim package";

  py::register_exception<InputError>(m, "InputError", PyExc_ValueError);

  m.def("version", [] { return std::string(ks::version()); });
  m.def("data_dir", &ks::data_dir, "the folder holding the model and GPU cards and the bundled traces");
  m.def("policies", &policies_list);

  bind_trace(m);
  bind_replay(m);
  bind_analysis(m);
  bind_plan(m);
  bind_eval(m);
  bind_policy(m);
#ifdef KVSIM_HAVE_QT
  bind_gui(m);  // kvsim.gui; without Qt, kvsim/_api.py says so
#endif
}
