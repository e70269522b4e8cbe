/// \file workspace.hpp
/// \brief Working memory that counts itself, so `peak_bytes` is measured, not estimated.
///
/// A step allocates every buffer beyond its inputs and outputs as a
/// `common::Workspace<T>` (a std::vector with a counting allocator). The driver
/// resets the peak before a run and reads it after. GPU steps add their device
/// buffers through the same counter (see common/cuda/device_buffer.cuh).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace common {

/// Process-wide count of working bytes live now and at most since the last reset.
class WorkspaceCounter {
 public:
  /// Records `bytes` more working memory.
  static void add(int64_t bytes) {
    const int64_t now = live_.fetch_add(bytes) + bytes;
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
  }
  /// Records `bytes` less working memory.
  static void remove(int64_t bytes) { live_.fetch_sub(bytes); }
  /// Starts a new measurement: the peak becomes what is live now.
  static void reset_peak() { peak_.store(live_.load()); }
  /// The most working memory live at once since the last reset (bytes).
  static int64_t peak() { return peak_.load(); }
  /// Working memory live now (bytes).
  static int64_t live() { return live_.load(); }

 private:
  static inline std::atomic<int64_t> live_{0};
  static inline std::atomic<int64_t> peak_{0};
};

/// A std::allocator that reports to WorkspaceCounter.
template <class T>
struct CountingAllocator {
  using value_type = T;  ///< element type
  CountingAllocator() = default;
  /// Rebinding constructor.
  template <class U>
  CountingAllocator(const CountingAllocator<U>&) noexcept {}
  /// Allocates n elements and counts them.
  T* allocate(std::size_t n) {
    T* p = std::allocator<T>{}.allocate(n);
    WorkspaceCounter::add(static_cast<int64_t>(n * sizeof(T)));
    return p;
  }
  /// Frees n elements and uncounts them.
  void deallocate(T* p, std::size_t n) noexcept {
    WorkspaceCounter::remove(static_cast<int64_t>(n * sizeof(T)));
    std::allocator<T>{}.deallocate(p, n);
  }
  /// All counting allocators are interchangeable.
  template <class U>
  bool operator==(const CountingAllocator<U>&) const noexcept { return true; }
  /// All counting allocators are interchangeable.
  template <class U>
  bool operator!=(const CountingAllocator<U>&) const noexcept { return false; }
};

/// A step's working buffer: a vector whose bytes count towards `peak_bytes`.
template <class T>
using Workspace = std::vector<T, CountingAllocator<T>>;

}  // namespace common
