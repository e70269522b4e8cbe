/// \file step33_backward_hopper/attention.cu
/// \brief Step 24's forward, bf16 and fp16, in a backward step (the backward is in backward.cu).
///
/// Step 24 improves on step 23 by handing out causal tiles dynamically. Query tile i of a
/// causal head costs i + 1 K/V tiles, so step 23's fixed stride (block b takes b, b + G, …)
/// gives some blocks more work than others, and the grid waits for the slowest. Here a block
/// that finishes a tile takes the next one nobody has claimed, numbered longest first, from
/// an atomic counter in global memory (tile_scheduler.hpp): the short tiles fill in at the
/// end. Full attention keeps the static schedule, whose tiles all cost the same.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "attention.hpp"
#include "common/cuda/convert.cuh"
#include "common/cuda/cuda_check.cuh"
#include "common/cuda/exp2.cuh"
#include "common/cuda/fragments.hpp"
#include "common/cuda/gpu_step.cuh"
#include "common/cuda/mma.cuh"
#include "common/cuda/scale_sign.cuh"
#include "common/cuda/tma.cuh"
#include "common/cuda/warpgroup.cuh"
#include "common/cuda/wgmma.cuh"
#include "common/cuda/wgmma.hpp"
#include "tile_scheduler.hpp"

