#include "results/replicated_plot.hpp"

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

}  // namespace

std::optional<Plot> over_replicates(const std::vector<Plot>& replicates, const std::string& over) {
  if (replicates.size() < 2 || !same_shape(replicates)) return std::nullopt;
  const Plot& first = replicates.front();
  Plot out{Table{first.table.name + "-" + over, {}}, first.figure};
  out.figure.series.clear();
  bool bands = false;
  auto add = [&](Column c) {
    if (!out.table.find(c.name)) out.table.columns.push_back(std::move(c));
  };
  int colour = 0;
  for (const Series& s : first.figure.series) {
    if (!s.expression.empty()) {
      out.figure.series.push_back(s);
      continue;
    }
    if (is_band(s) || s.y.empty()) continue;
    const Column* x = first.table.find(s.x);
    const Column* y = first.table.find(s.y);
    if (!x || !y) return std::nullopt;
    for (const Plot& p : replicates)
      if (p.table.find(s.x)->values != x->values) return std::nullopt;
    const bool bars = !s.z.empty() && s.style.rfind("yerror", 0) == 0;
    if (!s.z.empty() && !bars) {  // a map (style image, say): x and y as they are, z's mean
      for (const Plot& p : replicates)
        if (p.table.find(s.y)->values != y->values) return std::nullopt;
      const Column* z = first.table.find(s.z);
      if (!z) return std::nullopt;
      Column mean{s.z, {}};
      for (std::size_t i = 0; i < z->values.size(); ++i) {
        std::vector<double> at;
        for (const Plot& p : replicates) at.push_back(p.table.find(s.z)->values[i]);
        mean.values.push_back(over_replicates("", at).value);
      }
      add(*x), add(*y), add(mean);
      out.figure.series.push_back(s);
      continue;
    }
    Column mean{s.y, {}}, low{s.y + " - se", {}}, high{s.y + " + se", {}}, se{s.y + " se", {}};
    for (std::size_t i = 0; i < y->values.size(); ++i) {
      std::vector<double> at;
      for (const Plot& p : replicates) at.push_back(p.table.find(s.y)->values[i]);
      const Element e = over_replicates("", at);
      mean.values.push_back(e.value), low.values.push_back(e.value - e.se), high.values.push_back(e.value + e.se);
      se.values.push_back(e.se);
    }
    bands = true;
    if (s.style.rfind("boxes", 0) == 0) {  // bars: the se as error bars on each (x:y:ydelta)
      add(*x), add(mean), add(se);
      out.figure.series.push_back({s.x, s.y, "", s.title, "boxerrorbars" + s.style.substr(5), se.name});
      continue;
    }
    add(*x), add(mean), add(low), add(high);
    // The band in the curve's colour: its own lc clause (the style's last), else the next of gnuplot's.
    const std::size_t own = s.style.find("lc ");
    const std::string lc = own != std::string::npos ? s.style.substr(own) : "lc " + std::to_string(++colour);
    out.figure.series.push_back({s.x, s.y + " - se", "", "", "filledcurves fs transparent solid 0.2 noborder " + lc, s.y + " + se"});
    // A replicate's own error bars (style yerror…, z their column: a spread within one run) are left
    // out with their " (± …)" in the title: the band is the replicates' spread.
    const std::string style = bars ? "linespoints" : s.style, title = bars ? s.title.substr(0, s.title.find(" (±")) : s.title;
    out.figure.series.push_back({s.x, s.y, "", title, own != std::string::npos ? style : style + " " + lc, ""});
  }
  if (out.table.columns.empty()) return std::nullopt;
  out.figure.title += " (mean" + std::string(bands ? " ± se" : "") + " over " + std::to_string(replicates.size()) + " " + over + ")";
  return out;
}

}  // namespace qkvlab::results
