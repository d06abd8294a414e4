// The trained experiments 2–5 of docs/math/icl.md as results (`qkvlab icl train`,
// `sweep`, `anchor`, `depth`): the sweep over (d, n, sigma, a), and each
// experiment rendered as a terminal table, a JSON object (17 significant digits;
// a value that is not finite — a diverged run — throws NumericalError, it is
// never printed as a number), tables (HDF5, CSV) and a figure.
#pragma once

#include "results/figure.hpp"
#include "results/value.hpp"
#include "synthetic/icl/anchor.hpp"
#include "synthetic/icl/depth.hpp"
#include "synthetic/icl/train_experiment.hpp"

#include <functional>
#include <string>
#include <vector>

namespace qkvlab::icl {

// What an experiment writes: every table (HDF5), the main one (CSV) and the figure with its data.
struct ExperimentTables {
  std::vector<results::Table> tables;
  results::Table main;
  results::Plot plot;
};

// The memory the sizes imply, before anything is allocated: each thread's training
// batch, activations and gradients on the backend (bounded by about 30 matrices of
// batch x tokens x 3d, the count the old tape kept; the backend keeps fewer: peak RSS
// of `icl train` went from 473 to 345 MB when the models moved onto it), every run's
// held-out losses (kept per prompt for paired differences) and a held-out chunk's
// probes. `runs` run on min(threads, runs) workers.
double trained_memory_bytes(int d, int n, int batch, int eval_samples, int threads, double runs);
// What `icl depth` keeps beyond that: its held-out prompts themselves (about 1.5 KB each at d = 4,
// n = 16), GD's predictions on them, and each worker's layer predictions.
double depth_held_out_bytes(const DepthConfig& config);

// icl train (experiments 2 and 3).
ExperimentTables train_tables(const TrainExperimentResult& r);
std::string train_text(const TrainExperimentResult& r);
results::Value train_json(const TrainExperimentResult& r);

// icl sweep: MHA and SkipV1 under Assumption 1's fixed copying layer at every
// (d, n, sigma) of the lists and a = 0 … d, each point `base` with its own
// streams ("sweep/d=D/n=N/sigma=S/a=A").
struct TrainSweep {
  std::vector<TrainExperimentConfig> points;
  std::vector<TrainExperimentResult> results;
};
std::vector<TrainExperimentConfig> sweep_points(const TrainExperimentConfig& base, const std::vector<int>& ds,
                                                const std::vector<int>& ns, const std::vector<double>& sigmas);
// `icl sweep`'s base point from its settings (each point's task, a and models come from sweep_points).
TrainExperimentConfig sweep_base_of(const TrainSettings& s, long theory_prompts = kSweepTheoryPrompts);
// progress(done, total) before each point and at the end (may be empty).
TrainSweep run_train_sweep(const std::vector<TrainExperimentConfig>& points,
                           const std::function<void(std::size_t, std::size_t)>& progress = {});
// The figure draws the first (d, n, sigma); the tables hold every point.
ExperimentTables sweep_tables(const TrainSweep& s);
std::string sweep_text(const TrainSweep& s);
results::Value sweep_json(const TrainSweep& s);

// icl anchor (experiment 4).
ExperimentTables anchor_tables(const AnchorConfig& c, const AnchorResult& r);
std::string anchor_text(const AnchorConfig& c, const AnchorResult& r);
results::Value anchor_json(const AnchorConfig& c, const AnchorResult& r);

// icl depth (experiment 5).
ExperimentTables depth_tables(const DepthConfig& c, const std::vector<DepthRun>& runs);
std::string depth_text(const DepthConfig& c, const std::vector<DepthRun>& runs);
results::Value depth_json(const DepthConfig& c, const std::vector<DepthRun>& runs);

}  // namespace qkvlab::icl
