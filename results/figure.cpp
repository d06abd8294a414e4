// write_csv, write_tables_hdf5 and render_figure (results/figure.hpp).
#include "results/figure.hpp"

#include "core/atomic_file.hpp"
#include "results/hdf5_handle.hpp"

#include <hdf5.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <unistd.h>
#include <utility>

namespace qkvlab::results {
namespace {

using namespace hdf5;

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void check_shape(const Table& t) {
  if (t.columns.empty()) throw std::runtime_error("table " + t.name + " has no columns");
  for (const auto& c : t.columns)
    if (c.values.size() != t.columns.front().values.size())
      throw std::runtime_error("table " + t.name + ": column " + c.name + " has a different length");
}

// Single-quoted for a gnuplot string (a quote inside is doubled).
std::string gp_string(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

std::string shell_quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

bool pngcairo_available() {
  static const bool yes = std::system("gnuplot -e 'set terminal' 2>&1 | grep -q pngcairo") == 0;
  return yes;
}

void run_gnuplot(const std::string& script, const std::filesystem::path& work) {
  const std::filesystem::path file = work.string() + ".gp", log = work.string() + ".log";
  std::ofstream(file) << script;
  const int status = std::system(("gnuplot " + shell_quoted(file.string()) + " >" + shell_quoted(log.string()) +
                                  " 2>&1")
                                     .c_str());
  std::ifstream in(log);
  std::string first;
  std::getline(in, first);
  std::error_code ignored;
  std::filesystem::remove(file, ignored);
  std::filesystem::remove(log, ignored);
  if (status != 0) throw std::runtime_error("gnuplot failed" + (first.empty() ? "" : ": " + first));
}

}  // namespace

int Table::column_number(const std::string& wanted) const {
  for (std::size_t i = 0; i < columns.size(); ++i)
    if (columns[i].name == wanted) return int(i) + 1;
  throw std::runtime_error("table " + name + " has no column " + wanted);
}

void write_csv(const std::filesystem::path& path, const Table& table) {
  check_shape(table);
  std::string text;
  for (std::size_t j = 0; j < table.columns.size(); ++j) {
    if (j) text += ',';
    text += table.columns[j].name;
  }
  text += "\n";
  for (std::size_t i = 0; i < table.columns.front().values.size(); ++i) {
    for (std::size_t j = 0; j < table.columns.size(); ++j) {
      if (j) text += ',';
      text += number(table.columns[j].values[i]);
    }
    text += "\n";
  }
  write_bytes_atomically(path, "CSV", text);
}

void write_tables_hdf5(const std::filesystem::path& path, const std::vector<Table>& tables, std::uint64_t seed,
                       const std::string& command_line) {
  for (const auto& t : tables) check_shape(t);
  write_atomically(path, "HDF5", [&](const std::filesystem::path& temporary) {
    QuietErrors quiet;
    Handle file(H5Fcreate(temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose,
                "cannot create file");
    write_attribute(file.get(), "seed", H5T_NATIVE_UINT64, &seed);
    write_string_attribute(file.get(), "command_line", string_type().get(), command_line);
    for (const auto& t : tables) {
      Handle group(H5Gcreate2(file.get(), t.name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
                   "cannot create group " + t.name);
      for (const auto& c : t.columns) {
        const hsize_t dims[1] = {hsize_t(c.values.size())};
        Handle space(H5Screate_simple(1, dims, nullptr), H5Sclose, "cannot create dataspace");
        Handle set(H5Dcreate2(group.get(), c.name.c_str(), H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                              H5P_DEFAULT),
                   H5Dclose, "cannot create dataset " + t.name + "/" + c.name);
        if (!c.values.empty())
          check(H5Dwrite(set.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, c.values.data()),
                "cannot write dataset " + t.name + "/" + c.name);
      }
    }
    file.close("cannot close file");
  });
}

bool gnuplot_available() {
  static const bool yes = std::system("command -v gnuplot >/dev/null 2>&1") == 0;
  return yes;
}

bool render_figure(const Figure& figure, const Table& table, const std::filesystem::path& csv,
                   const std::filesystem::path& stem) {
  if (!gnuplot_available()) {
    std::cerr << "qkvlab: warning: gnuplot not found; wrote the numbers but not " << stem.string()
              << ".svg/.png (install gnuplot-nox)\n";
    return false;
  }
  std::ostringstream body;
  body << "set datafile separator ','\n"
       << "set title " << gp_string(figure.title) << " noenhanced\n"
       << "set xlabel " << gp_string(figure.xlabel) << " noenhanced\n"
       << "set ylabel " << gp_string(figure.ylabel) << " noenhanced\n"
       << "set grid\nset key top left noenhanced\nset samples 400\n";
  if (figure.log_x) body << "set logscale x\nset format x '10^{%L}'\n";
  if (figure.log_y) body << "set logscale y\nset format y '10^{%L}'\n";
  for (const auto& e : figure.extra) body << e << "\n";
  body << "plot ";
  for (std::size_t i = 0; i < figure.series.size(); ++i) {
    const Series& s = figure.series[i];
    if (i) body << ", \\\n     ";
    if (!s.expression.empty()) body << s.expression;
    else
      body << gp_string(csv.string()) << " skip 1 using " << table.column_number(s.x) << ":"
           << table.column_number(s.y) << (s.z.empty() ? "" : ":" + std::to_string(table.column_number(s.z)));
    body << " with " << s.style << " title " << gp_string(s.title);
  }
  body << "\n";
  const std::string terminals[2][2] = {
      {".svg", "set terminal svg size 800,560 dynamic enhanced font 'Sans,12' background '#ffffff'"},
      {".png", pngcairo_available() ? "set terminal pngcairo size 800,560 enhanced font 'Sans,11'"
                                    : "set terminal png size 800,560"}};
  for (const auto& [suffix, terminal] : terminals) {
    const std::filesystem::path target = stem.string() + suffix;
    write_atomically(target, "figure", [&](const std::filesystem::path& temporary) {
      run_gnuplot(terminal + "\nset output " + gp_string(temporary.string()) + "\n" + body.str() + "unset output\n",
                  temporary);
      if (!std::filesystem::exists(temporary) || std::filesystem::file_size(temporary) == 0)
        throw std::runtime_error("gnuplot wrote nothing");
    });
  }
  return true;
}

}  // namespace qkvlab::results
