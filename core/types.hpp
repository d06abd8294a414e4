// Scalar types and precisions. Every numerical routine in qkvlab is templated on
// the scalar S; the precision ladder runs the same code at float, double,
// long double and a 50-decimal-digit multiprecision type. That type is MPFR
// through Boost.Multiprecision with stack storage (168-bit significand): its
// erf and exp are 25 and 5 times faster than cpp_bin_float_50's, which is what
// keeps the default sweep's GELU blocks within budget at 50 digits.
#pragma once

#include <boost/multiprecision/mpfr.hpp>
#include <boost/multiprecision/eigen.hpp>
#include <Eigen/Dense>

#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace qkvlab {

using mp50 = boost::multiprecision::static_mpfr_float_50;

template <class S> using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;
template <class S> using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;
using MatD = Mat<double>;
using VecD = Vec<double>;

// M(S) for each scalar of the precision ladder. Core's costliest templates are instantiated once
// per scalar, each scalar in its own file (core/instances.hpp), and their headers declare those
// instances extern with it, so that no other file compiles them again (docs/benchmarks.md,
// "Build time").
#define QKVLAB_FOR_EACH_SCALAR(M) M(float) M(double) M(long double) M(::qkvlab::mp50)
// The headers' extern declarations; none where the build leaves the instance files out
// (-DQKVLAB_CORE_INSTANCES=OFF: the sanitizer and CUDA-emulation trees, which build a few tests,
// so each file instantiates only what it uses).
#ifdef QKVLAB_NO_CORE_INSTANCES
#define QKVLAB_EXTERN_INSTANCES(M)
#else
#define QKVLAB_EXTERN_INSTANCES(M) QKVLAB_FOR_EACH_SCALAR(M)
#endif

}  // namespace qkvlab

// Eigen's SVDs of a double matrix, compiled once too (core/instances_f64.cpp): BDCSVD<MatD> cost
// about 26 s to compile in each file that took one, JacobiSVD<MatD> about 7.5 s (it also serves
// BDCSVD's small blocks and draw_basis's condition numbers). Same code, same flags: the same bits.
#ifndef QKVLAB_NO_CORE_INSTANCES
extern template class Eigen::JacobiSVD<qkvlab::MatD>;
extern template class Eigen::BDCSVD<qkvlab::MatD>;
#endif

namespace qkvlab {

enum class Precision { f32, f64, f80, mp50 };

inline constexpr Precision all_precisions[] = {Precision::f32, Precision::f64, Precision::f80,
                                               Precision::mp50};

// Name used on the command line and in every output: float, double, long_double, mp50.
std::string_view precision_name(Precision p);
// Parses a name (or its aliases f32, f64, f80); throws UsageError.
Precision parse_precision(std::string_view name);

template <class S> struct ScalarTraits;
template <> struct ScalarTraits<float> { static constexpr Precision precision = Precision::f32; };
template <> struct ScalarTraits<double> { static constexpr Precision precision = Precision::f64; };
template <> struct ScalarTraits<long double> { static constexpr Precision precision = Precision::f80; };
template <> struct ScalarTraits<mp50> { static constexpr Precision precision = Precision::mp50; };

// Unit roundoff u = 2^-p for a p-bit significand (float 2^-24, double 2^-53, ...).
template <class S> double unit_roundoff() {
  return std::ldexp(1.0, -std::numeric_limits<S>::digits);
}
double unit_roundoff(Precision p);

// Calls f.template operator()<S>() with the scalar type named by p.
template <class F> decltype(auto) with_scalar(Precision p, F&& f) {
  switch (p) {
    case Precision::f32: return f.template operator()<float>();
    case Precision::f64: return f.template operator()<double>();
    case Precision::f80: return f.template operator()<long double>();
    case Precision::mp50: break;
  }
  return f.template operator()<mp50>();
}

// Conversions between a working scalar and double (for reporting and for draws).
template <class S> double to_double(const S& x) { return static_cast<double>(x); }
template <class S> Mat<S> cast(const MatD& m) { return m.template cast<S>(); }
template <class S> MatD to_double(const Mat<S>& m) { return m.template cast<double>(); }

}  // namespace qkvlab