namespace step33 {

namespace {

constexpr int kProducerRegisters = 24;  // a producer thread's registers; the consumers' depend on d (Tiles)
constexpr int kTurn = 1;  // named barriers kTurn + w: consumer warpgroup w may issue its wgmmas
// At a turn's barrier: the warpgroup that waits, the one that opens it.
constexpr int kTurnThreads = 2 * common::cuda::kWarpgroupThreads;
constexpr int kConsumersMet = kTurn + 3;  // named barrier: every consumer thread (after turns 1 … 3)
constexpr int kWarpSize = 32;
constexpr int kStages = 2;  // K_j, V_j buffers: tile j + 1 loads while tile j is used
static_assert(kStages == 2, "the barriers' set-up names exactly two stages");
using HeadDims = common::cuda::HeadDims<64, 96, 128>;  // one kernel instantiation each; the backward has no d = 256

//! [tiles]
// A warp's 16 rows of its warpgroup's 64 are 8 × 4 lanes, the mma's C layout, which wgmma's
// accumulator repeats every 8 columns (common/cuda/wgmma.cuh): a thread owns 2 rows, one tile.
constexpr int kRowLanes = 8, kColLanes = 4, kRowsPerThread = 2;

/// The tiles for head dimension d: a warpgroup's 64 rows are one wgmma's M, so
/// B_r = 64 · consumer warpgroups: 3 at d = 64 (192 rows), 2 from d = 96 on (128). A thread
/// holds 2 × B_c/4 of S_ij and 2 × W/4 of O_i in fp32 registers, W = d in whole 128-byte rows
/// (d = 96: 128, TMA's zeros past d). At d = 256, O_i's 128 registers leave room for B_c = 64.
template <int d>
struct Tiles {
  static constexpr int kWidth =
      (d + common::tma::kBoxCols - 1) / common::tma::kBoxCols * common::tma::kBoxCols;  // W: whole 64-element box rows
  static constexpr int kConsumers = d <= 64 ? 3 : 2;  // consumer warpgroups
  static constexpr int kConsumerWarps = 4 * kConsumers;  // the producer's 4 warps come after them
  static constexpr int kThreads = (kConsumers + 1) * common::cuda::kWarpgroupThreads;  // threads per block
  /// A consumer thread's registers, once setmaxnreg has moved them: as many as the budget allows.
  static constexpr int kConsumerRegisters = d <= 64 ? 160 : 240;
  static_assert(kConsumers * common::cuda::kWarpgroupThreads * kConsumerRegisters +
                        common::cuda::kWarpgroupThreads * kProducerRegisters <=
                    common::cuda::kRegisterFile,
                "the register budget: every warpgroup's registers fit in the register file");
  static constexpr int Bc = d <= 128 ? 128 : 64;  // keys: one wgmma's N for S_ij
  static constexpr int Br = kConsumerWarps * kRowLanes * kRowsPerThread;
  static_assert(kRowsPerThread * (kWidth + Bc) / kColLanes + Bc / 4 <= kConsumerRegisters - 32,
                "O_i, S_ij and P̃_ij's fragments leave a consumer thread 32 registers for the rest");
  /// Shared memory: kStages × K_j, V_j (B_c, W); Q_i (B_r, W); 2 bytes an element; + 1024 to align them.
  static constexpr size_t smem_bytes = (size_t(2) * kStages * Bc * kWidth + size_t(Br) * kWidth) * 2 + 1024;
};
//! [tiles]

/// The largest `x` of the kColLanes lanes that share a row, in each of them.
__device__ float row_max(float x) {
  for (int offset = kColLanes / 2; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

/// The sum of `x` over the kColLanes lanes that share a row, in each of them.
__device__ float row_sum(float x) {
  for (int offset = kColLanes / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

using common::cuda::barrier_arrive;
using common::cuda::barrier_init;
using common::cuda::barrier_wait;
using common::cuda::fence_async_shared;
using common::cuda::fence_operand;
using common::cuda::named_barrier_arrive;
using common::cuda::named_barrier_sync;
using common::cuda::registers_down;
using common::cuda::registers_up;
using common::cuda::shared_address;
using common::cuda::tma_load_tile;
using common::cuda::wgmma_commit;
using common::cuda::wgmma_fence;
using common::cuda::wgmma_rs;
using common::cuda::wgmma_ss;
using common::cuda::wgmma_wait;
using common::wgmma::k_major_sw128;  // wgmma's descriptors of Q_i, K_j (K-major) and V_j (MN-major)
using common::wgmma::mn_major_sw128;
using namespace common::tma;  // the tile layout (tensor_map.hpp)

/// FlashAttention-2 for the query tiles `scheduler` gives this block, one after another. Q, K, V, O, L as in the contract.
//! [kernel]
template <class T, int d, bool kDynamic>  // T: __nv_bfloat16 or __half; kDynamic: scheduler.dynamic
__global__ void __launch_bounds__(Tiles<d>::kThreads, 1)  // ≥ 1 block per SM: up to 65536 / kThreads registers each
    attention_kernel(const __grid_constant__ CUtensorMap Q_map, const __grid_constant__ CUtensorMap K_map,
                     const __grid_constant__ CUtensorMap V_map, T* __restrict__ O_all, float* __restrict__ L_all,
                     int n_q, int n_kv, TileScheduler scheduler, int* claimed, float scale, bool causal) {
  constexpr int Bc = Tiles<d>::Bc, Br = Tiles<d>::Br, W = Tiles<d>::kWidth;
  constexpr int kThreads = Tiles<d>::kThreads, kConsumerWarps = Tiles<d>::kConsumerWarps,
                kConsumers = Tiles<d>::kConsumers;
  constexpr int kConsumerThreads = kConsumerWarps * kWarpSize;
  // A thread's slice (fragments.hpp, c_m16n8): rows row(t) of the tile, columns col(n) of S_ij and of O_i.
  constexpr int kRows = kRowsPerThread, kSCols = Bc / kColLanes, kOCols = W / kColLanes;
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int row_lane = lane / kColLanes, col_lane = lane % kColLanes;
  const auto row = [&](int t) { return warp * kRowLanes * kRows + t * kRowLanes + row_lane; };
  const auto col = [&](int n) { return 8 * (n / 2) + 2 * col_lane + n % 2; };  // 2 neighbours per 8 columns
  // This thread's warpgroup: rows 64·wg … 64·wg + 63 of the tile. Read from lane 0, so that the
  // compiler knows it is the same in the whole warp and keeps what follows from it (the wgmma
  // descriptors of Q_i) in uniform registers, not in the consumers' full vector registers.
  const int wg = __shfl_sync(0xffffffffu, warp / 4, 0);
  // Causal: a tile's last row sees keys up to its own index; later K/V tiles are skipped.
  const auto kv_tiles = [&](int q0) { return ((causal ? min(n_kv, min(n_q, q0 + Br)) : n_kv) + Bc - 1) / Bc; };
  // |scale| · log2 e: S_ij in base 2, the scale applied inside each exponential. A scale that
  // is not positive goes into Q_i instead (its sign: common/cuda/scale_sign.cuh).
  const float scale_log2 = common::cuda::exp2_factor(scale);

  //! [shared memory]
  extern __shared__ unsigned char smem_bytes[];  // dynamic shared memory; tiles start on the swizzle's period, 1024
  const auto smem = reinterpret_cast<T*>(smem_bytes + (1024 - shared_address(smem_bytes) % 1024) % 1024);
  auto Kbuf = smem;  // kStages × K_j: (B_c, W), W/64 column blocks of swizzled 128-byte rows
  auto Vbuf = Kbuf + kStages * Bc * W;  // kStages × V_j: (B_c, W), the same layout
  auto Qi = Vbuf + kStages * Bc * W;  // Q_i: (B_r, W), the same layout
  __shared__ uint64_t q_full, k_full[kStages], v_full[kStages];  // a tile has landed: Q_i, each stage's K_j, V_j
  __shared__ uint64_t q_empty, k_empty[kStages],
      v_empty[kStages];  // the consumers are done with Q_i, a stage's K_j, V_j
  // The number of the tile whose Q_i is loading, set before its load: q_full's phase orders it
  // before the consumers' read; atomics, so that racecheck, which does not follow mbarriers, sees that.
  __shared__ int tile_n;
  //! [shared memory]
  //! [registers]
  float Oi[kRows][kOCols];  // O_i: this thread's rows row(t), columns col(n), fp32 accumulators
  float Sij[kRows][kSCols];  // S_ij, then P̃_ij in place: rows row(t), columns col(n)
  //! [registers]
  // m_i (base 2) and l_i (this lane's part) of the thread's 2 rows: touched once a tile, so they
  // wait in shared memory, a slot per thread, and leave the registers to O_i and S_ij.
  __shared__ float mi[kRows][kThreads], li[kRows][kThreads];

  //! [algorithm 1]
  // Once a block: one thread initialises the barriers before anyone waits on them.
  if (tid == 0) {
    for (uint64_t* barrier : {&q_full, &k_full[0], &k_full[1], &v_full[0], &v_full[1]}) barrier_init(barrier, 1);
    barrier_init(&q_empty, kConsumerWarps);  // one arrival a consumer warp
    for (uint64_t& barrier : k_empty) barrier_init(&barrier, kConsumerWarps);
    for (uint64_t& barrier : v_empty) barrier_init(&barrier, kConsumerWarps);
    common::cuda::barrier_init_fence();
  }
  __syncthreads();
  //! [producer]
  // The producer warpgroup: one thread takes the block's tiles from the scheduler and, for each,
  // issues lines 5 and 7: Q_i once the consumers' last S_ij of the tile before is in, then
  // K_j, V_j for j = 0 … T_c − 1 into the stages as they free up, running into the next tile.
  if (warp >= kConsumerWarps) {
    registers_down<kProducerRegisters>();
    if (tid != kConsumerThreads) return;
    int load = 0;  // K_j, V_j pairs loaded so far, over all tiles: stage load % kStages
    for (int n = blockIdx.x, t = 0;; ++t) {  // n: the work tile; t: how many this block has had
      if (t > 0) barrier_wait(&q_empty, (t - 1) % 2);
      atomicExch(&tile_n, n);  // released by q_full's arrival below
      if (n >= scheduler.tiles()) {  // none left: complete q_full's phase with no load
        barrier_arrive(&q_full);
        return;
      }
      const WorkTile w = scheduler.at(n);
      const int Tc = kv_tiles(w.i * Br);
      tma_load_tile<W, Br>(Qi, &Q_map, w.i * Br, w.bh, &q_full);
      for (int j = 0; j < Tc; ++j, ++load) {
        const int stage = load % kStages;  // its (load / kStages)-th use: wait for the consumers' release of the last
        if (load >= kStages) barrier_wait(&k_empty[stage], (load / kStages - 1) % 2);
        tma_load_tile<W, Bc>(Kbuf + stage * Bc * W, &K_map, j * Bc, w.bh, &k_full[stage]);
        if (load >= kStages) barrier_wait(&v_empty[stage], (load / kStages - 1) % 2);
        tma_load_tile<W, Bc>(Vbuf + stage * Bc * W, &V_map, j * Bc, w.bh, &v_full[stage]);
      }
      n = scheduler.next(n, kDynamic ? atomicAdd(claimed, 1) : 0);
    }
  }
  //! [producer]
  registers_up<Tiles<d>::kConsumerRegisters>();
  // Line 3's body for the consumers: query tile i of head bh, whose K_j, V_j are the producer's
  // loads number `load` … `load` + T_c − 1.
  const auto query_tile = [&](size_t bh, int i, int load) {
    // O: (N_q, d); L: (N_q) in global memory: head bh's (Q, K, V come through the tensor maps).
    const auto O = O_all + bh * n_q * d;
    const auto L = L_all + bh * n_q;
    const int q0 = i * Br, rows = min(Br, n_q - q0), Tc = kv_tiles(q0);
    // Line 5: O_i = 0 in registers, l_i = 0 and m_i = −∞ in their shared-memory slots.
#pragma unroll
    for (int t = 0; t < kRows; ++t) {
#pragma unroll
      for (int n = 0; n < kOCols; ++n) Oi[t][n] = 0.0f;
      li[t][tid] = 0.0f;
      mi[t][tid] = -INFINITY;
    }
    if (scale <= 0.0f) {  // sign(scale) into Q_i (common/cuda/scale_sign.cuh), by the consumers alone
      common::cuda::fold_scale_sign<kConsumerThreads, W, W>(Qi, Br, scale);
      fence_async_shared();  // wgmma reads shared memory through the async proxy
      named_barrier_sync(kConsumersMet, kConsumerThreads);  // Q_i's signs are in before anyone reads it
    }
    uint32_t Pij[Bc / 16][4];  // P̃_i,j−1 as A fragments: its product runs under S_ij's softmax
    float alpha[kRows];  // O_i's rescale, applied once P̃_i,j−1 V_j−1 is in
    const auto issue_S = [&](int j) {  // line 8 for tile j, queued on the tensor cores
      const int stage = (load + j) % kStages,
                parity = (load + j) / kStages % 2;  // a stage's barriers complete once a use
      const T* Kj = Kbuf + stage * Bc * W;  // K_j: this tile's stage
      barrier_wait(&k_full[stage], parity);  // K_j has landed

      //! [S on wgmma]
      // Line 8: S_ij = Q_i K_jᵀ on the tensor cores: per 16 of d, one wgmma of the warpgroup's
      // 64 rows of Q_i (A) by all B_c keys of K_j (B), both from shared memory, into S_ij = 0.
#pragma unroll
      for (int t = 0; t < kRows; ++t) {
#pragma unroll
        for (int n = 0; n < kSCols; ++n) Sij[t][n] = 0.0f;
      }
      fence_operand(Sij);
      wgmma_fence();  // the zeros are written before the wgmmas read them
#pragma unroll
      for (int k = 0; k < d; k += 16) {
        wgmma_ss<T, Bc>(Sij, k_major_sw128(shared_address(Qi + wg * common::cuda::kWarpgroupRows * kBoxCols), Br, k),
                        k_major_sw128(shared_address(Kj), Bc, k), common::cuda::kAccumulate);
      }
      wgmma_commit();
      //! [S on wgmma]
    };
    const auto softmax = [&](int j) {  // line 9 for tile j, once S_ij is in the registers
      fence_operand(Sij);
      if (lane == 0) barrier_arrive(&k_empty[(load + j) % kStages]);  // this warp is done with K_j
      if (lane == 0 && j == Tc - 1) barrier_arrive(&q_empty);  // and with Q_i: the next tile's may load
      const int kv0 = j * Bc, cols = min(Bc, n_kv - kv0);  // the last tile may be short
      // Hidden entries (past N_kv, or above the causal diagonal) are −∞. Only a tile
      // that crosses the diagonal or the end of K has any; rows past N_q are never stored.
      if (kv0 + Bc > n_kv || (causal && kv0 + Bc - 1 > q0)) {
#pragma unroll
        for (int t = 0; t < kRows; ++t) {
          const int visible = causal ? min(cols, q0 + row(t) - kv0 + 1) : cols;  // keys kv0 … kv0 + visible − 1
#pragma unroll
          for (int n = 0; n < kSCols; ++n) {
            if (col(n) >= visible) Sij[t][n] = -INFINITY;
          }
        }
      }

      //! [softmax]
      // Line 9, 4 lanes per row, in base 2 with the scale s = scale_log2 applied inside the
      // exponentials: m_new = max(m_i, s · rowmax(S_ij)), P̃_ij = 2^(s · S_ij − m_new) in place (one
      // fma and one ex2 an entry), l_i ← 2^(m_i − m_new) l_i + rowsum(P̃_ij); O_i's rescale, kept.
#pragma unroll
      for (int t = 0; t < kRows; ++t) {
        float m_tilde = -INFINITY;
#pragma unroll
        for (int n = 0; n < kSCols; ++n) m_tilde = fmaxf(m_tilde, Sij[t][n]);
        m_tilde = row_max(m_tilde);
        // Every row sees key 0 in tile j = 0, so m_new is finite from then on.
        const float m_new = fmaxf(mi[t][tid], scale_log2 * m_tilde);
        float l_tilde = 0.0f;
#pragma unroll
        for (int n = 0; n < kSCols; ++n) {
          Sij[t][n] = common::cuda::exp2_ftz(fmaf(Sij[t][n], scale_log2, -m_new));  // hidden: 2^−∞ = 0
          l_tilde += Sij[t][n];
        }
        {  // in every lane: each keeps the row's m_i and its own part of l_i
          alpha[t] = common::cuda::exp2_ftz(mi[t][tid] - m_new);  // FA2's only rescale; 0 in tile 0 (m_i = −∞)
          li[t][tid] = alpha[t] * li[t][tid] + l_tilde;
          mi[t][tid] = m_new;
        }
      }
      //! [softmax]
    };
    const auto rescale_and_pack = [&] {  // once P̃_i,j−1 V_j−1 is in O_i: O_i's rescale, P̃_ij packed
      fence_operand(Oi);
#pragma unroll
      for (int t = 0; t < kRows; ++t) {
#pragma unroll
        for (int n = 0; n < kOCols; ++n) Oi[t][n] *= alpha[t];
      }
      //! [P in registers]
      // Line 10: O_i ← O_i + P̃_ij V_j, no division, on the tensor cores. Per 16 keys c … c + 15,
      // a thread's 4 columns of P̃_ij among them, rows row(0) and row(1), rounded to T in pairs,
      // are wgmma's A fragment (wgmma.hpp, a_m64k16), as they were mma's; B is V_j, d contiguous.
#pragma unroll
      for (int c = 0; c < Bc; c += 16) {
        const int n0 = c / kColLanes;  // this thread's first column index among keys c … c + 15
        uint32_t(&p)[4] = Pij[c / 16];
        p[0] = common::cuda::pack2<T>(Sij[0][n0], Sij[0][n0 + 1]);
        p[1] = common::cuda::pack2<T>(Sij[1][n0], Sij[1][n0 + 1]);
        p[2] = common::cuda::pack2<T>(Sij[0][n0 + 2], Sij[0][n0 + 3]);
        p[3] = common::cuda::pack2<T>(Sij[1][n0 + 2], Sij[1][n0 + 3]);
      }
      //! [P in registers]
    };
    const auto issue_PV = [&](int j) {  // line 10 for tile j: O_i ← O_i + P̃_ij V_j, queued
      const T* Vj = Vbuf + (load + j) % kStages * Bc * W;
      barrier_wait(&v_full[(load + j) % kStages], (load + j) / kStages % 2);  // V_j has landed
      fence_operand(Oi);
      wgmma_fence();  // O_i's rescale and P̃_ij are written before the wgmmas read them
#pragma unroll
      for (int c = 0; c < Bc; c += 16)
        wgmma_rs<T, W>(Oi, Pij[c / 16], mn_major_sw128(shared_address(Vj), Bc, c), common::cuda::kAccumulate);
      wgmma_commit();
    };
    const auto PV_done = [&](int j) {  // this warp's P̃_ij V_j is in O_i: V_j goes back to the producer
      wgmma_wait<0>();
      fence_operand(Oi);
      if (lane == 0) barrier_arrive(&v_empty[(load + j) % kStages]);
    };
    //! [schedule]
    // Turns in a ring: warpgroup w issues its wgmmas when named barrier kTurn + w opens (its 128
    // threads and the 128 that open it), then opens the next one's; the last opens warpgroup 0's
    // first. Each warpgroup's softmax then runs while the others' products do. The ring runs on
    // from tile to tile: one warpgroup's epilogue runs while the others start the next tile.
    const auto my_turn = [&] { named_barrier_sync(kTurn + wg, kTurnThreads); };
    const auto your_turn = [&] { named_barrier_arrive(kTurn + (wg + 1) % kConsumers, kTurnThreads); };
    my_turn();
    issue_S(0);
    your_turn();
    wgmma_wait<0>();
    softmax(0);
    rescale_and_pack();
    for (int j = 1; j < Tc; ++j) {  // line 6: S_ij is issued with P̃_i,j−1 V_j−1 behind it
      my_turn();
      issue_S(j);
      issue_PV(j - 1);
      your_turn();
      wgmma_wait<1>();  // S_ij is in; P̃_i,j−1 V_j−1 still runs under the softmax
      softmax(j);
      PV_done(j - 1);
      rescale_and_pack();
    }
    my_turn();
    issue_PV(Tc - 1);
    your_turn();  // the last warpgroup's opens warpgroup 0's first turn of the next tile
    PV_done(Tc - 1);
    //! [schedule]
    // Lines 12–14: O_i ← diag(l_i)⁻¹ O_i and L_i = m_i + log l_i, each written to HBM once.
#pragma unroll
    for (int t = 0; t < kRows; ++t) {
      const int r = row(t);
      const float l_row = row_sum(li[t][tid]), inv_l = 1.0f / l_row;  // the 4 lanes' parts of l_i, added once
      if (r >= rows) continue;  // a row past the tile: never stored
#pragma unroll
      for (int n = 0; n < d / kColLanes; n += 2) {  // two neighbouring columns, rounded to T, in one 4-byte store
        *reinterpret_cast<uint32_t*>(O + size_t(q0 + r) * d + col(n)) =
            common::cuda::pack2<T>(Oi[t][n] * inv_l, Oi[t][n + 1] * inv_l);
      }
      if (col_lane == 0) L[q0 + r] = mi[t][tid] * common::cuda::kLn2 + logf(l_row);  // m_i · ln 2: base e
    }
  };
  //! [tile loop]
  // Line 3: the query tiles the scheduler gives this block, one after another.
  if (wg == kConsumers - 1) named_barrier_arrive(kTurn, kTurnThreads);  // warpgroup 0's first turn
  for (int t = 0, load = 0;; ++t) {
    barrier_wait(&q_full, t % 2);  // Q_i has landed, or the producer found no tile left
    // Static: known from blockIdx.x, in uniform registers; dynamic: the producer's claim.
    const int n = kDynamic ? __shfl_sync(0xffffffffu, lane == 0 ? atomicAdd(&tile_n, 0) : 0, 0)
                           : int(blockIdx.x) + t * scheduler.grid;
    if (n >= scheduler.tiles()) break;
    const WorkTile w = scheduler.at(n);
    query_tile(w.bh, w.i, load);
    load += kv_tiles(w.i * Br);
  }
  if (wg == 0) named_barrier_sync(kTurn, kTurnThreads);  // the turn the last tile's last warpgroup opened
  //! [tile loop]
  //! [algorithm 1]
}
//! [kernel]

//! [launch]
/// Launches the kernel for element type T and head dimension d: the persistent grid, one block
/// of Tiles<d>::kThreads threads an SM (fewer when there are fewer tiles), the shared memory of
/// Tiles<d>, a tensor map each for Q, K, V, and the scheduler; causal: its counter set to 0.
template <class T, int d>
void launch(const common::DeviceArgs& a) {
  const common::Shape& shape = a.shape;
  const auto map = [&](const void* x, int64_t n, int rows) {
    return common::cuda::make_tensor_map(x, std::is_same_v<T, __half>, shape.batch_heads(), n, d, rows);
  };
  const auto kernel = a.causal ? attention_kernel<T, d, true> : attention_kernel<T, d, false>;
  const size_t shared_bytes = Tiles<d>::smem_bytes;
  common::cuda::allow_shared_memory(kernel, shared_bytes);
  //! [grid]
  const int64_t Tr = (shape.seq_q + Tiles<d>::Br - 1) / Tiles<d>::Br;  // T_r query tiles a head
  int device = 0, sms = 0;  // G = SMs: the register budget (Tiles) leaves room for one block an SM
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int grid = int(std::min<int64_t>(Tr * shape.batch_heads(), sms));
  // The order of the tiles is step 21's block order: head by head, sharing K and V in L2,
  // but causal at d = 64 the longest tiles of every head first; causal tiles come dynamically.
  const TileScheduler scheduler{int(Tr), int(shape.batch_heads()), grid, a.causal && d <= 64, a.causal};
  //! [grid]
  const cudaStream_t stream = common::cuda::stream_of(a);
  if (a.causal) CUDA_CHECK(cudaMemsetAsync(a.workspace, 0, sizeof(int), stream));  // no tile claimed yet
  kernel<<<grid, Tiles<d>::kThreads, shared_bytes, stream>>>(
      map(a.q, shape.seq_q, Tiles<d>::Br), map(a.k, shape.seq_kv, Tiles<d>::Bc), map(a.v, shape.seq_kv, Tiles<d>::Bc),
      a.o_as<T>(), a.lse, int(shape.seq_q), int(shape.seq_kv), scheduler, static_cast<int*>(a.workspace), a.scale,
      a.causal);
  CUDA_CHECK_LAUNCH();
}
//! [launch]

/// The tiles and the compiler's resources of the kernel for head dimension d (bf16; fp16's are the same);
/// `registers` is the count at entry, before setmaxnreg moves them between the warpgroups' roles.
template <int d>
common::Figures resources() {
  return common::cuda::kernel_resources(attention_kernel<__nv_bfloat16, d, false>, Tiles<d>::kThreads,
                                        Tiles<d>::smem_bytes,
                                        {{"B_c", Tiles<d>::Bc},
                                         {"B_r", Tiles<d>::Br},
                                         {"consumer_warpgroups", Tiles<d>::kConsumers},  // by role: setmaxnreg's
                                         {"consumer_registers", Tiles<d>::kConsumerRegisters},
                                         {"producer_registers", kProducerRegisters}});
}

}  // namespace

common::StepInfo describe() {
  common::GpuKernel kernel;
  kernel.launch = [](const common::DeviceArgs& a) {
    HeadDims::dispatch(a.shape.head_dim, [&](auto d) {
      if (a.precision == common::Precision::fp16) launch<__half, d()>(a);
      else launch<__nv_bfloat16, d()>(a);
    });
  };
  kernel.resources = [](int64_t d) { return HeadDims::dispatch(d, [](auto D) { return resources<D()>(); }); };
  // Causal: the count of claimed tiles; full attention's static schedule needs nothing.
  kernel.workspace_bytes = [](const common::Shape&, bool causal) { return causal ? int64_t(sizeof(int)) : 0; };
  kernel.compute_capability = 90;  // sm_90a machine code: wgmma exists on Hopper alone
  kernel.launch_backward = launch_backward;
  kernel.backward_workspace_bytes = backward_workspace_bytes;
  kernel.backward_resources = backward_resources;
  common::StepInfo info = common::cuda::gpu_step(
      "step33_backward_hopper",
      "the backward pass on Hopper: wgmma products fed by TMA, warp-specialised, dQ added by TMA reductions; "
      "d = 64, 96, 128 (sm_90a)",
      HeadDims::list(), kernel, {common::Precision::bf16, common::Precision::fp16});
  info.extends = "step24_dynamic_scheduler";
  return info;
}

common::Result attention_forward(const common::Problem& problem, const common::Options& options) {
  return describe().forward(problem, options);
}

common::Gradients attention_backward(const common::Problem& problem, const common::BackwardInputs& inputs,
                                     const common::Options& options) {
  return describe().backward(problem, inputs, options);
}

}  // namespace step33
