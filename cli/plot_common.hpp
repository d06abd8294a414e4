// Shared by the subcommands: output-directory checks and progress on stderr.
#pragma once

#include "cli/output_paths.hpp"
#include "core/errors.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <unistd.h>
#include <vector>

namespace qkvlab::cli {

// An --out-dir given on the command line must exist; the default is created (one that cannot be, a
// UsageError naming --out-dir).
inline std::filesystem::path prepare_out_dir(const std::string& dir, bool given) {
  const std::filesystem::path p(dir);
  if (std::filesystem::is_directory(p)) return p;
  if (given || std::filesystem::exists(p)) require_directory("--out-dir", p);
  std::error_code error;
  std::filesystem::create_directories(p, error);
  if (error)
    throw UsageError("--out-dir: cannot create the default directory " + p.string() + " (" + error.message() +
                     "): give an existing one");
  return p;
}

// --figure STEM, one rule in every command that draws a figure (transfer, icl theory/train/sweep/anchor/
// depth, analyze, probe, lm compare): the figure goes to STEM.svg and STEM.png (results::figure_files);
// a STEM ending in .svg or .png is taken without it (--figure o/fig.svg draws o/fig.svg and o/fig.png);
// any other dot is STEM's own (o/fig.v2 draws o/fig.v2.svg); the figure's numbers, where the command
// writes them beside it, go to figure_table(STEM) = STEM.csv (o/fig.v2.csv). A STEM that names a
// directory (ending in '/', ".", "..", or an existing directory) is refused. Empty: no figure.
inline std::string figure_stem(const std::string& figure) {
  if (figure.empty()) return figure;
  std::filesystem::path stem(figure);
  const std::string name = stem.filename().string();
  if (name.empty() || name == "." || name == ".." || std::filesystem::is_directory(stem))
    throw UsageError("--figure: " + figure + " names a directory; give a file stem in it (" +
                     (stem / "figure").lexically_normal().string() + " draws figure.svg and figure.png there)");
  if (stem.extension() == ".svg" || stem.extension() == ".png") stem.replace_extension();
  return stem.string();
}
inline std::string figure_table(const std::string& stem) { return stem + ".csv"; }
// --figure STEM without --csv: the figure is drawn from its numbers, written to figure_table(STEM) (several
// tables: STEM-TABLE.csv each), as --figure means in every command that draws one. Returns the name the
// CSV goes by in messages: "--csv", or "--figure's CSV" where the user gave none.
inline std::string default_csv_beside_figure(std::string& csv, const std::string& figure) {
  if (!csv.empty() || figure.empty()) return "--csv";
  csv = figure_table(figure_stem(figure));
  return "--figure's CSV";
}

// A progress line on stderr (only when stderr is a terminal and not --quiet):
// "qkvlab NAME: WHAT done/total  rate/s  time left  EXTRA", redrawn at most
// five times a second and once at the end.
struct Progress {
  std::string name;
  bool on = false;
  mutable std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now(), last{};
  mutable std::size_t already = 0;  // units done before this process started (a resumed run's steps): not in the rate

  void operator()(const std::string& what, std::size_t done, std::size_t total, const std::string& extra = "") const {
    if (!on) return;
    const auto now = std::chrono::steady_clock::now();
    if (done != total && now - last < std::chrono::milliseconds(200)) return;
    last = now;
    const double seconds = std::chrono::duration<double>(now - start).count();
    const double rate = seconds > 0 && done > already ? double(done - already) / seconds : 0;
    std::cerr << "\rqkvlab " << name << ": " << what << " " << done << "/" << total;
    if (rate > 0) std::cerr << "  " << rate_text(rate) << "/s  " << duration_text(double(total - done) / rate) << " left";
    std::cerr << (extra.empty() ? "" : "  ") << extra << "   " << (done == total ? "\n" : "") << std::flush;
  }
  static bool wanted(bool quiet) { return !quiet && isatty(STDERR_FILENO); }
  static std::string rate_text(double r) {
    char buf[32];
    std::snprintf(buf, sizeof buf, r >= 100 ? "%.0f" : "%.3g", r);
    return buf;
  }
  static std::string duration_text(double s) {
    char buf[32];
    if (s < 60) std::snprintf(buf, sizeof buf, "%.0fs", s);
    else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
    else std::snprintf(buf, sizeof buf, "%dh%02dm", int(s) / 3600, int(s) % 3600 / 60);
    return buf;
  }
};

}  // namespace qkvlab::cli
