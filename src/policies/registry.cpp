#include "kvsim/policies/registry.hpp"

#include "list.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {

#define KVSIM_DECLARE_POLICY(id) PolicyInfo id##_policy();
KVSIM_POLICIES(KVSIM_DECLARE_POLICY)
#undef KVSIM_DECLARE_POLICY

const std::vector<PolicyInfo>& policies() {
#define KVSIM_POLICY_ENTRY(id) id##_policy(),
  static const std::vector<PolicyInfo> table = {KVSIM_POLICIES(KVSIM_POLICY_ENTRY)};
#undef KVSIM_POLICY_ENTRY
  return table;
}

const PolicyInfo& find_policy(const std::string& name) {
  for (const auto& info : policies())
    if (info.name == name) return info;
  std::string known;
  for (const auto& info : policies()) known += (known.empty() ? "" : ", ") + info.name;
  throw kvtrace::InputError("", "", "unknown policy '" + name + "' (known: " + known + ")");
}

}  // namespace kvsim
