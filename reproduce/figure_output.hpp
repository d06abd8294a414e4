// What a figure of `qkvlab reproduce` writes (reproduce.hpp: run_figure renders it), and the
// figures whose function needs no Session (figure_kit.hpp), each in its own file.
#pragma once

#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "reproduce/reproduce.hpp"
#include "results/figure.hpp"
#include "results/value.hpp"

namespace qkvlab::reproduce {

// A figure's value (FIGURE.json's results), tables (CSV), figures drawn from them, and notes
// (README.md, after the paper's paragraph).
struct Output {
  results::Value value = results::Value::object();
  std::vector<results::Table> tables;
  struct Drawn {
    results::Figure figure;
    std::size_t table;
    std::string stem;
    bool over_seeds = true;  // drawn once more over a replicated figure's seeds (registry.cpp); false
                             // where the seeds' rows do not correspond (one model's heads, say)
  };
  std::vector<Drawn> drawn;
  std::string notes;

  std::size_t add(results::Table t) {
    tables.push_back(std::move(t));
    return tables.size() - 1;
  }
  void draw(results::Figure f, std::size_t table, std::string stem, bool over_seeds = true) {
    drawn.push_back({std::move(f), table, std::move(stem), over_seeds});
  }
};

// skipv1-fig6c-7 (figure_skipv1_cache.cpp): each variant's KV cache measured from the allocation
// against lm/accounting's count, and prefill and decode throughput against context and batch.
void skipv1_fig6c_7(const Options& options, engine::Backend<float>& backend, Output& out, const ProgressFn& progress);

// x with `digits` decimals ("%.*f"), every digit of a large x kept (session.cpp).
std::string fixed(double x, int digits);

}  // namespace qkvlab::reproduce
