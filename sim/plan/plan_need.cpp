#include "plan_need.hpp"

#include <cstdio>
#include <cstdlib>

#include "kvtrace/error.hpp"

namespace kvsim {

std::optional<double> need_target_mass(const std::string& target) {
  std::string text;
  for (char c : target)
    if (c != ' ') text += c;
  if (text.rfind("need", 0) != 0) return std::nullopt;
  const std::string number = text.rfind("need@", 0) == 0 ? text.substr(5) : "";
  char* end = nullptr;
  const double mass = std::strtod(number.c_str(), &end);
  if (number.empty() || *end != '\0' || !(mass > 0 && mass <= 1))
    throw kvtrace::InputError(
        "", "", "--target '" + target + "': write need@P with P an attention mass in (0, 1], e.g. need@0.95");
  return mass;
}

void plan_need(Plan& plan, double mass, const std::vector<QuantSpec>& quants, const std::string& sweep) {
  char params[40];
  std::snprintf(params, sizeof params, "p=%.10g", mass);
  Target target;
  target.text = std::string("need@") + (params + 2);
  target.column = "need";
  target.value = mass;
  plan.target = target;
  plan.reference.metric = 1.0;  // the full cache holds all of the attention
  plan.rows.push_back(plan.reference);
  bool found = false;
  for (const TargetRow& need : plan.sweep.rows) {
    if (!is_need_row(need) || need.params != params) continue;
    found = true;
    for (size_t q = 0; q <= quants.size(); ++q) {
      PlanRow row;
      row.policy = "need(" + need.params + ")";
      row.mode = plan.sweep.mixed_modes ? need.mode : "";
      row.budget = Budget::parse(need.budget);
      row.metric = mass;
      if (q > 0) row.quant = quants[q - 1];
      plan.unmeasured |= q > 0;
      fill_row(plan.setup, plan.memory, row, &plan.reference);
      plan.rows.push_back(std::move(row));
    }
  }
  if (!found)
    throw kvtrace::InputError(
        sweep, "",
        std::string("no need row at ") + params + " (kvsim sweep --need " + (params + 2) + " --csv writes it)");
}

}  // namespace kvsim
