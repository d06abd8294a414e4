#include "lm/describe.hpp"

#include <cstdlib>

#include "lm/parameters.hpp"
#include "lm/plan.hpp"

namespace qkvlab::lm {

results::Value config_value(const Config& c) {
  results::Value v = results::Value::object();
  for (const auto& [key, text] : to_metadata(c)) {
    char* end = nullptr;
    const double x = std::strtod(text.c_str(), &end);
    if (key == "q_identity_layers")
      v.set(key, results::Value::array_of(c.q_identity_layers));
    else if (text == "true" || text == "false")
      v.set(key, text == "true");
    else if (end && *end == '\0' && !text.empty())
      v.set(key, text.find_first_of(".eE") == std::string::npos ? results::Value(std::int64_t(x)) : results::Value(x));
    else
      v.set(key, text);
  }
  v.set("parameters", std::int64_t(parameter_layout(c, make_plan(c)).count()));
  return v;
}

}  // namespace qkvlab::lm
