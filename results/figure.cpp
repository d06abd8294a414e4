// write_csv, write_tables_hdf5 and the figures (results/figure.hpp).
#include "results/figure.hpp"

#include "core/atomic_file.hpp"
#include "results/hdf5_handle.hpp"

#include <hdf5.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <stdexcept>
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
    if (c.size() != t.columns.front().size() || (c.integer && !c.values.empty()))
      throw std::runtime_error("table " + t.name + ": column " + c.name + " has a different length");
}

// Single-quoted for a gnuplot string (a quote inside is doubled).
std::string gp_string(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

// The data rows of the table as CSV lines (no header).
std::string csv_rows(const Table& table) {
  std::string text;
  for (std::size_t i = 0; i < table.columns.front().size(); ++i) {
    for (std::size_t j = 0; j < table.columns.size(); ++j) {
      const Column& c = table.columns[j];
      if (j) text += ',';
      text += c.integer ? std::to_string(c.integers[i]) : number(c.values[i]);
    }
    text += "\n";
  }
  return text;
}

std::string csv_text(const Table& table) {
  check_shape(table);
  std::string text;
  for (std::size_t j = 0; j < table.columns.size(); ++j) {
    if (j) text += ',';
    text += table.columns[j].name;
  }
  return text + "\n" + csv_rows(table);
}

// gnuplot's path on the PATH, or empty.
std::string gnuplot_path() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t at = 0;
  while (at <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', at), dirs.size());
    std::string dir = dirs.substr(at, end - at);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/gnuplot";
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    at = end + 1;
  }
  return "";
}

