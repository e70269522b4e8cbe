/// \file step31_backward_vector_reductions/backward.cu
/// \brief Step 31 — dQ's atomics four floats at a time: a quarter of the reductions into the L2 cache.
///
/// This step extends step 30 by the width of dQ_i's additions. Step 30's blocks add their
/// terms of dQ_i one float a reduction: B_r · d of them per (i, j), 8192 at d = 128, each an
/// operation of its own at the L2 cache, from every block at once. sm_90 adds a float4 in one
/// reduction (`atomicAdd(float4*, float4)`, PTX's `atom.global.add.v4.f32`), but a thread's 4
/// columns of a C row are two pairs 8 columns apart (fragments.hpp): two lanes of a quad swap
/// a pair by a shuffle, so that each holds 4 neighbouring floats, and one reduction carries
/// them. Before sm_90, one float a reduction, as step 30.
///
/// Run: build/bin/step31_backward_vector_reductions --batch 4 --heads 16 --seq-q 4096 --seq-kv 4096 --head-dim 128 --backward --repeat 10
///      build/bin/step31_backward_vector_reductions --seq-q 1000 --seq-kv 333 --head-dim 64 --causal --dtype fp16 --backward --check
#include <cuda_runtime.h>

#include <cmath>

#include "attention.hpp"
#include "common/cuda/backward.cuh"
#include "common/cuda/convert.cuh"
#include "common/cuda/cp_async.cuh"
#include "common/cuda/cuda_check.cuh"
#include "common/cuda/exp2.cuh"
#include "common/cuda/fragments.hpp"
#include "common/cuda/gpu_step.cuh"
#include "common/cuda/mma.cuh"
#include "common/cuda/warp.cuh"

