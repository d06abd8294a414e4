// `qkvlab absorb W1.npy W2.npy`: is the skip ReLU MLP x ↦ x + W_2 σ(W_1 x)
// (column vectors, W_1 m×d, W_2 d×m) a skipless ReLU MLP of the same width
// (qwe.thm8.4, decided as in qwe.cor8.4.1)? On yes writes W1_absorbed.npy and
// W2_absorbed.npy (each atomically) into --out-dir. Exit 0 on a decision (yes or
// no), 1 when undecided, 2 on a usage error (nothing written).
// `qkvlab absorb fit` (absorb_fit_command.cpp) is a subcommand of this one; W1 and
// W2 are therefore optional to CLI11 and required here when no subcommand is given.
#include "cli/format_option.hpp"
#include "cli/commands.hpp"
#include "cli/matrix_argument.hpp"
#include "cli/output_paths.hpp"
#include "cli/validators.hpp"
#include "core/absorb.hpp"
#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/json_text.hpp"
#include "core/npy.hpp"
#include "results/hdf5_matrix.hpp"

#include <cmath>
#include <filesystem>
#include <iostream>
#include <sstream>

namespace qkvlab::cli {
namespace {

struct AbsorbArgs {
  std::string w1, w2, out_dir = ".", format = "text";
  int max_exact = 20;
};

std::string index_list(const std::vector<int>& J, const char* open, const char* close) {
  std::string s = open;
  for (std::size_t k = 0; k < J.size(); ++k) s += (k ? ", " : "") + std::to_string(J[k]);
  return s + close;
}

// The files the absorbed weights go to: absorbed.h5 when the inputs are HDF5, else
// W1_absorbed.npy and W2_absorbed.npy, in --out-dir.
std::vector<std::string> absorbed_files(const AbsorbArgs& a) {
  const std::filesystem::path dir(a.out_dir);
  if (results::parse_hdf5_location(a.w1)) return {(dir / "absorbed.h5").string()};
  return {(dir / "W1_absorbed.npy").string(), (dir / "W2_absorbed.npy").string()};
}

// No output is a file the inputs are read from (W1_absorbed.npy given as W1, absorbed.h5 holding
// them): writing it would replace the input, a whole HDF5 file with its other datasets. Checked
// when a "yes" is about to be written; a decision alone writes nothing.
void refuse_inputs_as_outputs(const AbsorbArgs& a) {
  const std::string w1 = matrix_file(a.w1), w2 = matrix_file(a.w2);
  for (const std::string& out : absorbed_files(a))
    refuse_overlapping_files({{"output", &out}}, {{"W1", &w1}, {"W2", &w2}});
}

// The absorbed weights in the inputs' format (absorbed_files): W1_absorbed.npy and
// W2_absorbed.npy (both or neither: staged, then renamed), or absorbed.h5 with
// datasets W1 and W2 when the inputs were HDF5.
std::vector<std::string> write_absorbed(const AbsorbArgs& a, const SkiplessMlp<double>& w, NpyDtype d1, NpyDtype d2) {
  refuse_inputs_as_outputs(a);
  const std::vector<std::string> paths = absorbed_files(a);
  if (paths.size() == 1) {
    results::write_hdf5_matrices(paths[0], {{"W1", w.W_1}, {"W2", w.W_2}});
    return {paths[0] + ":/W1", paths[0] + ":/W2"};
  }
  // Rows of W1 negated and W2 unchanged: exact in the inputs' own dtypes.
  StagedFiles files;
  files.add_bytes(paths[0], ".npy", npy_bytes(w.W_1, d1));
  files.add_bytes(paths[1], ".npy", npy_bytes(w.W_2, d2));
  files.commit();
  return paths;
}

int run_absorb(const AbsorbArgs& a) {
  const NpyMatrix W_1 = read_matrix_argument(a.w1), W_2 = read_matrix_argument(a.w2);
  const Eigen::Index m = W_1.data.rows(), d = W_1.data.cols();
  if (m == 0 || d == 0) throw UsageError(a.w1 + ": W1 is empty (" + std::to_string(m) + "x" + std::to_string(d) + ")");
  if (W_2.data.rows() != d || W_2.data.cols() != m)
    throw UsageError(a.w2 + ": W2 must be " + std::to_string(d) + "x" + std::to_string(m) + " (d x m for W1 " +
                     std::to_string(m) + "x" + std::to_string(d) + "), got " + std::to_string(W_2.data.rows()) + "x" +
                     std::to_string(W_2.data.cols()));
  require_directory("--out-dir", a.out_dir);

  AbsorbLimits limits;
  limits.max_exact = a.max_exact;
  limits.unit_roundoff = data_unit_roundoff(W_1, W_2);
  const AbsorbDecision dec = decide_absorption(W_1.data, W_2.data, limits);

  std::vector<std::string> written;
  if (dec.verdict == Verdict::yes) written = write_absorbed(a, *dec.absorbed, W_1.dtype, W_2.dtype);

  if (a.format == "json") {
    std::cout << "{\"verdict\": " << json_quote(verdict_name(dec.verdict)) << ", \"m\": " << m << ", \"d\": " << d
              << ", \"J\": " << index_list(dec.J, "[", "]") << ", \"reason\": " << json_quote(dec.reason)
              << ", \"hypotheses_hold\": " << (dec.hypotheses_hold ? "true" : "false")
              << ", \"hypothesis_failure\": " << json_quote(dec.hypothesis_failure)
              << ", \"independent\": " << (dec.independent ? "true" : "false")
              << ", \"relaxation_residual\": " << json_number(dec.relaxation_residual)
              << ", \"residual\": " << json_number(dec.residual) << ", \"tolerance\": " << json_number(dec.tolerance)
              << ", \"subsets_searched\": " << dec.subsets_searched << ", \"written\": [";
    for (std::size_t k = 0; k < written.size(); ++k) std::cout << (k ? ", " : "") << json_quote(written[k]);
    std::cout << "]}\n";
  } else {
    const auto shown = [](double x) {  // text: a value not computed is said so, never printed as nan
      std::ostringstream s;
      if (std::isfinite(x)) s << x;
      else s << "not computed";
      return s.str();
    };
    std::cout << verdict_name(dec.verdict) << "\n";
    if (dec.verdict == Verdict::yes)
      std::cout << "J = " << index_list(dec.J, "{", "}") << " (0-based rows of W1), |J| = " << dec.J.size()
                << ", d = " << d << ", m = " << m << "\n"
                << "||W2 P_J W1 + I||_F / ||I||_F = " << dec.residual << " (tolerance " << dec.tolerance << ")\n";
    std::cout << "reason: " << dec.reason << "\n";
    if (!dec.hypotheses_hold) std::cout << "hypothesis fails: " << dec.hypothesis_failure << "\n";
    std::cout << "relaxation residual: " << shown(dec.relaxation_residual) << " (tolerance " << shown(dec.tolerance) << ")\n";
    for (const auto& f : written) std::cout << "wrote " << f << "\n";
  }
  return dec.verdict == Verdict::undecided ? 1 : 0;
}

}  // namespace

Command add_absorb_command(CLI::App& app, const std::string& command_line) {
  auto a = std::make_shared<AbsorbArgs>();
  auto* cmd = app.add_subcommand(
      "absorb", "Decide whether x + W2 relu(W1 x) is a skipless ReLU MLP of the same width (qwe.thm8.4)");
  cmd->footer(
      "W1 (m x d) and W2 (d x m) are 2-D .npy files (dtype <f8 or <f4, C or Fortran order) or HDF5 datasets\n"
      "named FILE.h5:DATASET (any float or integer type, row-major as h5py writes them).\n"
      "The skip is absorbable iff W2 P_J W1 = -I for some J with |J| >= d (rows of W1 pairwise non-collinear,\n"
      "non-zero; columns of W2 non-zero). Tolerance: 1e3 * u * sum_i ||W2[:,i]|| ||W1[i,:]||, u of the inputs' dtype\n"
      "(unchanged by rescaling a unit: row i of W1 times c > 0, column i of W2 divided by c).\n"
      "yes: prints J (0-based) and writes W1_absorbed.npy = (I - 2 P_J) W1 and W2_absorbed.npy = W2 to --out-dir\n"
      "(for HDF5 inputs: absorbed.h5 with datasets W1 and W2).\n"
      "no: prints the reason and the best real relaxation's residual.\n"
      "undecided: the hypotheses fail and no J was found, or the rank-one matrices are dependent and m > --max-exact.\n"
      "Exit status: 0 on a decision (yes or no), 1 undecided, 2 usage error (nothing written).\n"
      "Subcommand: 'qkvlab absorb fit' fits skipless MLPs to skip ones (qwe.cor8.4.1, empirical; see its --help).");
  cmd->add_option("W1", a->w1, "W1, m x d (.npy or FILE.h5:DATASET); required unless a subcommand is given");
  cmd->add_option("W2", a->w2, "W2, d x m (.npy or FILE.h5:DATASET); required unless a subcommand is given");
  cmd->add_option("--out-dir", a->out_dir, "Directory for W1_absorbed.npy and W2_absorbed.npy")->capture_default_str();
  add_format_option(cmd, a->format, Readable::text);
  cmd->add_option("--max-exact", a->max_exact,
                  "Largest m searched exhaustively (2^m subsets) when the rank-one matrices are dependent")
      ->check(integer_in(0, 30))
      ->capture_default_str();
  const Command fit = add_absorb_fit_command(*cmd, command_line);
  cmd->require_subcommand(0, 1);
  return {cmd, [a, fit] {
            if (fit.app->parsed()) return fit.run();
            if (a->w1.empty()) throw UsageError("absorb: W1 is required (or 'qkvlab absorb fit')");
            if (a->w2.empty()) throw UsageError("absorb: W2 is required");
            return run_absorb(*a);
          }};
}

}  // namespace qkvlab::cli
