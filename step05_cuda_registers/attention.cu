/// \file step05_cuda_registers/attention.cu
/// \brief Step 5 — FlashAttention-1, Algorithm 1, on the GPU, working set in registers.
///
/// This step extends step 4 by moving the per-iteration working set out of
/// shared memory and into registers:
///  1. Each thread owns a fixed slice of the tiles: kRowsPerThread rows of S_ij,
///     P̃_ij and O_i (B_c/8 columns of S, d/8 columns of O) and those rows' m_i
///     and l_i. The slices are arrays indexed only by compile-time constants
///     (fully unrolled loops), so the compiler keeps them in registers. Every
///     value a thread loads from shared memory feeds kRowsPerThread (or B_c/8)
///     rows' worth of FMAs, where step 4's one entry per thread fed one.
///  2. Only Q_i, K_j and V_j, which many threads read, stay in shared memory.
///     A row's max and sum, and the P̃_ij values a thread needs for P̃_ij V_j,
///     come from the 8 lanes that share the row, by warp shuffles.
///  3. The same kernel with the slice loops not unrolled (`kRegisters = false`)
///     indexes the slices at run time: they go to local memory, which is what a
///     register spill costs. Both are compiled; the benchmark runs both.
///  4. With S_ij off shared memory, the wait for the next Q_i from global memory
///     is the largest stall left: it is copied by cp.async while the current
///     Q_i's softmax and P̃_ij V_j run (its O_i, l_i, m_i are loaded into
///     registers at the top of the iteration and first used after S_ij).
/// Still Algorithm 1: O, l and m are read from and written back to global
/// memory on every (j, i); registers hold the working set within one (j, i).
///
/// Run: build/bin/step05_cuda_registers --batch 4 --heads 16 --seq-q 4096 --seq-kv 4096 --head-dim 128 --repeat 10
///      build/bin/step05_cuda_registers --seq-q 1000 --seq-kv 257 --head-dim 64 --causal --check
#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "attention.hpp"
#include "common/cuda/cp_async.cuh"
#include "common/cuda/cuda_check.cuh"
#include "common/cuda/device_buffer.cuh"
#include "common/cuda/device_problem.cuh"

