#pragma once
// The registry: every policy kvsim has (src/policies/list.hpp names them, one file each).
#include <string>
#include <vector>

#include "kvsim/core/policy.hpp"

namespace kvsim {

const std::vector<PolicyInfo>& policies();
// Throws InputError listing the known names.
const PolicyInfo& find_policy(const std::string& name);

}  // namespace kvsim
