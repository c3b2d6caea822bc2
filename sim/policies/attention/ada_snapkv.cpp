// ada-snapkv: Ada-KV (Feng et al.) on SnapKV: snapkv's scores, a layer's kv heads sharing
// their budgets by Ada-KV's allocation with floor 0.2 (--head-budget adaptive).
#include "kvsim/core/policy.hpp"

namespace kvsim {

PolicyInfo snapkv_policy();

PolicyInfo ada_snapkv_policy() {
  PolicyInfo info = snapkv_policy();
  info.name = "ada-snapkv";
  info.summary = "Ada-KV on snapkv: snapkv's scores, budgets shared by a layer's kv heads";
  info.head_floor = 0.2;
  return info;
}

}  // namespace kvsim
