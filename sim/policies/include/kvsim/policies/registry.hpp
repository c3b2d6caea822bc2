#pragma once
// The registry: every policy kvsim has. The built-in ones (sim/policies/list.hpp names them,
// one file each) come first, then those added at run time (the Python module's
// kvsim.register_policy). References to entries stay valid for the life of the process.
#include <deque>
#include <string>

#include "kvsim/core/policy.hpp"

namespace kvsim {

const std::deque<PolicyInfo>& policies();
// Throws InputError listing the known names.
const PolicyInfo& find_policy(const std::string& name);
// Adds `info` after the built-in policies, or replaces the one added earlier under its name
// (its references then see the new entry). Throws InputError for a built-in name. Not to be
// called while another thread looks up, lists or runs policies.
void register_policy(PolicyInfo info);

}  // namespace kvsim
