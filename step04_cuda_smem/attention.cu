/// \file step04_cuda_smem/attention.cu
/// \brief Step 4 — FlashAttention-1, Algorithm 1, on a real GPU, working set in shared memory.
///
/// This step extends step 3 (the same kernel on a simulator of CUDA) by running
/// it on an NVIDIA GPU:
///  1. The grid has one thread block per (batch, head), as in the paper's
///     FlashAttention-1; a block of 1024 threads walks the K/V tiles j (outer
///     loop) and the Q tiles i (inner loop) of its head. B·H = 64 heads give
///     at most one block to each of 64 SMs, so the block is as large as CUDA
///     allows: 32 warps on the SM to hide shared-memory and barrier latency.
///  2. Q_i, K_j, V_j, S_ij and O_i, m_i, l_i live in the block's shared memory
///     (the paper's SRAM); O, l and m live in global memory (HBM) and are read
///     and written back on every (j, i), exactly as lines 8 and 12–13 say.
///  3. The tile shapes are template parameters, derived at compile time from a
///     shared-memory budget M per head dimension d (one instantiation per d).
/// Why: this is the algorithm as published, on the hardware it was written for;
/// step 5 then moves the per-iteration working set into registers.
///
/// Run: build/bin/step04_cuda_smem --batch 4 --heads 16 --seq-q 4096 --seq-kv 4096 --head-dim 128 --repeat 10
///      build/bin/step04_cuda_smem --seq-q 1000 --seq-kv 257 --head-dim 64 --causal --check
#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "attention.hpp"
#include "common/cuda/cuda_check.cuh"
#include "common/cuda/device_buffer.cuh"
#include "common/cuda/device_problem.cuh"
#include "common/io_complexity.hpp"