// Runs gnuplot on `script` (its standard input), its standard output to out_fd.
// The child dies with qkvlab (PR_SET_PDEATHSIG). Returns the exit status and the
// first non-empty line gnuplot wrote to its standard error.
std::pair<int, std::string> run_gnuplot(const std::string& script, int out_fd) {
  const std::string exe = gnuplot_path();
  if (exe.empty()) throw std::runtime_error("gnuplot not found");
  int in[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error("cannot create a pipe");
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(in[0]), ::close(in[1]);
    throw std::runtime_error("cannot create a pipe");
  }
  char* const argv[] = {const_cast<char*>("gnuplot"), nullptr};
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {  // only async-signal-safe calls until exec
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    if (::dup2(in[0], 0) < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err[1], 2) < 0) ::_exit(127);
    ::execv(exe.c_str(), argv);
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(err[1]);
  if (pid < 0) {
    ::close(in[1]), ::close(err[0]);
    throw std::runtime_error(std::string("cannot start gnuplot (") + std::strerror(errno) + ")");
  }
  // Feed the script and drain stderr together, so neither side can block the other.
  // SIGPIPE is blocked meanwhile: a gnuplot that exits early must not kill qkvlab.
  sigset_t pipe_set, old_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  std::string errors;
  std::size_t written = 0;
  int in_fd = in[1];
  ::fcntl(in_fd, F_SETFL, ::fcntl(in_fd, F_GETFL) | O_NONBLOCK);
  for (bool err_open = true; err_open;) {
    pollfd fds[2] = {{err[0], POLLIN, 0}, {in_fd, POLLOUT, 0}};
    if (::poll(fds, in_fd >= 0 ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (in_fd >= 0 && (fds[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t n = ::write(in_fd, script.data() + written, script.size() - written);
      if (n > 0) written += std::size_t(n);
      if ((n < 0 && errno != EAGAIN && errno != EINTR) || written == script.size()) {
        ::close(in_fd);
        in_fd = -1;
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[4096];
      const ssize_t n = ::read(err[0], buf, sizeof buf);
      if (n > 0) {
        if (errors.size() < 65536) errors.append(buf, std::size_t(n));
      } else if (n == 0 || errno != EINTR) {
        err_open = false;
      }
    }
  }
  if (in_fd >= 0) ::close(in_fd);
  ::close(err[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const timespec zero{0, 0};
  while (sigtimedwait(&pipe_set, nullptr, &zero) > 0) {  // a SIGPIPE raised above, if any
  }
  pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  std::string first;
  std::istringstream lines(errors);
  for (std::string line; first.empty() && std::getline(lines, line);) {
    const auto b = line.find_first_not_of(" \t\r");
    if (b != std::string::npos) first = line.substr(b);
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return {code, first};
}

bool pngcairo_available() {
  static const bool yes = [] {
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null < 0) return false;
    bool ok = false;
    try {
      ok = run_gnuplot("set terminal pngcairo\n", null).first == 0;
    } catch (const std::exception&) {
    }
    ::close(null);
    return ok;
  }();
  return yes;
}

}  // namespace

const Column* Table::find(const std::string& wanted) const {
  for (const Column& c : columns)
    if (c.name == wanted) return &c;
  return nullptr;
}

int Table::column_number(const std::string& wanted) const {
  if (const Column* c = find(wanted)) return int(c - columns.data()) + 1;
  throw std::runtime_error("table " + name + " has no column " + wanted);
}

void stage_csv(StagedFiles& files, const std::filesystem::path& path, const Table& table) {
  files.add_bytes(path, "CSV", csv_text(table));
}

void write_csv(const std::filesystem::path& path, const Table& table) {
  StagedFiles files;
  stage_csv(files, path, table);
  files.commit();
}

void stage_tables_hdf5(StagedFiles& files, const std::filesystem::path& path, const std::vector<Table>& tables,
                       std::uint64_t seed, const std::string& command_line, const std::string& context) {
  for (const auto& t : tables) check_shape(t);
  std::string image;
  try {
    QuietErrors quiet;
    MemoryFile file;
    write_attribute(file.get(), "seed", H5T_NATIVE_UINT64, &seed);
    write_string_attribute(file.get(), "command_line", string_type().get(), command_line);
    if (!context.empty()) write_string_attribute(file.get(), "context", string_type().get(), context);
    for (const auto& t : tables) {
      Handle group(H5Gcreate2(file.get(), t.name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
                   "cannot create group " + t.name);
      for (const auto& c : t.columns) {
        const hsize_t dims[1] = {hsize_t(c.size())};
        Handle space(H5Screate_simple(1, dims, nullptr), H5Sclose, "cannot create dataspace");
        const Handle set = create_dataset(group.get(), c.name, c.integer ? H5T_STD_U64LE : H5T_IEEE_F64LE, space.get(),
                                          "cannot create dataset " + t.name + "/" + c.name);
        const void* data = c.integer ? static_cast<const void*>(c.integers.data()) : c.values.data();
        if (c.size() > 0)
          check(H5Dwrite(set.get(), c.integer ? H5T_NATIVE_UINT64 : H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
                "cannot write dataset " + t.name + "/" + c.name);
      }
    }
    image = file.image();
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot write HDF5 file " + path.string() + ": " + e.what());
  }
  files.add_bytes(path, "HDF5", image);
}

void write_tables_hdf5(const std::filesystem::path& path, const std::vector<Table>& tables, std::uint64_t seed,
                       const std::string& command_line) {
  StagedFiles files;
  stage_tables_hdf5(files, path, tables, seed, command_line);
  files.commit();
}

bool gnuplot_available() { return !gnuplot_path().empty(); }

std::vector<TableFiles> table_files(const std::string& csv, const std::string& figure, const std::vector<std::string>& tables) {
  // A CSV's extension stays last (o/t.csv: o/t-TABLE.csv); a figure's stem has none (o/fig.v2: o/fig.v2-TABLE).
  const auto named = [&](const std::string& base, const std::string& table, bool has_extension) {
    const std::filesystem::path p(base);
    if (base.empty() || tables.size() == 1) return base;
    const std::string name = has_extension ? p.stem().string() : p.filename().string();
    return (p.parent_path() / (name + "-" + table + (has_extension ? p.extension().string() : ""))).string();
  };
  std::vector<TableFiles> files;
  for (const std::string& t : tables) files.push_back({named(csv, t, true), named(figure, t, false)});
  return files;
}

void stage_tables(StagedFiles& staged, const std::vector<TableFiles>& files, const std::vector<Table>& tables,
                  const std::vector<Figure>& figures) {
  for (std::size_t i = 0; i < tables.size(); ++i) {
    if (!files.at(i).csv.empty()) stage_csv(staged, files[i].csv, tables[i]);
    if (!files.at(i).figure.empty()) stage_figure(staged, figures.at(i), tables[i], files[i].figure);
  }
}

std::vector<std::filesystem::path> figure_files(const std::filesystem::path& stem) {
  return {stem.string() + ".svg", stem.string() + ".png"};
}

namespace {

// Without gnuplot: each stem's older STEM.svg and STEM.png are withdrawn from `files` (removed at
// its commit, so no figure outlives the numbers written with it), and one warning names them all.
void withdraw_figures(StagedFiles& files, const std::vector<std::filesystem::path>& stems) {
  std::string names;
  bool older = false;
  for (const std::filesystem::path& stem : stems) {
    names += (names.empty() ? "" : ", ") + stem.string() + ".svg/.png";
    for (const std::filesystem::path& f : figure_files(stem)) {
      older = older || std::filesystem::is_regular_file(f);
      files.withdraw(f, "figure");
    }
  }
  std::cerr << "qkvlab: warning: gnuplot not found; wrote the numbers but not " << names << " (install gnuplot-nox)"
            << (older ? "; the older figures there are removed" : "") << "\n";
}

}  // namespace

bool stage_figures(StagedFiles& files, const std::vector<Plot>& plots, const std::vector<std::filesystem::path>& stems) {
  if (!gnuplot_available()) {
    withdraw_figures(files, stems);
    return false;
  }
  for (std::size_t i = 0; i < plots.size(); ++i) stage_figure(files, plots[i].figure, plots[i].table, stems.at(i));
  return true;
}

bool stage_figure(StagedFiles& files, const Figure& figure, const Table& table, const std::filesystem::path& stem) {
  if (!gnuplot_available()) {
    withdraw_figures(files, {stem});
    return false;
  }
  check_shape(table);
  std::ostringstream body;
  body << "set datafile separator ','\n"
       << "$qkvlab_data << EOD\n"
       << csv_rows(table) << "EOD\n"
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
      body << "$qkvlab_data using " << table.column_number(s.x) << ":" << table.column_number(s.y)
           << (s.z.empty() ? "" : ":" + std::to_string(table.column_number(s.z)));
    body << " with " << s.style << " title " << gp_string(s.title);
  }
  body << "\n";
  const std::string terminals[2] = {
      "set terminal svg size 800,560 dynamic enhanced font 'Sans,12' background '#ffffff'",
      pngcairo_available() ? "set terminal pngcairo size 800,560 enhanced font 'Sans,11'" : "set terminal png size 800,560"};
  const std::vector<std::filesystem::path> targets = figure_files(stem);
  for (std::size_t k = 0; k < targets.size(); ++k) {
    const std::string& terminal = terminals[k];
    files.add(targets[k], "figure", [&](int fd) {
      const auto [status, message] = run_gnuplot(terminal + "\nset output\n" + body.str() + "unset output\n", fd);
      if (status != 0) throw std::runtime_error("gnuplot failed" + (message.empty() ? "" : ": " + message));
      struct stat st {};
      if (::fstat(fd, &st) != 0 || st.st_size == 0) throw std::runtime_error("gnuplot wrote nothing");
    });
  }
  return true;
}

bool render_figure(const Figure& figure, const Table& table, const std::filesystem::path& stem) {
  StagedFiles files;
  const bool drawn = stage_figure(files, figure, table, stem);
  files.commit();
  return drawn;
}

}  // namespace qkvlab::results
