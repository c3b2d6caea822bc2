// ada-h2o: Ada-KV (Feng et al.) on H2O: h2o's scores, a layer's kv heads sharing their
// budgets by Ada-KV's allocation with floor 0.2 (--head-budget adaptive).
#include "kvsim/core/policy.hpp"

namespace kvsim {

PolicyInfo h2o_policy();

PolicyInfo ada_h2o_policy() {
  PolicyInfo info = h2o_policy();
  info.name = "ada-h2o";
  info.summary = "Ada-KV on h2o: h2o's scores, budgets shared by a layer's kv heads";
  info.head_floor = 0.2;
  return info;
}

}  // namespace kvsim
