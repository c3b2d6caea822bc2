// kvsim._kvsim, policies written in Python: kvsim.register_policy (kvsim/_api.py reads the
// class's attributes) adds a PolicyInfo to the registry whose make() wraps a new instance of
// the class in a PyPolicy, so replay, sweep, replay_rows and eval run it as any C++ policy.
//
// Threads: the engine runs its work items on several threads, each simulation with its own
// instance; every call into Python takes the GIL (the calls are serialised, the C++ work
// between them is not). Results do not depend on the thread count as long as instances share
// no mutable state (module globals, class attributes, a global random generator: use
// ctx.seed). The functions that run policies release the GIL first (module_replay.cpp,
// module_eval.cpp), else the engine's threads would wait for it forever.
//
// A class stays registered as it is while a run uses it (PoliciesInUse): the run reads the
// registry's entry throughout and makes instances of the class as it goes.
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <optional>
#include <stdexcept>

#include "kvsim/core/policy.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvsim/replay/replay.hpp"
#include "module.hpp"

namespace kvsim::python {
namespace {

// kvsim.PolicyError (a RuntimeError): a Python policy raised, or evict returned a bad answer.
class PolicyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct PyClass {
  const PolicyInfo* info = nullptr;  // the registry's entry (stable)
  py::handle cls;                    // a reference kept for the life of the process
  int runs = 0;                      // runs using it now (PoliciesInUse; changed with the GIL held)
};

// "ZeroDivisionError: division by zero (at my_policies.py:12)": the exception and the
// innermost frame of its traceback.
std::string describe(const py::error_already_set& error) {
  std::string text = py::str(error.type().attr("__name__"));
  const std::string message = py::str(error.value());
  if (!message.empty()) text.append(": ").append(message);
  py::object tb = py::reinterpret_borrow<py::object>(error.trace());
  if (tb && !tb.is_none()) {  // null when raised from C++ with no Python frame
    while (!tb.attr("tb_next").is_none()) tb = tb.attr("tb_next");
    const std::string file = py::str(tb.attr("tb_frame").attr("f_code").attr("co_filename"));
    text.append(" (at ").append(file.substr(file.find_last_of('/') + 1)).append(":");
    text.append(std::to_string(tb.attr("tb_lineno").cast<int>())).append(")");
  }
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

// The GIL, taken from any thread. An engine thread (not Python's) keeps the Python thread
// state it gets on its first call until it ends, instead of making and deleting one at every
// call (which cost about as much as a small policy's whole step).
class Gil {
 public:
  Gil() {
    thread_local const ThreadState kept;
    state_ = PyGILState_Ensure();
  }
  ~Gil() { PyGILState_Release(state_); }
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;

 private:
  struct ThreadState {
    ThreadState() : made(PyGILState_GetThisThreadState() == nullptr) {
      if (!made) return;  // a Python thread (replay_rows runs on the caller's)
      state = PyGILState_Ensure();
      saved = PyEval_SaveThread();  // the GIL goes, the thread state stays
    }
    ~ThreadState() {
      if (!made || !Py_IsInitialized()) return;
      PyEval_RestoreThread(saved);
      PyGILState_Release(state);  // deletes the thread state, releases the GIL
    }
    bool made;
    PyGILState_STATE state{};
    PyThreadState* saved = nullptr;
  };
  PyGILState_STATE state_;
};

class PyPolicy final : public Policy {
 public:
  PyPolicy(const PyClass& cls, const Params& params) : cls_(cls) {
    Gil gil;
    guarded("__init__", [&] {
      py::dict kwargs;
      for (const ParamSpec& spec : cls.info->params) {
        if (!params.has(spec.name)) continue;
        const py::str name(spec.name);
        if (spec.type == ParamType::integer)
          kwargs[name] = params.integer(spec.name);
        else if (spec.type == ParamType::real)
          kwargs[name] = params.real(spec.name);
        else
          kwargs[name] = params.text(spec.name);
      }
      py::object self = cls.cls(**kwargs);
      bound_.emplace(Bound{self, self.attr("reset"), self.attr("observe"), self.attr("evict")});
    });
  }
  ~PyPolicy() override {
    Gil gil;
    bound_.reset();
  }

  void reset(const GroupContext& group) override {
    tensors_ = group.tensors;
    where_ = Where{group.seed, group.layer, group.budget};
    Gil gil;
    guarded("reset", [&] {
      py::object ctx = py::module_::import("types").attr("SimpleNamespace")(
          py::arg("n_tokens") = group.n_tokens, py::arg("budget") = group.budget, py::arg("n_heads") = group.n_heads,
          py::arg("layer") = group.layer, py::arg("seed") = group.seed);
      bound_->reset(ctx);
    });
  }

  void observe(int64_t step, std::span<const int32_t> cache, std::span<const float> attention) override {
    step_ = step;
    Gil gil;
    guarded("observe", [&] {
      py::array_t<int32_t> positions(static_cast<py::ssize_t>(cache.size()), cache.data());  // copies
      py::array_t<float> row(static_cast<py::ssize_t>(attention.size()), attention.data());
      if (!tensors_) {
        bound_->observe(step, positions, row);
        return;
      }
      py::dict tensors;
      if (cls_.info->needs_keys) tensors["keys"] = gather(tensors_->keys, cache);
      if (cls_.info->needs_values) tensors["values"] = gather(tensors_->values, cache);
      if (cls_.info->needs_queries) {
        const int32_t row_of_step = static_cast<int32_t>(step);
        py::array_t<float> queries = gather(tensors_->queries, std::span<const int32_t>(&row_of_step, 1));
        tensors["queries"] = queries.reshape({queries.shape(0), queries.shape(2)});
      }
      bound_->observe(step, positions, row, **tensors);
    });
  }

  void evict(int64_t step, std::span<const int32_t> cache, int64_t excess, bool compress,
             std::vector<int32_t>& victims) override {
    step_ = step;
    const size_t first = victims.size();
    {
      Gil gil;
      guarded("evict", [&] {
        py::array_t<int32_t> positions(static_cast<py::ssize_t>(cache.size()), cache.data());
        const py::object answer = bound_->evict(step, positions, excess, compress);
        if (answer.is_none()) return;
        const py::array array = py::array::ensure(answer);
        if (!array || array.size() == 0) {
          if (!array || array.ndim() != 1) fail("evict must return a list or 1-d array of positions (or None)");
          return;
        }
        if (array.ndim() != 1 || (array.dtype().kind() != 'i' && array.dtype().kind() != 'u'))
          fail("evict must return a list or 1-d array of integer positions, got " +
               std::string(py::str(array.attr("dtype"))) + " of shape " + std::string(py::str(array.attr("shape"))));
        const auto ints = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(array);
        for (py::ssize_t i = 0; i < ints.size(); ++i) {
          const int64_t position = ints.data()[i];
          if (!std::binary_search(cache.begin(), cache.end(), position))
            fail("evict returned position " + std::to_string(position) + ", which is not cached");
          victims.push_back(static_cast<int32_t>(position));
        }
      });
    }
    std::vector<int32_t> sorted(victims.begin() + static_cast<std::ptrdiff_t>(first), victims.end());
    std::sort(sorted.begin(), sorted.end());
    const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
    if (twice != sorted.end()) fail("evict returned position " + std::to_string(*twice) + " twice");
    if (cls_.info->budgeted && excess > 0 && static_cast<int64_t>(sorted.size()) < excess)
      fail("evict returned " + std::to_string(sorted.size()) + " positions, needs at least " + std::to_string(excess) +
           " (the cache is over the budget by that many)");
  }

 private:
  struct Bound {
    py::object self, reset, observe, evict;
  };

  // [heads, rows, head_dim]: the rows of each head's tensor, copied.
  py::array_t<float> gather(const std::vector<const float*>& heads, std::span<const int32_t> rows) const {
    const auto d = static_cast<size_t>(tensors_->head_dim);
    py::array_t<float> out(
        {static_cast<py::ssize_t>(heads.size()), static_cast<py::ssize_t>(rows.size()), static_cast<py::ssize_t>(d)});
    float* to = out.mutable_data();
    for (const float* head : heads)
      for (const int32_t row : rows) {
        std::memcpy(to, head + static_cast<size_t>(row) * d, d * sizeof(float));
        to += d;
      }
    return out;
  }

  // "Python policy NAME, sequence 2, layer 3, kv head 1, step 7, budget 51: PROBLEM": the
  // cache group and the step, so that a run of many (a sweep, the GUI's replays at other
  // budgets) says which one failed. The group's seed is cache_group_seed(sequence, layer,
  // group) (kvsim/core/engine.cpp: sequence << 40 ^ layer << 20 ^ group), group the kv head
  // (replay_rows: as its origin numbers them) or, for a class with one cache per layer,
  // past the last one. Before reset only the name is known.
  [[noreturn]] void fail(const std::string& problem) const {
    std::string text = "Python policy " + cls_.info->name;
    if (where_) {
      text.append(", sequence ").append(std::to_string(where_->seed >> 40));
      text.append(", layer ").append(std::to_string(where_->layer));
      if (cls_.info->grouping == Grouping::layer)
        text.append(", all kv heads");
      else
        text.append(", kv head ").append(std::to_string(where_->seed & 0xFFFFF));
    }
    if (step_ >= 0) text.append(", step ").append(std::to_string(step_));
    if (where_) text.append(", budget ").append(std::to_string(where_->budget));
    throw PolicyError(text.append(": ").append(problem));
  }

  // Runs `call` (GIL held); a Python exception becomes one PolicyError line, except those
  // that ask the program to stop (KeyboardInterrupt, SystemExit), which pass unchanged.
  template <class Call>
  void guarded(const char* method, Call&& call) const {
    try {
      call();
    } catch (py::error_already_set& error) {
      if (error.matches(PyExc_KeyboardInterrupt) || error.matches(PyExc_SystemExit)) throw;
      fail(std::string(method) + " raised " + describe(error));
    }
  }

  const PyClass& cls_;
  std::optional<Bound> bound_;
  struct Where {
    uint64_t seed;
    int layer;
    int64_t budget;
  };
  const GroupTensors* tensors_ = nullptr;
  std::optional<Where> where_;  // the cache group (GroupContext), from reset on
  int64_t step_ = -1;           // -1 before the first step
};

ParamType param_type(const std::string& name) {
  for (const ParamType type : {ParamType::integer, ParamType::real, ParamType::choice, ParamType::index_set})
    if (name == param_type_name(type)) return type;
  throw InputError("", "", "parameter type '" + name + "': expected integer, real, choice or index_set");
}

// One PyClass per name registered, for the process (a replaced class's entry is reused).
std::deque<PyClass>& classes() {
  static std::deque<PyClass> entries;
  return entries;
}

PyClass* python_class(const std::string& name) {
  std::deque<PyClass>& known = classes();
  auto entry = std::find_if(known.begin(), known.end(), [&](const PyClass& c) { return c.info->name == name; });
  return entry == known.end() ? nullptr : &*entry;
}

// The class's attributes as kvsim/_api.py read and checked them.
void register_python_policy(const std::string& name, const py::object& cls, const std::string& summary,
                            const std::string& grouping, const std::vector<bool>& flags, const py::list& params) {
  PolicyInfo info;
  info.name = name;
  info.summary = summary;
  info.grouping = grouping == "layer" ? Grouping::layer : Grouping::kv_head;
  info.budgeted = flags.at(0);
  info.needs_attention = flags.at(1);
  info.needs_keys = flags.at(2);
  info.needs_values = flags.at(3);
  info.needs_queries = flags.at(4);
  for (const py::handle& p : params) {
    const py::dict d = py::reinterpret_borrow<py::dict>(p);
    ParamSpec spec;
    spec.name = d["name"].cast<std::string>();
    spec.type = param_type(d["type"].cast<std::string>());
    spec.default_value = d["default"].cast<std::string>();
    spec.help = d["help"].cast<std::string>();
    spec.min = d["min"].cast<double>();
    spec.max = d["max"].cast<double>();
    spec.choices = d["choices"].cast<std::vector<std::string>>();
    info.params.push_back(std::move(spec));
  }
  for (const ParamSpec& spec : info.params)  // the defaults pass their own checks
    if (!spec.default_value.empty()) resolve_params(info, {{spec.name, spec.default_value}});
  std::deque<PyClass>& known = classes();
  PyClass* entry = python_class(name);
  if (entry && entry->runs > 0)
    throw InputError("", "",
                     "register_policy: policy '" + name +
                         "' is in use by a run that has not finished; register the new class under another name, "
                         "or once the run is over");
  const bool added = entry == nullptr;
  PyClass& target = added ? known.emplace_back() : *entry;
  info.make = [&target](const Params& values) -> std::unique_ptr<Policy> {
    return std::make_unique<PyPolicy>(target, values);
  };
  try {
    register_policy(std::move(info));
  } catch (...) {  // a built-in name
    if (added) known.pop_back();
    throw;
  }
  target.info = &find_policy(name);
  target.cls = cls.inc_ref();
}

}  // namespace

bool is_python_policy(const std::string& name) { return python_class(name) != nullptr; }

PoliciesInUse::PoliciesInUse(const std::vector<PolicyChoice>& policies) {
  for (const PolicyChoice& policy : policies)
    if (PyClass* entry = python_class(policy.info->name)) {
      ++entry->runs;
      names_.push_back(policy.info->name);
    }
}

PoliciesInUse::~PoliciesInUse() {
  for (const std::string& name : names_) --python_class(name)->runs;
}

void bind_policy(py::module_& m) {
  py::register_exception<PolicyError>(m, "PolicyError", PyExc_RuntimeError);
  m.def("_register_policy", &register_python_policy);
}

}  // namespace kvsim::python
