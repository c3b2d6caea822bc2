#pragma once
// The registry: every policy kvsim has. The built-in ones (sim/policies/list.hpp names them,
// one file each) come first, then those added at run time (the Python module's
// kvsim.register_policy). References to entries stay valid for the life of the process.
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvsim/core/policy.hpp"

namespace kvsim {

const std::deque<PolicyInfo>& policies();
// A policy by its kvsim name or by the kvpress press it ports (its class name, SnapKVPress, or
// its module's, snapkv_press: kvpress_alias), or a scoring policy under a wrapper,
// `<policy>+<wrapper>` (snapkv+block, SnapKVPress+BlockPress: wrapped_policy). Throws
// InputError listing the known names.
const PolicyInfo& find_policy(const std::string& name);
// The kvsim name of `name` (itself, or the policy a kvpress alias names); unknown: `name`.
std::string canonical_policy_name(const std::string& name);

// The kvpress press a built-in policy ports (NVIDIA/kvpress `kvpress/__init__.py`), under its
// class name and its module's name (kvpress/presses/<module>.py); nullptr for the others.
struct PressAlias {
  const char* policy;
  const char* press;
  const char* module;
};
const PressAlias* kvpress_alias(const std::string& policy);

// A wrapper (docs/semantics.md, section 4, "Wrappers"): a rule applied to any scoring policy's
// scores, kvpress's presses that take a ScorerPress. `<policy>+<wrapper>` names the policy
// under it; its parameters are the policy's and the wrapper's (none share a name).
struct WrapperInfo {
  std::string name, summary;
  const char* press = "";   // kvpress's class name (BlockPress)
  const char* module = "";  // kvpress's module name (block_press)
  std::vector<ParamSpec> params;
  bool budgeted = true;  // false: the wrapped policy ignores the budget (dms)
  // The wrapping policy: `make_inner` makes a fresh instance of the wrapped policy (with its
  // own parameters), `own` holds the wrapper's.
  std::function<std::unique_ptr<Policy>(std::function<std::unique_ptr<Policy>()> make_inner, const Params& own)>
      make;
};
const std::vector<WrapperInfo>& wrappers();
// The wrapper named `name` (its kvsim name or a kvpress name), or nullptr.
const WrapperInfo* find_wrapper(const std::string& name);
// `inner` under `wrapper`: its PolicyInfo, made once per process and kept (references stay
// valid). Throws InputError, one line, for a policy without per-position scores.
const PolicyInfo& wrapped_policy(const PolicyInfo& inner, const WrapperInfo& wrapper);
// Adds `info` after the built-in policies, or replaces the one added earlier under its name
// (its references then see the new entry). Throws InputError for a built-in name. Not to be
// called while another thread looks up, lists or runs policies.
void register_policy(PolicyInfo info);

}  // namespace kvsim
