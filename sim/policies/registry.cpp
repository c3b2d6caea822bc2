#include "kvsim/policies/registry.hpp"

#include "list.hpp"
#include "kvsim/core/lists.hpp"
#include "kvtrace/error.hpp"

#include <cctype>

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

// docs/semantics.md, section 4: the policies that port a kvpress press.
constexpr PressAlias kPressAliases[] = {
    {"snapkv", "SnapKVPress", "snapkv_press"},
    {"streaming", "StreamingLLMPress", "streaming_llm_press"},
    {"tova", "TOVAPress", "tova_press"},
    {"observed-attention", "ObservedAttentionPress", "observed_attention_press"},
    {"knorm", "KnormPress", "knorm_press"},
    {"keydiff", "KeyDiffPress", "keydiff_press"},
    {"lagkv", "LagKVPress", "lagkv_press"},
    {"expected-attention", "ExpectedAttentionPress", "expected_attention_press"},
    {"pyramidkv", "PyramidKVPress", "pyramidkv_press"},
    {"leverage", "LeverageScorePress", "leverage_press"},
    {"non-causal-attention", "NonCausalAttnPress", "non_causal_attention_press"},
    {"compactor", "CompactorPress", "compactor_press"},
    {"finch", "FinchPress", "finch_press"},
    {"random", "RandomPress", "random_press"},
    {"curdkv", "CURPress", "cur_press"},
    {"chunkkv", "ChunkKVPress", "chunkkv_press"},
    {"capkv", "CapPress", "cap_press"},
    {"kvcompose", "KVComposePress", "kvcompose_press"},
    {"cam", "CAMPress", "cam_press"},
    {"merging", "MergingPress", "merging_press"},
    {"simlayerkv", "SimLayerKVPress", "simlayerkv_press"},
    {"duoattention", "DuoAttentionPress", "duo_attention_press"},
};

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string folded(std::string text) {  // lower case, '_' as '-': what a near miss shares
  for (char& c : text) c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace

const std::deque<PolicyInfo>& policies() { return table(); }

const PressAlias* kvpress_alias(const std::string& policy) {
  for (const PressAlias& alias : kPressAliases)
    if (policy == alias.policy) return &alias;
  return nullptr;
}

std::string canonical_policy_name(const std::string& name) {
  if (const size_t plus = name.find('+'); plus != std::string::npos) {
    const WrapperInfo* wrapper = find_wrapper(name.substr(plus + 1));
    return canonical_policy_name(name.substr(0, plus)) + "+" + (wrapper ? wrapper->name : name.substr(plus + 1));
  }
  for (const PressAlias& alias : kPressAliases)
    if (name == alias.press || name == alias.module) return alias.policy;
  for (const auto& info : policies())
    if (info.name == name) return name;
  // Whatever the case (H2O, SNAPKVPRESS): kvsim's names and kvpress's differ in more than case.
  const std::string lowered = lower(name);
  for (const auto& info : policies())
    if (lower(info.name) == lowered) return info.name;
  for (const PressAlias& alias : kPressAliases)
    if (lowered == lower(alias.press) || lowered == lower(alias.module)) return alias.policy;
  return name;
}

const PolicyInfo& find_policy(const std::string& name) {
  if (const size_t plus = name.find('+'); plus != std::string::npos) {
    const PolicyInfo& inner = find_policy(name.substr(0, plus));
    const std::string wrapper = name.substr(plus + 1);
    if (const WrapperInfo* found = find_wrapper(wrapper)) return wrapped_policy(inner, *found);
    std::string known;
    for (const WrapperInfo& info : wrappers()) known += (known.empty() ? "" : ", ") + info.name;
    throw kvtrace::InputError("", "", "unknown wrapper '" + wrapper + "' in policy '" + name + "' (known: " + known + ")");
  }
  const std::string canonical = canonical_policy_name(name);
  for (const auto& info : policies())
    if (info.name == canonical) return info;
  // A near miss: the same name but for '_' and '-', else the nearest a letter or two off.
  std::vector<std::string> names, known_as;
  for (const auto& info : policies()) {
    const PressAlias* alias = kvpress_alias(info.name);
    if (folded(name) == folded(info.name) || (alias && (folded(name) == folded(alias->press) ||
                                                        folded(name) == folded(alias->module))))
      throw kvtrace::InputError("", "", "unknown policy '" + name + "' (did you mean " + info.name + "?)");
    names.push_back(info.name);
    known_as.push_back(info.name);
    if (alias) names.insert(names.end(), {alias->press, alias->module});
    if (alias) known_as.insert(known_as.end(), 2, info.name);
  }
  if (const size_t near = nearest_name(name, names); near < names.size())
    throw kvtrace::InputError("", "", "unknown policy '" + name + "' (did you mean " + known_as[near] + "?)");
  std::string known;
  for (const auto& info : policies()) {
    if (!known.empty()) known += ", ";
    known += info.name;
  }
  throw kvtrace::InputError("", "", "unknown policy '" + name + "' (known: " + known + ")");
}

void register_policy(PolicyInfo info) {
  if (info.name.find('+') != std::string::npos)
    throw kvtrace::InputError("", "", "policy '" + info.name + "': '+' joins a policy to a wrapper (snapkv+block)");
  if (const std::string canonical = canonical_policy_name(info.name); canonical != info.name)
    throw kvtrace::InputError("", "", "policy '" + info.name + "' " +
                                          (lower(canonical) == lower(info.name)
                                               ? "differs from " + canonical + " only in case (names match whatever their case)"
                                               : "is kvpress's name for the built-in " + canonical));
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
