/// \file cuda_check.cuh
/// \brief Checking every CUDA call and every launch; finding the GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
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
    throw InputError(std::string("not enough GPU memory for this problem (") + call + " at " + where +
                     "); use smaller sizes");
  }
  throw CudaError(std::string("CUDA error ") + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ") in " +
                  call + " at " + where);
}

/// Why no GPU could be used, in words a user can act on. `status` is what
/// cudaGetDeviceCount returned, `count` the devices it found, `driver_found`
/// whether the NVIDIA driver library (libcuda) could be loaded. Separate from
/// require_gpu so that a machine with a GPU can test the wording of the paths
/// it never takes.
inline std::string no_gpu_message(const std::string& step_name, int count, cudaError_t status, bool driver_found) {
  std::string why;
  if (!driver_found) {
    why = "no NVIDIA GPU/driver found";
  } else if (status == cudaErrorInsufficientDriver) {
    why = "the NVIDIA driver is older than this program's CUDA runtime needs; update the driver";
  } else if (status == cudaSuccess || status == cudaErrorNoDevice) {
    why = "no NVIDIA GPU found (" + std::to_string(count) + " devices)";
  } else {
    why = std::string("the GPU cannot be used: ") + cudaGetErrorString(status);
  }
  return step_name + " needs an NVIDIA GPU: " + why;
}

/// Whether the NVIDIA driver's library can be loaded (a machine without the
/// driver has none; the CUDA runtime then reports an "insufficient driver").
bool nvidia_driver_present();

/// Throws NoGpuError unless a CUDA device is present and usable; returns its id.
inline int require_gpu(const std::string& step_name) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    throw NoGpuError(no_gpu_message(step_name, count, status, nvidia_driver_present()));
  }
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice", __FILE__, __LINE__);
  return device;
}

/// Why a kernel built for one GPU generation cannot run here: `needed` and `found`
/// are compute capabilities as major·10 + minor. Pure, so it can be tested anywhere.
inline std::string wrong_gpu_message(const std::string& step_name, int needed, int found, const std::string& gpu) {
  const auto version = [](int cc) { return std::to_string(cc / 10) + "." + std::to_string(cc % 10); };
  const std::string family = needed == 90 ? "a Hopper GPU (H100, H200; " : "a GPU of (";
  return step_name + " needs " + family + "compute capability " + version(needed) + "); this GPU, " + gpu +
         ", has compute capability " + version(found);
}

/// Throws NoGpuError unless the current device has compute capability `needed`
/// (major·10 + minor); 0 accepts any device.
inline void require_compute_capability(int needed, const std::string& step_name) {
  if (needed == 0) return;
  int device = 0, major = 0, minor = 0;
  check(cudaGetDevice(&device), "cudaGetDevice", __FILE__, __LINE__);
  // Two attributes, not cudaGetDeviceProperties: that one fills every field of the device's
  // description and is slow; the name is asked for only to explain a refusal.
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute", __FILE__,
        __LINE__);
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "cudaDeviceGetAttribute", __FILE__,
        __LINE__);
  const int found = major * 10 + minor;
  if (found == needed) return;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties", __FILE__, __LINE__);
  throw NoGpuError(wrong_gpu_message(step_name, needed, found, prop.name));
}

/// Throws InputError when `needed_bytes` exceed `free_bytes` of device memory, so
/// that a problem too large for the GPU is refused before anything is allocated
/// or launched. Pure, so it can be tested with made-up numbers.
inline void check_fits(int64_t needed_bytes, size_t free_bytes, const std::string& step_name) {
  if (needed_bytes <= static_cast<int64_t>(free_bytes)) return;
  const auto mib = [](double bytes) { return std::to_string(static_cast<int64_t>(bytes / (1 << 20))) + " MiB"; };
  throw InputError(step_name + ": this problem needs " + mib(double(needed_bytes)) + " of GPU memory and " +
                   mib(double(free_bytes)) + " are free; use smaller sizes");
}

/// check_fits against the memory free on the current device now.
inline void require_device_memory(int64_t needed_bytes, const std::string& step_name) {
  size_t free_bytes = 0, total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo", __FILE__, __LINE__);
  check_fits(needed_bytes, free_bytes, step_name);
}

}  // namespace common::cuda

/// Checks a CUDA runtime call: `CUDA_CHECK(cudaMalloc(&p, bytes));`
#define CUDA_CHECK(call) ::common::cuda::check((call), #call, __FILE__, __LINE__)

/// Checks the launch that was just made (bad configuration, too much shared
/// memory) without waiting for the kernel: `kernel<<<g, b, smem>>>(...); CUDA_CHECK_LAUNCH();`
#define CUDA_CHECK_LAUNCH() ::common::cuda::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