namespace step31 {

namespace {

constexpr int kWarpSize = 32;
constexpr int kWarps = 8;  // warps per block: 16 keys of K_j each
constexpr int kBackwardThreads = kWarps * kWarpSize;
constexpr int kStages = 2;  // Q_i, dO_i, L_i, D_i: tile i + 1 lands while tile i is computed
constexpr int kPad = 8;  // ld = d + 8: the 8 rows one ldmatrix matrix reads start in different banks
// A warp is 8 × 4 lanes, the mma's C layout: lane = row_lane · 4 + col_lane (fragments.hpp).
// A thread owns 2 rows of its warp's 16-row tile: row_lane and row_lane + 8 (kRows).
constexpr int kRowLanes = 8, kColLanes = 4, kRows = 2;
constexpr int kKeysPerWarp = kRows * kRowLanes;  // one mma's M: the warp's keys of K_j
// The register budget: of a thread's 255 registers, its fp32 accumulators of S_ijᵀ, dP_ijᵀ,
// dK_j and dV_j take at most this many; the rest hold fragments, addresses and temporaries.
constexpr int kAccumulatorRegisters = 160;
/// Blocks per SM the kernels are compiled for: one, so that a thread may hold 255 registers.
constexpr int kBlocksPerSm = 1;
using HeadDims = common::cuda::HeadDims<32, 64, 96, 128>;  // as the forward: one instantiation each

//! [tiles]
/// The backward's tiles for head dimension d: B_c = 8 warps · 16 keys a block; B_r queries an
/// iteration (128 where d <= 64, else 64: two stages of Q_i and dO_i fit in shared memory),
/// in passes of B_p. A thread holds 2 rows × B_p/4 columns of S_ijᵀ and of dP_ijᵀ and
/// 2 rows × d/4 of dK_j and of dV_j in fp32 registers: B_p + d = 160 at d = 96 (B_p = 64)
/// and at d = 128 (B_p = 32). dQ_i's term, B_r × d, is split over the 8 warps: 16 rows and
/// kDqCols columns each.
template <int d>
struct BackwardTiles {
  static constexpr int Bc = kWarps * kKeysPerWarp;  // keys: 128
  static constexpr int Br = d <= 64 ? 128 : 64;  // queries of Q_i: one load, two barriers, one dQ_i term
  /// S_ijᵀ and dP_ijᵀ are computed in passes of B_p queries: as many as the registers hold
  /// beside dK_j and dV_j.
  static constexpr int Bp = d <= 96 ? 64 : 32;
  static constexpr int kSCols = Bp / kColLanes;  // columns of S_ijᵀ, dP_ijᵀ a thread owns in each row
  static constexpr int kDCols = d / kColLanes;  // columns of dK_j, dV_j a thread owns in each row
  static constexpr int kQueryTiles = Br / 16;  // 16-row tiles of dQ_i's term
  static constexpr int kDqCols = d * kQueryTiles / kWarps;  // columns of dQ_i's term a warp computes
  static constexpr int ld = d + kPad;  // row stride of K_j, V_j, Q_i, dO_i in shared memory
  static constexpr int ld_s = Br + kPad;  // row stride of dS_ijᵀ
  /// One stage: Q_i, dO_i (B_r, ld), 2 bytes an element, then L_i, D_i (B_r), fp32.
  static constexpr size_t stage_bytes = size_t(2) * Br * ld * 2 + size_t(2) * Br * 4;
  /// Shared memory: K_j, V_j (B_c, ld) and dS_ijᵀ (B_c, ld_s), 2 bytes an element; kStages stages.
  static constexpr size_t smem_bytes = (size_t(2) * Bc * ld + size_t(Bc) * ld_s) * 2 + kStages * stage_bytes;
  static_assert(kRows * (2 * kSCols + 2 * kDCols) <= kAccumulatorRegisters, "S_ijᵀ, dP_ijᵀ, dK_j and dV_j spill");
  static_assert(d % 16 == 0 && Bp % 16 == 0 && Br % Bp == 0, "mma tiles of k = 16 along d and along the queries");
  static_assert(kWarps % kQueryTiles == 0 && kDqCols % 16 == 0, "dQ_i's term: whole 16 × 16 tiles a warp");
};
//! [tiles]

using common::cuda::ldmatrix_x4;
using common::cuda::ldmatrix_x4_trans;
using common::cuda::mma_m16n8k16;
using common::mma::RowCol;

/// Column n of the 4 · B/16 columns a thread owns in each row of a C tile B wide:
/// 2 neighbours per 8 columns (fragments.hpp, c_m16n8).
__device__ int col(int n) { return 8 * (n / 2) + 2 * (threadIdx.x % kColLanes) + n % 2; }

/// Starts loading rows row0 … row0 + B − 1 of an (n_rows, d) matrix into a (B, ld) tile
/// in shared memory by cp.async, 16 bytes (8 elements) a copy; rows past n_rows become zeros.
template <int d, class T>
__device__ void load_rows(T* tile, const T* matrix, int row0, int B, int n_rows) {
  constexpr int ld = BackwardTiles<d>::ld;
  for (int e = threadIdx.x; e < B * d / 8; e += kBackwardThreads) {
    const int r = e / (d / 8), k = 8 * (e % (d / 8));
    const bool inside = row0 + r < n_rows;  // a zero-filling copy reads nothing, but needs a valid address
    common::cuda::cp_async_16(tile + r * ld + k, matrix + size_t(inside ? row0 + r : 0) * d + k, inside);
  }
}

//! [products]
/// S_ijᵀ = K_j Q_iᵀ and dP_ijᵀ = V_j dO_iᵀ for this warp's 16 keys: per 16 of d, one ldmatrix
/// of K_j and of V_j (A), and per 16 queries one of Q_i and of dO_i (B of two 8-query mmas,
/// read as they lie, as step 14 reads K_j).
template <class T, int d>
__device__ void scores_transposed(float (&S)[kRows][BackwardTiles<d>::kSCols],
                                  float (&dP)[kRows][BackwardTiles<d>::kSCols], const T* Kj, const T* Vj, const T* Qi,
                                  const T* dOi) {
  using Bt = BackwardTiles<d>;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const RowCol a_at = common::mma::ldmatrix_x4_address(lane), b_at = common::mma::ldmatrix_x4_address_nk(lane);
#pragma unroll
  for (int t = 0; t < kRows; ++t) {
#pragma unroll
    for (int n = 0; n < Bt::kSCols; ++n) S[t][n] = dP[t][n] = 0.0f;
  }
#pragma unroll
  for (int k = 0; k < d; k += 16) {
    uint32_t kj[4], vj[4];
    ldmatrix_x4(kj, Kj + (warp * kKeysPerWarp + a_at.row) * Bt::ld + k + a_at.col);
    ldmatrix_x4(vj, Vj + (warp * kKeysPerWarp + a_at.row) * Bt::ld + k + a_at.col);
#pragma unroll
    for (int n = 0; n < Bt::kSCols; n += 4) {  // queries 4n … 4n + 15: this thread's columns n … n + 3
      uint32_t q[4], o[4];
      ldmatrix_x4(q, Qi + (4 * n + b_at.row) * Bt::ld + k + b_at.col);
      ldmatrix_x4(o, dOi + (4 * n + b_at.row) * Bt::ld + k + b_at.col);
      mma_m16n8k16<T>(S[0][n], S[0][n + 1], S[1][n], S[1][n + 1], kj, q[0], q[1]);
      mma_m16n8k16<T>(S[0][n + 2], S[0][n + 3], S[1][n + 2], S[1][n + 3], kj, q[2], q[3]);
      mma_m16n8k16<T>(dP[0][n], dP[0][n + 1], dP[1][n], dP[1][n + 1], vj, o[0], o[1]);
      mma_m16n8k16<T>(dP[0][n + 2], dP[0][n + 3], dP[1][n + 2], dP[1][n + 3], vj, o[2], o[3]);
    }
  }
}

/// C(16 keys × d) += Aᵀ B over the B_p queries of a pass: A the warp's 16-bit A fragments of
/// P_ijᵀ or dS_ijᵀ (one per 16 queries), B (B_p, ld) row-major in shared memory, read by ldmatrix
/// .trans as step 14 reads V_j. dV_j += P_ijᵀ dO_i, dK_j += dS_ijᵀ Q_i.
template <class T, int d>
__device__ void fragments_times_rows(float (&C)[kRows][BackwardTiles<d>::kDCols],
                                     const uint32_t (&A)[BackwardTiles<d>::kSCols / 4][4], const T* B) {
  using Bt = BackwardTiles<d>;
  const RowCol at = common::mma::ldmatrix_x4_address(threadIdx.x % kWarpSize);
#pragma unroll
  for (int c = 0; c < Bt::Bp; c += 16) {  // queries c … c + 15 of the pass: the k of these mmas
#pragma unroll
    for (int n = 0; n < Bt::kDCols; n += 4) {  // columns 4n … 4n + 15 of d
      uint32_t b[4];
      ldmatrix_x4_trans(b, B + (c + at.row) * Bt::ld + 4 * n + at.col);
      mma_m16n8k16<T>(C[0][n], C[0][n + 1], C[1][n], C[1][n + 1], A[c / 16], b[0], b[1]);
      mma_m16n8k16<T>(C[0][n + 2], C[0][n + 3], C[1][n + 2], C[1][n + 3], A[c / 16], b[2], b[3]);
    }
  }
}

/// C(16 queries × kDqCols) += dS_ij K_j over the B_c keys, this warp's tile of dQ_i's term
/// (rows 16 · (warp % kQueryTiles), columns kDqCols · (warp / kQueryTiles)): A from dS_ijᵀ
/// (B_c, ld_s) by ldmatrix .trans, so that it arrives by queries; B from K_j (B_c, ld) by
/// ldmatrix .trans.
template <class T, int d>
__device__ void ds_times_keys(float (&C)[kRows][BackwardTiles<d>::kDqCols / kColLanes], const T* dSt, const T* Kj) {
  using Bt = BackwardTiles<d>;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int q_first = 16 * (warp % Bt::kQueryTiles), c_first = Bt::kDqCols * (warp / Bt::kQueryTiles);
  // The transposed A: the 8 × 8 matrices of dS_ij lie as dS_ijᵀ's, keys along the rows.
  const RowCol a_at = common::mma::ldmatrix_x4_address_nk(lane), b_at = common::mma::ldmatrix_x4_address(lane);
#pragma unroll 2
  for (int k = 0; k < Bt::Bc; k += 16) {  // keys k … k + 15
    uint32_t a[4];
    ldmatrix_x4_trans(a, dSt + (k + a_at.row) * Bt::ld_s + q_first + a_at.col);
#pragma unroll
    for (int n = 0; n < Bt::kDqCols / kColLanes; n += 4) {  // columns c_first + 4n … + 15
      uint32_t b[4];
      ldmatrix_x4_trans(b, Kj + (k + b_at.row) * Bt::ld + c_first + 4 * n + b_at.col);
      mma_m16n8k16<T>(C[0][n], C[0][n + 1], C[1][n], C[1][n + 1], a, b[0], b[1]);
      mma_m16n8k16<T>(C[0][n + 2], C[0][n + 3], C[1][n + 2], C[1][n + 3], a, b[2], b[3]);
    }
  }
}
//! [products]

//! [P and dS]
/// Lines 10–14 for one (i, j), transposed, for this warp's 16 keys and the B_p queries
/// p … p + B_p − 1 of Q_i (one pass): P_ijᵀ = 2^((scale · S_ijᵀ
/// − L_i) · log2 e), masked to 0 past N_q, past N_kv and above the causal diagonal;
/// dS_ijᵀ = P_ijᵀ ∘ (dP_ijᵀ − D_i). Both rounded to T as A fragments (P16, dS16: 16 queries
/// each, the pairs of step 14's P̃_ij), and dS_ijᵀ stored into shared memory for dQ_i. Any sign
/// of the scale works as it is: L_i, not a row maximum, is subtracted, so sign(scale) need not
/// go into Q_i as in step 14 (common/cuda/scale_sign.cuh).
template <class T, int d>
__device__ void p_and_ds(uint32_t (&P16)[BackwardTiles<d>::kSCols / 4][4],
                         uint32_t (&dS16)[BackwardTiles<d>::kSCols / 4][4], const T* Kj, const T* Vj, const T* Qi,
                         const T* dOi, const float* Li, const float* Di, T* dSt, int p, int q0, int kv0, int n_q,
                         int n_kv, float scale, bool causal) {
  using Bt = BackwardTiles<d>;
  float S[kRows][Bt::kSCols], dP[kRows][Bt::kSCols];
  scores_transposed<T, d>(S, dP, Kj, Vj, Qi + p * Bt::ld, dOi + p * Bt::ld);
  const int warp = threadIdx.x / kWarpSize, row_lane = (threadIdx.x % kWarpSize) / kColLanes;
  const auto key = [&](int t) { return warp * kKeysPerWarp + 8 * t + row_lane; };  // row t's key in K_j
  // Only a tile that crosses the end of Q or K, or the causal diagonal, hides anything.
  const bool masked = q0 + Bt::Br > n_q || kv0 + Bt::Bc > n_kv || (causal && kv0 + Bt::Bc - 1 > q0);
#pragma unroll
  for (int n = 0; n < Bt::kSCols; ++n) {
    const int q = p + col(n);  // this column's query in Q_i
    const float L = Li[q], D = Di[q];
#pragma unroll
    for (int t = 0; t < kRows; ++t) {
      const bool visible = !masked || (q0 + q < n_q && kv0 + key(t) < n_kv && !(causal && kv0 + key(t) > q0 + q));
      // L_i is the row's final log-sum-exp: P_ij is final at once, no running max. The fma
      // subtracts L_i from the exact scale · S_ij, so that the exponent of a dominant key, near
      // 0, is exact even where scores are 10³ (scaled by log2 e first, it would be off by 10⁻⁴).
      const float p = visible ? common::cuda::exp2_ftz(fmaf(S[t][n], scale, -L) * common::cuda::kLog2e) : 0.0f;
      S[t][n] = p;
      dP[t][n] = p * (dP[t][n] - D);
    }
  }
  // Per 16 queries c … c + 15, a thread's 4 columns among them in rows row_lane and
  // row_lane + 8, rounded to T in pairs: the A fragment (fragments.hpp). dS_ijᵀ goes to
  // shared memory as it is, two neighbouring queries in one 4-byte store.
#pragma unroll
  for (int m = 0; m < Bt::kSCols / 4; ++m) {
    const int n0 = 4 * m;  // this thread's first column index among queries 16m … 16m + 15
    P16[m][0] = common::cuda::pack2<T>(S[0][n0], S[0][n0 + 1]);
    P16[m][1] = common::cuda::pack2<T>(S[1][n0], S[1][n0 + 1]);
    P16[m][2] = common::cuda::pack2<T>(S[0][n0 + 2], S[0][n0 + 3]);
    P16[m][3] = common::cuda::pack2<T>(S[1][n0 + 2], S[1][n0 + 3]);
    dS16[m][0] = common::cuda::pack2<T>(dP[0][n0], dP[0][n0 + 1]);
    dS16[m][1] = common::cuda::pack2<T>(dP[1][n0], dP[1][n0 + 1]);
    dS16[m][2] = common::cuda::pack2<T>(dP[0][n0 + 2], dP[0][n0 + 3]);
    dS16[m][3] = common::cuda::pack2<T>(dP[1][n0 + 2], dP[1][n0 + 3]);
#pragma unroll
    for (int r = 0; r < 4; ++r) {  // register r: row 8 · (r % 2) + row_lane, columns col(n0 + 2 · (r / 2)) and + 1
      *reinterpret_cast<uint32_t*>(dSt + key(r % 2) * Bt::ld_s + p + col(n0 + 2 * (r / 2))) = dS16[m][r];
    }
  }
}
//! [P and dS]

//! [add_row]
/// row[col(n)] += C[n] for a thread's kN columns of one row of a C tile (the row's other
/// columns are its 3 neighbours' in the quad), each addition whole, whatever the other blocks
/// add at the same time. sm_90 adds 4 neighbouring floats in one vector reduction into the L2
/// cache: two lanes of a quad swap a pair, so that the even one holds columns 8g + 2c … + 3
/// and the odd one 8(g + 1) + 2(c − 1) … + 3. Before sm_90, one reduction a float. Every lane
/// of the warp calls it (the swap is a shuffle); only those with `inside` add.
template <int kN>
__device__ void add_row(float* row, const float (&C)[kN], bool inside) {
  static_assert(kN % 4 == 0, "pairs of 8-column groups");
#pragma unroll
  for (int n = 0; n < kN; n += 4) {  // 8-column groups n/2 and n/2 + 1: pairs n, n + 1 and n + 2, n + 3
#if __CUDA_ARCH__ >= 900
    const bool odd = threadIdx.x % 2;
    const float give0 = odd ? C[n] : C[n + 2], give1 = odd ? C[n + 1] : C[n + 3];
    const float got0 = __shfl_xor_sync(0xffffffffu, give0, 1), got1 = __shfl_xor_sync(0xffffffffu, give1, 1);
    const float4 four = odd ? make_float4(got0, got1, C[n + 2], C[n + 3]) : make_float4(C[n], C[n + 1], got0, got1);
    if (inside) atomicAdd(reinterpret_cast<float4*>(row + col(n) + (odd ? 6 : 0)), four);
#else
    if (inside) {
#pragma unroll
      for (int m = n; m < n + 4; ++m) atomicAdd(row + col(m), C[m]);
    }
#endif
  }
}
//! [add_row]

/// Starts loading L_i and D_i by cp.async (B_r each; 0 past N_q, where P_ij is masked anyway).
template <int d>
__device__ void load_row_stats(float* Li, float* Di, const float* L, const float* D, int q0, int n_q) {
  for (int r = threadIdx.x; r < BackwardTiles<d>::Br; r += kBackwardThreads) {
    const bool inside = q0 + r < n_q;
    common::cuda::cp_async_4(Li + r, L + (inside ? q0 + r : 0), inside);
    common::cuda::cp_async_4(Di + r, D + (inside ? q0 + r : 0), inside);
  }
}

/// A stage of the ring in shared memory: Q_i, dO_i (B_r, ld) and L_i, D_i (B_r).
template <class T, int d>
struct QueryTile {
  T *Qi, *dOi;
  float *Li, *Di;
  __device__ QueryTile(unsigned char* at) {
    using Bt = BackwardTiles<d>;
    Qi = reinterpret_cast<T*>(at);
    dOi = Qi + Bt::Br * Bt::ld;
    Li = reinterpret_cast<float*>(dOi + Bt::Br * Bt::ld);
    Di = Li + Bt::Br;
  }
  /// Starts loading query tile i (rows q0 …) of one (batch, head) into this stage.
  __device__ void load(const T* Q, const T* dO, const float* L, const float* D, int q0, int n_q) const {
    load_rows<d>(Qi, Q, q0, BackwardTiles<d>::Br, n_q);
    load_rows<d>(dOi, dO, q0, BackwardTiles<d>::Br, n_q);
    load_row_stats<d>(Li, Di, L, D, q0, n_q);
  }
};

/// Algorithm 2 for one K/V tile of one (batch, head) per block: dK_j, dV_j in fp32
/// registers over the query tiles, dQ_i's terms added into the fp32 dQ_acc.
//! [kernel]
template <class T, int d>  // T: __nv_bfloat16 or __half
__global__ void __launch_bounds__(kBackwardThreads, kBlocksPerSm)
    backward_kernel(const T* __restrict__ Q_all, const T* __restrict__ K_all, const T* __restrict__ V_all,
                    const T* __restrict__ dO_all, const float* __restrict__ L_all, const float* __restrict__ D_all,
                    float* __restrict__ dQ_acc, T* __restrict__ dK_all, T* __restrict__ dV_all, int n_q, int n_kv,
                    int batch_heads, float scale, bool causal) {
  using Bt = BackwardTiles<d>;
  constexpr int Bc = Bt::Bc, Br = Bt::Br, ld = Bt::ld;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, row_lane = lane / kColLanes;
  // The K/V tiles of one (batch, head) are neighbours in the grid: they run together and
  // read the same Q_i, dO_i, which the L2 cache then serves once for all of them.
  const int Tc = (n_kv + Bc - 1) / Bc;
  const size_t bh = blockIdx.x / Tc;
  const int j = int(blockIdx.x) % Tc, kv0 = j * Bc;  // this block's K/V tile
  const auto Q = Q_all + bh * n_q * d;  // Q, dO, dQ: (N_q, d); K, V, dK, dV: (N_kv, d); L, D: (N_q)
  const auto dO = dO_all + bh * n_q * d;
  const auto K = K_all + bh * n_kv * d;
  const auto V = V_all + bh * n_kv * d;
  const auto L = L_all + bh * n_q;
  const auto D = D_all + bh * n_q;
  const auto dQ = dQ_acc + bh * n_q * d;

  extern __shared__ __align__(16) unsigned char smem_bytes[];  // the block's dynamic shared memory
  T* Kj = reinterpret_cast<T*>(smem_bytes);  // K_j: (B_c, d), row stride ld
  T* Vj = Kj + Bc * ld;  // V_j: (B_c, d)
  T* dSt = Vj + Bc * ld;  // dS_ijᵀ: (B_c, B_r), row stride ld_s
  unsigned char* stages = reinterpret_cast<unsigned char*>(dSt + Bc * Bt::ld_s);  // kStages × QueryTile

  // Line 7: dK_j, dV_j = 0: rows row_lane + 8t of the warp's 16 keys, columns col(n), fp32.
  float dKj[kRows][Bt::kDCols] = {}, dVj[kRows][Bt::kDCols] = {};

  // Line 6: load K_j, V_j once, in one group of copies with the first query tile.
  load_rows<d>(Kj, K, kv0, Bc, n_kv);
  load_rows<d>(Vj, V, kv0, Bc, n_kv);
  // Causal: query tiles that end before kv0 see none of this tile's keys.
  const int Tr = (n_q + Br - 1) / Br, i_first = causal ? kv0 / Br : 0;
  if (i_first < Tr) QueryTile<T, d>(stages).load(Q, dO, L, D, i_first * Br, n_q);
  common::cuda::cp_async_commit();
  for (int i = i_first; i < Tr; ++i) {  // line 8: query tiles
    const int q0 = i * Br;
    const QueryTile<T, d> tile(stages + ((i - i_first) % kStages) * Bt::stage_bytes);
    // Line 9: load Q_i, dO_i, L_i, D_i — tile i + 1's copies start now, into the other stage,
    // whose tile i − 1 every warp finished before the barrier that ended its products.
    if (i + 1 < Tr)
      QueryTile<T, d>(stages + ((i + 1 - i_first) % kStages) * Bt::stage_bytes).load(Q, dO, L, D, q0 + Br, n_q);
    common::cuda::cp_async_commit();  // an empty group past the last tile: the wait below counts groups
    common::cuda::cp_async_wait<1>();  // tile i's group has landed, for this thread
    __syncthreads();  // … and for every thread; every warp is also done with dS_(i−1)jᵀ

#pragma unroll
    for (int p = 0; p < Br; p += Bt::Bp) {  // the queries of Q_i in passes of B_p
      uint32_t P16[Bt::kSCols / 4][4], dS16[Bt::kSCols / 4][4];  // P_ijᵀ, dS_ijᵀ: 16-bit A fragments
      p_and_ds<T, d>(P16, dS16, Kj, Vj, tile.Qi, tile.dOi, tile.Li, tile.Di, dSt, p, q0, kv0, n_q, n_kv, scale, causal);
      fragments_times_rows<T, d>(dVj, P16, tile.dOi + p * ld);  // line 12: dV_j += P_ijᵀ dO_i
      fragments_times_rows<T, d>(dKj, dS16, tile.Qi + p * ld);  // line 16: dK_j += dS_ijᵀ Q_i (scaled at the end)
    }
    // dS_ijᵀ is complete: each warp reads the other warps' keys; and every warp is done with
    // this stage, which the next iteration's copies refill.
    __syncthreads();
    // Line 15: dQ_i += scale · dS_ij K_j. Every block of this head adds to dQ_i at the same
    // time: atomicAdd makes each addition whole, in an order set by timing; the scale is
    // applied once, when dQ is rounded to 16 bits.
    float dQi[kRows][Bt::kDqCols / kColLanes] = {};
    ds_times_keys<T, d>(dQi, dSt, Kj);
    const int q_first = 16 * (warp % Bt::kQueryTiles), c_first = Bt::kDqCols * (warp / Bt::kQueryTiles);
#pragma unroll
    for (int t = 0; t < kRows; ++t) {
      const int q = q0 + q_first + 8 * t + row_lane;
      add_row(dQ + size_t(q) * d + c_first, dQi[t], q < n_q);
    }
  }
  // Line 18: write dK_j, dV_j once, rounded to T: two neighbouring columns in one 4-byte store.
#pragma unroll
  for (int t = 0; t < kRows; ++t) {
    const int key = kv0 + warp * kKeysPerWarp + 8 * t + row_lane;
    if (key >= n_kv) continue;
#pragma unroll
    for (int n = 0; n < Bt::kDCols; n += 2) {
      const size_t at = (bh * n_kv + key) * d + col(n);
      *reinterpret_cast<uint32_t*>(dK_all + at) = common::cuda::pack2<T>(scale * dKj[t][n], scale * dKj[t][n + 1]);
      *reinterpret_cast<uint32_t*>(dV_all + at) = common::cuda::pack2<T>(dVj[t][n], dVj[t][n + 1]);
    }
  }
}
//! [kernel]

/// dQ = scale · dQ_acc, rounded to T: four elements a thread.
template <class T>
__global__ void __launch_bounds__(kBackwardThreads)
    dq_convert_kernel(const float* __restrict__ dQ_acc, T* __restrict__ dQ, int64_t elements, float scale) {
  const int64_t e = 4 * (int64_t(blockIdx.x) * kBackwardThreads + threadIdx.x);
  if (e >= elements) return;  // elements is a multiple of d, so of 4
  common::cuda::store4(dQ + e, common::cuda::scale4(scale, *reinterpret_cast<const float4*>(dQ_acc + e)));
}

/// Where the fp32 dQ accumulator starts in the workspace, in floats: after D, rounded up to
/// 4 floats so that the conversion's float4 loads are aligned.
int64_t accumulator_offset(const common::Shape& s) { return (s.lse_elements() + 3) / 4 * 4; }

//! [launch]
/// D first, then the main kernel (one block per (K/V tile, batch·head)), then the rounding of
/// dQ's accumulator.
template <class T, int d>
void launch_backward(const common::DeviceBackwardArgs& a) {
  using Bt = BackwardTiles<d>;
  const common::Shape& s = a.shape;
  const auto stream = static_cast<cudaStream_t>(a.stream);
  const auto q = static_cast<const T*>(a.q), k = static_cast<const T*>(a.k), v = static_cast<const T*>(a.v),
             o = static_cast<const T*>(a.o), d_o = static_cast<const T*>(a.d_o);
  const auto dq = static_cast<T*>(a.dq), dk = static_cast<T*>(a.dk), dv = static_cast<T*>(a.dv);
  const auto D = static_cast<float*>(a.workspace);  // D: (B, H, N_q)
  const auto dQ_acc = D + accumulator_offset(s);  // (B, H, N_q, d), fp32
  common::cuda::launch_row_dot(d_o, o, D, s.lse_elements(), d, stream);  // fp32 sums of the 16-bit elements
  CUDA_CHECK(cudaMemsetAsync(dQ_acc, 0, size_t(s.q_elements()) * sizeof(float), stream));
  common::cuda::allow_shared_memory(backward_kernel<T, d>, Bt::smem_bytes);
  const unsigned kv_tiles = unsigned((s.seq_kv + Bt::Bc - 1) / Bt::Bc);
  backward_kernel<T, d><<<kv_tiles* unsigned(s.batch_heads()), kBackwardThreads, Bt::smem_bytes, stream>>>(
      q, k, v, d_o, a.lse, D, dQ_acc, dk, dv, int(s.seq_q), int(s.seq_kv), int(s.batch_heads()), a.scale, a.causal);
  CUDA_CHECK_LAUNCH();
  const int64_t per_block = 4 * int64_t(kBackwardThreads);
  dq_convert_kernel<T><<<unsigned((s.q_elements() + per_block - 1) / per_block), kBackwardThreads, 0, stream>>>(
      dQ_acc, dq, s.q_elements(), a.scale);
  CUDA_CHECK_LAUNCH();
}
//! [launch]

/// The main kernel's tiles and resources, bf16; fp16's are the same.
template <int d>
common::Figures backward_resources() {
  using Bt = BackwardTiles<d>;
  return common::cuda::kernel_resources(backward_kernel<__nv_bfloat16, d>, kBackwardThreads, Bt::smem_bytes,
                                        {{"B_c", Bt::Bc}, {"B_r", Bt::Br}, {"B_p", Bt::Bp}});
}

}  // namespace

common::Figures backward_resources(int64_t head_dim) {
  return HeadDims::dispatch(head_dim, [](auto d) { return backward_resources<d()>(); });
}

void launch_backward(const common::DeviceBackwardArgs& args) {
  HeadDims::dispatch(args.shape.head_dim, [&](auto d) {
    if (args.precision == common::Precision::bf16) launch_backward<__nv_bfloat16, d()>(args);
    else if (args.precision == common::Precision::fp16) launch_backward<__half, d()>(args);
    else throw common::InputError("step31_backward_vector_reductions computes in bf16 and fp16 only");
  });
}

int64_t backward_workspace_bytes(const common::Shape& shape, bool /*deterministic*/) {
  return (accumulator_offset(shape) + shape.q_elements()) * int64_t(sizeof(float));  // D, dQ's accumulator
}

}  // namespace step31
