/// \file step33_backward_hopper/backward.cu
/// \brief Step 33 — the backward pass on Hopper: the five products on wgmma, fed by TMA, dQ added by TMA.
///
/// This step extends step 24 (its forward files are step 24's, renamed) by the backward
/// pass, as step 30 does step 14's with mma.sync. One block per K/V tile j of one
/// (batch, head), three warpgroups with roles, as the Hopper forward steps have:
///  1. A producer thread loads K_j and V_j once by TMA, then Q_i and dO_i into two stages,
///     each as soon as the consumers release it.
///  2. Two consumer warpgroups own 64 keys of K_j each, one wgmma's M, and compute their
///     tile transposed as step 30's warps do: S_ijᵀ = K_j Q_iᵀ and dP_ijᵀ = V_j dO_iᵀ
///     with both operands in shared memory; P_ijᵀ and dS_ijᵀ, rounded to 16 bits in
///     registers, are the A operands of dV_j += P_ijᵀ dO_i and dK_j += dS_ijᵀ Q_i, as
///     step 24's P̃_ij is the A operand of P̃_ij V_j.
///  3. dQ_i += dS_ij K_j needs dS_ij by queries: dS_ijᵀ goes to shared memory, where wgmma
///     reads it transposed (MN-major); each warpgroup computes half of dQ_i's term (half
///     its queries at d = 64, half its columns above) over all B_c keys and writes it into
///     a shared-memory tile; a dQ writer, one thread of the producer warpgroup, adds the
///     tile into an fp32 accumulator in HBM with a TMA reduction (`cp.reduce.async.bulk.tensor
///     … .add`: one instruction a box, no atomics issued by the threads) while the consumers
///     go on to the next query tile. A last kernel rounds scale · dQ into the 16-bit dQ.
///     `--deterministic` makes the blocks of a head take turns at each dQ_i, in the order
///     of j (causal: descending from the diagonal), through a counter per query tile: the
///     same sums in the same order every run.
///
/// Run: build/bin/step33_backward_hopper --batch 4 --heads 16 --seq-q 4096 --seq-kv 4096 --head-dim 128 --backward --repeat 10
///      build/bin/step33_backward_hopper --seq-q 1000 --seq-kv 333 --head-dim 64 --causal --dtype fp16 --backward --check
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <string>

#include "attention.hpp"
#include "common/cuda/convert.cuh"
#include "common/cuda/cuda_check.cuh"
#include "common/cuda/exp2.cuh"
#include "common/cuda/gpu_step.cuh"
#include "common/cuda/mma.cuh"
#include "common/cuda/tma.cuh"
#include "common/cuda/warp.cuh"
#include "common/cuda/warpgroup.cuh"
#include "common/cuda/wgmma.cuh"
#include "common/cuda/wgmma.hpp"

