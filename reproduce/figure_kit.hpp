// What the figure files of reproduce/ share (internal: only reproduce/*.cpp include it): a figure's
// registration (Entry; one list per paper's file, joined in --list order by registry.cpp), what a
// figure writes (Output, figure_output.hpp), the run it computes in (Session: the backend, the corpus and the trained
// models, each fetched once) and the small renderings several figures use. reproduce/README.md says
// how to add a figure.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "analysis/analyze.hpp"
#include "lm/evaluate.hpp"
#include "lm/model.hpp"
#include "reproduce/figure_output.hpp"
#include "reproduce/reproduce.hpp"
#include "results/figure.hpp"

namespace qkvlab::reproduce {

namespace fs = std::filesystem;
using results::Column;
using results::Table;
using results::Value;

class Session;

// A figure of the registry: its name, the recipes it trains (a recipe named k times is trained at k
// seeds) and the function that makes it. What it remakes, the paper's figure and its measured time
// are its section of docs/reproduce-figures.md (figure_docs.cpp).
//
// `seeds` > 1 replicates the whole figure: `make` runs once per seed, options.seed … options.seed +
// seeds − 1, with Session::seed() set to it (so every recipe it names is trained at that seed), and
// registry.cpp gathers the runs: FIGURE.json's results hold "seeds" and each run's results under
// "seed S", seed S's tables and drawings after the first carry the suffix "-sS", and the verdict
// (verdicts.cpp) measures the quantity in each run and takes its mean and standard error over them.
struct Entry {
  std::string name;
  std::vector<std::string> recipes;
  void (*make)(Session&, Output&);
  int seeds = 1;
};
// Each paper's figures, in --list order; registry.cpp joins the lists (a new file adds its list there).
std::vector<Entry> resformer_figures();  // resformer_figures.cpp
std::vector<Entry> skipv1_figures();     // skipv1_figures.cpp
std::vector<Entry> qwe_figures();        // qwe_figures.cpp
std::vector<Entry> icl_figures();        // icl_figures.cpp

// One figure's run: the backend, the corpus and the trained models, each fetched once.
class Session {
 public:
  explicit Session(const Context& c);

  const lm::TrainData& data();
  // The seed a recipe is trained at when a call names none: the options' seed, or, while the
  // registry replicates a figure over seeds (Entry::seeds), the replicate's.
  std::uint64_t seed() const { return seed_; }
  void set_seed(std::uint64_t seed) { seed_ = seed; }
  // The recipe `name` trained at seed().
  const Trained& trained(const std::string& name);
  std::filesystem::path checkpoint(const std::string& name) { return trained(name).dir / "checkpoint"; }
  std::unique_ptr<lm::Model<float>> model(const std::string& name);
  engine::Backend<float>& backend() { return *backend_; }
  // n validation sequences of T tokens chosen by the options' seed (analysis::choose_sequences): the
  // same for every replicate seed, so the replicates' differences are paired.
  lm::TokenSequences sequences(int T);
  // The sequences each analysis length got, [{length, sequences}] by length: the options' number, or
  // all the validation split holds when that is fewer (the JSON's sequences_analysed).
  results::Value sequences_analysed() const;
  analysis::Report analyze(const std::string& name, analysis::Kind kind, analysis::Options o, int T);
  void progress(const std::string& stage, const std::string& unit, std::int64_t done, std::int64_t total,
                const std::string& extra = "") const {
    if (c_.progress) c_.progress(stage, unit, done, total, extra);
  }
  const Options& options() const { return c_.options; }
  // The runs used, for the JSON: name → directory, reused, final validation loss, command, the device
  // the run was trained on and qkvlab's version then (its run.json's).
  results::Value runs() const;

 private:
  const Context& c_;
  std::unique_ptr<engine::Backend<float>> backend_;
  std::uint64_t seed_;
  std::optional<lm::TrainData> data_;
  struct Used {
    std::string recipe;
    std::uint64_t seed;
    Trained trained;
  };
  std::map<std::string, Used> trained_;  // "vanilla" at the options' seed, "vanilla-s2" at another
  std::map<int, std::int64_t> analysed_;  // T → the sequences chosen
};

// ---- small renderings ----------------------------------------------------------------------------------

std::string list_text(const std::vector<double>& x, int digits);  // fixed(x_i), space-separated
double mean_of(const std::vector<double>& x);                   // NaN when empty

}  // namespace qkvlab::reproduce
