/// \file device_buffer.cuh
/// \brief Device memory that frees itself, and CUDA-event timing.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/cuda/cuda_check.cuh"
#include "common/workspace.hpp"

namespace common::cuda {

/// A device array of T that frees itself. A buffer made with `Counted::yes` is
/// working memory: its bytes count towards the step's `peak_bytes`.
template <class T>
class DeviceBuffer {
 public:
  /// Whether the buffer counts as working memory.
  enum class Counted { no, yes };

  DeviceBuffer() = default;
  /// Allocates `count` elements (uninitialised).
  explicit DeviceBuffer(size_t count, Counted counted = Counted::no)
      : count_(count), counted_(counted == Counted::yes) {
    if (count_ > 0) CUDA_CHECK(cudaMalloc(&data_, bytes()));
    if (counted_) WorkspaceCounter::add(static_cast<int64_t>(bytes()));
  }
  /// Allocates and copies `host` to the device.
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  /// Moves ownership.
  DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }
  /// Moves ownership.
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    swap(other);
    return *this;
  }
  /// Frees the memory (errors are ignored: a destructor must not throw).
  ~DeviceBuffer() {
    if (data_) (void)cudaFree(data_);
    if (counted_) WorkspaceCounter::remove(static_cast<int64_t>(bytes()));
  }

  T* data() { return data_; }  ///< device pointer
  const T* data() const { return data_; }  ///< device pointer
  size_t size() const { return count_; }  ///< elements
  size_t bytes() const { return count_ * sizeof(T); }  ///< bytes

  /// Copies `host` (same length) to the device.
  void upload(const std::vector<T>& host) {
    CUDA_CHECK(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  /// Copies the device data into `host` (resized to fit).
  void download(std::vector<T>& host) const {
    host.resize(count_);
    CUDA_CHECK(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost));
  }
  /// Fills every byte with 0xFF: as float, every element becomes NaN, so an
  /// element a kernel forgets to write fails the check.
  void poison() { CUDA_CHECK(cudaMemset(data_, 0xFF, bytes())); }

 private:
  void swap(DeviceBuffer& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    std::swap(counted_, other.counted_);
  }
  T* data_ = nullptr;
  size_t count_ = 0;
  bool counted_ = false;
};

/// Times GPU work with a pair of CUDA events (device time, not host time).
class EventTimer {
 public:
  /// Creates the two events.
  EventTimer() {
    CUDA_CHECK(cudaEventCreate(&start_));
    CUDA_CHECK(cudaEventCreate(&stop_));
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  /// Destroys the events.
  ~EventTimer() {
    (void)cudaEventDestroy(start_);
    (void)cudaEventDestroy(stop_);
  }
  /// Records the start event on the default stream.
  void start() { CUDA_CHECK(cudaEventRecord(start_)); }
  /// Records the stop event, waits for it, and returns the elapsed milliseconds.
  float stop_ms() {
    CUDA_CHECK(cudaEventRecord(stop_));
    CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaEvent_t start_{};
  cudaEvent_t stop_{};
};

}  // namespace common::cuda
