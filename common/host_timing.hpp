/// \file host_timing.hpp
/// \brief Host time per phase of a call, switched on to find what a launch from Python costs.
///
/// A kernel that runs for a few microseconds is timed, from PyTorch, by the host work
/// around its launch: borrowing tensors, checking them, encoding tensor maps, the launch
/// itself. `scripts/gpu/per_call.py` switches this on (`flash_steps._native.host_timing`),
/// makes many calls and reads the microseconds each phase took per call. Off, a phase
/// costs one relaxed atomic load; on, two clock reads and a locked add.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace common {

/// What one phase took over the calls made while timing was on.
struct PhaseTotal {
  int64_t calls = 0;  ///< how many times the phase ran
  int64_t nanoseconds = 0;  ///< host time summed over those runs
};

/// Switches the timing of phases on or off (off at start; FLASH_STEPS_HOST_TIMING=1 in the
/// environment of the Python module switches it on when the module loads).
void set_host_timing(bool on);

/// The switch behind set_host_timing (read through host_timing_on).
extern std::atomic<bool> host_timing_flag;

/// Whether phases are being timed.
inline bool host_timing_on() { return host_timing_flag.load(std::memory_order_relaxed); }

/// Adds one run of `nanoseconds` to `phase`.
void add_host_time(const char* phase, int64_t nanoseconds);

/// The totals by phase name since the last call, which starts them again from zero.
std::map<std::string, PhaseTotal> take_host_times();

/// Times its own lifetime (or up to stop()) as one run of `phase` when timing is on:
/// `{ const HostPhase timed("tensor maps"); ... }`.
class HostPhase {
 public:
  /// Starts timing `phase` (a string that outlives the timer) if timing is on; else does nothing.
  explicit HostPhase(const char* phase)
      : phase_(host_timing_on() ? phase : nullptr),
        start_(phase_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{}) {}
  HostPhase(const HostPhase&) = delete;
  HostPhase& operator=(const HostPhase&) = delete;
  /// Ends the phase, if stop() has not.
  ~HostPhase() { stop(); }

  /// Ends the phase before the end of the scope (once; later calls and the destructor add nothing).
  void stop() {
    if (phase_) {
      add_host_time(
          phase_,
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count());
      phase_ = nullptr;
    }
  }

 private:
  const char* phase_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace common
