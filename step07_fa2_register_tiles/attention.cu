/// \file step07_fa2_register_tiles/attention.cu
/// \brief Step 7 — FlashAttention-2 with register tiles: each loaded value feeds many FMAs.
///
/// This step extends step 6 by reusing what a thread loads. In step 6 each entry
/// of S_ij is its own dot product: two shared-memory loads per FMA. Now a warp is
/// 4 × 8 lanes and a thread owns 4 rows × B_c/8 columns: per float4 of d it loads
/// 4 float4s of Q_i, B_c/8 of K_j, and does 4 · B_c/8 · 4 FMAs; P̃_ij V_j likewise.
/// The tiles come from these registers now: B_r = 64, B_c = 64 (32 above d = 64).
///
/// Run: build/bin/step07_fa2_register_tiles --batch 4 --heads 16 --seq-q 4096 --seq-kv 4096 --head-dim 128 --repeat 20
///      build/bin/step07_fa2_register_tiles --seq-q 1000 --seq-kv 333 --head-dim 64 --causal --check
#include <cuda_runtime.h>

#include <cmath>

#include "attention.hpp"
#include "common/cuda/cuda_check.cuh"
#include "common/cuda/gpu_step.cuh"
#include "common/cuda/warp.cuh"

namespace step07 {

namespace {

constexpr int kThreads = 128;  // threads per block: 4 warps of 16 rows each
constexpr int kWarps = kThreads / 32;  // warps per block
constexpr int kWarpSize = 32;
constexpr int kPad = 4;  // ld = d + 4: the float4s 8 lanes read from 8 rows start in different banks
using HeadDims = common::cuda::HeadDims<32, 64, 96, 128>;  // one kernel instantiation each

//! [tiles]
// A warp is 4 × 8 lanes: lane = row_lane · 8 + col_lane. The 8 lanes of a row
// split its columns; a thread owns 4 rows.
constexpr int kRowLanes = 4, kColLanes = 8, kRowsPerThread = 4;

/// The tiles for head dimension d, from the registers: a thread holds 4 × B_c/8 of
/// S_ij and 4 × d/8 of O_i, so B_c = 64 (32 above d = 64) and B_r = 4 · 4 · 4 = 64.
template <int d>
struct Tiles {
  static constexpr int Bc = d <= 64 ? 64 : 32;
  static constexpr int Br = kWarps * kRowLanes * kRowsPerThread;
  static constexpr int ld = d + kPad;  // row stride of Q_i, K_j, V_j in shared memory
  /// Shared memory: K_j, V_j (B_c, ld); Q_i (B_r, ld).
  static constexpr size_t smem_bytes = (size_t(2) * Bc * ld + size_t(Br) * ld) * 4;
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

using common::cuda::dot4;
using common::cuda::fma4;
using common::cuda::scale4;

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
  // A thread's slice: rows row(t) of the tile, columns col_lane + 8·n of S_ij, float4s 4·col_lane + 32·n of O_i.
  constexpr int kRows = kRowsPerThread, kSCols = Bc / kColLanes, kOCols = d / (4 * kColLanes);
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int row_lane = lane / kColLanes, col_lane = lane % kColLanes;
  const auto row = [&](int t) { return warp * kRowLanes * kRows + t * kRowLanes + row_lane; };
  const int Tr = (n_q + Br - 1) / Br;  // T_r query tiles

  // This block's head: Q, O: (N_q, d); K, V: (N_kv, d); L: (N_q) in global memory.
  const size_t bh = blockIdx.x % batch_heads;
  const auto Q = Q_all + bh * n_q * d;
  const auto K = K_all + bh * n_kv * d;
  const auto V = V_all + bh * n_kv * d;
  const auto O = O_all + bh * n_q * d;
  const auto L = L_all + bh * n_q;

