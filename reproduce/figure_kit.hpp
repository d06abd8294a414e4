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
struct Entry {
  std::string name;
  std::vector<std::string> recipes;
  void (*make)(Session&, Output&);
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
  // The recipe `name` trained at `seed` (0: the options' seed).
  const Trained& trained(const std::string& name, std::uint64_t seed = 0);
  std::filesystem::path checkpoint(const std::string& name, std::uint64_t seed = 0) {
    return trained(name, seed).dir / "checkpoint";
  }
  std::unique_ptr<lm::Model<float>> model(const std::string& name, std::uint64_t seed = 0);
  engine::Backend<float>& backend() { return *backend_; }
  // n validation sequences of T tokens chosen by the seed (analysis::choose_sequences).
  lm::TokenSequences sequences(int T);
  analysis::Report analyze(const std::string& name, analysis::Kind kind, analysis::Options o, int T,
                           std::uint64_t seed = 0);
  void progress(const std::string& stage, const std::string& unit, std::int64_t done, std::int64_t total,
                const std::string& extra = "") const {
    if (c_.progress) c_.progress(stage, unit, done, total, extra);
  }
  const Options& options() const { return c_.options; }
  // The runs used, for the JSON: name → directory, reused, final validation loss, command.
  results::Value runs() const;

 private:
  const Context& c_;
  std::unique_ptr<engine::Backend<float>> backend_;
  std::optional<lm::TrainData> data_;
  struct Used {
    std::string recipe;
    std::uint64_t seed;
    Trained trained;
  };
  std::map<std::string, Used> trained_;  // "vanilla" at the options' seed, "vanilla-s2" at another
};

// ---- small renderings ----------------------------------------------------------------------------------

std::string fixed(double x, int digits);                       // "%.*f"
std::string list_text(const std::vector<double>& x, int digits);  // fixed(x_i), space-separated
double mean_of(const std::vector<double>& x);                   // NaN when empty

}  // namespace qkvlab::reproduce
