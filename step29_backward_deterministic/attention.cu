/// \file step29_backward_deterministic/attention.cu
/// \brief Step 8's forward, fp32, in a backward step (the backward is in backward.cu).
///
/// Step 8 improves on step 7 by overlapping memory traffic with arithmetic:
///  1. K_j and V_j arrive by cp.async into two shared-memory stages: tile j + 1
///     is in flight while tile j is used, and the copies bypass the registers.
///  2. P̃_ij reaches the lanes that multiply it with V_j through shared memory
///     (one float4 per 4 columns) instead of one shuffle per column and row.
///  3. Fewer instructions per tile: only tiles that cross the diagonal or the end
///     of K are masked, and each lane keeps its own part of l_i, the 8 parts of a
///     row added once at the end instead of once per tile.
/// Why: in step 7 every warp waits at a barrier for each K_j, V_j to arrive, and
/// spends a shuffle on every 4 · d/8 FMAs of P̃_ij V_j.
#include <cuda_runtime.h>

#include <cmath>

#include "attention.hpp"
#include "common/cuda/cp_async.cuh"
#include "common/cuda/cuda_check.cuh"
#include "common/cuda/gpu_step.cuh"
#include "common/cuda/warp.cuh"

namespace step29 {

namespace {

constexpr int kThreads = 128;  // threads per block: 4 warps of 16 rows each
constexpr int kWarps = kThreads / 32;  // warps per block
constexpr int kWarpSize = 32;
constexpr int kPad = 4;  // ld = d + 4: the float4s 8 lanes read from 8 rows start in different banks
constexpr int kStages = 2;  // K_j, V_j buffers: tile j + 1 loads while tile j is used
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
  static constexpr int ld_p = Bc + 2 * kPad;  // row stride of P̃_ij: the 4 row lanes' rows start 8 banks apart
  /// Shared memory: kStages × K_j, V_j (B_c, ld); Q_i (B_r, ld); P̃_ij (B_r, ld_p).
  static constexpr size_t smem_bytes = (size_t(2) * kStages * Bc * ld + size_t(Br) * ld + size_t(Br) * ld_p) * 4;
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
/// Starts loading rows row0 … row0 + B − 1 of an (n_rows, d) matrix in HBM into a
/// (B, ld) tile in SRAM, 16 bytes per cp.async: the copies land in the background,
/// without passing through registers. Rows past n_rows become zeros.
template <int d>
__device__ void load_tile(float* tile, const float* matrix, int row0, int B, int n_rows) {
  constexpr int ld = Tiles<d>::ld;
#pragma unroll
  for (int e = threadIdx.x; e < B * d / 4; e += kThreads) {
    const int r = e / (d / 4), k = 4 * (e % (d / 4));
    const bool inside = row0 + r < n_rows;  // a zero-filling copy reads nothing, but needs a valid address
    common::cuda::cp_async_16(tile + r * ld + k, matrix + size_t(inside ? row0 + r : 0) * d + k, inside);
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
  constexpr int Bc = Tiles<d>::Bc, Br = Tiles<d>::Br, ld = Tiles<d>::ld, ld_p = Tiles<d>::ld_p;
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
  auto Kbuf = smem;  // kStages × K_j: (B_c, d), row stride ld, in shared memory
  auto Vbuf = Kbuf + kStages * Bc * ld;  // kStages × V_j: (B_c, d), row stride ld
  auto Qi = Vbuf + kStages * Bc * ld;  // Q_i: (B_r, d), row stride ld
  auto Pij = Qi + Br * ld;  // P̃_ij: (B_r, B_c), row stride ld_p; each warp its own rows
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
    // Lines 4–5: load Q_i from HBM to SRAM, with K_0, V_0 (stage 0) in one group of
    // copies; O_i = 0, l_i = 0, m_i = −∞ in registers.
    load_tile<d>(Qi, Q, q0, Br, n_q);
    load_tile<d>(Kbuf, K, 0, Bc, n_kv);
    load_tile<d>(Vbuf, V, 0, Bc, n_kv);
    common::cuda::cp_async_commit();
#pragma unroll
    for (int t = 0; t < kRows; ++t) {
#pragma unroll
      for (int n = 0; n < kOCols; ++n) Oi[t][n] = make_float4(0, 0, 0, 0);
      li[t] = 0.0f;
      mi[t] = -INFINITY;
    }
    for (int j = 0; j < Tc; ++j) {  // line 6: K/V tiles, the inner loop
      const int kv0 = j * Bc, cols = min(Bc, n_kv - kv0);  // the last tile may be short
      const float* Kj = Kbuf + (j % kStages) * Bc * ld;  // K_j, V_j: this tile's stage
      const float* Vj = Vbuf + (j % kStages) * Bc * ld;
      if (j + 1 < Tc) {  // line 7 for tile j + 1, into the stage that tile j − 1 is done with
        load_tile<d>(Kbuf + ((j + 1) % kStages) * Bc * ld, K, kv0 + Bc, Bc, n_kv);
        load_tile<d>(Vbuf + ((j + 1) % kStages) * Bc * ld, V, kv0 + Bc, Bc, n_kv);
        common::cuda::cp_async_commit();
        common::cuda::cp_async_wait<1>();  // all groups but the newest have landed: tile j
      } else {
        common::cuda::cp_async_wait<0>();
      }
      __syncthreads();  // every thread's copies of tile j have landed before anyone reads them

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
      // Hidden entries (past N_kv, or above the causal diagonal) are −∞. Only a tile
      // that crosses the diagonal or the end of K has any; rows past N_q are never stored.
      const bool masked = kv0 + Bc > n_kv || (causal && kv0 + Bc - 1 > q0);
#pragma unroll
      for (int t = 0; t < kRows; ++t) {
#pragma unroll
        for (int n = 0; n < kSCols; ++n) {
          const int r = row(t), c = col_lane + kColLanes * n;
          const bool visible = !masked || (c < cols && !(causal && kv0 + c > q0 + r));
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
          Pij[row(t) * ld_p + col_lane + kColLanes * n] = p;
          l_tilde += p;
        }
        {  // in every lane: each keeps the row's m_i and its own part of l_i
          const float alpha = expf(mi[t] - m_new);  // FA2's only rescale; 0 in tile 0 (m_i = −∞)
          li[t] = alpha * li[t] + l_tilde;
          mi[t] = m_new;
#pragma unroll
          for (int n = 0; n < kOCols; ++n) Oi[t][n] = scale4(alpha, Oi[t][n]);
        }
      }

      // The P̃_ij values a lane needs were written by the other lanes of its row:
      // they must have landed in shared memory (only this warp's rows).
      __syncwarp();

      // Line 10: O_i ← O_i + P̃_ij V_j, no division, register-tiled. A row's P̃_ij comes
      // from shared memory, 4 columns per float4, and each float4 of V_j feeds 4 rows.
#pragma unroll 2
      for (int c4 = 0; c4 < Bc; c4 += 4) {
        float4 p[kRows];
#pragma unroll
        for (int t = 0; t < kRows; ++t) p[t] = *reinterpret_cast<const float4*>(Pij + row(t) * ld_p + c4);
#pragma unroll
        for (int c = 0; c < 4; ++c) {
#pragma unroll
          for (int n = 0; n < kOCols; ++n) {
            const float4 v = reinterpret_cast<const float4*>(Vj + (c4 + c) * ld)[col_lane + kColLanes * n];
#pragma unroll
            for (int t = 0; t < kRows; ++t) Oi[t][n] = fma4(common::cuda::component(p[t], c), v, Oi[t][n]);
          }
        }
      }
      // Iteration j + 1 loads tile j + 2 over this stage and rewrites P̃_ij:
      // every warp must have finished reading both.
      __syncthreads();
    }
    // Lines 12–14: O_i ← diag(l_i)⁻¹ O_i and L_i = m_i + log l_i, each written to HBM once.
#pragma unroll
    for (int t = 0; t < kRows; ++t) {
      const int r = row(t);
      const float l_row = row_sum(li[t]);  // the 8 lanes' parts of l_i, added once
      if (r >= rows) continue;  // a row past the tile: never stored
#pragma unroll
      for (int n = 0; n < kOCols; ++n) {
        reinterpret_cast<float4*>(O + size_t(q0 + r) * d)[col_lane + kColLanes * n] = scale4(1.0f / l_row, Oi[t][n]);
      }
      if (col_lane == 0) L[q0 + r] = mi[t] + logf(l_row);
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
  kernel.launch_backward = launch_backward;
  kernel.backward_workspace_bytes = backward_workspace_bytes;
  kernel.backward_resources = backward_resources;
  common::StepInfo info = common::cuda::gpu_step(
      "step29_backward_deterministic", "a deterministic dQ: a second kernel sums dQ_i over the K/V tiles in order",
      HeadDims::list(), kernel);
  info.extends = "step08_fa2_pipelined";
  return info;
}

common::Result attention_forward(const common::Problem& problem, const common::Options& options) {
  return describe().forward(problem, options);
}

}  // namespace step29
