#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "kvsim/core/lists.hpp"
#include "kvsim/core/policy.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {

const char* param_type_name(ParamType type) {
  switch (type) {
    case ParamType::integer:
      return "integer";
    case ParamType::real:
      return "real";
    case ParamType::choice:
      return "choice";
    case ParamType::index_set:
      return "index_set";
  }
  return "";
}

int64_t Params::integer(const std::string& name) const { return std::stoll(values_.at(name)); }
double Params::real(const std::string& name) const { return std::stod(values_.at(name)); }
const std::string& Params::text(const std::string& name) const { return values_.at(name); }

namespace {

void check_value(const PolicyInfo& info, const ParamSpec& spec, const std::string& value) {
  auto fail = [&](const std::string& problem) {
    throw kvtrace::InputError("", "", "policy " + info.name + ": parameter " + spec.name + "=" + value + " " + problem);
  };
  switch (spec.type) {
    case ParamType::integer: {
      char* end = nullptr;
      const long long number = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0') fail("is not an integer");
      if (number < spec.min || number > spec.max)
        fail("is out of range [" + std::to_string(static_cast<long long>(spec.min)) + ", " +
             std::to_string(static_cast<long long>(spec.max)) + "]");
      return;
    }
    case ParamType::real: {
      char* end = nullptr;
      const double number = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !std::isfinite(number)) fail("is not a number");
      if (number < spec.min || number > spec.max)
        fail("is out of range [" + std::to_string(spec.min) + ", " + std::to_string(spec.max) + "]");
      return;
    }
    case ParamType::choice:
      if (std::find(spec.choices.begin(), spec.choices.end(), value) == spec.choices.end()) {
        std::string choices;
        for (const auto& c : spec.choices) choices += (choices.empty() ? "" : "|") + c;
        fail("is not one of " + choices);
      }
      return;
    case ParamType::index_set:
      if (value != "all")
        parse_index_list("policy " + info.name + ": parameter " + spec.name + " (all, or e.g. 0,2,5-35)", value);
      return;
  }
}

}  // namespace

Params resolve_params(const PolicyInfo& info, const std::map<std::string, std::string>& overrides) {
  Params params;
  for (const auto& spec : info.params)
    if (!spec.default_value.empty()) params.set(spec.name, spec.default_value);
  for (const auto& entry : overrides) {
    // Not a structured binding: clang before 16 cannot capture one in the lambda.
    const std::string& name = entry.first;
    const std::string& value = entry.second;
    auto spec =
        std::find_if(info.params.begin(), info.params.end(), [&](const ParamSpec& s) { return s.name == name; });
    if (spec == info.params.end()) {
      std::string known;
      for (const auto& s : info.params) known += (known.empty() ? "" : ", ") + s.name;
      throw kvtrace::InputError("", "",
                                "policy " + info.name + " has no parameter '" + name + "'" +
                                    (known.empty() ? " (it takes none)" : " (it takes: " + known + ")"));
    }
    check_value(info, *spec, value);
    params.set(name, value);
  }
  return params;
}

}  // namespace kvsim
