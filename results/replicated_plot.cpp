#include "results/replicated_plot.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "results/verdict.hpp"

namespace qkvlab::results {

namespace {

bool same_shape(const std::vector<Plot>& r) {
  const Table& first = r.front().table;
  for (const Plot& p : r) {
    if (p.table.columns.size() != first.columns.size()) return false;
    for (std::size_t i = 0; i < first.columns.size(); ++i)
      if (p.table.columns[i].name != first.columns[i].name || p.table.columns[i].values.size() != first.columns[i].values.size())
        return false;
  }
  return true;
}

bool is_band(const Series& s) { return s.style.find("filledcurves") != std::string::npos; }

// `text` as a number, when it is one and nothing else.
std::optional<double> constant(const std::string& text) {
  char* end = nullptr;
  const double x = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(x)) return std::nullopt;
  return x;
}

// The expression series `i` of the first replicate (a reference line) over the replicates: kept where
// every replicate draws it alike; a constant that differs under one title (an estimate each replicate
// makes, a Bayes loss by Monte Carlo say) at its mean; left out otherwise (a line fitted to each
// replicate's own curve, titled with its own slope), since it is no replicate's mean.
std::optional<Series> expression_over(const std::vector<Plot>& replicates, std::size_t i) {
  Series s = replicates.front().figure.series[i];
  double sum = 0;
  bool same = true, constants = true;
  for (const Plot& p : replicates) {
    if (i >= p.figure.series.size() || p.figure.series[i].title != s.title || p.figure.series[i].style != s.style)
      return std::nullopt;
    const std::string& e = p.figure.series[i].expression;
    same = same && e == s.expression;
    const auto c = constant(e);
    constants = constants && c.has_value();
    sum += c.value_or(0);
  }
  if (same) return s;
  if (!constants) return std::nullopt;
  char mean[32];
  std::snprintf(mean, sizeof mean, "%.10g", sum / double(replicates.size()));
  s.expression = mean;
  return s;
}

// Column `name` of series `i` of each replicate (its y, say): each replicate's own series, which may
// draw another column under the same title (a best restart's); none where one lacks it.
std::optional<std::vector<const Column*>> columns_of(const std::vector<Plot>& replicates, std::size_t i,
                                                    std::string Series::*name) {
  std::vector<const Column*> columns;
  for (const Plot& p : replicates) {
    const Column* c = i < p.figure.series.size() ? p.table.find(p.figure.series[i].*name) : nullptr;
    if (!c) return std::nullopt;
    columns.push_back(c);
  }
  return columns;
}

// The mean over the replicates of each point of `columns`, with its se.
// Each point's mean over the replicates that have a value there: a replicate's NaN (a run recorded
// as diverged) is left out, not averaged in, and `partial` says that some point was left short.
std::vector<Element> point_means(const std::vector<const Column*>& columns, bool& partial) {
  std::vector<Element> out;
  for (std::size_t k = 0; k < columns.front()->values.size(); ++k) {
    std::vector<double> at;
    for (const Column* c : columns)
      if (!std::isnan(c->values[k])) at.push_back(c->values[k]);
    partial = partial || (!at.empty() && at.size() < columns.size());
    out.push_back(at.empty() ? Element{"", std::nan(""), std::nan(""), 0, 0} : over_replicates("", at));
  }
  return out;
}

// The name of the mean of `columns`: theirs where every replicate draws one column, else the series' title.
std::string mean_name(const std::vector<const Column*>& columns, const Series& s) {
  for (const Column* c : columns)
    if (c->name != columns.front()->name) return s.title.empty() ? s.y : s.title;
  return columns.front()->name;
}

}  // namespace

std::optional<Plot> over_replicates(const std::vector<Plot>& replicates, const std::string& over) {
  if (replicates.size() < 2 || !same_shape(replicates)) return std::nullopt;
  const Plot& first = replicates.front();
  Plot out{Table{first.table.name + "-" + over, {}}, first.figure};
  out.figure.series.clear();
  bool bands = false, partial = false;
  auto add = [&](Column c) {
    if (!out.table.find(c.name)) out.table.columns.push_back(std::move(c));
  };
  int colour = 0;
  for (std::size_t i = 0; i < first.figure.series.size(); ++i) {
    const Series& s = first.figure.series[i];
    if (!s.expression.empty()) {
      if (auto e = expression_over(replicates, i)) out.figure.series.push_back(*e);
      continue;
    }
    if (is_band(s) || s.y.empty()) continue;
    for (const Plot& p : replicates)  // each replicate's series i: the same curve, drawn alike
      if (i >= p.figure.series.size() || p.figure.series[i].title != s.title || p.figure.series[i].x != s.x ||
          p.figure.series[i].style != s.style)
        return std::nullopt;
    const auto xs = columns_of(replicates, i, &Series::x), ys = columns_of(replicates, i, &Series::y);
    if (!xs || !ys) return std::nullopt;
    for (const Column* x : *xs)
      if (x->values != xs->front()->values || x->values.size() != ys->front()->values.size()) return std::nullopt;
    const Column& x = *xs->front();
    const bool bars = !s.z.empty() && s.style.rfind("yerror", 0) == 0;
    if (!s.z.empty() && !bars) {  // a map (style image, say): x and y as they are, z's mean
      const auto zs = columns_of(replicates, i, &Series::z);
      if (!zs) return std::nullopt;
      for (const Column* y : *ys)
        if (y->values != ys->front()->values) return std::nullopt;
      Column mean{s.z, {}};
      for (const Element& e : point_means(*zs, partial)) mean.values.push_back(e.value);
      add(x), add(*ys->front()), add(mean);
      out.figure.series.push_back(s);
      continue;
    }
    const std::string y = mean_name(*ys, s);
    Column mean{y, {}}, low{y + " - se", {}}, high{y + " + se", {}}, se{y + " se", {}};
    for (const Element& e : point_means(*ys, partial))
      mean.values.push_back(e.value), low.values.push_back(e.value - e.se), high.values.push_back(e.value + e.se),
          se.values.push_back(e.se);
    bands = true;
    if (s.style.rfind("boxes", 0) == 0) {  // bars: the se as error bars on each (x:y:ydelta)
      add(x), add(mean), add(se);
      out.figure.series.push_back({s.x, y, "", s.title, "boxerrorbars" + s.style.substr(5), se.name});
      continue;
    }
    add(x), add(mean), add(low), add(high);
    // The band in the curve's colour: its own lc clause (the style's last), else the next of gnuplot's.
    const std::size_t own = s.style.find("lc ");
    const std::string lc = own != std::string::npos ? s.style.substr(own) : "lc " + std::to_string(++colour);
    out.figure.series.push_back({s.x, low.name, "", "", "filledcurves fs transparent solid 0.2 noborder " + lc, high.name});
    // A replicate's own error bars (style yerror…, z their column: a spread within one run) are left
    // out with their " (± …)" in the title: the band is the replicates' spread.
    const std::string style = bars ? "linespoints" : s.style, title = bars ? s.title.substr(0, s.title.find(" (±")) : s.title;
    out.figure.series.push_back({s.x, y, "", title, own != std::string::npos ? style : style + " " + lc, ""});
  }
  if (out.table.columns.empty()) return std::nullopt;
  out.figure.title += " (mean" + std::string(bands ? " ± se" : "") + " over " + std::to_string(replicates.size()) + " " + over +
                      (partial ? "; a point's mean leaves out the " + over + " without a value there" : "") + ")";
  return out;
}

}  // namespace qkvlab::results
