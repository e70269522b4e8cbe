/// \file step04_cuda_smem/attention.cu
/// \brief Step 4 — FlashAttention-1, Algorithm 1, on a real GPU, working set in shared memory.
///
/// This step extends step 3 by running step 3's kernel, line for line, on an
/// NVIDIA GPU. Only what a real GPU needs changes: CUDA's qualifiers (plain
/// `const float* __restrict__` for the simulator's checked pointers, `extern
/// __shared__` for its arena), tiles fixed at compile time (one kernel per d),
/// 1024 threads per block (B·H = 64 heads give one block to each of 64 SMs, and
/// 32 warps hide latency), and CUDA's launch code, checked.
///
/// Run: build/bin/step04_cuda_smem --batch 4 --heads 16 --seq-q 4096 --seq-kv 4096 --head-dim 128 --repeat 10
///      build/bin/step04_cuda_smem --seq-q 1000 --seq-kv 257 --head-dim 64 --causal --check
#include <cuda_runtime.h>

#include <cmath>

#include "attention.hpp"
#include "common/cuda/cuda_check.cuh"
#include "common/cuda/gpu_step.cuh"

namespace step04 {

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
  static constexpr int ld = d + kPad;  // row stride of Q_i, K_j, V_j, O_i in shared memory
  /// Shared memory: K_j, V_j (B_c, ld); Q_i, O_i (B_r, ld); S_ij (B_r, B_c);
  /// m_i, l_i, m_i^new, l_i^new and the two line-12 factors (B_r) each.
  static constexpr size_t smem_bytes = (size_t(2) * Bc * ld + size_t(2) * Br * ld + size_t(Br) * Bc + 6 * Br) * 4;
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
__global__ void __launch_bounds__(kThreads, 1)  // 1 block per SM at least: up to 65536 / kThreads registers each
    attention_kernel(const float* __restrict__ Q_all, const float* __restrict__ K_all, const float* __restrict__ V_all,
                     float* __restrict__ O_all, float* __restrict__ L_all, float* __restrict__ l_all,
                     float* __restrict__ m_all, int n_q, int n_kv, float scale, bool causal) {
  constexpr int Bc = Tiles<d>::Bc, Br = Tiles<d>::Br, ld = Tiles<d>::ld;
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
  auto Oi = Qi + Br * ld;  // O_i: (B_r, d), row stride ld
  auto Sij = Oi + Br * ld;  // S_ij, then P̃_ij in place: (B_r, B_c)
  auto mi = Sij + Br * Bc;  // m_i: (B_r)
  auto li = mi + Br;  // l_i: (B_r)
  auto mi_new = li + Br;  // m_i^new: (B_r)
  auto li_new = mi_new + Br;  // l_i^new: (B_r)
  auto keep = li_new + Br;  // diag(l_i^new)⁻¹ diag(l_i) e^(m_i − m_i^new): (B_r)
  auto add = keep + Br;  // diag(l_i^new)⁻¹ e^(m̃_ij − m_i^new): (B_r)
  //! [shared memory]

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
      // Line 8: load Q_i, O_i, l_i, m_i from HBM to SRAM.
      load_tile<d>(Qi, Q, q0, Br, n_q);
      load_tile<d>(Oi, O, q0, Br, n_q);
      for (int r = tid; r < rows; r += kThreads) {
        li[r] = l[q0 + r];
        mi[r] = m[q0 + r];
      }
      __syncthreads();  // the tiles are complete before anyone reads them

      // Line 9: S_ij = scale · Q_i K_jᵀ, a warp per row: its lanes split the row's
      // columns, so a row of Q_i is shared and K_j's rows are 32 different rows.
      // Hidden entries (past N_kv or N_q, or above the causal diagonal) are −∞.
      for (int r = warp; r < Br; r += kWarps) {
        for (int c = lane; c < Bc; c += kWarpSize) {
          float s = -INFINITY;
          if (r < rows && c < cols && !(causal && kv0 + c > q0 + r)) {
            float dot = 0.0f;
            for (int k = 0; k < d; ++k) dot = fmaf(Qi[r * ld + k], Kj[c * ld + k], dot);
            s = scale * dot;
          }
          Sij[r * Bc + c] = s;
        }
      }
      __syncthreads();  // all of S_ij is written before a warp reduces a row of it

      // Lines 10–11, one warp per row: m̃_ij = rowmax(S_ij), P̃_ij = exp(S_ij − m̃_ij),
      // l̃_ij = rowsum(P̃_ij); m_i^new, l_i^new; and the two line-12 factors.
      for (int r = warp; r < rows; r += kWarps) {
        float m_tilde = -INFINITY;
        for (int c = lane; c < Bc; c += kWarpSize) m_tilde = fmaxf(m_tilde, Sij[r * Bc + c]);
        m_tilde = warp_max(m_tilde);
        // A causal row can be fully hidden in this tile (m̃_ij = −∞): its P̃ is 0.
        // (Every row sees key 0 in tile j = 0, so m_i is finite from then on.)
        float l_tilde = 0.0f;
        for (int c = lane; c < Bc; c += kWarpSize) {
          const float p = m_tilde == -INFINITY ? 0.0f : expf(Sij[r * Bc + c] - m_tilde);
          Sij[r * Bc + c] = p;
          l_tilde += p;
        }
        l_tilde = warp_sum(l_tilde);
        if (lane == 0) {
          const float m_new = fmaxf(mi[r], m_tilde);
          const float alpha = expf(mi[r] - m_new);  // rescales the old
          const float beta = expf(m_tilde - m_new);  // rescales the new
          const float l_new = alpha * li[r] + beta * l_tilde;
          mi_new[r] = m_new;
          li_new[r] = l_new;
          // Line 12's diagonal factors, formed first: a row with nothing new in
          // this tile gets exactly 1 and 0, so its O_i is not rounded again.
          keep[r] = alpha * li[r] / l_new;
          add[r] = beta / l_new;
        }
      }
      __syncthreads();  // P̃_ij and the factors are complete before line 12 reads them

      // Line 12: O_i ← keep · O_i + add · P̃_ij V_j; write O_i back to HBM. A warp
      // per row again: its lanes split the row's d columns.
      for (int r = warp; r < rows; r += kWarps) {
        for (int k = lane; k < d; k += kWarpSize) {
          float pv = 0.0f;  // (P̃_ij V_j)[r, k]
          for (int c = 0; c < Bc; ++c) {
            const float p = Sij[r * Bc + c];
            const float v = Vj[c * ld + k];
            pv = fmaf(p, v, pv);
          }
          const float o = keep[r] * Oi[r * ld + k] + add[r] * pv;
          Oi[r * ld + k] = o;
          O[size_t(q0 + r) * d + k] = o;
        }
      }
      // Line 13: write l_i^new, m_i^new back to HBM.
      for (int r = tid; r < rows; r += kThreads) {
        l[q0 + r] = li_new[r];
        m[q0 + r] = mi_new[r];
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
      "step04_cuda_smem",
      "FlashAttention-1 Algorithm 1 on the GPU (one block per head; tiles, O_i, m_i, l_i in shared memory)",
      HeadDims::list(), kernel);
}

common::Result attention_forward(const common::Problem& problem, const common::Options& options) {
  return describe().forward(problem, options);
}

}  // namespace step04
