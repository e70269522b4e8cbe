/// \file host_timing.cpp
/// \brief The totals of host_timing.hpp's phases, shared by every thread that launches.
#include "common/host_timing.hpp"

#include <mutex>

namespace common {

std::atomic<bool> host_timing_flag{false};

namespace {

std::mutex totals_mutex;
std::map<std::string, PhaseTotal>& totals() {
  static std::map<std::string, PhaseTotal> by_phase;  // guarded by totals_mutex
  return by_phase;
}

}  // namespace

void set_host_timing(bool on) { host_timing_flag.store(on, std::memory_order_relaxed); }

void add_host_time(const char* phase, int64_t nanoseconds) {
  const std::lock_guard<std::mutex> lock(totals_mutex);
  PhaseTotal& total = totals()[phase];
  total.calls += 1;
  total.nanoseconds += nanoseconds;
}

std::map<std::string, PhaseTotal> take_host_times() {
  const std::lock_guard<std::mutex> lock(totals_mutex);
  std::map<std::string, PhaseTotal> taken;
  taken.swap(totals());
  return taken;
}

}  // namespace common
