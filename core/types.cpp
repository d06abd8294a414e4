#include "core/types.hpp"

#include "core/errors.hpp"

namespace qkvlab {

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::f32: return "float";
    case Precision::f64: return "double";
    case Precision::f80: return "long_double";
    case Precision::mp50: return "mp50";
  }
  return "?";
}

Precision parse_precision(std::string_view name) {
  if (name == "float" || name == "f32") return Precision::f32;
  if (name == "double" || name == "f64") return Precision::f64;
  if (name == "long_double" || name == "long-double" || name == "f80") return Precision::f80;
  if (name == "mp50" || name == "multiprecision") return Precision::mp50;
  throw UsageError("unknown precision '" + std::string(name) +
                   "' (expected float, double, long_double or mp50)");
}

double unit_roundoff(Precision p) {
  return with_scalar(p, []<class S>() { return unit_roundoff<S>(); });
}

}  // namespace qkvlab
