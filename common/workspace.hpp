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
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {}
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

/// The alignment of every working buffer: a cache line, and the width of an
/// AVX-512 vector. Eigen's vectorised loops over a buffer start at its first
/// aligned element and take the elements before it one at a time, whose exp,
/// log and sums round differently from the vector path's. With malloc's 16-byte
/// alignment that split, and so the last bits of O and L, would change from
/// call to call and thread to thread; with a fixed alignment a step's output is
/// a function of its inputs.
inline constexpr std::size_t kWorkspaceAlignment = 64;

/// A std::allocator that reports to WorkspaceCounter and aligns to kWorkspaceAlignment.
template <class T>
struct CountingAllocator {
  using value_type = T;  ///< element type
  CountingAllocator() = default;
  /// Rebinding constructor.
  template <class U>
  CountingAllocator(const CountingAllocator<U>&) noexcept {}
  /// Allocates n elements and counts them.
  T* allocate(std::size_t n) {
    T* p = static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kWorkspaceAlignment}));
    WorkspaceCounter::add(static_cast<int64_t>(n * sizeof(T)));
    return p;
  }
  /// Frees n elements and uncounts them.
  void deallocate(T* p, std::size_t n) noexcept {
    WorkspaceCounter::remove(static_cast<int64_t>(n * sizeof(T)));
    ::operator delete (p, std::align_val_t{kWorkspaceAlignment});
  }
  /// All counting allocators are interchangeable.
  template <class U>
  bool operator==(const CountingAllocator<U>&) const noexcept {
    return true;
  }
  /// All counting allocators are interchangeable.
  template <class U>
  bool operator!=(const CountingAllocator<U>&) const noexcept {
    return false;
  }
};

/// A step's working buffer: a vector whose bytes count towards `peak_bytes`.
template <class T>
using Workspace = std::vector<T, CountingAllocator<T>>;

}  // namespace common