namespace step04 {

namespace {

constexpr int kThreads = 1024;            // threads per block (so at most 64 registers each)
constexpr int kWarps = kThreads / 32;     // warps per block
constexpr int kWarpSize = 32;
constexpr int kSramFloats = 16384;        // M: 64 KiB of shared memory for K_j, V_j, Q_i, O_i
constexpr int kPad = 4;                   // floats of padding per row (see Tiles::ld)

//! [tiles]
/// The tiles of Algorithm 1 for head dimension d, from the budget M = kSramFloats:
/// B_c = ⌈M/4d⌉ rounded down to a whole number of warps (a warp computes one
/// 32-wide row segment of S_ij), B_r = min(B_c, d), as in line 1 of the paper.
template <int d>
struct Tiles {
  static_assert(d % 32 == 0, "d must be a multiple of 32 (a warp spans d/4 float4 columns)");
  static constexpr int Bc = common::ceil_div(kSramFloats, 4 * d) / kWarpSize * kWarpSize;
  static constexpr int Br = Bc < d ? Bc : d;
  static_assert(Bc >= kWarpSize && Bc % kWarpSize == 0, "B_c must be a whole number of warps");
  /// Row stride of Q_i, K_j, V_j, O_i in shared memory: d + 4 floats, so that the
  /// float4 rows that the 32 lanes of a warp read start in different banks.
  static constexpr int ld = d + kPad;
  /// Shared memory: K_j, V_j (B_c, ld); Q_i, O_i (B_r, ld); S_ij (B_r, B_c);
  /// m_i, l_i, m_i^new, l_i^new and the two line-12 factors (B_r) each.
  static constexpr size_t smem_floats = size_t(2) * Bc * ld + size_t(2) * Br * ld + size_t(Br) * Bc + 6 * Br;
  static constexpr size_t smem_bytes = smem_floats * sizeof(float);
};
//! [tiles]

__device__ float warp_max(float x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

__device__ float warp_sum(float x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

/// Algorithm 1 for one (batch, head) per block. Q, K, V, O, L as in the
/// contract; l and m are (B, H, N_q) working arrays in global memory.
template <int d>
__global__ void __launch_bounds__(kThreads, 1)  // one block per SM: all 64 registers a thread may have
    attention_kernel(const float* __restrict__ Q_all, const float* __restrict__ K_all,
                     const float* __restrict__ V_all, float* __restrict__ O_all, float* __restrict__ l_all,
                     float* __restrict__ m_all, float* __restrict__ L_all, int n_q, int n_kv, float scale,
                     bool causal) {
  using T = Tiles<d>;
  constexpr int Bc = T::Bc, Br = T::Br, ld = T::ld, d4 = d / 4;
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int Tc = (n_kv + Bc - 1) / Bc, Tr = (n_q + Br - 1) / Br;

  // This block's head: Q, O: (N_q, d); K, V: (N_kv, d); l, m, L: (N_q) in global memory.
  const size_t bh = blockIdx.x;
  const float* Q = Q_all + bh * n_q * d;
  const float* K = K_all + bh * n_kv * d;
  const float* V = V_all + bh * n_kv * d;
  float* O = O_all + bh * n_q * d;
  float* l = l_all + bh * n_q;
  float* m = m_all + bh * n_q;
  float* L = L_all + bh * n_q;

  //! [shared memory]
  extern __shared__ float4 smem4[];  // float4: 16-byte alignment for the tiles
  float* Kj = reinterpret_cast<float*>(smem4);  // K_j: (B_c, d), row stride ld, in shared memory
  float* Vj = Kj + Bc * ld;                     // V_j: (B_c, d), row stride ld
  float* Qi = Vj + Bc * ld;                     // Q_i: (B_r, d), row stride ld
  float* Oi = Qi + Br * ld;                     // O_i: (B_r, d), row stride ld
  float* Sij = Oi + Br * ld;                    // S_ij, then P̃_ij in place: (B_r, B_c)
  float* mi = Sij + Br * Bc;                    // m_i: (B_r)
  float* li = mi + Br;                          // l_i: (B_r)
  float* mi_new = li + Br;                      // m_i^new: (B_r)
  float* li_new = mi_new + Br;                  // l_i^new: (B_r)
  float* keep = li_new + Br;                    // diag(l_i^new)⁻¹ diag(l_i) e^(m_i − m_i^new): (B_r)
  float* add = keep + Br;                       // diag(l_i^new)⁻¹ e^(m̃_ij − m_i^new): (B_r)
  //! [shared memory]

  // Line 2: O = 0, l = 0, m = −∞ in global memory.
  for (int e = tid; e < n_q * d4; e += kThreads) reinterpret_cast<float4*>(O)[e] = make_float4(0, 0, 0, 0);
  for (int r = tid; r < n_q; r += kThreads) {
    l[r] = 0.0f;
    m[r] = -INFINITY;
  }
  __syncthreads();  // the block's own global writes are visible to all its threads after a barrier

  //! [algorithm 1]
  for (int j = 0; j < Tc; ++j) {  // line 5: K/V tiles, outer loop
    const int kv0 = j * Bc, cols = min(Bc, n_kv - kv0);  // the last tile may be short
    // Line 6: load K_j, V_j from HBM to SRAM. Rows past the end are zero, so the
    // fixed-length loops below multiply zeros there, never stale values.
    for (int e = tid; e < Bc * d4; e += kThreads) {
      const int c = e / d4, k4 = e % d4;
      const bool inside = c < cols;
      const float4 zero = make_float4(0, 0, 0, 0);
      reinterpret_cast<float4*>(Kj + c * ld)[k4] = inside ? reinterpret_cast<const float4*>(K + size_t(kv0 + c) * d)[k4] : zero;
      reinterpret_cast<float4*>(Vj + c * ld)[k4] = inside ? reinterpret_cast<const float4*>(V + size_t(kv0 + c) * d)[k4] : zero;
    }

    for (int i = 0; i < Tr; ++i) {  // line 7: Q tiles, inner loop
      const int q0 = i * Br, rows = min(Br, n_q - q0);
      // Line 8: load Q_i, O_i, l_i, m_i from HBM to SRAM.
      for (int e = tid; e < rows * d4; e += kThreads) {
        const int r = e / d4, k4 = e % d4;
        reinterpret_cast<float4*>(Qi + r * ld)[k4] = reinterpret_cast<const float4*>(Q + size_t(q0 + r) * d)[k4];
        reinterpret_cast<float4*>(Oi + r * ld)[k4] = reinterpret_cast<const float4*>(O + size_t(q0 + r) * d)[k4];
      }
      for (int r = tid; r < rows; r += kThreads) {
        li[r] = l[q0 + r];
        mi[r] = m[q0 + r];
      }
      __syncthreads();  // K_j, V_j, Q_i, O_i, l_i, m_i complete before anyone reads them

      // Line 9: S_ij = scale · Q_i K_jᵀ. A warp computes 32 neighbouring columns
      // of one row: Q_i's row is a broadcast, K_j's rows are 32 different rows.
      // Hidden entries (past N_kv, or above the causal diagonal) are −∞.
      for (int e = tid; e < Br * Bc; e += kThreads) {
        const int r = e / Bc, c = e % Bc;
        float s = -INFINITY;
        if (r < rows && c < cols && !(causal && kv0 + c > q0 + r)) {
          const float4* q = reinterpret_cast<const float4*>(Qi + r * ld);
          const float4* k = reinterpret_cast<const float4*>(Kj + c * ld);
          float dot = 0.0f;
#pragma unroll
          for (int k4 = 0; k4 < d4; ++k4) {
            const float4 a = q[k4], b = k[k4];
            dot = fmaf(a.x, b.x, dot);
            dot = fmaf(a.y, b.y, dot);
            dot = fmaf(a.z, b.z, dot);
            dot = fmaf(a.w, b.w, dot);
          }
          s = scale * dot;
        }
        Sij[r * Bc + c] = s;
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
          const float alpha = expf(mi[r] - m_new);   // rescales the old
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

      // Line 12: O_i ← keep · O_i + add · P̃_ij V_j; write O_i back to HBM. A
      // thread owns 4 neighbouring columns of one row of O_i (one float4).
      for (int e = tid; e < rows * d4; e += kThreads) {
        const int r = e / d4, k4 = e % d4;
        float4 pv = make_float4(0, 0, 0, 0);  // (P̃_ij V_j)[r, 4·k4 .. 4·k4+3]
#pragma unroll 8
        for (int c = 0; c < Bc; ++c) {
          const float p = Sij[r * Bc + c];
          const float4 v = reinterpret_cast<const float4*>(Vj + c * ld)[k4];
          pv.x = fmaf(p, v.x, pv.x);
          pv.y = fmaf(p, v.y, pv.y);
          pv.z = fmaf(p, v.z, pv.z);
          pv.w = fmaf(p, v.w, pv.w);
        }
        float4& o = reinterpret_cast<float4*>(Oi + r * ld)[k4];
        o.x = keep[r] * o.x + add[r] * pv.x;
        o.y = keep[r] * o.y + add[r] * pv.y;
        o.z = keep[r] * o.z + add[r] * pv.z;
        o.w = keep[r] * o.w + add[r] * pv.w;
        reinterpret_cast<float4*>(O + size_t(q0 + r) * d)[k4] = o;
      }
      // Line 13: write l_i^new, m_i^new back to HBM.
      for (int r = tid; r < rows; r += kThreads) {
        l[q0 + r] = li_new[r];
        m[q0 + r] = mi_new[r];
      }
      // Faster threads would otherwise load the next Q_i, O_i (or, after the
      // last i, the next K_j, V_j) over tiles that slower threads still read.
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

//! [launch]
/// Launches the kernel for head dimension d: one block per (batch, head), the
/// shared memory of Tiles<d>, raised above the default 48 KB where needed.
template <int d>
void launch(const common::Problem& problem, common::cuda::DeviceProblem& dev, float* l, float* m) {
  using T = Tiles<d>;
  const common::Shape& s = problem.shape;
  CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<d>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(T::smem_bytes)));
  attention_kernel<d><<<static_cast<unsigned>(s.batch_heads()), kThreads, T::smem_bytes>>>(
      dev.q.data(), dev.k.data(), dev.v.data(), dev.o.data(), l, m, dev.lse.data(), static_cast<int>(s.seq_q),
      static_cast<int>(s.seq_kv), problem.scale, problem.causal);
  CUDA_CHECK_LAUNCH();
}
//! [launch]

/// The launcher for head dimension d, chosen at run time from the compiled set.
using Launcher = void (*)(const common::Problem&, common::cuda::DeviceProblem&, float*, float*);

Launcher launcher_for(int64_t d) {
  switch (d) {
    case 32: return launch<32>;
    case 64: return launch<64>;
    case 96: return launch<96>;
    case 128: return launch<128>;
    default: return nullptr;  // unreachable after require_head_dim
  }
}

/// B_c, B_r and the shared-memory bytes of Tiles<d>, for the report.
template <int d>
std::vector<std::pair<std::string, double>> tiles_report() {
  return {{"B_c", double(Tiles<d>::Bc)}, {"B_r", double(Tiles<d>::Br)}, {"smem_bytes", double(Tiles<d>::smem_bytes)}};
}

std::vector<std::pair<std::string, double>> tiles_report_for(int64_t d) {
  switch (d) {
    case 32: return tiles_report<32>();
    case 64: return tiles_report<64>();
    case 96: return tiles_report<96>();
    default: return tiles_report<128>();
  }
}

}  // namespace

common::Result attention_forward(const common::Problem& problem, const common::Options& options) {
  const std::string name = "step04_cuda_smem";
  common::validate(problem);
  common::require_head_dim(problem.shape.head_dim, kHeadDims, name);
  common::cuda::require_gpu(name);
  const common::Shape& s = problem.shape;

  // l and m: (B, H, N_q) working arrays in global memory ("HBM"), counted.
  using Buffer = common::cuda::DeviceBuffer<float>;
  common::cuda::DeviceProblem dev(problem, 2 * s.lse_elements() * int64_t(sizeof(float)), name);
  Buffer l(static_cast<size_t>(s.lse_elements()), Buffer::Counted::yes);
  Buffer m(static_cast<size_t>(s.lse_elements()), Buffer::Counted::yes);

  const Launcher launcher = launcher_for(s.head_dim);
  common::Result result = common::allocate_result(s);
  result.kernel_ms = common::cuda::run_and_time(options, [&] { launcher(problem, dev, l.data(), m.data()); });
  dev.download(result);
  result.extra = tiles_report_for(s.head_dim);
  return result;
}

common::StepInfo describe() {
  common::StepInfo info;
  info.name = "step04_cuda_smem";
  info.title = "FlashAttention-1 Algorithm 1 on the GPU (one block per head; tiles, O_i, m_i, l_i in shared memory)";
  info.forward = [](const common::Problem& p, const common::Options& o) { return attention_forward(p, o); };
  info.head_dims = kHeadDims;
  info.needs_gpu = true;
  return info;
}

}  // namespace step04
