#pragma once
// The registry: every policy kvsim has. The built-in ones (sim/policies/list.hpp names them,
// one file each) come first, then those added at run time (the Python module's
// kvsim.register_policy). References to entries stay valid for the life of the process.
#include <deque>
#include <string>

#include "kvsim/core/policy.hpp"

namespace kvsim {

const std::deque<PolicyInfo>& policies();
// A policy by its kvsim name or by the kvpress press it ports (its class name, SnapKVPress, or
// its module's, snapkv_press: kvpress_alias). Throws InputError listing the known names.
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
// Adds `info` after the built-in policies, or replaces the one added earlier under its name
// (its references then see the new entry). Throws InputError for a built-in name. Not to be
// called while another thread looks up, lists or runs policies.
void register_policy(PolicyInfo info);

}  // namespace kvsim
