/// \file step06_fa2/attention.cu
/// \brief Step 6 — FlashAttention-2 forward on the GPU, fp32.
///
/// This step extends step 5 by FlashAttention-2's three changes (Dao 2023):
///  1. The loops swap, and the outer one, over query tiles, spans the grid.
///  2. O_i, m_i, l_i stay in registers through the inner loop: O_i is rescaled
///     by exp(m_i − m_new) per tile, divided by l_i once, written to HBM once.
///  3. Causal: K/V tiles entirely above the diagonal are skipped, never loaded.
///
/// Run: build/bin/step06_fa2 --batch 4 --heads 16 --seq-q 4096 --seq-kv 4096 --head-dim 128 --repeat 20
///      build/bin/step06_fa2 --seq-q 1000 --seq-kv 333 --head-dim 64 --causal --check
#include <cuda_runtime.h>

#include <cmath>

#include "attention.hpp"
#include "common/cuda/cuda_check.cuh"
#include "common/cuda/gpu_step.cuh"

namespace step06 {

namespace {

constexpr int kThreads = 1024;  // threads per block (so at most 64 registers each)
constexpr int kWarps = kThreads / 32;  // warps per block
constexpr int kWarpSize = 32;
constexpr int kPad = 1;  // ld = d + 1: a warp reads column k of 32 rows of K_j from 32 banks
constexpr int kSramFloats = 16384;  // M: 64 KiB of shared memory for K_j, V_j, Q_i, O_i
using HeadDims = common::cuda::HeadDims<32, 64, 96, 128>;  // one kernel instantiation each

//! [tiles]
/// The tiles of Algorithm 1 for head dimension d, from the budget M = kSramFloats,
/// fixed at compile time.
template <int d>
struct Tiles {
  // Line 1: B_c = ⌈M/4d⌉, B_r = min(B_c, d), exactly as in steps 2 and 3.
  static constexpr int Bc = (kSramFloats + 4 * d - 1) / (4 * d);
  static constexpr int Br = Bc < d ? Bc : d;
  static constexpr int ld = d + kPad;  // row stride of Q_i, K_j, V_j in shared memory
  /// Shared memory: K_j, V_j (B_c, ld); Q_i (B_r, ld).
  static constexpr size_t smem_bytes = (size_t(2) * Bc * ld + size_t(Br) * ld) * 4;
};
//! [tiles]

/// The largest `x` of the warp's 32 lanes, in every lane.
__device__ float warp_max(float x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

/// The sum of `x` over the warp's 32 lanes, in every lane.
__device__ float warp_sum(float x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

//! [load tile]
/// Loads rows row0 … row0 + B − 1 of an (n_rows, d) matrix in HBM into a (B, ld)
/// tile in SRAM, element by element over the block's threads. Rows past n_rows
/// become zeros, so the fixed-length loops over a tile multiply zeros there.
template <int d>
__device__ void load_tile(float* tile, const float* matrix, int row0, int B, int n_rows) {
  constexpr int ld = Tiles<d>::ld;
  for (int e = threadIdx.x; e < B * d; e += kThreads) {
    const int r = e / d, k = e % d;
    tile[r * ld + k] = row0 + r < n_rows ? matrix[size_t(row0 + r) * d + k] : 0.0f;
  }
}
//! [load tile]

/// FlashAttention-2 for one query tile of one (batch, head) per block. Q, K, V, O, L as in the contract.
//! [kernel]
template <int d>
__global__ void __launch_bounds__(kThreads, 1)  // 1 block per SM at least: up to 65536 / kThreads registers each
    attention_kernel(const float* __restrict__ Q_all, const float* __restrict__ K_all, const float* __restrict__ V_all,
                     float* __restrict__ O_all, float* __restrict__ L_all, int n_q, int n_kv, int batch_heads,
                     float scale, bool causal) {
  constexpr int Bc = Tiles<d>::Bc, Br = Tiles<d>::Br, ld = Tiles<d>::ld;
  // A thread's slice: rows warp + 32·t of the tile, columns lane + 32·n of S_ij and of O_i.
  constexpr int kRows = (Br + kWarps - 1) / kWarps, kSCols = (Bc + kWarpSize - 1) / kWarpSize, kOCols = d / kWarpSize;
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int Tr = (n_q + Br - 1) / Br;  // T_r query tiles

  // This block's head: Q, O: (N_q, d); K, V: (N_kv, d); L: (N_q) in global memory.
  const size_t bh = blockIdx.x % batch_heads;
  const auto Q = Q_all + bh * n_q * d;
  const auto K = K_all + bh * n_kv * d;
  const auto V = V_all + bh * n_kv * d;
  const auto O = O_all + bh * n_q * d;
  const auto L = L_all + bh * n_q;

  //! [shared memory]
  extern __shared__ float smem[];  // the block's dynamic shared memory
  auto Kj = smem;  // K_j: (B_c, d), row stride ld, in shared memory
  auto Vj = Kj + Bc * ld;  // V_j: (B_c, d), row stride ld
  auto Qi = Vj + Bc * ld;  // Q_i: (B_r, d), row stride ld
  //! [shared memory]
  //! [registers]
  float Oi[kRows][kOCols];  // O_i: this warp's rows warp + 32·t, columns lane + 32·n, in registers
  float Sij[kRows][kSCols];  // S_ij, then P̃_ij in place: rows warp + 32·t, columns lane + 32·n
  float mi[kRows], li[kRows];  // m_i, l_i of the warp's rows (the same in all 32 lanes)
  //! [registers]

  //! [algorithm 1]
  // Line 3: query tiles, in parallel: T_r blocks per (b, h), the longest causal tiles of
  // every head first; with this grid each block takes one tile and the loop runs once.
  for (int i = Tr - 1 - int(blockIdx.x) / batch_heads; i >= 0; i -= int(gridDim.x) / batch_heads) {
    const int q0 = i * Br, rows = min(Br, n_q - q0);
    // Causal: the tile's last row sees keys up to its own index; later K/V tiles are skipped.
    const int Tc = ((causal ? min(n_kv, q0 + rows) : n_kv) + Bc - 1) / Bc;
    // Lines 4–5: load Q_i from HBM to SRAM; O_i = 0, l_i = 0, m_i = −∞ in registers.
    load_tile<d>(Qi, Q, q0, Br, n_q);
#pragma unroll
    for (int t = 0; t < kRows; ++t) {
#pragma unroll
      for (int n = 0; n < kOCols; ++n) Oi[t][n] = 0.0f;
      li[t] = 0.0f;
      mi[t] = -INFINITY;
    }
    for (int j = 0; j < Tc; ++j) {  // line 6: K/V tiles, the inner loop
      const int kv0 = j * Bc, cols = min(Bc, n_kv - kv0);  // the last tile may be short
      load_tile<d>(Kj, K, kv0, Bc, n_kv);  // line 7: load K_j, V_j from HBM to SRAM
      load_tile<d>(Vj, V, kv0, Bc, n_kv);
      __syncthreads();  // the tiles are complete before anyone reads them

      // Line 8: S_ij = scale · Q_i K_jᵀ, a warp per row: its lanes split the row's
      // columns, so a row of Q_i is shared and K_j's rows are 32 different rows.
      // Hidden entries (past N_kv or N_q, or above the causal diagonal) are −∞.
#pragma unroll
      for (int t = 0; t < kRows; ++t) {
#pragma unroll
        for (int n = 0; n < kSCols; ++n) {
          const int r = warp + kWarps * t, c = lane + kWarpSize * n;
          float s = -INFINITY;
          if (r < rows && c < cols && !(causal && kv0 + c > q0 + r)) {
            float dot = 0.0f;
            for (int k = 0; k < d; ++k) dot = fmaf(Qi[r * ld + k], Kj[c * ld + k], dot);
            s = scale * dot;
          }
          Sij[t][n] = s;
        }
      }

      // Line 9, one warp per row: m_new = max(m_i, rowmax(S_ij)), P̃_ij = exp(S_ij − m_new),
      // l_i ← e^(m_i − m_new) l_i + rowsum(P̃_ij); and O_i's rescale by e^(m_i − m_new).
#pragma unroll
      for (int t = 0; t < kRows; ++t) {
        float m_tilde = -INFINITY;
#pragma unroll
        for (int n = 0; n < kSCols; ++n) m_tilde = fmaxf(m_tilde, Sij[t][n]);
        m_tilde = warp_max(m_tilde);
        // Every row sees key 0 in tile j = 0, so m_new is finite from then on.
        const float m_new = fmaxf(mi[t], m_tilde);
        float l_tilde = 0.0f;
#pragma unroll
        for (int n = 0; n < kSCols; ++n) {
          const float p = expf(Sij[t][n] - m_new);  // hidden entries: exp(−∞) = 0
          Sij[t][n] = p;
          l_tilde += p;
        }
        l_tilde = warp_sum(l_tilde);
        {  // in every lane: each keeps the row's m_i and l_i
          const float alpha = expf(mi[t] - m_new);  // FA2's only rescale; 0 in tile 0 (m_i = −∞)
          li[t] = alpha * li[t] + l_tilde;
          mi[t] = m_new;
#pragma unroll
          for (int n = 0; n < kOCols; ++n) Oi[t][n] *= alpha;
        }
      }

      // Line 10: O_i ← O_i + P̃_ij V_j, no division (diag(l_i)⁻¹ comes once, after the loop). A warp
      // per row again: its lanes split the row's d columns. P̃_ij[r, c] is in lane
      // c mod 32: a shuffle hands it to every lane, for all of its row's columns.
#pragma unroll
      for (int t = 0; t < kRows; ++t) {
        float pv[kOCols] = {};  // (P̃_ij V_j)[r, lane + 32·n]
#pragma unroll
        for (int c0 = 0; c0 < Bc; c0 += kWarpSize) {  // P̃_ij[r, c0 … c0 + 31] is Sij[t][c0 / 32]
#pragma unroll 4
          for (int c = c0; c < min(c0 + kWarpSize, Bc); ++c) {
            const float p = __shfl_sync(0xffffffffu, Sij[t][c0 / kWarpSize], c - c0);
#pragma unroll
            for (int n = 0; n < kOCols; ++n) pv[n] = fmaf(p, Vj[c * ld + lane + kWarpSize * n], pv[n]);
          }
        }
#pragma unroll
        for (int n = 0; n < kOCols; ++n) Oi[t][n] += pv[n];
      }
      // Faster threads would otherwise load the next tiles over ones that slower
      // threads still read.
      __syncthreads();
    }
    // Lines 12–14: O_i ← diag(l_i)⁻¹ O_i and L_i = m_i + log l_i, each written to HBM once.
#pragma unroll
    for (int t = 0; t < kRows; ++t) {
      const int r = warp + kWarps * t;
      if (r >= rows) continue;  // a row past the tile: never stored
#pragma unroll
      for (int n = 0; n < kOCols; ++n) O[size_t(q0 + r) * d + lane + kWarpSize * n] = Oi[t][n] / li[t];
      if (lane == 0) L[q0 + r] = mi[t] + logf(li[t]);
    }
  }
  //! [algorithm 1]
}
//! [kernel]

//! [launch]
/// Launches the kernel for head dimension d: one block of kThreads threads per
/// (query tile, batch·head) on a 1-D grid (any B·H fits), the shared memory of
/// Tiles<d> (raised above the default 48 KB).
template <int d>
void launch(const common::DeviceArgs& a) {
  const common::Shape& shape = a.shape;
  const dim3 grid(unsigned((shape.seq_q + Tiles<d>::Br - 1) / Tiles<d>::Br * shape.batch_heads())), block(kThreads);
  const size_t shared_bytes = Tiles<d>::smem_bytes;
  common::cuda::allow_shared_memory(attention_kernel<d>, shared_bytes);
  attention_kernel<d><<<grid, block, shared_bytes, common::cuda::stream_of(a)>>>(
      a.q_as<float>(), a.k_as<float>(), a.v_as<float>(), a.o_as<float>(), a.lse, int(shape.seq_q), int(shape.seq_kv),
      int(shape.batch_heads()), a.scale, a.causal);
  CUDA_CHECK_LAUNCH();
}
//! [launch]

/// The tiles and the compiler's resources of the kernel for head dimension d.
template <int d>
common::Figures resources() {
  return common::cuda::kernel_resources(attention_kernel<d>, kThreads, Tiles<d>::smem_bytes,
                                        {{"B_c", Tiles<d>::Bc}, {"B_r", Tiles<d>::Br}});
}

}  // namespace

common::StepInfo describe() {
  common::GpuKernel kernel;
  kernel.launch = [](const common::DeviceArgs& a) {
    HeadDims::dispatch(a.shape.head_dim, [&](auto d) { launch<d()>(a); });
  };
  kernel.resources = [](int64_t d) { return HeadDims::dispatch(d, [](auto D) { return resources<D()>(); }); };
  return common::cuda::gpu_step(
      "step06_fa2",
      "FlashAttention-2: Q tiles outside, K/V inside; O_i, m_i, l_i in registers, one rescale; causal skip",
      HeadDims::list(), kernel);
}

common::Result attention_forward(const common::Problem& problem, const common::Options& options) {
  return describe().forward(problem, options);
}

}  // namespace step06
