// qwe.exp8.4 over several d (`qkvlab transfer`): run_transfer at each d, the
// finding checked (the trained MLP's held-out relative L2 error below the best
// linear map's at every d) and the result rendered: the terminal table, the JSON
// object, the tables (per d, and each d's loss curve) and the figure.
#pragma once

#include "results/figure.hpp"
#include "results/value.hpp"
#include "synthetic/transfer.hpp"

#include <functional>
#include <string>
#include <vector>

namespace qkvlab::transfer {

struct TransferSweep {
  TransferConfig config;
  std::vector<TransferResult> runs;  // one per d, in the order given
  bool mlp_beats_linear = false;     // the MLP's rel_l2 below the linear map's at every d
};

// observe(d, step, loss) after each training step.
using SweepObserver = std::function<void(int d, std::int64_t step, double loss)>;
TransferSweep run_transfer_sweep(const std::vector<int>& ds, const TransferConfig& config, const SweepObserver& observe);

// The memory one d implies: a training step's batch on the backend (inputs,
// hidden layer of 4d, their gradients: at most about 50 floats per sample and input
// coordinate), the weights with AdamW's state, the loss history, the ridge and
// evaluation chunks.
double transfer_memory_bytes(int d, int batch, std::int64_t steps);

// The first reported value that is not finite, named with its d ("mlp_rel_l2 at d = 16"), or empty.
std::string non_finite_value(const std::vector<TransferResult>& runs);

results::Table summary_table(const TransferSweep& s);      // "transfer": a row per d
std::vector<results::Table> transfer_tables(const TransferSweep& s);  // the summary, then "loss_dD" per d
results::Figure transfer_figure();                         // errors against d, from the summary
std::string transfer_text(const TransferSweep& s);
results::Value transfer_json(const TransferSweep& s, const std::string& command_line);

}  // namespace qkvlab::transfer
