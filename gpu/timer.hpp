// Timing work on the device with CUDA events (for bench/; no CUDA in this header).
// Kernels run asynchronously, so host clocks measure launches, not work; an
// event recorded on the stream between two phases measures the phase itself.
//
//   PhaseTimer timer;
//   timer.start();
//   ...forward kernels...   timer.mark("forward");
//   ...backward kernels...  timer.mark("backward");
//   for (auto& [phase, ms] : timer.phases()) ...   // waits for the device
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace qkvlab::gpu {

class PhaseTimer {
 public:
  PhaseTimer();
  ~PhaseTimer();
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

  void start();                          // forgets earlier phases and records the first event
  void mark(const std::string& phase);   // ends the phase begun at the previous start() or mark()
  // Milliseconds per phase name (phases with the same name summed), in the
  // order first marked; waits for the device to finish.
  std::vector<std::pair<std::string, double>> phases() const;
  double total_ms() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Waits until every queued kernel and copy has finished; throws on an
// asynchronous CUDA error.
void synchronize();

}  // namespace qkvlab::gpu
