#pragma once
// kvsim plan --target need@p (internal to sim/plan): the budget a sweep's attention need holds
// (kvsim sweep --need, docs/semantics.md, section 7) planned as one row per mode.
#include <optional>
#include <string>
#include <vector>

#include "kvsim/plan/plan_table.hpp"

namespace kvsim {

// The sweep rows of the attention need (policy "need"): kvsim sweep --need writes them.
inline bool is_need_row(const SweepRow& row) { return row.policy == "need"; }

// "need@0.95": the mass; nullopt for any other target. Throws InputError for "need@" with no
// mass in (0, 1].
std::optional<double> need_target_mass(const std::string& target);

// The target and the rows of plan.sweep's need at `mass`: the reference (mass 1), then per
// mode the need row's budget, at full precision and in each of `quants` (not measured).
// Throws InputError naming `sweep` when it has no need row at that mass.
void plan_need(Plan& plan, double mass, const std::vector<QuantSpec>& quants, const std::string& sweep);

}  // namespace kvsim