namespace step33 {

namespace {

constexpr int kWarpSize = 32;
constexpr int kConsumers = 2;  // consumer warpgroups: 64 keys of K_j each
constexpr int kConsumerThreads = kConsumers * common::cuda::kWarpgroupThreads;
constexpr int kConsumerWarps = kConsumerThreads / kWarpSize;
constexpr int kBackwardThreads = kConsumerThreads + common::cuda::kWarpgroupThreads;  // + the producer warpgroup
constexpr int kProducerRegisters = 24;  // a producer thread's registers, after setmaxnreg
constexpr int kConsumerRegisters = 240;  // a consumer thread's
// setmaxnreg moves registers within the block: the consumers' .inc takes what the producer's .dec
// gave back, out of the block's allocation at launch (a multiple of 8 registers a thread).
constexpr int kLaunchRegisters = common::cuda::kRegisterFile / kBackwardThreads / 8 * 8;  // 168
static_assert(kConsumerThreads * kConsumerRegisters + common::cuda::kWarpgroupThreads * kProducerRegisters <=
                  kBackwardThreads * kLaunchRegisters,
              "the register budget: the consumers' registers come from those the producer gives back");
// The register budget: of a consumer thread's registers, its fp32 accumulators of S_ijᵀ, dP_ijᵀ,
// dK_j and dV_j take at most this many; the rest hold fragments, addresses and temporaries.
constexpr int kAccumulatorRegisters = 192;
constexpr int kStages = 2;  // Q_i, dO_i, L_i, D_i: tile i + 1 lands while tile i is computed
constexpr int kDsReady = 1;  // named barrier: both warpgroups' dS_ijᵀ are in shared memory
constexpr int kDqReady = 2;  // named barrier: both halves of dQ_i's term are in shared memory
constexpr int kColLanes = 4, kRows = 2;  // a warp's 16 rows: 8 × 4 lanes (row_lane, col_lane), 2 rows a thread
using HeadDims = common::cuda::HeadDims<64, 96, 128>;  // as the forward

//! [tiles]
/// The backward's tiles for head dimension d: B_c = 2 warpgroups · 64 keys; W = d in whole
/// 64-element box rows (d = 96: 128, TMA's zeros past d). A consumer thread holds 2 rows ×
/// B_r/4 of S_ijᵀ and of dP_ijᵀ and 2 rows × W/4 of dK_j and of dV_j in fp32 registers,
/// 192 in all: B_r = 128 queries at d = 64, 64 from d = 96 on. dQ_i's term, B_r × W, is
/// split between the warpgroups: by queries (64 each, one wgmma's M) where B_r = 128, by
/// columns (W/2 each) where B_r = 64.
template <int d>
struct BackwardTiles {
  static constexpr int W = (d + common::tma::kBoxCols - 1) / common::tma::kBoxCols * common::tma::kBoxCols;
  static constexpr int Bc = kConsumers * common::cuda::kWarpgroupRows;  // keys: 128
  static constexpr int Br =
      W <= 64 ? 2 * common::tma::kBoxCols : common::tma::kBoxCols;  // queries: wgmma's N for S, dP
  static constexpr int kSCols = Br / kColLanes;  // columns of S_ijᵀ, dP_ijᵀ a thread owns in each row
  static constexpr int kDCols = W / kColLanes;  // columns of dK_j, dV_j a thread owns in each row
  static constexpr bool kDqByQueries = Br == kConsumers * common::cuda::kWarpgroupRows;
  static constexpr int kDqCols = kDqByQueries ? W : W / kConsumers;  // columns of dQ_i's term a warpgroup computes: N
  static_assert(kRows * (2 * kSCols + 2 * kDCols) <= kAccumulatorRegisters, "S_ijᵀ, dP_ijᵀ, dK_j and dV_j spill");
  static_assert(Bc % Br == 0, "K/V tile j's first query tile is j · B_c/B_r: the deterministic turns count on it");
  /// Shared memory, 2 bytes an element unless said: K_j, V_j (B_c, W); kStages × Q_i, dO_i
  /// (B_r, W); dS_ijᵀ (B_c, B_r); two tiles of dQ_i's term (B_r, W), fp32; kStages × L_i, D_i
  /// (B_r), fp32; + 1024 to align the swizzled tiles.
  static constexpr size_t kv_bytes = size_t(Bc) * W * 2;
  static constexpr size_t q_bytes = size_t(Br) * W * 2;
  static constexpr size_t ds_bytes = size_t(Bc) * Br * 2;
  static constexpr size_t dq_bytes = size_t(Br) * W * 4;
  static constexpr size_t smem_bytes =
      2 * kv_bytes + 2 * kStages * q_bytes + ds_bytes + 2 * dq_bytes + 2 * kStages * Br * 4 + 1024;
  static_assert(smem_bytes <= 227 * 1024, "an H100's or H200's shared memory for one block: 227 KB");
};
//! [tiles]

using common::cuda::barrier_arrive;
using common::cuda::barrier_expect_bytes;
using common::cuda::barrier_init;
using common::cuda::barrier_wait;
using common::cuda::fence_async_shared;
using common::cuda::fence_operand;
using common::cuda::named_barrier_sync;
using common::cuda::shared_address;
using common::cuda::tma_load;
using common::cuda::wgmma_commit;
using common::cuda::wgmma_fence;
using common::cuda::wgmma_rs;
using common::cuda::wgmma_ss;
using common::cuda::wgmma_ss_mn;
using common::cuda::wgmma_wait;
using common::wgmma::k_major_sw128;
using common::wgmma::mn_major_sw128;
using namespace common::tma;  // the tile layout (tensor_map.hpp)

/// D = rowsum(dO ∘ O) and a copy of L, one warp per row, into arrays padded to T_r · B_r rows
/// a head (0 past N_q), so that a query tile's L_i and D_i are read without bounds checks.
template <class T, int d>
__global__ void __launch_bounds__(256)
    row_dot_kernel(const T* __restrict__ dO, const T* __restrict__ O, const float* __restrict__ L,
                   float* __restrict__ L_pad, float* __restrict__ D_pad, int n_q, int padded, int64_t rows) {
  const int64_t row = int64_t(blockIdx.x) * (256 / kWarpSize) + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= rows) return;  // the whole warp leaves together
  const int64_t bh = row / padded;
  const int q = int(row % padded);
  float sum = 0.0f;
  if (q < n_q) {
    const int64_t at = (bh * n_q + q) * d;
    for (int c = lane; c < d; c += kWarpSize) sum = fmaf(float(dO[at + c]), float(O[at + c]), sum);
  }
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) {
    D_pad[row] = sum;
    L_pad[row] = q < n_q ? L[bh * n_q + q] : 0.0f;
  }
}

