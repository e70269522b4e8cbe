/// \file step05_cuda_registers/attention.cu
/// \brief Step 5 — FlashAttention-1, Algorithm 1, on the GPU, working set in registers.
///
/// This step extends step 4 by keeping S_ij, P̃_ij, O_i, m_i and l_i in
/// registers: the warp that owns a row keeps it for the whole (j, i), lane c
/// holding columns c, c + 32, … in arrays indexed only by compile-time constants
/// (unrolled loops); P̃_ij reaches other lanes by shuffles. Only Q_i, K_j, V_j
/// stay in shared memory. spill.cu caps the same kernel at 32 registers a thread.
///
/// Run: build/bin/step05_cuda_registers --batch 4 --heads 16 --seq-q 4096 --seq-kv 4096 --head-dim 128 --repeat 10
///      build/bin/step05_cuda_registers --seq-q 1000 --seq-kv 257 --head-dim 64 --causal --check
#include <cuda_runtime.h>

#include <cmath>

#include "attention.hpp"
#include "common/cuda/cuda_check.cuh"
#include "common/cuda/gpu_step.cuh"

namespace step05 {

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

/// Algorithm 1 for one (batch, head) per block. Q, K, V, O, L as in the
/// contract; l and m are (B, H, N_q) working arrays in global memory.
//! [kernel]
template <int d>
__global__ void __launch_bounds__(kThreads, STEP05_SPILL ? 2 : 1)  // spill.cu: 2 blocks, 32 registers each
    attention_kernel(const float* __restrict__ Q_all, const float* __restrict__ K_all, const float* __restrict__ V_all,
                     float* __restrict__ O_all, float* __restrict__ L_all, float* __restrict__ l_all,
                     float* __restrict__ m_all, int n_q, int n_kv, float scale, bool causal) {
  constexpr int Bc = Tiles<d>::Bc, Br = Tiles<d>::Br, ld = Tiles<d>::ld;
  // A thread's slice: rows warp + 32·t of the tile, columns lane + 32·n of S_ij and of O_i.
  constexpr int kRows = (Br + kWarps - 1) / kWarps, kSCols = (Bc + kWarpSize - 1) / kWarpSize, kOCols = d / kWarpSize;
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int Tr = (n_q + Br - 1) / Br;  // T_r query tiles
  const int Tc = (n_kv + Bc - 1) / Bc;  // T_c K/V tiles

  // This block's head: Q, O: (N_q, d); K, V: (N_kv, d); L: (N_q) in global memory.
  const size_t bh = blockIdx.x;
  const auto Q = Q_all + bh * n_q * d;
  const auto K = K_all + bh * n_kv * d;
  const auto V = V_all + bh * n_kv * d;
  const auto O = O_all + bh * n_q * d;
  const auto l = l_all + bh * n_q;  // l, m: (N_q), Algorithm 1's running sums and maxima
  const auto m = m_all + bh * n_q;
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
  float keep[kRows], add[kRows];  // the two line-12 factors of the warp's rows
  //! [registers]

  // Line 2: O = 0, l = 0, m = −∞ in global memory.
  for (int e = tid; e < n_q * d; e += kThreads) O[e] = 0.0f;
  for (int r = tid; r < n_q; r += kThreads) {
    l[r] = 0.0f;
    m[r] = -INFINITY;
  }
  __syncthreads();  // the block's own global writes are visible to all its threads after a barrier

  //! [algorithm 1]
  for (int j = 0; j < Tc; ++j) {  // line 5: K/V tiles, outer loop
    const int kv0 = j * Bc, cols = min(Bc, n_kv - kv0);  // the last tile may be short
    load_tile<d>(Kj, K, kv0, Bc, n_kv);  // line 6: load K_j, V_j from HBM to SRAM
    load_tile<d>(Vj, V, kv0, Bc, n_kv);

    for (int i = 0; i < Tr; ++i) {  // line 7: Q tiles, inner loop
      const int q0 = i * Br, rows = min(Br, n_q - q0);
      // Line 8: load Q_i from HBM to SRAM, and the warp's rows of O_i, l_i, m_i to registers.
      load_tile<d>(Qi, Q, q0, Br, n_q);
#pragma unroll
      for (int t = 0; t < kRows; ++t) {
        const int r = warp + kWarps * t;  // r >= rows: a row past the tile, never stored
#pragma unroll
        for (int n = 0; n < kOCols; ++n) Oi[t][n] = r < rows ? O[size_t(q0 + r) * d + lane + kWarpSize * n] : 0.0f;
        li[t] = r < rows ? l[q0 + r] : 0.0f;
        mi[t] = r < rows ? m[q0 + r] : -INFINITY;
      }
      __syncthreads();  // the tiles are complete before anyone reads them

      // Line 9: S_ij = scale · Q_i K_jᵀ, a warp per row: its lanes split the row's
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

      // Lines 10–11, one warp per row: m̃_ij = rowmax(S_ij), P̃_ij = exp(S_ij − m̃_ij),
      // l̃_ij = rowsum(P̃_ij); m_i^new, l_i^new; and the two line-12 factors.
#pragma unroll
      for (int t = 0; t < kRows; ++t) {
        float m_tilde = -INFINITY;
#pragma unroll
        for (int n = 0; n < kSCols; ++n) m_tilde = fmaxf(m_tilde, Sij[t][n]);
        m_tilde = warp_max(m_tilde);
        // A causal row can be fully hidden in this tile (m̃_ij = −∞): its P̃ is 0.
        // (Every row sees key 0 in tile j = 0, so m_i is finite from then on.)
        float l_tilde = 0.0f;
#pragma unroll
        for (int n = 0; n < kSCols; ++n) {
          const float p = m_tilde == -INFINITY ? 0.0f : expf(Sij[t][n] - m_tilde);
          Sij[t][n] = p;
          l_tilde += p;
        }
        l_tilde = warp_sum(l_tilde);
        {  // in every lane: each keeps the row's m_i and l_i
          const float m_new = fmaxf(mi[t], m_tilde);
          const float alpha = expf(mi[t] - m_new);  // rescales the old
          const float beta = expf(m_tilde - m_new);  // rescales the new
          const float l_new = alpha * li[t] + beta * l_tilde;
          // Line 12's diagonal factors, formed first: a row with nothing new in
          // this tile gets exactly 1 and 0, so its O_i is not rounded again.
          keep[t] = alpha * li[t] / l_new;
          add[t] = beta / l_new;
          mi[t] = m_new;
          li[t] = l_new;
        }
      }

      // Line 12: O_i ← keep · O_i + add · P̃_ij V_j; write O_i back to HBM. A warp
      // per row again: its lanes split the row's d columns. P̃_ij[r, c] is in lane
      // c mod 32: a shuffle hands it to every lane, for all of its row's columns.
#pragma unroll
      for (int t = 0; t < kRows; ++t) {
        const int r = warp + kWarps * t;
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
        for (int n = 0; n < kOCols; ++n) {
          Oi[t][n] = keep[t] * Oi[t][n] + add[t] * pv[n];
          if (r < rows) O[size_t(q0 + r) * d + lane + kWarpSize * n] = Oi[t][n];
        }
        // Line 13: write l_i^new, m_i^new back to HBM.
        if (r < rows && lane == 0) {
          l[q0 + r] = li[t];
          m[q0 + r] = mi[t];
        }
      }
      // Faster threads would otherwise load the next tiles over ones that slower
      // threads still read.
      __syncthreads();
    }
  }
  //! [algorithm 1]

  //! [logsumexp]
  // L = m + log(l), kept for the backward pass. The barrier above made every
  // thread's last write of l and m visible.
  for (int r = tid; r < n_q; r += kThreads) L[r] = m[r] + logf(l[r]);
  //! [logsumexp]
}
//! [kernel]

//! [launch]
/// Launches the kernel for head dimension d: one block of kThreads threads per
/// (batch, head), the shared memory of Tiles<d> (raised above the default 48 KB).
/// The workspace holds l and m: (B, H, N_q) each, in global memory ("HBM").
template <int d>
void launch(const common::DeviceArgs& a) {
  const common::Shape& shape = a.shape;
  float* l = static_cast<float*>(a.workspace);
  float* m = l + shape.lse_elements();
  const dim3 grid(unsigned(shape.batch_heads())), block(kThreads);
  const size_t shared_bytes = Tiles<d>::smem_bytes;
  common::cuda::allow_shared_memory(attention_kernel<d>, shared_bytes);
  attention_kernel<d><<<grid, block, shared_bytes, common::cuda::stream_of(a)>>>(
      a.q_as<float>(), a.k_as<float>(), a.v_as<float>(), a.o_as<float>(), a.lse, l, m, int(shape.seq_q),
      int(shape.seq_kv), a.scale, a.causal);
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
  kernel.workspace_bytes = [](const common::Shape& s, bool) { return 2 * s.lse_elements() * int64_t(sizeof(float)); };
  return common::cuda::gpu_step(
      STEP05_SPILL ? "step05_spill" : "step05_cuda_registers",
      "Algorithm 1 on the GPU with S_ij, P~_ij, O_i, m_i, l_i in registers (Q_i, K_j, V_j in shared memory)",
      HeadDims::list(), kernel);
}

common::Result attention_forward(const common::Problem& problem, const common::Options& options) {
  return describe().forward(problem, options);
}

}  // namespace step05
