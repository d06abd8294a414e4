// Verdicts by rule: a paper's claim, stated as an inequality on a named quantity, judged against
// the measured quantity with its uncertainty over replicates (seeds, prompts) by a stated decision
// rule, giving `agrees`, `disagrees` or `inconclusive`. Never written by hand: every verdict of
// `qkvlab reproduce` (and of `lm compare --claim`) is `judge`'s.
//
// The rule, element by element (a layer, a model pair, a sweep point), with m the element's mean
// over its n replicates, s its standard error and z Student's t quantile at the rule's confidence
// (0.975 unless stated) with n − 1 degrees of freedom: 12.71 at n = 2, 4.30 at 3, 2.26 at 10, 2.09 at
// 20, the normal's 1.96 where n is not recorded (many). So each outcome is a one-sided test at
// 2.5%: a clear effect over two or three seeds must be large against their spread (a fixed 2 s
// would call "agrees" 15% of the time at n = 2, and 9% at n = 3, where there is no effect).
//   greater than r:    agrees when m − r > z s, disagrees when m − r < −z s
//   less than r:       agrees when m − r < −z s, disagrees when m − r > z s
//   within r ± t:      agrees when |m − r| + z s ≤ t, disagrees when |m − r| − z s > t
//   not below r − t:   agrees when m − r − z s > −t, disagrees when m − r + z s < −t (non-inferiority
//                      within the margin t: shown, or its violation shown; a spread too wide for
//                      either is inconclusive, not agreement)
// inconclusive otherwise, and always when the element has fewer replicates than the rule asks
// (2 unless stated: one seed is inconclusive) or no finite positive standard error (se 0 over
// replicates is identical replicates: no spread was measured, and any difference would pass). An
// exact element (a count, no randomness: Element::exact) is judged by its value alone (s = 0),
// whatever its replicates. The quantity's verdict: disagrees when some element disagrees, agrees
// when every element agrees, inconclusive otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "results/value.hpp"

namespace qkvlab::results {

enum class Sense { greater, less, within, not_below };

struct Claim {
  std::string statement;  // the paper's claim in one sentence
  std::string quantity;   // the named quantity, e.g. "ResFormer − vanilla, column entropy per layer (nats)"
  Sense sense = Sense::greater;
  double reference = 0;
  double tolerance = 0;  // Sense::within: the half-width; Sense::not_below: the margin
};

struct Rule {
  double confidence = 0.975;        // one-sided: z = Student's t quantile at this, n − 1 degrees of freedom
  std::string over = "seeds";       // what the replicates are
  std::int64_t min_replicates = 2;  // fewer: inconclusive
  std::string note;                 // what else the reader must know of them ("one training seed")
};

// One element of the measured quantity: its mean and standard error over `replicates` replicates
// (se NaN with one; replicates −1: a library's standard error over many, their count not recorded,
// e.g. the held-out prompts of an icl sweep), and, where the replicates are one run, the spread within that run (e.g. the
// standard error over the sequences analysed), recorded but not used by the rule.
struct Element {
  std::string label;
  double value = 0, se = 0;
  std::int64_t replicates = 1;
  double within_se = 0;
  bool exact = false;  // a count with no randomness: se 0 is its spread, z 0 (to_value's "exact" list)
};
// The mean and standard error of one element's per-replicate values.
Element over_replicates(std::string label, const std::vector<double>& per_replicate);

struct Verdict {
  std::string verdict;                // agrees | disagrees | inconclusive
  std::vector<std::string> outcomes;  // each element's
  Claim claim;
  Rule rule;
  std::string within_over;  // what `within_se` is over ("" when not recorded)
  std::vector<Element> elements;

  std::string rule_text() const;  // the rule in one sentence
  // {"claim", "quantity": {name, claimed, elements: [{label, value, outcome}]},
  //  "uncertainty": {over, confidence, replicates, se, z: [...], exact: [...] (when some element is),
  //  within_run_over, within_run_se: [...]}, "rule",
  //  "verdict"}
  Value to_value() const;
};

Verdict judge(const Claim& claim, const Rule& rule, std::vector<Element> elements, std::string within_over = "");

// z of an element of `replicates` replicates under `rule` (above); the normal quantile below 2 (an
// exact count's se is 0; a count not recorded, −1, stands for many).
double se_multiple(const Rule& rule, std::int64_t replicates);

std::string claimed_text(const Claim& claim);  // "> 0", "< 0", "within 0.01 of 0", "≥ 0 (not significantly below)"

}  // namespace qkvlab::results