/// `ld.acquire.gpu`: the value of `counter`, and everything written before it was released.
__device__ int load_acquire(const int* counter) {
  int value;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(value) : "l"(counter) : "memory");
  return value;
}

/// Algorithm 2 for one K/V tile of one (batch, head) per block: dK_j, dV_j in the consumers'
/// fp32 registers over the query tiles, dQ_i's terms added into the fp32 accumulator
/// `dQ_map` describes. `turns`: nullptr, or (deterministic) a counter per query tile that
/// says how many K/V tiles have added their term.
//! [kernel]
template <class T, int d>  // T: __nv_bfloat16 or __half
__global__ void __launch_bounds__(kBackwardThreads, 1)
    backward_kernel(const __grid_constant__ CUtensorMap Q_map, const __grid_constant__ CUtensorMap K_map,
                    const __grid_constant__ CUtensorMap V_map, const __grid_constant__ CUtensorMap dO_map,
                    const __grid_constant__ CUtensorMap dQ_map, const float* __restrict__ L_pad,
                    const float* __restrict__ D_pad, int* turns, T* __restrict__ dK_all, T* __restrict__ dV_all,
                    int n_q, int n_kv, float scale, bool causal) {
  using Bt = BackwardTiles<d>;
  constexpr int Bc = Bt::Bc, Br = Bt::Br, W = Bt::W;
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int row_lane = lane / kColLanes, col_lane = lane % kColLanes;
  // This thread's warpgroup (its keys: 64·wg …), read from lane 0 so that the compiler keeps
  // what follows from it in uniform registers.
  const int wg = __shfl_sync(0xffffffffu, warp / 4, 0);
  const auto row = [&](int t) { return 16 * (warp % 4) + 8 * t + row_lane; };  // of the warpgroup's 64
  const auto col = [&](int n) { return 8 * (n / 2) + 2 * col_lane + n % 2; };  // 2 neighbours per 8 columns
  // The K/V tiles of one (batch, head) are neighbours in the grid: they read the same Q_i, dO_i,
  // which the L2 cache then serves once for all of them.
  // Deterministic and causal, in descending order of j: the turns at a query tile then run from
  // the K/V tile on its diagonal down (below), and a block waits only for blocks launched before it.
  const int Tc = (n_kv + Bc - 1) / Bc, Tr = (n_q + Br - 1) / Br;
  const int bh = int(blockIdx.x) / Tc, kv_order = int(blockIdx.x) % Tc;
  const int j = turns != nullptr && causal ? Tc - 1 - kv_order : kv_order, kv0 = j * Bc;
  const int i_first = causal ? kv0 / Br : 0;  // causal: query tiles that end before kv0 see none of the keys

  //! [shared memory]
  extern __shared__ unsigned char smem_bytes[];  // tiles start on the swizzle's period, 1024
  const auto smem = reinterpret_cast<T*>(smem_bytes + (1024 - shared_address(smem_bytes) % 1024) % 1024);
  T* Kj = smem;  // K_j: (B_c, W), W/64 column blocks of swizzled 128-byte rows
  T* Vj = Kj + Bc * W;  // V_j: the same layout
  T* Qbuf = Vj + Bc * W;  // kStages × Q_i: (B_r, W)
  T* dObuf = Qbuf + kStages * Br * W;  // kStages × dO_i: (B_r, W)
  T* dSt = dObuf + kStages * Br * W;  // dS_ijᵀ: (B_c, B_r), B_r/64 column blocks of one swizzled 128-byte row a key
  auto dQbuf = reinterpret_cast<float*>(dSt + Bc * Br);  // 2 × dQ_i's term: (B_r, W), W/32 boxes of 128-byte rows
  float* stats = dQbuf + 2 * Br * W;  // kStages × (L_i, D_i): (2, B_r)
  __shared__ uint64_t kv_full, full[kStages], empty[kStages];  // K_j and V_j, Q_i and dO_i have landed; a stage is free
  __shared__ uint64_t dq_full[2], dq_empty[2];  // a tile of dQ_i's term is written; its reduction has read it
  //! [shared memory]

  if (tid == 0) {
    barrier_init(&kv_full, 2);  // two arrivals: K_j's and V_j's expected bytes
    for (uint64_t& barrier : full) barrier_init(&barrier, 1);
    for (uint64_t& barrier : empty) barrier_init(&barrier, kConsumerWarps);  // one arrival a consumer warp
    for (uint64_t& barrier : dq_full) barrier_init(&barrier, 1);
    for (uint64_t& barrier : dq_empty) barrier_init(&barrier, 1);
    common::cuda::barrier_init_fence();
  }
  __syncthreads();

  //! [dQ writer]
  // The dQ writer adds each query tile's term, once the consumers have written both halves of it
  // into shared memory tile n % 2, into dQ's accumulator: a box of 32 columns at a time, each
  // element's addition whole in the L2 cache, rows past N_q skipped by TMA. The consumers go on
  // to the next tile meanwhile; the writer gives tile n % 2 back once the reduction has read it.
  const auto dq_writer = [&] {
    for (int i = i_first, n = 0; i < Tr; ++i, ++n) {
      barrier_wait(&dq_full[n % 2], (n / 2) % 2);
      // Deterministic: after the K/V tiles before this one, so the sums run in the order of j;
      // causal, in descending order from j = i·B_r/B_c, the last K/V tile that sees Q_i: each
      // block's first tiles are then its turn at once, where ascending turns would make block j
      // wait for block 0 to reach its diagonal.
      if (turns != nullptr) {
        const int turn = causal ? min((n_kv - 1) / Bc, i * Br / Bc) - j : j;  // T_c − 1 from n_kv
        while (load_acquire(turns + size_t(bh) * Tr + i) != turn) {}
        ::cuda::ptx::fence_proxy_async(::cuda::ptx::space_global);
      }
#pragma unroll
      for (int b = 0; b * kAccumulatorBoxCols < d; ++b) {
        common::cuda::tma_reduce_add(&dQ_map, b * kAccumulatorBoxCols, i * Br, bh,
                                     dQbuf + (n % 2) * Br * W + b * Br * kAccumulatorBoxCols);
      }
      common::cuda::bulk_commit();
      if (turns != nullptr) {
        common::cuda::bulk_wait<0>();  // the sums are done before the next K/V tile's turn
        ::cuda::ptx::fence_proxy_async(::cuda::ptx::space_global);
        __threadfence();
        atomicAdd(turns + size_t(bh) * Tr + i, 1);
      } else {
        common::cuda::bulk_wait_read<0>();  // the reduction has read tile n % 2
      }
      barrier_arrive(&dq_empty[n % 2]);
    }
    common::cuda::bulk_wait<0>();  // the last reductions are done before the block ends
  };
  //! [dQ writer]

  //! [producer]
  // The producer warpgroup. Its first thread loads: line 6 once, then line 9 for each query
  // tile into the stages as they free up. Its next warp's first thread is the dQ writer (below).
  if (warp >= kConsumerWarps) {
    common::cuda::registers_down<kProducerRegisters>();
    if (tid == kConsumerThreads + kWarpSize) dq_writer();
    if (tid != kConsumerThreads) return;
    common::cuda::tma_load_tile<W, Bc>(Kj, &K_map, kv0, bh, &kv_full);
    common::cuda::tma_load_tile<W, Bc>(Vj, &V_map, kv0, bh, &kv_full);
    for (int i = i_first, n = 0; i < Tr; ++i, ++n) {
      const int stage = n % kStages;  // its (n / kStages)-th use: wait for the consumers' release of the last
      if (n >= kStages) barrier_wait(&empty[stage], (n / kStages - 1) % 2);
      barrier_expect_bytes(&full[stage], 2 * tile_bytes(Br, W));
#pragma unroll
      for (int c = 0; c < W / kBoxCols; ++c) {
        tma_load(Qbuf + stage * Br * W + column_block(c, Br), &Q_map, c * kBoxCols, i * Br, bh, &full[stage]);
        tma_load(dObuf + stage * Br * W + column_block(c, Br), &dO_map, c * kBoxCols, i * Br, bh, &full[stage]);
      }
    }
    return;
  }
  //! [producer]
  common::cuda::registers_up<kConsumerRegisters>();
  // Line 7: dK_j, dV_j = 0 — the warpgroup's 64 keys, rows row(t), columns col(n), fp32.
  float dKj[kRows][Bt::kDCols] = {}, dVj[kRows][Bt::kDCols] = {};
  const T* Kw = Kj + wg * common::cuda::kWarpgroupRows * kBoxCols;  // this warpgroup's 64 rows of K_j, V_j
  const T* Vw = Vj + wg * common::cuda::kWarpgroupRows * kBoxCols;
  // The warpgroup's part of dQ_i's term: its first query and its first column.
  const int dq_query0 = Bt::kDqByQueries ? wg * common::cuda::kWarpgroupRows : 0;
  const int dq_col0 = Bt::kDqByQueries ? 0 : wg * Bt::kDqCols;
  const T* dS_cols = dSt + column_block(dq_query0 / kBoxCols, Bc);  // dS_ijᵀ's column block of those queries
  const T* Kcols = Kj + column_block(dq_col0 / kBoxCols, Bc) + dq_col0 % kBoxCols;  // K_j's columns for it
  // A thread's shared-memory stores of dS_ijᵀ and of dQ_i's term go to rows whose index % 8 is
  // row_lane, in 128-byte rows that TMA's swizzle permutes by 16-byte chunks (chunk XOR row % 8):
  // each store is a row's base plus (the thread's chunk offset XOR a constant of the unrolled loop).
  unsigned char* ds_row = reinterpret_cast<unsigned char*>(dSt) + (wg * common::cuda::kWarpgroupRows + row(0)) * 128;
  const int swizzled = 16 * row_lane + 4 * col_lane;
  const int dq_row = (dq_query0 + row(0)) * 128, dq_swizzled = 16 * (col_lane / 2 ^ row_lane) + 8 * (col_lane % 2);
  // L_i and D_i: the first 2·B_r consumer threads copy one value each from the padded arrays
  // into a stage, a tile ahead, between the named barriers every consumer meets anyway.
  const auto stat = [&](int i) {
    return tid < 2 * Br && i < Tr ? (tid < Br ? L_pad : D_pad)[(size_t(bh) * Tr + i) * Br + tid % Br] : 0.0f;
  };
  if (tid < 2 * Br) stats[tid] = stat(i_first);
  named_barrier_sync(kDqReady, kConsumerThreads);  // the first tile's L_i, D_i are in
  barrier_wait(&kv_full, 0);
  for (int i = i_first, n = 0; i < Tr; ++i, ++n) {  // line 8: query tiles
    const int stage = n % kStages, q0 = i * Br;
    const T* Qi = Qbuf + stage * Br * W;
    const T* dOi = dObuf + stage * Br * W;
    const float* Li = stats + stage * 2 * Br;
    const float* Di = Li + Br;
    const float next_stat = stat(i + 1);  // tile i + 1's, loaded now, stored once this tile's are read
    barrier_wait(&full[stage], (n / kStages) % 2);  // Q_i and dO_i have landed

    //! [S and dP]
    // Lines 10 and 13, transposed: S_ijᵀ = K_j Q_iᵀ and dP_ijᵀ = V_j dO_iᵀ, per 16 of d one
    // wgmma of the warpgroup's 64 keys (A) by the B_r queries (B), both K-major in shared
    // memory. One pass for all B_r queries: at N = 64 a wgmma reads 2 bytes of shared memory
    // per 32 multiply-adds, at N = 32 it would read 3 (docs/results/runs/step33_variants.txt).
    float S[kRows][Bt::kSCols] = {}, dP[kRows][Bt::kSCols] = {};
    fence_operand(S);
    fence_operand(dP);
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < d; k += 16) {
      wgmma_ss<T, Br>(S, k_major_sw128(shared_address(Kw), Bc, k), k_major_sw128(shared_address(Qi), Br, k),
                      common::cuda::kAccumulate);
      wgmma_ss<T, Br>(dP, k_major_sw128(shared_address(Vw), Bc, k), k_major_sw128(shared_address(dOi), Br, k),
                      common::cuda::kAccumulate);
    }
    wgmma_commit();
    wgmma_wait<0>();  // S_ijᵀ, dP_ijᵀ are in
    fence_operand(S);
    fence_operand(dP);
    //! [S and dP]

    //! [P and dS]
    // Lines 11 and 14 as step 30's: P_ijᵀ = exp(scale · S_ijᵀ − L_i) (no running max: L_i is
    // final), masked to 0 past N_q, past N_kv and above the causal diagonal; dS_ijᵀ = P_ijᵀ ∘
    // (dP_ijᵀ − D_i). Rounded to T in pairs: the A fragments of the next products, 16 queries
    // at a time, so that each fp32 value is dead once packed (computed all first, then packed,
    // they spilled at B_r = 128).
    const bool masked = q0 + Br > n_q || kv0 + Bc > n_kv || (causal && kv0 + Bc - 1 > q0);
    uint32_t P16[Br / 16][4], dS16[Br / 16][4];  // P_ijᵀ, dS_ijᵀ: wgmma's A fragments, 16 queries each
#pragma unroll
    for (int m = 0; m < Br / 16; ++m) {
      const int n0 = 4 * m;  // this thread's first column index among queries 16m … 16m + 15
#pragma unroll
      for (int c = n0; c < n0 + 4; ++c) {
        const int q = col(c);  // this column's query in Q_i
        const float L = Li[q], D = Di[q];
#pragma unroll
        for (int t = 0; t < kRows; ++t) {
          const int key = kv0 + wg * common::cuda::kWarpgroupRows + row(t);
          const bool visible = !masked || (q0 + q < n_q && key < n_kv && !(causal && key > q0 + q));
          const float e = visible ? common::cuda::exp2_ftz(fmaf(S[t][c], scale, -L) * common::cuda::kLog2e) : 0.0f;
          S[t][c] = e;
          dP[t][c] = e * (dP[t][c] - D);
        }
      }
      P16[m][0] = common::cuda::pack2<T>(S[0][n0], S[0][n0 + 1]);
      P16[m][1] = common::cuda::pack2<T>(S[1][n0], S[1][n0 + 1]);
      P16[m][2] = common::cuda::pack2<T>(S[0][n0 + 2], S[0][n0 + 3]);
      P16[m][3] = common::cuda::pack2<T>(S[1][n0 + 2], S[1][n0 + 3]);
      dS16[m][0] = common::cuda::pack2<T>(dP[0][n0], dP[0][n0 + 1]);
      dS16[m][1] = common::cuda::pack2<T>(dP[1][n0], dP[1][n0 + 1]);
      dS16[m][2] = common::cuda::pack2<T>(dP[0][n0 + 2], dP[0][n0 + 3]);
      dS16[m][3] = common::cuda::pack2<T>(dP[1][n0 + 2], dP[1][n0 + 3]);
      // dS_ijᵀ into shared memory, a key's B_r queries one swizzled 128-byte row a column
      // block of 64: register r is row(r % 2), queries col(n0 + 2 · (r / 2)) and the next, one
      // 4-byte store, in block m / 4, 16-byte chunk 2 (m % 4) + r / 2 XOR row_lane (the key's
      // row % 8).
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        *reinterpret_cast<uint32_t*>(ds_row + m / 4 * (Bc * 128) + (r % 2) * 8 * 128 +
                                     (swizzled ^ 16 * (2 * (m % 4) + r / 2))) = dS16[m][r];
      }
    }
    //! [P and dS]

    //! [dV and dK]
    // Lines 12 and 16: dV_j += P_ijᵀ dO_i, dK_j += dS_ijᵀ Q_i (scaled at the end): A from
    // registers, B (dO_i, Q_i) MN-major in shared memory, as V_j is for step 24's P̃_ij V_j.
    fence_operand(dKj);
    fence_operand(dVj);
    wgmma_fence();
