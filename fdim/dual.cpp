#include "fdim/dual.hpp"

#include <mpfi.h>
#include <mpfr.h>

namespace qkvlab::fdim {

namespace {
// The endpoints of x as MPFR numbers at x's precision.
struct Ends {
  mpfr_t lo, hi;
  explicit Ends(const Interval& x) {
    const mpfr_prec_t p = mpfi_get_prec(x.backend().data());
    mpfr_init2(lo, p);
    mpfr_init2(hi, p);
    mpfi_get_left(lo, x.backend().data());
    mpfi_get_right(hi, x.backend().data());
  }
  ~Ends() {
    mpfr_clear(lo);
    mpfr_clear(hi);
  }
  Ends(const Ends&) = delete;
  Ends& operator=(const Ends&) = delete;
};
}  // namespace

double midpoint(const Interval& x) {
  Ends e(x);
  return 0.5 * mpfr_get_d(e.lo, MPFR_RNDN) + 0.5 * mpfr_get_d(e.hi, MPFR_RNDN);
}

double radius(const Interval& x) {
  Ends e(x);
  mpfr_sub(e.hi, e.hi, e.lo, MPFR_RNDU);
  return 0.5 * mpfr_get_d(e.hi, MPFR_RNDU);
}

bool contains_zero(const Interval& x) { return mpfi_has_zero(x.backend().data()) != 0; }

// erf is increasing: [erf↓(a), erf↑(b)] encloses erf([a, b]), MPFR rounding each end outward.
Interval interval_erf(const Interval& x) {
  Ends e(x);
  mpfr_erf(e.lo, e.lo, MPFR_RNDD);
  mpfr_erf(e.hi, e.hi, MPFR_RNDU);
  Interval out;
  mpfi_interv_fr(out.backend().data(), e.lo, e.hi);
  return out;
}

// max(x, 0) over [a, b]: [max(a, 0), max(b, 0)] (exact ends).
Interval positive_part(const Interval& x) {
  Ends e(x);
  if (mpfr_sgn(e.lo) < 0) mpfr_set_zero(e.lo, 1);
  if (mpfr_sgn(e.hi) < 0) mpfr_set_zero(e.hi, 1);
  Interval out;
  mpfi_interv_fr(out.backend().data(), e.lo, e.hi);
  return out;
}

Interval interval_pi() {
  Interval out;
  mpfi_const_pi(out.backend().data());
  return out;
}

}  // namespace qkvlab::fdim
