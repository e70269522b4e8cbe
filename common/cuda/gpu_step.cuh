/// \file gpu_step.cuh
/// \brief The host side every CUDA step shares: choosing the compiled head dimension,
/// the resource report, and the StepInfo built from a step's kernel launch.
///
/// A CUDA step writes only its kernel, `launch<d>(args)` (the grid, the shared
/// memory, the launch itself) and `resources<d>()`. Everything else — checking
/// the GPU and its free memory, uploading Q, K, V once, poisoning O and L,
/// timing launches with CUDA events, downloading once — lives here, once.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "common/cuda/cuda_check.cuh"
#include "common/step.hpp"

namespace common::cuda {

/// The head dimensions a step is compiled for: one kernel instantiation each.
/// `dispatch(d, f)` calls `f(std::integral_constant<int, D>{})` for the D that
/// equals d — so `f` can name `launch<D>` — and throws InputError for any other
/// d. The one run-time switch over d that a step has, generated from one list.
template <int... kDims>
struct HeadDims {
  /// The dimensions, for StepInfo::head_dims and messages.
  static std::vector<int64_t> list() { return {kDims...}; }

  /// Calls f with the compile-time D equal to `head_dim`; returns what f returns.
  template <class F>
  static auto dispatch(int64_t head_dim, F&& f) {
    using R = decltype(f(std::integral_constant<int, first()>{}));
    if constexpr (std::is_void_v<R>) {
      const bool found = ((head_dim == kDims ? (f(std::integral_constant<int, kDims>{}), true) : false) || ...);
      if (!found) unsupported(head_dim);
    } else {
      R result{};
      const bool found =
          ((head_dim == kDims ? (result = f(std::integral_constant<int, kDims>{}), true) : false) || ...);
      if (!found) unsupported(head_dim);
      return result;
    }
  }

 private:
  static constexpr int first() {
    constexpr int dims[] = {kDims...};
    return dims[0];
  }
  [[noreturn]] static void unsupported(int64_t head_dim) {
    std::string list;
    for (int64_t d : {int64_t{kDims}...}) list += " " + std::to_string(d);
    throw InputError("head_dim " + std::to_string(head_dim) + " is not compiled in (supported:" + list + ")");
  }
};

/// The stream of a launch, as CUDA's type.
inline cudaStream_t stream_of(const DeviceArgs& args) { return static_cast<cudaStream_t>(args.stream); }

/// Lets `kernel` launch with `bytes` of dynamic shared memory on the current device (a
/// kernel gets 48 KB unless its attribute is raised). The attribute stays set on the device,
/// so the driver is asked once per kernel, device and size, not at every launch: a launch
/// from Python is a few microseconds of host work, and this is one driver call of it.
void allow_shared_memory(const void* kernel, size_t bytes);

/// The same for a kernel named by its function: `allow_shared_memory(attention_kernel<T, d>, shared_bytes);`
template <class Kernel>
void allow_shared_memory(Kernel* kernel, size_t bytes) {
  allow_shared_memory(reinterpret_cast<const void*>(kernel), bytes);
}

/// The resource report of one kernel: `tiles` (e.g. B_r, B_c), then its shared
/// memory per block, the registers per thread and local-memory (spill) bytes
/// the compiler gave it, and the blocks per SM that these allow at `threads`.
template <class Kernel>
Figures kernel_resources(Kernel* kernel, int threads, size_t smem_bytes, Figures tiles) {
  cudaFuncAttributes attributes{};
  CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  allow_shared_memory(kernel, smem_bytes);
  int blocks_per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, threads, smem_bytes));
  tiles.insert(tiles.end(), {{"threads", double(threads)},
                             {"smem_bytes", double(smem_bytes)},
                             {"registers", double(attributes.numRegs)},
                             {"local_bytes", double(attributes.localSizeBytes)},
                             {"blocks_per_sm", double(blocks_per_sm)}});
  return tiles;
}

/// A GPU step's StepInfo from its kernel: `forward` and `open` run it through a
/// session that uploads once in the precision asked for (see Session), `gpu`
/// exposes the launch itself (for callers that own device memory, such as Python
/// through DLPack). `precisions`: those the kernel computes in, its own first.
StepInfo gpu_step(std::string name, std::string title, std::vector<int64_t> head_dims, GpuKernel kernel,
                  std::vector<Precision> precisions = {Precision::fp32});

}  // namespace common::cuda