namespace step05 {

namespace {

constexpr int kThreads = 256;             // threads per block
constexpr int kWarps = kThreads / 32;     // warps per block
constexpr int kWarpSize = 32;
constexpr int kPad = 4;                   // floats of padding per row (see Tiles::ld)

//! [mapping]
// A warp is 4 × 8 lanes: lane = row_lane · 8 + col_lane. Row r of a tile
// belongs to the 8 lanes of one row_lane; they split its columns.
constexpr int kRowLanes = 4;
constexpr int kColLanes = 8;
constexpr int kRowsPerThread = 4;  // rows of S_ij and O_i per thread

/// The tiles for head dimension d. B_r = 8 warps × 4 row lanes × 4 rows = 128;
/// B_c = 64, so a thread holds 4 × 8 of S_ij and 4 × d/8 of O_i (and of
/// P̃_ij V_j) in registers.
template <int d>
struct Tiles {
  static_assert(d % 32 == 0, "d must be a multiple of 32 (8 column lanes × one float4 per 32 columns)");
  static constexpr int Br = kWarps * kRowLanes * kRowsPerThread;
  static constexpr int Bc = 64;
  static constexpr int kSCols = Bc / kColLanes;   // S_ij columns per thread: cg + 8·n
  static constexpr int kOCols = d / (4 * kColLanes);  // float4s of O_i per thread: 4·cg + 32·n
  /// Row stride of Q_i, K_j, V_j in shared memory: d + 4 floats, so the float4s
  /// that the 8 column lanes read from 8 different rows start in different banks.
  static constexpr int ld = d + kPad;
  /// Shared memory: Q_i (B_r, ld); K_j, V_j (B_c, ld).
  static constexpr size_t smem_bytes = (size_t(Br) + 2 * size_t(Bc)) * ld * sizeof(float);
};

using common::cuda::cp_async_16;     // the cp.async helpers live in common/cuda/cp_async.cuh
using common::cuda::cp_async_commit;
using common::cuda::cp_async_wait;

//! [async copy]
/// Starts copying Q_i (rows q0 … q0 + B_r − 1 of Q: (N_q, d)) into Qi: (B_r, ld);
/// rows at or past N_q become zeros.
template <int d>
__device__ void load_Qi_async(float* Qi, const float* Q, int q0, int n_q) {
  constexpr int d4 = d / 4, ld = Tiles<d>::ld;
  for (int e = threadIdx.x; e < Tiles<d>::Br * d4; e += kThreads) {
    const int r = e / d4, k4 = e % d4;
    const bool inside = q0 + r < n_q;
    // A zero-filling copy reads nothing, but its address must still be a valid one.
    cp_async_16(Qi + r * ld + 4 * k4, Q + size_t(inside ? q0 + r : 0) * d + 4 * k4, inside);
  }
  cp_async_commit();
}
//! [async copy]
//! [mapping]

__device__ float row_max(float x) {  // over the 8 column lanes that share a row
  for (int offset = kColLanes / 2; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

__device__ float row_sum(float x) {
  for (int offset = kColLanes / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__device__ float4 fma4(float a, float4 b, float4 c) {
  return make_float4(fmaf(a, b.x, c.x), fmaf(a, b.y, c.y), fmaf(a, b.z, c.z), fmaf(a, b.w, c.w));
}

/// Algorithm 1 for one (batch, head) per block. `kRegisters` = true: the slice
/// loops are fully unrolled (registers); false: not unrolled (local memory).
template <int d, bool kRegisters>
__global__ void __launch_bounds__(kThreads)
    attention_kernel(const float* __restrict__ Q_all, const float* __restrict__ K_all,
                     const float* __restrict__ V_all, float* __restrict__ O_all, float* __restrict__ l_all,
                     float* __restrict__ m_all, float* __restrict__ L_all, int n_q, int n_kv, float scale,
                     bool causal) {
  using T = Tiles<d>;
  constexpr int Bc = T::Bc, Br = T::Br, ld = T::ld, d4 = d / 4, kSCols = T::kSCols, kOCols = T::kOCols;
  constexpr int TR = kRowsPerThread;
  // The one difference between the two variants: how far the loops over a
  // thread's slice are unrolled. Not unrolled, the slice index is a run-time
  // value, and a run-time index into an array forces it into local memory.
  constexpr int kUnroll = kRegisters ? 64 : 1;
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int rl = lane / kColLanes, cg = lane % kColLanes;  // row lane, column lane
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

  //! [registers]
  extern __shared__ float4 smem4[];  // float4: 16-byte alignment for the tiles
  float* Kj = reinterpret_cast<float*>(smem4);  // K_j: (B_c, d), row stride ld, in shared memory
  float* Vj = Kj + Bc * ld;                     // V_j: (B_c, d), row stride ld
  float* Qi = Vj + Bc * ld;                     // Q_i: (B_r, d), row stride ld

  float4 Oi[TR][kOCols];  // O_i: (TR, d/8) in registers — rows row(t), columns 4·cg + 32·n .. +3
  float Sij[TR][kSCols];  // S_ij, then P̃_ij: (TR, B_c/8) in registers — columns cg + 8·n
  float mi[TR], li[TR];   // m_i, l_i of this thread's rows, in registers
  // Row t of this thread's slice within the tile: warps take 4 · TR rows each.
  const auto row = [&](int t) { return warp * kRowLanes * TR + t * kRowLanes + rl; };
  //! [registers]

  load_Qi_async<d>(Qi, Q, 0, n_q);  // Q_0 is on its way while O, l, m are set

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
    // Line 6: load K_j, V_j from HBM to SRAM; rows past the end are zero.
    for (int e = tid; e < Bc * d4; e += kThreads) {
      const int c = e / d4, k4 = e % d4;
      const bool inside = c < cols;
      const float4 zero = make_float4(0, 0, 0, 0);
      reinterpret_cast<float4*>(Kj + c * ld)[k4] = inside ? reinterpret_cast<const float4*>(K + size_t(kv0 + c) * d)[k4] : zero;
      reinterpret_cast<float4*>(Vj + c * ld)[k4] = inside ? reinterpret_cast<const float4*>(V + size_t(kv0 + c) * d)[k4] : zero;
    }

    for (int i = 0; i < Tr; ++i) {  // line 7: Q tiles, inner loop
      const int q0 = i * Br, rows = min(Br, n_q - q0);
      // Line 8: Q_i is already on its way to SRAM (issued during the previous
      // iteration); load this thread's slice of O_i and its rows' l_i, m_i from
      // HBM straight into registers (first used after S_ij, so the loads overlap it).
#pragma unroll kUnroll
      for (int t = 0; t < TR; ++t) {
        const bool valid = row(t) < rows;
        const size_t q = size_t(q0 + row(t));
        mi[t] = valid ? m[q] : -INFINITY;
        li[t] = valid ? l[q] : 0.0f;
#pragma unroll kUnroll
        for (int n = 0; n < kOCols; ++n) {
          Oi[t][n] = valid ? reinterpret_cast<const float4*>(O + q * d)[cg + kColLanes * n] : make_float4(0, 0, 0, 0);
        }
      }
      cp_async_wait<0>();  // this thread's copies of Q_i have landed ...
      __syncthreads();      // ... and everyone's, and K_j, V_j, before anyone reads them

      // Line 9: S_ij = scale · Q_i K_jᵀ, this thread's TR × B_c/8 entries. Per
      // float4 step of d, TR + B_c/8 shared loads feed TR · B_c/8 · 4 FMAs.
#pragma unroll kUnroll
      for (int t = 0; t < TR; ++t) {
#pragma unroll kUnroll
        for (int n = 0; n < kSCols; ++n) Sij[t][n] = 0.0f;
      }
#pragma unroll 4
      for (int k4 = 0; k4 < d4; ++k4) {
        float4 q[TR];
#pragma unroll kUnroll
        for (int t = 0; t < TR; ++t) q[t] = reinterpret_cast<const float4*>(Qi + row(t) * ld)[k4];
#pragma unroll kUnroll
        for (int n = 0; n < kSCols; ++n) {
          const float4 k = reinterpret_cast<const float4*>(Kj + (cg + kColLanes * n) * ld)[k4];
#pragma unroll kUnroll
          for (int t = 0; t < TR; ++t) {
            Sij[t][n] = fmaf(q[t].x, k.x, Sij[t][n]);
            Sij[t][n] = fmaf(q[t].y, k.y, Sij[t][n]);
            Sij[t][n] = fmaf(q[t].z, k.z, Sij[t][n]);
            Sij[t][n] = fmaf(q[t].w, k.w, Sij[t][n]);
          }
        }
      }

      // Every warp is done with Q_i: start copying the next Q tile over it (the
      // first one of the next K/V tile after the last i), to land during the rest.
      __syncthreads();
      if (i + 1 < Tr) {
        load_Qi_async<d>(Qi, Q, q0 + Br, n_q);
      } else if (j + 1 < Tc) {
        load_Qi_async<d>(Qi, Q, 0, n_q);
      }

      // Lines 10–11 for each of this thread's rows; the 8 lanes of a row combine
      // their partial max and sum by shuffles.
      float keep[TR], add[TR];  // line 12's diagonal factors, per row
#pragma unroll kUnroll
      for (int t = 0; t < TR; ++t) {
        const int r = row(t);
        // Hidden entries (past N_kv or N_q, or above the causal diagonal) are −∞.
        float m_tilde = -INFINITY;
#pragma unroll kUnroll
        for (int n = 0; n < kSCols; ++n) {
          const int c = cg + kColLanes * n;
          const bool visible = r < rows && c < cols && !(causal && kv0 + c > q0 + r);
          Sij[t][n] = visible ? scale * Sij[t][n] : -INFINITY;
          m_tilde = fmaxf(m_tilde, Sij[t][n]);
        }
        m_tilde = row_max(m_tilde);
        // A causal row can be fully hidden in this tile (m̃_ij = −∞): its P̃ is 0.
        float l_tilde = 0.0f;
#pragma unroll kUnroll
        for (int n = 0; n < kSCols; ++n) {
          Sij[t][n] = m_tilde == -INFINITY ? 0.0f : expf(Sij[t][n] - m_tilde);
          l_tilde += Sij[t][n];
        }
        l_tilde = row_sum(l_tilde);
        const float m_new = fmaxf(mi[t], m_tilde);
        const float alpha = expf(mi[t] - m_new);   // rescales the old
        const float beta = expf(m_tilde - m_new);  // rescales the new
        const float l_new = alpha * li[t] + beta * l_tilde;
        // Formed first, as in step 2: nothing new in this tile gives exactly 1 and 0.
        keep[t] = alpha * li[t] / l_new;
        add[t] = beta / l_new;
        mi[t] = m_new;
        li[t] = l_new;
      }

      // Line 12: O_i ← keep · O_i + add · P̃_ij V_j. Column c of P̃_ij lives in
      // lane (rl, c mod 8) as Sij[t][c / 8]; a shuffle hands it to the row's lanes.
      float4 pv[TR][kOCols];  // (P̃_ij V_j) for this thread's slice of O_i
#pragma unroll kUnroll
      for (int t = 0; t < TR; ++t) {
#pragma unroll kUnroll
        for (int n = 0; n < kOCols; ++n) pv[t][n] = make_float4(0, 0, 0, 0);
      }
#pragma unroll kUnroll
      for (int n = 0; n < kSCols; ++n) {
#pragma unroll
        for (int src = 0; src < kColLanes; ++src) {
          const int c = src + kColLanes * n;
          float p[TR];
#pragma unroll kUnroll
          for (int t = 0; t < TR; ++t) p[t] = __shfl_sync(0xffffffffu, Sij[t][n], rl * kColLanes + src);
#pragma unroll kUnroll
          for (int o = 0; o < kOCols; ++o) {
            const float4 v = reinterpret_cast<const float4*>(Vj + c * ld)[cg + kColLanes * o];
#pragma unroll kUnroll
            for (int t = 0; t < TR; ++t) pv[t][o] = fma4(p[t], v, pv[t][o]);
          }
        }
      }
      // Lines 12–13: the new O_i, l_i, m_i go back to HBM.
#pragma unroll kUnroll
      for (int t = 0; t < TR; ++t) {
        if (row(t) >= rows) continue;
        const size_t q = size_t(q0 + row(t));
#pragma unroll kUnroll
        for (int n = 0; n < kOCols; ++n) {
          const float4 o = Oi[t][n], a = pv[t][n];
          Oi[t][n] = make_float4(keep[t] * o.x + add[t] * a.x, keep[t] * o.y + add[t] * a.y,
                                 keep[t] * o.z + add[t] * a.z, keep[t] * o.w + add[t] * a.w);
          reinterpret_cast<float4*>(O + q * d)[cg + kColLanes * n] = Oi[t][n];
        }
        if (cg == 0) {
          l[q] = li[t];
          m[q] = mi[t];
        }
      }
      // Faster threads would otherwise load the next K_j, V_j over tiles that
      // slower threads still read, or read l, m before lane cg = 0 wrote them.
      __syncthreads();
    }
  }
  //! [algorithm 1]

  // L = m + log(l), kept for the backward pass.
  for (int r = tid; r < n_q; r += kThreads) L[r] = m[r] + logf(l[r]);
}

/// Launches the kernel for head dimension d: one block per (batch, head), the
/// shared memory of Tiles<d>, raised above the default 48 KB where needed.
template <int d, bool kRegisters>
void launch(const common::Problem& problem, common::cuda::DeviceProblem& dev, float* l, float* m) {
  using T = Tiles<d>;
  const common::Shape& s = problem.shape;
  CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<d, kRegisters>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(T::smem_bytes)));
  attention_kernel<d, kRegisters><<<static_cast<unsigned>(s.batch_heads()), kThreads, T::smem_bytes>>>(
      dev.q.data(), dev.k.data(), dev.v.data(), dev.o.data(), l, m, dev.lse.data(), static_cast<int>(s.seq_q),
      static_cast<int>(s.seq_kv), problem.scale, problem.causal);
  CUDA_CHECK_LAUNCH();
}

/// The launcher for head dimension d, chosen at run time from the compiled set.
using Launcher = void (*)(const common::Problem&, common::cuda::DeviceProblem&, float*, float*);

template <bool kRegisters>
Launcher launcher_for(int64_t d) {
  switch (d) {
    case 32: return launch<32, kRegisters>;
    case 64: return launch<64, kRegisters>;
    case 96: return launch<96, kRegisters>;
    case 128: return launch<128, kRegisters>;
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

/// Both variants' host side: check, upload, launch (and time), download.
common::Result forward(const common::Problem& problem, const common::Options& options, bool registers) {
  const std::string name = registers ? "step05_cuda_registers" : "step05_cuda_registers (local memory)";
  common::validate(problem);
  common::require_head_dim(problem.shape.head_dim, kHeadDims, name);
  common::cuda::require_gpu(name);
  const common::Shape& s = problem.shape;

  // l and m: (B, H, N_q) working arrays in global memory ("HBM"), counted.
  using Buffer = common::cuda::DeviceBuffer<float>;
  common::cuda::DeviceProblem dev(problem, 2 * s.lse_elements() * int64_t(sizeof(float)), name);
  Buffer l(static_cast<size_t>(s.lse_elements()), Buffer::Counted::yes);
  Buffer m(static_cast<size_t>(s.lse_elements()), Buffer::Counted::yes);

  const Launcher launcher = registers ? launcher_for<true>(s.head_dim) : launcher_for<false>(s.head_dim);
  common::Result result = common::allocate_result(s);
  result.kernel_ms = common::cuda::run_and_time(options, [&] { launcher(problem, dev, l.data(), m.data()); });
  dev.download(result);
  result.extra = tiles_report_for(s.head_dim);
  return result;
}

}  // namespace

common::Result attention_forward(const common::Problem& problem, const common::Options& options) {
  return forward(problem, options, true);
}

common::Result attention_forward_local_memory(const common::Problem& problem, const common::Options& options) {
  return forward(problem, options, false);
}

common::StepInfo describe() {
  common::StepInfo info;
  info.name = "step05_cuda_registers";
  info.title = "Algorithm 1 on the GPU with S_ij, P~_ij, O_i, m_i, l_i in registers (Q_i, K_j, V_j in shared memory)";
  info.forward = [](const common::Problem& p, const common::Options& o) { return attention_forward(p, o); };
  info.head_dims = kHeadDims;
  info.needs_gpu = true;
  return info;
}

common::StepInfo describe_local_memory() {
  common::StepInfo info = describe();
  info.name = "step05_local_memory";
  info.title = "step05's kernel with its slices indexed at run time (local memory, a spill)";
  info.forward = [](const common::Problem& p, const common::Options& o) { return attention_forward_local_memory(p, o); };
  return info;
}

}  // namespace step05
