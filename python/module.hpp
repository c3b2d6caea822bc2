#pragma once
// What the files of the Python module kvsim._kvsim share: numpy arrays that own the library's
// vectors, the trace handle, attention rows given as numpy arrays, and each area's bindings
// (module_trace.cpp: the trace; module_replay.cpp: policies, replay and sweep, with
// module_replay_cells.cpp: a cell's per-sequence and per-span dicts; module_analysis.cpp:
// persistence analysis; module_plan.cpp: capacity planning; module_eval.cpp: the closed loop;
// module_policy.cpp: policies written in Python; module_gui.cpp: kvsim-gui's window, with Qt).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"

namespace kvsim {
struct CellResult;
struct GroupRecord;
struct PolicyChoice;
}  // namespace kvsim

namespace kvsim::python {

namespace py = pybind11;
using kvtrace::InputError;

[[noreturn]] inline void bad_option(const std::string& option, const std::string& problem) {
  throw InputError("", "", "--" + option + ": " + problem);
}

// Throws InputError naming `option` ("--policies") for an item given twice, in the CLI's
// words for its comma list (kvsim/core/lists.hpp).
void refuse_repeats(const std::string& option, const std::vector<std::string>& items);
// The items of one of the library's comma lists (a default grid), as a tuple of str.
py::tuple list_tuple(const std::string& list);

// ---- a replay cell's parts (module_replay_cells.cpp) ----

// With pools or shared contexts: per sequence, the columns of pool_table and
// shared_context_table (kvsim/replay/report.hpp).
py::dict per_sequence_dict(const CellResult& cell);
// CellResult::spans: a dict per span, the keys of the replay JSON's cells[i].spans.
py::list span_list(const CellResult& cell);

// ---- numpy arrays that own a vector (no copy) ----

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

// ---- long runs ----

// Runs work(cancel) on a thread of its own with the GIL released, while the calling thread
// waits for it and watches for Ctrl-C (PyErr_CheckSignals, every 50 ms). When a signal
// handler raises (KeyboardInterrupt), `cancel` turns true, the engine stops at its next block
// of steps (EngineOptions::cancel), and that exception is raised once work has returned.
// Otherwise work's own exception, if any, comes back. Python policies are called from the
// work's threads only, so Ctrl-C never lands inside one.
void run_interruptibly(const std::function<void(const std::atomic<bool>& cancel)>& work);

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

// ---- attention rows given as a numpy array ----

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

struct Rows {
  FloatArray array;  // keeps the buffer alive
  int n_heads = 0;
  int64_t n_tokens = 0;
  bool packed = false;
};

// [heads, n, n] full matrices, [heads, n(n+1)/2] packed, or [n(n+1)/2] one packed head.
// Throws InputError naming "attention". Shapes are checked against kvtrace::Limits before
// anything is copied.
Rows rows_of(const py::handle& object);

// `object` as a numpy array: an ndarray as it is (nothing copied), anything else converted.
// Throws InputError naming `name` when it cannot be.
py::array array_of(const py::handle& object, const char* name);
// The array as float32 in C order: itself when it is one, else a copy. Check its shape first.
// Throws InputError naming `name` for a view whose elements share memory (a broadcast view):
// its copy would take more memory than the array holds.
FloatArray float32_of(const py::array& a, const char* name);

// One cache group's record as replay()'s "groups" list it (module_replay.cpp); with_position
// adds its sequence and layer.
py::dict group_dict(GroupRecord&& record, bool with_position);

// ---- each area's functions, added to the module ----

void bind_trace(py::module_& m);
void bind_replay(py::module_& m);
void bind_analysis(py::module_& m);
void bind_plan(py::module_& m);
void bind_eval(py::module_& m);                  // module_eval.cpp: the closed loop
void bind_policy(py::module_& m);                // module_policy.cpp: policies written in Python
bool is_python_policy(const std::string& name);  // registered by kvsim.register_policy
void bind_gui(py::module_& m);                   // module_gui.cpp: kvsim.gui (built with Qt only)

// While it lives, the Python policies among `policies` are in use: kvsim.register_policy
// refuses to replace their classes (a run reads its policies' registry entries throughout).
// Made and destroyed with the GIL held.
class PoliciesInUse {
 public:
  explicit PoliciesInUse(const std::vector<PolicyChoice>& policies);
  ~PoliciesInUse();
  PoliciesInUse(const PoliciesInUse&) = delete;
  PoliciesInUse& operator=(const PoliciesInUse&) = delete;

 private:
  std::vector<std::string> names_;
};

}  // namespace kvsim::python
