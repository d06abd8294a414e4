// A figure drawn over replicates (the seeds of a figure of `qkvlab reproduce`): each curve's mean
// over the replicates with a band of ± one standard error of that mean (results/verdict.hpp's
// over_replicates, point by point), from the replicates' plots of one shape.
//
// The replicates' tables must have the same columns (names and lengths) and each curve's x column
// the same values; otherwise there is nothing to average and the result is empty. Curves: the
// figure's series with a y column; a replicate's own band or error bars (style filledcurves, or
// yerror… with a z column: a spread within one run, over sequences say) are left out, the
// replicates' band taking their place; a map (a z column in another style, image say) is drawn as the
// mean of its z, without a band; bars (style boxes) get the se as error bars; a series drawn from an
// expression (a reference line) is kept. The table is named NAME-OVER ("-seeds").
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "results/figure.hpp"

namespace qkvlab::results {

std::optional<Plot> over_replicates(const std::vector<Plot>& replicates, const std::string& over);

}  // namespace qkvlab::results