#pragma unroll
    for (int c = 0; c < Br; c += 16) {
      wgmma_rs<T, W>(dVj, P16[c / 16], mn_major_sw128(shared_address(dOi), Br, c), common::cuda::kAccumulate);
      wgmma_rs<T, W>(dKj, dS16[c / 16], mn_major_sw128(shared_address(Qi), Br, c), common::cuda::kAccumulate);
    }
    wgmma_commit();
    //! [dV and dK]

    //! [dQ]
    // Line 15: dQ_i += scale · dS_ij K_j. dS_ijᵀ's stores reach wgmma (the async proxy), and
    // both warpgroups' keys are in, before either reads them; each computes its part of the
    // term (64 queries, or W/2 columns) over all B_c keys, A = dS_ij and B = K_j both MN-major.
    fence_async_shared();
    named_barrier_sync(kDsReady, kConsumerThreads);  // … and every consumer has read L_i, D_i
    if (tid < 2 * Br) stats[(n + 1) % kStages * 2 * Br + tid] = next_stat;  // read after kDqReady below
    float dQi[kRows][Bt::kDqCols / kColLanes] = {};
    fence_operand(dQi);
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < Bc; k += 16) {
      wgmma_ss_mn<T, Bt::kDqCols>(dQi, mn_major_sw128(shared_address(dS_cols), Bc, k),
                                  mn_major_sw128(shared_address(Kcols), Bc, k), common::cuda::kAccumulate);
    }
    wgmma_commit();
    wgmma_wait<0>();  // dV_j's, dK_j's and dQ_i's products are in
    fence_operand(dQi);
    fence_operand(dKj);
    fence_operand(dVj);
    if (lane == 0) barrier_arrive(&empty[stage]);  // this warp is done with the stage: the producer may refill it
    // The term into shared memory, fp32, laid out as TMA's 128-byte swizzle lays out boxes
    // of 32 columns; tile n % 2, once the writer's reduction two tiles ago has read it.
    // Columns dq_col0 + col(c) and the next, one 8-byte store: box (dq_col0 + 8 · (c/2)) / 32,
    // 16-byte chunk 2 · ((c/2) % 4) + col_lane / 2 XOR row_lane (the row's row % 8).
    if (n >= 2) barrier_wait(&dq_empty[n % 2], (n / 2 - 1) % 2);
    float* dQs = dQbuf + (n % 2) * Br * W;