  //! [shared memory]
  extern __shared__ __align__(16) float smem[];  // the block's dynamic shared memory, 16-byte aligned
  auto Kj = smem;  // K_j: (B_c, d), row stride ld, in shared memory
  auto Vj = Kj + Bc * ld;  // V_j: (B_c, d), row stride ld
  auto Qi = Vj + Bc * ld;  // Q_i: (B_r, d), row stride ld
  //! [shared memory]
  //! [registers]
  float4 Oi[kRows][kOCols];  // O_i: this thread's rows row(t), float4s 4·col_lane + 32·n, in registers
  float Sij[kRows][kSCols];  // S_ij, then P̃_ij in place: rows row(t), columns col_lane + 8·n
  float mi[kRows], li[kRows];  // m_i, l_i of the thread's rows (the same in the row's 8 lanes)
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
      for (int n = 0; n < kOCols; ++n) Oi[t][n] = make_float4(0, 0, 0, 0);
      li[t] = 0.0f;
      mi[t] = -INFINITY;
    }
    for (int j = 0; j < Tc; ++j) {  // line 6: K/V tiles, the inner loop
      const int kv0 = j * Bc, cols = min(Bc, n_kv - kv0);  // the last tile may be short
      load_tile<d>(Kj, K, kv0, Bc, n_kv);  // line 7: load K_j, V_j from HBM to SRAM
      load_tile<d>(Vj, V, kv0, Bc, n_kv);
      __syncthreads();  // the tiles are complete before anyone reads them

      // Line 8: S_ij = scale · Q_i K_jᵀ, register-tiled: per float4 step of d, a thread
      // loads 4 float4s of Q_i and B_c/8 of K_j, and each feeds B_c/8 or 4 dot products.
#pragma unroll
      for (int t = 0; t < kRows; ++t) {
#pragma unroll
        for (int n = 0; n < kSCols; ++n) Sij[t][n] = 0.0f;
      }
#pragma unroll 4
      for (int k4 = 0; k4 < d / 4; ++k4) {
        float4 q[kRows];
#pragma unroll
        for (int t = 0; t < kRows; ++t) q[t] = reinterpret_cast<const float4*>(Qi + row(t) * ld)[k4];
#pragma unroll
        for (int n = 0; n < kSCols; ++n) {
          const float4 k = reinterpret_cast<const float4*>(Kj + (col_lane + kColLanes * n) * ld)[k4];
#pragma unroll
          for (int t = 0; t < kRows; ++t) Sij[t][n] = dot4(q[t], k, Sij[t][n]);
        }
      }
      // Hidden entries (past N_kv or N_q, or above the causal diagonal) are −∞.
#pragma unroll
      for (int t = 0; t < kRows; ++t) {
#pragma unroll
        for (int n = 0; n < kSCols; ++n) {
          const int r = row(t), c = col_lane + kColLanes * n;
          const bool visible = r < rows && c < cols && !(causal && kv0 + c > q0 + r);
          Sij[t][n] = visible ? scale * Sij[t][n] : -INFINITY;
        }
      }

      // Line 9, 8 lanes per row: m_new = max(m_i, rowmax(S_ij)), P̃_ij = exp(S_ij − m_new),
      // l_i ← e^(m_i − m_new) l_i + rowsum(P̃_ij); and O_i's rescale by e^(m_i − m_new).
#pragma unroll
      for (int t = 0; t < kRows; ++t) {
        float m_tilde = -INFINITY;
#pragma unroll
        for (int n = 0; n < kSCols; ++n) m_tilde = fmaxf(m_tilde, Sij[t][n]);
        m_tilde = row_max(m_tilde);
        // Every row sees key 0 in tile j = 0, so m_new is finite from then on.
        const float m_new = fmaxf(mi[t], m_tilde);
        float l_tilde = 0.0f;
#pragma unroll
        for (int n = 0; n < kSCols; ++n) {
          const float p = expf(Sij[t][n] - m_new);  // hidden entries: exp(−∞) = 0
          Sij[t][n] = p;
          l_tilde += p;
        }
        l_tilde = row_sum(l_tilde);
        {  // in every lane: each keeps the row's m_i and l_i
          const float alpha = expf(mi[t] - m_new);  // FA2's only rescale; 0 in tile 0 (m_i = −∞)
          li[t] = alpha * li[t] + l_tilde;
          mi[t] = m_new;
#pragma unroll
          for (int n = 0; n < kOCols; ++n) Oi[t][n] = scale4(alpha, Oi[t][n]);
        }
      }

      // Line 10: O_i ← O_i + P̃_ij V_j, no division, register-tiled: a shuffle hands each P̃_ij
      // to the 8 lanes of its row, and each float4 of V_j a thread loads feeds its 4 rows.
#pragma unroll
      for (int c = 0; c < Bc; ++c) {
        const int src = row_lane * kColLanes + c % kColLanes;  // P̃_ij[row(t), c] is Sij[t][c / 8] in this lane
        float p[kRows];
#pragma unroll
        for (int t = 0; t < kRows; ++t) p[t] = __shfl_sync(0xffffffffu, Sij[t][c / kColLanes], src);
#pragma unroll
        for (int n = 0; n < kOCols; ++n) {
          const float4 v = reinterpret_cast<const float4*>(Vj + c * ld)[col_lane + kColLanes * n];
#pragma unroll
          for (int t = 0; t < kRows; ++t) Oi[t][n] = fma4(p[t], v, Oi[t][n]);
        }
      }
      // Faster threads would otherwise load the next tiles over ones that slower
      // threads still read.
      __syncthreads();
    }
    // Lines 12–14: O_i ← diag(l_i)⁻¹ O_i and L_i = m_i + log l_i, each written to HBM once.
#pragma unroll
    for (int t = 0; t < kRows; ++t) {
      const int r = row(t);
      if (r >= rows) continue;  // a row past the tile: never stored
      float4* const O_row = reinterpret_cast<float4*>(O + size_t(q0 + r) * d);  // row r of O, as float4s
#pragma unroll
      for (int n = 0; n < kOCols; ++n) O_row[col_lane + kColLanes * n] = scale4(1.0f / li[t], Oi[t][n]);
      if (col_lane == 0) L[q0 + r] = mi[t] + logf(li[t]);
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
  return common::cuda::gpu_step("step07_fa2_register_tiles",
                                "FlashAttention-2 with register tiles: 4 rows x B_c/8 columns per thread, float4 loads",
                                HeadDims::list(), kernel);
}

common::Result attention_forward(const common::Problem& problem, const common::Options& options) {
  return describe().forward(problem, options);
}

}  // namespace step07
