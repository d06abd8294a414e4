// A figure drawn over replicates (the seeds of a figure of `qkvlab reproduce`): each curve's mean
// over the replicates with a band of ± one standard error of that mean (results/verdict.hpp's
// over_replicates, point by point), from the replicates' plots of one shape. A point where a replicate
// has no value (NaN: a run recorded as diverged) is the mean of the others, and the title says so.
//
// The replicates' tables must have the same columns (names and lengths), their figures the same
// series (titles and styles) and each curve's x column the same values; otherwise there is nothing to
// average and the result is empty. Each series is averaged over the replicates' own series: where
// they draw different columns under one title (each seed's best restart), the mean of those, named
// by the title. Curves: the figure's series with a y column; a replicate's own band or error bars
// (style filledcurves, or yerror… with a z column: a spread within one run, over sequences say) are
// left out, the replicates' band taking their place; a map (a z column in another style, image say)
// is drawn as the mean of its z, without a band; bars (style boxes) get the se as error bars. A series
// drawn from an expression (a reference line) is kept where every replicate draws the same one, drawn
// at the mean where each draws a constant of its own under one title, and left out where they differ
// otherwise (a line fitted to each replicate's curve). No series of the result is one replicate's. The
// table is named NAME-OVER ("-seeds").
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "results/figure.hpp"

namespace qkvlab::results {

std::optional<Plot> over_replicates(const std::vector<Plot>& replicates, const std::string& over);

}  // namespace qkvlab::results