#pragma unroll
    for (int t = 0; t < kRows; ++t) {
#pragma unroll
      for (int c = 0; c < Bt::kDqCols / kColLanes; c += 2) {
        const int box = (dq_col0 + 8 * (c / 2)) / kAccumulatorBoxCols;
        *reinterpret_cast<float2*>(reinterpret_cast<unsigned char*>(dQs + box * Br * kAccumulatorBoxCols) + dq_row +
                                   t * 8 * 128 + (dq_swizzled ^ 32 * ((c / 2) % 4))) =
            make_float2(dQi[t][c], dQi[t][c + 1]);
      }
    }
    fence_async_shared();
    named_barrier_sync(kDqReady, kConsumerThreads);  // both halves are in; both warpgroups are done with dS_ijᵀ
    if (tid == 0) barrier_arrive(&dq_full[n % 2]);  // to the dQ writer
    //! [dQ]
  }
  // Line 18: write dK_j (scaled), dV_j once, rounded to T: two neighbouring columns in one 4-byte store.
#pragma unroll
  for (int t = 0; t < kRows; ++t) {
    const int key = kv0 + wg * common::cuda::kWarpgroupRows + row(t);
    if (key >= n_kv) continue;
#pragma unroll
    for (int c = 0; c < Bt::kDCols; c += 2) {
      if (col(c) >= d) continue;  // d = 96: the columns past d are TMA's zeros
      const size_t at = (size_t(bh) * n_kv + key) * d + col(c);
      *reinterpret_cast<uint32_t*>(dK_all + at) = common::cuda::pack2<T>(scale * dKj[t][c], scale * dKj[t][c + 1]);
      *reinterpret_cast<uint32_t*>(dV_all + at) = common::cuda::pack2<T>(dVj[t][c], dVj[t][c + 1]);
    }
  }
}
//! [kernel]

