#include "kvsim/policies/registry.hpp"

#include "list.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {

#define KVSIM_DECLARE_POLICY(id) PolicyInfo id##_policy();
KVSIM_POLICIES(KVSIM_DECLARE_POLICY)
#undef KVSIM_DECLARE_POLICY

namespace {

#define KVSIM_POLICY_ENTRY(id) id##_policy(),
std::deque<PolicyInfo>& table() {  // a deque: push_back keeps references to the entries
  static std::deque<PolicyInfo> entries = {KVSIM_POLICIES(KVSIM_POLICY_ENTRY)};
  return entries;
}
#undef KVSIM_POLICY_ENTRY

#define KVSIM_POLICY_COUNT(id) +1
constexpr size_t kBuiltIn = 0 KVSIM_POLICIES(KVSIM_POLICY_COUNT);
#undef KVSIM_POLICY_COUNT

}  // namespace

const std::deque<PolicyInfo>& policies() { return table(); }

const PolicyInfo& find_policy(const std::string& name) {
  for (const auto& info : policies())
    if (info.name == name) return info;
  std::string known;
  for (const auto& info : policies()) {
    if (!known.empty()) known += ", ";
    known += info.name;
  }
  throw kvtrace::InputError("", "", "unknown policy '" + name + "' (known: " + known + ")");
}

void register_policy(PolicyInfo info) {
  std::deque<PolicyInfo>& entries = table();
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].name != info.name) continue;
    if (i < kBuiltIn)
      throw kvtrace::InputError("", "", "policy '" + info.name + "' is built in and cannot be replaced");
    entries[i] = std::move(info);
    return;
  }
  entries.push_back(std::move(info));
}

}  // namespace kvsim
