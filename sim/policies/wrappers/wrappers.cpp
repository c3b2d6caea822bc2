// The wrappers (docs/semantics.md, section 4, "Wrappers") and `<policy>+<wrapper>`: the
// wrapped policy's PolicyInfo, made on first use and kept for the process.
#include <algorithm>
#include <cctype>
#include <deque>
#include <mutex>

#include "kvsim/policies/registry.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {

#define KVSIM_WRAPPERS(X) X(block) X(chunk) X(dms)

#define KVSIM_DECLARE_WRAPPER(id) WrapperInfo id##_wrapper();
KVSIM_WRAPPERS(KVSIM_DECLARE_WRAPPER)
#undef KVSIM_DECLARE_WRAPPER

namespace {

// The refusals: a wrapper ranks per-position scores of one cache's policy.
void check_wrappable(const PolicyInfo& inner, const WrapperInfo& wrapper) {
  const std::string name = "policy " + inner.name;
  const std::string needs = "; the " + wrapper.name + " wrapper (" + wrapper.press + ") needs a scoring policy";
  if (inner.engine == Engine::bound) throw kvtrace::InputError("", "", name + " keeps no cache" + needs);
  if (inner.engine == Engine::cross_layer) throw kvtrace::InputError("", "", name + " evicts across layers" + needs);
  if (!inner.scoring) throw kvtrace::InputError("", "", name + " has no per-position scores" + needs);
  if (inner.head_floor >= 0)
    throw kvtrace::InputError("", "", name + " shares its budget across kv heads" + needs + " of one cache");
  for (const ParamSpec& spec : wrapper.params)
    for (const ParamSpec& own : inner.params)
      if (own.name == spec.name)
        throw kvtrace::InputError("", "", name + " has a parameter " + spec.name + " as the " + wrapper.name +
                                              " wrapper does");
}

PolicyInfo compose(const PolicyInfo& inner, const WrapperInfo& wrapper) {
  check_wrappable(inner, wrapper);
  PolicyInfo info = inner;
  info.name = inner.name + "+" + wrapper.name;
  info.summary = wrapper.summary + ", of " + inner.name + "'s scores";
  info.params.insert(info.params.end(), wrapper.params.begin(), wrapper.params.end());
  info.budgeted = inner.budgeted && wrapper.budgeted;
  info.reads_budget = !wrapper.budgeted;  // the wrapped policy still reads B
  info.scoring = false;  // its rule is not "the lowest scores first" at every step
  std::vector<std::string> own;
  for (const ParamSpec& spec : wrapper.params) own.push_back(spec.name);
  info.make = [make_inner = inner.make, make = wrapper.make, own](const Params& params) {
    Params inner_params, wrapper_params;
    for (const auto& [key, value] : params.values())
      (std::find(own.begin(), own.end(), key) != own.end() ? wrapper_params : inner_params).set(key, value);
    return make([make_inner, inner_params] { return make_inner(inner_params); }, wrapper_params);
  };
  return info;
}

}  // namespace

const std::vector<WrapperInfo>& wrappers() {
#define KVSIM_WRAPPER_ENTRY(id) id##_wrapper(),
  static const std::vector<WrapperInfo> entries = {KVSIM_WRAPPERS(KVSIM_WRAPPER_ENTRY)};
#undef KVSIM_WRAPPER_ENTRY
  return entries;
}

const WrapperInfo* find_wrapper(const std::string& name) {
  auto lower = [](std::string text) {
    for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
  };
  for (const WrapperInfo& wrapper : wrappers())  // whatever the case, as policy names
    if (lower(name) == wrapper.name || lower(name) == lower(wrapper.press) || lower(name) == lower(wrapper.module))
      return &wrapper;
  return nullptr;
}

const PolicyInfo& wrapped_policy(const PolicyInfo& inner, const WrapperInfo& wrapper) {
  static std::mutex mutex;
  static std::deque<PolicyInfo> made;  // a deque: references to its entries stay valid
  const std::string name = inner.name + "+" + wrapper.name;
  const std::lock_guard<std::mutex> lock(mutex);
  for (PolicyInfo& info : made)
    if (info.name == name) return info = compose(inner, wrapper);  // the inner one may have been re-registered
  made.push_back(compose(inner, wrapper));
  return made.back();
}

}  // namespace kvsim
