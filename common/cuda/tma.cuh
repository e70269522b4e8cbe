/// \file tma.cuh
/// \brief Hopper's tensor memory accelerator (TMA) and the shared-memory barriers
/// its copies complete on (sm_90): thin wrappers over CCCL's `cuda::ptx`.
///
/// One thread asks the copy engine for a whole tile (`cp.async.bulk.tensor`, PTX ISA
/// "Data Movement and Conversion Instructions: cp.async.bulk.tensor"): rows of a 3-D
/// tensor described by a tensor map (common/cuda/tensor_map.cuh), written into shared
/// memory with the tensor map's swizzle, rows outside the tensor written as zeros. The
/// copy counts its bytes on an `mbarrier` (PTX ISA, "Parallel Synchronization and
/// Communication Instructions: mbarrier"): the issuing thread announces how many bytes
/// to expect (`barrier_expect_bytes`, which is also its arrival), and the barrier's
/// phase completes when they have all landed. Threads wait for a phase by its parity,
/// 0 for the first, 1 for the next, and so on, alternating.
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>
#include <cuda/ptx>

#include "common/cuda/tensor_map.cuh"  // make_tensor_map (host), the tile layout (tensor_map.hpp)

namespace common::cuda {

/// `mbarrier.init.shared.b64`: a barrier whose phase completes after `arrivals` arrivals
/// (and, when bytes are expected, after they have landed).
__device__ inline void barrier_init(uint64_t* barrier, uint32_t arrivals) {
  ::cuda::ptx::mbarrier_init(barrier, arrivals);
}

/// `fence.mbarrier_init.release.cluster`: makes initialised barriers visible to the copy engine.
__device__ inline void barrier_init_fence() {
  ::cuda::ptx::fence_mbarrier_init(::cuda::ptx::sem_release, ::cuda::ptx::scope_cluster);
}

/// `mbarrier.arrive.expect_tx`: this thread's arrival, and `bytes` more to land before the phase completes.
__device__ inline void barrier_expect_bytes(uint64_t* barrier, uint32_t bytes) {
  (void)::cuda::ptx::mbarrier_arrive_expect_tx(::cuda::ptx::sem_release, ::cuda::ptx::scope_cta,
                                               ::cuda::ptx::space_shared, barrier, bytes);
}

/// `mbarrier.arrive`: this thread's arrival, with nothing to land.
__device__ inline void barrier_arrive(uint64_t* barrier) { (void)::cuda::ptx::mbarrier_arrive(barrier); }

/// `mbarrier.try_wait.parity`, repeated: returns once the phase of parity `parity` has completed.
__device__ inline void barrier_wait(uint64_t* barrier, uint32_t parity) {
  while (!::cuda::ptx::mbarrier_try_wait_parity(barrier, parity)) {}
}

/// `cp.async.bulk.tensor.3d` (qualifiers `.shared::cluster`, `.global`, `.tile`,
/// `.mbarrier::complete_tx::bytes`):
/// the box of `map` at element coordinates (c0, c1, c2), innermost first, into `tile`
/// (aligned to the swizzle's atom, 1024 bytes for 128-byte rows); its bytes complete on `barrier`.
__device__ inline void tma_load(void* tile, const CUtensorMap* map, int c0, int c1, int c2, uint64_t* barrier) {
  const int32_t coords[3] = {c0, c1, c2};
  ::cuda::ptx::cp_async_bulk_tensor(::cuda::ptx::space_cluster, ::cuda::ptx::space_global, tile, map, coords, barrier);
}

/// Asks the copy engine for rows row0 … row0 + B − 1 of head bh of the (B·H, N, d) tensor
/// `map` describes (tensor_map.hpp), into a (B, d) tile: d/64 boxes of (64, B), one after
/// the other, each 128-byte row swizzled; rows past N arrive as zeros. One thread calls
/// it: it announces the tile's B · d · 2 bytes, out-of-bounds rows included, on `barrier`.
template <int d, int B, class T>
__device__ void tma_load_tile(T* tile, const CUtensorMap* map, int row0, int bh, uint64_t* barrier) {
  barrier_expect_bytes(barrier, tma::tile_bytes(B, d));
#pragma unroll
  for (int c = 0; c < d / tma::kBoxCols; ++c) {
    tma_load(tile + tma::column_block(c, B), map, c * tma::kBoxCols, row0, bh, barrier);
  }
}

/// `cp.reduce.async.bulk.tensor.3d` (qualifiers `.global.shared::cta`, `.add`, `.tile`,
/// `.bulk_group`): adds the box of fp32 elements at `tile` (laid out as a load of `map` would
/// land it, swizzle included) into the tensor `map` describes at element coordinates (c0, c1,
/// c2), each element's addition whole (an atomic add in the L2 cache); elements outside the
/// tensor are skipped. The copy engine reads `tile` later: bulk_wait_read says when it may be
/// written again.
__device__ inline void tma_reduce_add(const CUtensorMap* map, int c0, int c1, int c2, const void* tile) {
  const int32_t coords[3] = {c0, c1, c2};
  ::cuda::ptx::cp_reduce_async_bulk_tensor(::cuda::ptx::space_global, ::cuda::ptx::space_shared, ::cuda::ptx::op_add,
                                           map, coords, tile);
}

/// `cp.async.bulk.commit_group`: closes the group of this thread's bulk operations issued so far.
__device__ inline void bulk_commit() { ::cuda::ptx::cp_async_bulk_commit_group(); }

/// `cp.async.bulk.wait_group.read N`: waits until at most N of this thread's committed bulk
/// groups are still reading shared memory: the tiles of the others may be written again.
template <int kPending>
__device__ inline void bulk_wait_read() {
  ::cuda::ptx::cp_async_bulk_wait_group_read(::cuda::ptx::n32_t<kPending>{});
}

/// `cp.async.bulk.wait_group N`: waits until at most N of this thread's committed bulk groups
/// are still running: the others' writes to global memory are done.
template <int kPending>
__device__ inline void bulk_wait() {
  ::cuda::ptx::cp_async_bulk_wait_group(::cuda::ptx::n32_t<kPending>{});
}

/// `fence.proxy.async.shared::cta`: this thread's ordinary stores to shared memory become
/// visible to what reads it through the async proxy (wgmma, TMA) after the next barrier.
__device__ inline void fence_async_shared() { ::cuda::ptx::fence_proxy_async(::cuda::ptx::space_shared); }

}  // namespace common::cuda