/// dQ = scale · dQ_acc, rounded to T: four elements a thread.
template <class T>
__global__ void __launch_bounds__(256)
    dq_convert_kernel(const float* __restrict__ dQ_acc, T* __restrict__ dQ, int64_t elements, float scale) {
  const int64_t e = 4 * (int64_t(blockIdx.x) * 256 + threadIdx.x);
  if (e >= elements) return;  // elements is a multiple of d, so of 4
  common::cuda::store4(dQ + e, common::cuda::scale4(scale, *reinterpret_cast<const float4*>(dQ_acc + e)));
}

/// The workspace, in floats: L and D padded to T_r · B_r rows a head, dQ's fp32 accumulator,
/// and (deterministic) a counter per query tile.
struct Workspace {
  int64_t padded_rows, pad, accumulator, turns, floats;
  template <int d>
  static Workspace of(const common::Shape& s, bool deterministic) {
    const int64_t Tr = (s.seq_q + BackwardTiles<d>::Br - 1) / BackwardTiles<d>::Br;
    Workspace w{};
    w.padded_rows = s.batch_heads() * Tr * BackwardTiles<d>::Br;  // a multiple of 64: the next array stays aligned
    w.pad = w.padded_rows;
    w.accumulator = 2 * w.padded_rows;
    w.turns = w.accumulator + s.q_elements();
    w.floats = w.turns + (deterministic ? s.batch_heads() * Tr : 0);
    return w;
  }
};

