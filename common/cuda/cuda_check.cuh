/// \file cuda_check.cuh
/// \brief Checking every CUDA call and every launch; finding the GPU.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/problem.hpp"

namespace common::cuda {

/// Thrown when a CUDA runtime call or a kernel launch fails.
struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Throws CudaError naming the call, file and line if `status` is not cudaSuccess.
/// Out-of-memory becomes an InputError: the problem does not fit on the device.
inline void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  const std::string where = std::string(file) + ":" + std::to_string(line);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // clear the sticky-free error so later calls work
    throw InputError(std::string("not enough GPU memory for this problem (") + call + " at " +
                     where + "); use smaller sizes");
  }
  throw CudaError(std::string("CUDA error ") + cudaGetErrorName(status) + " (" +
                  cudaGetErrorString(status) + ") in " + call + " at " + where);
}

/// Throws NoGpuError unless a CUDA device is present and usable; returns its id.
inline int require_gpu(const std::string& step_name) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    throw NoGpuError(step_name + " needs an NVIDIA GPU, and none was found (" +
                     (status == cudaSuccess ? std::string("0 devices") : std::string(cudaGetErrorString(status))) +
                     ")");
  }
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice", __FILE__, __LINE__);
  return device;
}

}  // namespace common::cuda

/// Checks a CUDA runtime call: `CUDA_CHECK(cudaMalloc(&p, bytes));`
#define CUDA_CHECK(call) ::common::cuda::check((call), #call, __FILE__, __LINE__)

/// Checks the launch that was just made (bad configuration, too much shared
/// memory) without waiting for the kernel: `kernel<<<g, b, smem>>>(...); CUDA_CHECK_LAUNCH();`
#define CUDA_CHECK_LAUNCH() ::common::cuda::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
