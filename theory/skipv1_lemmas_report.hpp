// `qkvlab icl lemmas`: every check of skipv1_lemmas.hpp under two priors side by
// side, W_0 = 0 and W_0 = c I, and the result rendered as a terminal table and
// a JSON object.
#pragma once

#include "results/value.hpp"
#include "theory/skipv1_lemmas.hpp"

#include <string>
#include <vector>

namespace qkvlab::icl {

struct TwoPriorLemmas {
  Task zero;           // W_0 = 0
  double w0_scale = 0;  // c of the second prior W_0 = c I
  LemmaOptions options;
  std::vector<LemmaResult> w0_zero, w0_scaled;  // check_all_lemmas under each prior, same order
  // The theorem's condition on the second prior: σ_d(c I) = |c| > 2 sqrt(d) σ.
  bool theorem_condition_holds() const;
};

// zero: the task with W_0 = 0; the second prior is W_0 = w0_scale I (any finite c; the theorem's is
// theorem_w0_scale(zero)).
TwoPriorLemmas check_lemmas_two_priors(const Task& zero, double w0_scale, const LemmaOptions& options);

std::string lemmas_text(const TwoPriorLemmas& r);
results::Value lemmas_json(const TwoPriorLemmas& r, const std::string& command_line);

}  // namespace qkvlab::icl