//! [launch]
/// L and D padded, dQ's accumulator set to 0, then the main kernel (one block per (K/V
/// tile, batch·head)), then the rounding of dQ.
template <class T, int d>
void launch_backward(const common::DeviceBackwardArgs& a) {
  using Bt = BackwardTiles<d>;
  const common::Shape& s = a.shape;
  const auto stream = static_cast<cudaStream_t>(a.stream);
  const Workspace w = Workspace::of<d>(s, a.deterministic);
  const auto ws = static_cast<float*>(a.workspace);
  float *L_pad = ws, *D_pad = ws + w.pad, *dQ_acc = ws + w.accumulator;
  int* turns = a.deterministic ? reinterpret_cast<int*>(ws + w.turns) : nullptr;
  const int64_t Tc = (s.seq_kv + Bt::Bc - 1) / Bt::Bc;
  if (Tc * s.batch_heads() > INT_MAX) {
    throw common::InputError("step33_backward_hopper: " + std::to_string(Tc * s.batch_heads()) +
                             " K/V tiles; the grid holds at most 2^31 - 1 blocks");
  }
  const int Tr = int((s.seq_q + Bt::Br - 1) / Bt::Br);
  row_dot_kernel<T, d><<<unsigned((w.padded_rows + 7) / 8), 256, 0, stream>>>(
      static_cast<const T*>(a.d_o), static_cast<const T*>(a.o), a.lse, L_pad, D_pad, int(s.seq_q), Tr * Bt::Br,
      w.padded_rows);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaMemsetAsync(dQ_acc, 0, size_t(w.floats - w.accumulator) * sizeof(float), stream));
  const auto map = [&](const void* x, int64_t n, int rows) {
    return common::cuda::make_tensor_map(x, std::is_same_v<T, __half>, s.batch_heads(), n, d, rows);
  };
  common::cuda::allow_shared_memory(backward_kernel<T, d>, Bt::smem_bytes);
  backward_kernel<T, d><<<unsigned(Tc) * unsigned(s.batch_heads()), kBackwardThreads, Bt::smem_bytes, stream>>>(
      map(a.q, s.seq_q, Bt::Br), map(a.k, s.seq_kv, Bt::Bc), map(a.v, s.seq_kv, Bt::Bc), map(a.d_o, s.seq_q, Bt::Br),
      common::cuda::make_accumulator_map(dQ_acc, s.batch_heads(), s.seq_q, d, Bt::Br), L_pad, D_pad, turns,
      static_cast<T*>(a.dk), static_cast<T*>(a.dv), int(s.seq_q), int(s.seq_kv), a.scale, a.causal);
  CUDA_CHECK_LAUNCH();
  const int64_t per_block = 4 * 256;
  dq_convert_kernel<T><<<unsigned((s.q_elements() + per_block - 1) / per_block), 256, 0, stream>>>(
      dQ_acc, static_cast<T*>(a.dq), s.q_elements(), a.scale);
  CUDA_CHECK_LAUNCH();
}
//! [launch]

