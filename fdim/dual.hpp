// Forward-mode differentiation and interval enclosures, the two scalars of the functional
// dimension (docs/math/fdim.md).
//
// Dual<T> = (v, d): the value and one directional derivative. The network's forward pass run at
// Dual<T>, with the parameters' tangent set to a direction u, returns f(θ) and J(θ) u exactly as
// the chain rule gives them (no finite differences): at T = double, up to double's rounding; at
// T = Interval, an enclosure that provably contains the exact value and derivative at the
// (exactly representable) point.
//
// Interval = MPFI at 50 digits (Boost.Multiprecision's mpfi_float_50): +, −, ×, ÷, exp, sqrt
// and tanh are MPFI's, whose results contain the exact real result of any real arguments inside the input
// intervals. erf is enclosed through MPFR (correctly rounded, monotone): [erf↓(a), erf↑(b)].
// relu at an interval that contains 0 cannot be enclosed by one branch: it throws Uncertified.
// relu² = max(x, 0)² is C¹ (derivative 2 max(x, 0)), so it needs no branch: an argument through 0
// is enclosed by max(x, 0) ∈ [max(a, 0), max(b, 0)].
#pragma once

#include "core/block.hpp"
#include "core/types.hpp"

#include <boost/multiprecision/mpfi.hpp>

#include <cmath>
#include <stdexcept>
#include <type_traits>

namespace qkvlab::fdim {

using Interval = boost::multiprecision::mpfi_float_50;

// A step of the certificate that an enclosure cannot decide (a pivot or a ReLU argument that
// contains 0): the count stays uncertified, the reason is reported.
struct Uncertified : std::runtime_error {
  using std::runtime_error::runtime_error;
};

double midpoint(const Interval& x);
double radius(const Interval& x);           // an upper bound of half the width
bool contains_zero(const Interval& x);
Interval interval_erf(const Interval& x);
Interval positive_part(const Interval& x);  // max(x, 0) over the interval
Interval interval_pi();

inline double scalar_erf(double x) { return std::erf(x); }
inline Interval scalar_erf(const Interval& x) { return interval_erf(x); }
inline Interval scalar_pi_of(const Interval&) { return interval_pi(); }
inline double scalar_pi_of(double) { return M_PI; }

template <class T> struct Dual {
  T v{0}, d{0};
  Dual() = default;
  template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  Dual(I x) : v(double(x)) {}
  Dual(double x) : v(x) {}
  Dual(T value, T derivative) : v(std::move(value)), d(std::move(derivative)) {}

  Dual& operator+=(const Dual& o) { v += o.v; d += o.d; return *this; }
  Dual& operator-=(const Dual& o) { v -= o.v; d -= o.d; return *this; }
  Dual& operator*=(const Dual& o) { d = d * o.v + v * o.d; v *= o.v; return *this; }
  Dual& operator/=(const Dual& o) { d = (d * o.v - v * o.d) / (o.v * o.v); v /= o.v; return *this; }
  Dual operator-() const { return {T(-v), T(-d)}; }
};

template <class T> Dual<T> operator+(Dual<T> a, const Dual<T>& b) { return a += b; }
template <class T> Dual<T> operator-(Dual<T> a, const Dual<T>& b) { return a -= b; }
template <class T> Dual<T> operator*(Dual<T> a, const Dual<T>& b) { return a *= b; }
template <class T> Dual<T> operator/(Dual<T> a, const Dual<T>& b) { return a /= b; }
// Comparisons read the value only. The softmax's row maximum is a shift that cancels exactly
// (any choice gives the same function and derivative); relu decides its branch in relu_value.
template <class T> bool operator<(const Dual<T>& a, const Dual<T>& b) { return a.v < b.v; }
template <class T> bool operator>(const Dual<T>& a, const Dual<T>& b) { return a.v > b.v; }
template <class T> bool operator<=(const Dual<T>& a, const Dual<T>& b) { return a.v <= b.v; }
template <class T> bool operator>=(const Dual<T>& a, const Dual<T>& b) { return a.v >= b.v; }
template <class T> bool operator==(const Dual<T>& a, const Dual<T>& b) { return a.v == b.v && a.d == b.d; }
template <class T> bool operator!=(const Dual<T>& a, const Dual<T>& b) { return !(a == b); }

template <class T> Dual<T> exp(const Dual<T>& x) {
  using std::exp;
  T e = exp(x.v);
  return {e, T(e * x.d)};
}
template <class T> Dual<T> sqrt(const Dual<T>& x) {
  using std::sqrt;
  T s = sqrt(x.v);
  return {s, T(x.d / (s + s))};
}
// erf' = 2/√π exp(−x²).
template <class T> Dual<T> erf(const Dual<T>& x) {
  using std::exp;
  using std::sqrt;
  const T slope = T(2) / sqrt(scalar_pi_of(x.v)) * exp(T(-(x.v * x.v)));
  return {scalar_erf(x.v), T(slope * x.d)};
}
// tanh' = 1 − tanh² (MPFI's tanh at intervals).
template <class T> Dual<T> tanh(const Dual<T>& x) {
  using std::tanh;
  T t = tanh(x.v);
  return {t, T((T(1) - t * t) * x.d)};
}
template <class T> Dual<T> abs(const Dual<T>& x) { return x.v < T(0) ? -x : x; }

// The branch of relu at x: 1 when x > 0, 0 when x < 0; an interval containing 0 is Uncertified.
inline bool relu_positive(double x) { return x > 0; }
inline bool relu_positive(const Interval& x) {
  if (contains_zero(x)) throw Uncertified("a ReLU argument's enclosure contains 0");
  return x > 0;
}

// relu²(x) = max(x, 0)², derivative 2 max(x, 0) x' (no branch: see the header comment).
inline double positive_part(double x) { return x > 0 ? x : 0.0; }
inline double relu_squared(double x) { return positive_part(x) * positive_part(x); }
template <class T> Dual<T> relu_squared(const Dual<T>& x) {
  const T r = positive_part(x.v);
  return {T(r * r), T(T(2) * r * x.d)};
}

}  // namespace qkvlab::fdim

namespace qkvlab {
// relu at a dual number: the branch decided by relu_positive (core/block.hpp's relu compares).
template <> inline fdim::Dual<double> relu<fdim::Dual<double>>(const fdim::Dual<double>& x) {
  return fdim::relu_positive(x.v) ? x : fdim::Dual<double>(0);
}
template <> inline fdim::Dual<fdim::Interval> relu<fdim::Dual<fdim::Interval>>(const fdim::Dual<fdim::Interval>& x) {
  return fdim::relu_positive(x.v) ? x : fdim::Dual<fdim::Interval>(0);
}
}  // namespace qkvlab

namespace Eigen {
template <class T> struct NumTraits<qkvlab::fdim::Dual<T>> : GenericNumTraits<qkvlab::fdim::Dual<T>> {
  using Real = qkvlab::fdim::Dual<T>;
  using NonInteger = Real;
  using Literal = Real;
  using Nested = Real;
  enum { IsComplex = 0, IsInteger = 0, IsSigned = 1, RequireInitialization = 1, ReadCost = 2, AddCost = 4, MulCost = 8 };
  static Real epsilon() { return Real(1e-15); }
  static Real dummy_precision() { return Real(1e-12); }
  static Real highest() { return Real(1e300); }
  static Real lowest() { return Real(-1e300); }
  static int digits10() { return 15; }
};
}  // namespace Eigen
