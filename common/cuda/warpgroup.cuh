/// \file warpgroup.cuh
/// \brief What warpgroups with different roles need (sm_90a): moving registers from one
/// warpgroup to another (`setmaxnreg`), and named barriers among some of a block's threads.
///
/// PTX ISA, "Miscellaneous Instructions: setmaxnreg": each warp of a warpgroup executes
/// it together; `.dec` gives registers back to the multiprocessor's pool, `.inc` waits
/// until the pool has enough and takes them. It takes effect only in a kernel whose
/// register count is capped at entry (`__launch_bounds__(threads, 1)`) and in a branch
/// that a whole warpgroup takes; otherwise the compiler warns (C7508) and ignores it.
/// PTX ISA, "Parallel Synchronization and Communication Instructions: bar, barrier":
/// `bar.sync id, n` waits until n threads have reached barrier id (0 is __syncthreads'),
/// counting those that only `bar.arrive` there, which do not wait.
#pragma once

namespace common::cuda {

/// Threads in a warpgroup: 4 consecutive warps, which wgmma and setmaxnreg act on together.
constexpr int kWarpgroupThreads = 128;
/// A multiprocessor's register file: the registers of a block that runs alone on one add up
/// to at most this many.
constexpr int kRegisterFile = 65536;

/// `setmaxnreg.dec.sync.aligned.u32 N`: this warpgroup keeps N registers a thread (a multiple of 8, 24 to 256).
template <int N>
__device__ inline void registers_down() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

/// `setmaxnreg.inc.sync.aligned.u32 N`: this warpgroup gets N registers a thread.
template <int N>
__device__ inline void registers_up() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

/// `bar.sync id, threads`: waits until `threads` threads (a multiple of 32) have reached barrier `id` (1 to 15).
__device__ inline void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/// `bar.arrive id, threads`: counts this warp at barrier `id` and goes on without waiting.
__device__ inline void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace common::cuda