/// The main kernel's tiles and resources (bf16; fp16's are the same); `registers` is the count
/// at entry, before setmaxnreg moves them between the warpgroups' roles.
template <int d>
common::Figures backward_resources() {
  using Bt = BackwardTiles<d>;
  return common::cuda::kernel_resources(backward_kernel<__nv_bfloat16, d>, kBackwardThreads, Bt::smem_bytes,
                                        {{"B_c", Bt::Bc},
                                         {"B_r", Bt::Br},
                                         {"consumer_registers", kConsumerRegisters},
                                         {"producer_registers", kProducerRegisters}});
}

}  // namespace

common::Figures backward_resources(int64_t head_dim) {
  return HeadDims::dispatch(head_dim, [](auto d) { return backward_resources<d()>(); });
}

void launch_backward(const common::DeviceBackwardArgs& args) {
  HeadDims::dispatch(args.shape.head_dim, [&](auto d) {
    if (args.precision == common::Precision::bf16) launch_backward<__nv_bfloat16, d()>(args);
    else if (args.precision == common::Precision::fp16) launch_backward<__half, d()>(args);
    else throw common::InputError("step33_backward_hopper computes in bf16 and fp16 only");
  });
}

int64_t backward_workspace_bytes(const common::Shape& shape, bool deterministic) {
  return HeadDims::dispatch(
      shape.head_dim, [&](auto d) { return Workspace::of<d()>(shape, deterministic).floats * int64_t(sizeof(float)); });
}

}  // namespace step33
