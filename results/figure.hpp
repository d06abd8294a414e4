// Numbers and figures for the plotting subcommands (qkvlab rmt, qkvlab lnorm).
// A Table is named double columns of equal length (or uint64 ones: Column::integer). It is written
// as CSV (one header line, %.17g) and, several tables at once, as an HDF5 file with one
// group per table holding one 1-D double (or uint64) dataset per column; the root carries
// the attributes seed (uint64) and command_line (string). A Figure is rendered
// by running gnuplot on a generated script that holds the table's numbers, to SVG
// and PNG (pngcairo, else png). Every file is written atomically, and a command's
// files all or none: each writer has a stage_* form that adds its files to a
// StagedFiles set committed at the end (core/atomic_file.hpp); without gnuplot the
// numbers are written and the figures' older files removed with them (a warning,
// not an error). gnuplot writes to
// its standard output, a descriptor of the staged file: it opens no path of the
// output directory, and it is killed when qkvlab dies (PR_SET_PDEATHSIG).
#pragma once

#include "core/atomic_file.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace qkvlab::results {

struct Column {
  std::string name;
  std::vector<double> values;
  // An integer column (seeds past 2^53 included) holds its numbers here, exactly, and `values` stays empty:
  // HDF5 writes it as uint64, CSV in decimal.
  bool integer = false;
  std::vector<std::uint64_t> integers{};
  std::size_t size() const { return integer ? integers.size() : values.size(); }
  bool operator==(const Column&) const = default;  // the same name and numbers (a NaN differs from itself)
};

struct Table {
  std::string name;  // HDF5 group name (no '/')
  std::vector<Column> columns;
  // The column named `name`, or nullptr.
  const Column* find(const std::string& name) const;
  // Index of the column named `name`, 1-based as gnuplot counts; throws if absent.
  int column_number(const std::string& name) const;
};

void write_csv(const std::filesystem::path& path, const Table& table);
void stage_csv(StagedFiles& files, const std::filesystem::path& path, const Table& table);
void write_tables_hdf5(const std::filesystem::path& path, const std::vector<Table>& tables, std::uint64_t seed,
                       const std::string& command_line);
// context: a JSON object (compact) of what the tables were measured on, written as the root's
// string attribute "context" when not empty (verify's report files carry theirs the same way).
void stage_tables_hdf5(StagedFiles& files, const std::filesystem::path& path, const std::vector<Table>& tables,
                       std::uint64_t seed, const std::string& command_line, const std::string& context = "");

// One curve: columns x and y of the figure's table, or, when `expression` is set, a
// gnuplot function of x (e.g. "0.5*x**(-2.0/3)") drawn over the plotted range.
// A third column `z`, when set, is passed too (x:y:z): a band's upper edge with
// style "filledcurves", an error with "yerrorbars".
struct Series {
  std::string x, y, expression, title;
  std::string style = "lines";  // gnuplot "with" clause: lines, points, linespoints, boxes, ...
  std::string z;
};

struct Figure {
  std::string title, xlabel, ylabel;
  bool log_x = false, log_y = false;
  std::vector<Series> series;
  std::vector<std::string> extra;  // further gnuplot commands before `plot` (e.g. "set yrange [0:*]")
};

// A figure with the table it is drawn from.
struct Plot {
  Table table;
  Figure figure;
};

// True when an executable `gnuplot` is on the PATH.
bool gnuplot_available();

// Where a command writes its tables: --csv FILE holds one table, or each of several (named `tables`)
// in FILE's stem + "-" + TABLE + FILE's extension; --figure STEM likewise, each drawn from its table.
// A name is empty where its option is not given.
struct TableFiles {
  std::string csv, figure;  // figure: the stem of figure_files
};
std::vector<TableFiles> table_files(const std::string& csv, const std::string& figure, const std::vector<std::string>& tables);

// The files a figure of stem `stem` is drawn into: stem.svg and stem.png.
std::vector<std::filesystem::path> figure_files(const std::filesystem::path& stem);

// Renders `figure` from the table into figure_files(stem), staged into
// `files`. Returns false, having printed a one-line warning on stderr, when
// gnuplot is missing: then the figure files already there are withdrawn from
// `files` (removed when it is committed), so a figure never outlives the numbers
// written with it; throws std::runtime_error when gnuplot fails.
bool stage_figure(StagedFiles& files, const Figure& figure, const Table& table, const std::filesystem::path& stem);
// stage_figure for plots[i] at stems[i], with one warning for them all when gnuplot is missing.
bool stage_figures(StagedFiles& files, const std::vector<Plot>& plots, const std::vector<std::filesystem::path>& stems);
// Stages tables[i] as CSV into files[i].csv and figures[i], drawn from it, at files[i].figure, where
// those are given.
void stage_tables(StagedFiles& staged, const std::vector<TableFiles>& files, const std::vector<Table>& tables,
                  const std::vector<Figure>& figures);
// The same, written at once.
bool render_figure(const Figure& figure, const Table& table, const std::filesystem::path& stem);

}  // namespace qkvlab::results
