// Bounds on what a run may ask for: the memory it may allocate (the budget),
// the number of attempts a rejection sampler may make, and the formatting of
// sizes in messages. Readers check declared sizes against memory_budget()
// before allocating; commands estimate the memory their size options imply
// and refuse, naming the size and the estimate, before allocating.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace qkvlab {

// Bytes a run may allocate: the smallest of the physical memory, the address-space
// and data-segment limits (RLIMIT_AS, RLIMIT_DATA) and the cgroup's memory.max,
// each where it is set, times 3/4 (leaving room for the program, its threads and
// the allocator's slack). Computed once per process.
std::uint64_t memory_budget();

// "2.3 GB", "512 MB", "17 kB": three significant digits, decimal units.
std::string format_bytes(double bytes);

// Throws UsageError("WHAT needs about N of memory, more than the budget of M")
// when bytes exceeds memory_budget(); `what` names the option(s) and value(s),
// e.g. "--d 100000". bytes is a double so that a product of sizes cannot overflow.
void require_memory(const std::string& what, double bytes);

// Thrown by a rejection sampler that reached its bound on attempts: the
// condition it samples for is infeasible or too unlikely. The message names the
// condition; a command that sets the condition from an option turns it into a
// UsageError naming the option.
struct SamplingLimit : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Draws until accept(draw) holds, at most max_attempts times; throws SamplingLimit
// naming `condition` and the number of attempts otherwise.
template <class Draw, class Accept>
auto draw_until(int max_attempts, const std::string& condition, Draw draw, Accept accept) {
  for (int attempt = 0; attempt < max_attempts; ++attempt) {
    auto x = draw();
    if (accept(x)) return x;
  }
  throw SamplingLimit("no draw satisfied " + condition + " in " + std::to_string(max_attempts) + " attempts");
}

// The bound every rejection loop of qkvlab uses unless it has a reason for another.
inline constexpr int default_max_attempts = 10000;

}  // namespace qkvlab
