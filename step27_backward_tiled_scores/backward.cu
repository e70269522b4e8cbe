/// \file step27_backward_tiled_scores/backward.cu
/// \brief Step 27 — S_ij and dP_ij register-tiled: a 16 × 16 thread grid, 4 × 4 values a thread.
///
/// This step extends step 26 by the way a block computes S_ij = Q_i K_jᵀ and dP_ij =
/// dO_i V_jᵀ, the two products that cost step 26 two shared-memory loads per FMA:
///  1. The 256 threads form a 16 × 16 grid over the B_r × B_c tile; a thread owns
///     rows 4·tm … 4·tm + 3 and columns tn, tn + 16, tn + 32, tn + 48 of both.
///  2. It reads its 4 rows of Q_i and 4 rows of K_j as float4s, and makes the 16
///     dot products of them: 4 FMAs per value loaded instead of 1.
///  3. The tiles arrive by cp.async, 16 bytes a copy, rows padded to d + 4 floats:
///     the float4s 8 lanes read from 8 rows start in different banks.
/// dV_j, dK_j and dQ_i's term are still computed an element at a time.
///
/// Run: build/bin/step27_backward_tiled_scores --batch 4 --heads 16 --seq-q 4096 --seq-kv 4096 --head-dim 128 --backward --repeat 10
///      build/bin/step27_backward_tiled_scores --seq-q 1000 --seq-kv 333 --head-dim 64 --causal --backward --check
#include <cuda_runtime.h>

#include <cmath>

#include "attention.hpp"
#include "common/cuda/backward.cuh"
#include "common/cuda/cp_async.cuh"
#include "common/cuda/gpu_step.cuh"
#include "common/cuda/warp.cuh"

namespace step27 {

namespace {

constexpr int kBackwardThreads = 256;  // a 16 × 16 grid of threads over S_ij and dP_ij
constexpr int kGrid = 16;  // threads along each side of that grid
constexpr int kPad = 4;  // ld = d + 4: the float4s 8 lanes read from 8 rows start in different banks
using HeadDims = common::cuda::HeadDims<32, 64, 96, 128>;

//! [tiles]
/// The backward's tiles for head dimension d: B_c keys a block, B_r queries an
/// iteration. A thread owns 4 rows × B_c/16 columns of S_ij and dP_ij; element e of
/// dK_j and dV_j (row e / d, column e % d) belongs to thread e mod 256: B_c · d / 256
/// of each, 2 · 32 = 64 accumulators at d = 128.
template <int d>
struct BackwardTiles {
  static constexpr int Bc = 64, Br = 64;
  static constexpr int kRows = Br / kGrid;  // rows of S_ij, dP_ij a thread owns: 4
  static constexpr int kSCols = Bc / kGrid;  // columns of S_ij, dP_ij a thread owns: 4
  static constexpr int kPerThread = Bc * d / kBackwardThreads;  // elements of dK_j, of dV_j a thread owns
  static constexpr int ld = d + kPad;  // row stride of Q_i, dO_i, K_j, V_j in shared memory
  static constexpr int ld_s = Bc + kPad;  // row stride of P_ij, dS_ij
  /// Shared memory: K_j, V_j, Q_i, dO_i (B, ld); P_ij, dS_ij (B_r, ld_s); L_i, D_i (B_r).
  static constexpr size_t smem_bytes =
      (size_t(2) * Bc * ld + size_t(2) * Br * ld + size_t(2) * Br * ld_s + size_t(2) * Br) * 4;
  static_assert(Bc * d % kBackwardThreads == 0 && d % 32 == 0, "a warp's elements share one row");
  static_assert(Br == 4 * kGrid && Bc == 4 * kGrid, "one 16 x 16 thread grid covers S_ij");
  static_assert(2 * kPerThread + 2 * kRows * kSCols <= 128, "dK_j, dV_j and S_ij, dP_ij fit a thread's registers");
};
//! [tiles]

/// Starts loading rows row0 … row0 + B − 1 of an (n_rows, d) matrix into a (B, ld) tile
/// in shared memory by cp.async, 16 bytes a copy; rows past n_rows become zeros.
template <int d>
__device__ void load_rows(float* tile, const float* matrix, int row0, int B, int n_rows) {
  constexpr int ld = BackwardTiles<d>::ld;
  for (int e = threadIdx.x; e < B * d / 4; e += kBackwardThreads) {
    const int r = e / (d / 4), k = 4 * (e % (d / 4));
    const bool inside = row0 + r < n_rows;
    common::cuda::cp_async_16(tile + r * ld + k, matrix + size_t(inside ? row0 + r : 0) * d + k, inside);
  }
}

using common::cuda::dot4;

//! [products]
/// C(4 × kSCols) += A Bᵀ for this thread's rows 4·tm + r of A and rows tn + 16·c of B,
/// both (·, d) with row stride ld: S_ij = Q_i K_jᵀ and dP_ij = dO_i V_jᵀ.
template <int d>
__device__ void rows_times_rows(float (&C)[BackwardTiles<d>::kRows][BackwardTiles<d>::kSCols], const float* A,
                                const float* B, int tm, int tn) {
  using T = BackwardTiles<d>;
#pragma unroll 4
  for (int k4 = 0; k4 < d / 4; ++k4) {
    float4 a[T::kRows];
#pragma unroll
    for (int r = 0; r < T::kRows; ++r) a[r] = reinterpret_cast<const float4*>(A + (T::kRows * tm + r) * T::ld)[k4];
#pragma unroll
    for (int c = 0; c < T::kSCols; ++c) {
      const float4 b = reinterpret_cast<const float4*>(B + (tn + kGrid * c) * T::ld)[k4];
#pragma unroll
      for (int r = 0; r < T::kRows; ++r) C[r][c] = dot4(a[r], b, C[r][c]);
    }
  }
}
//! [products]

//! [P and dS]
/// Lines 10–14 for one (i, j): P_ij = exp(scale · Q_i K_jᵀ − L_i), masked to 0
/// past N_q, past N_kv and above the causal diagonal; dS_ij = P_ij ∘ (dO_i V_jᵀ − D_i).
/// Both into shared memory.
template <int d>
__device__ void p_and_ds(const float* Qi, const float* dOi, const float* Kj, const float* Vj, const float* Li,
                         const float* Di, float* Pij, float* dSij, int q0, int kv0, int n_q, int n_kv, float scale,
                         bool causal, int tm, int tn) {
  using T = BackwardTiles<d>;
  float S[T::kRows][T::kSCols] = {}, dP[T::kRows][T::kSCols] = {};
  rows_times_rows<d>(S, Qi, Kj, tm, tn);
  rows_times_rows<d>(dP, dOi, Vj, tm, tn);
#pragma unroll
  for (int r = 0; r < T::kRows; ++r) {
    const int q = T::kRows * tm + r;
#pragma unroll
    for (int c = 0; c < T::kSCols; ++c) {
      const int key = tn + kGrid * c;
      const bool visible = q0 + q < n_q && kv0 + key < n_kv && !(causal && kv0 + key > q0 + q);
      const float p = visible ? expf(scale * S[r][c] - Li[q]) : 0.0f;  // L_i: the row's final log-sum-exp
      Pij[q * T::ld_s + key] = p;
      dSij[q * T::ld_s + key] = p * (dP[r][c] - Di[q]);
    }
  }
}
//! [P and dS]

/// Algorithm 2 for one K/V tile of one (batch, head) per block: dK_j, dV_j in
/// registers over the query tiles, dQ_i's terms added into dQ.
//! [kernel]
template <int d>
__global__ void __launch_bounds__(kBackwardThreads)
    backward_kernel(const float* __restrict__ Q_all, const float* __restrict__ K_all, const float* __restrict__ V_all,
                    const float* __restrict__ dO_all, const float* __restrict__ L_all, const float* __restrict__ D_all,
                    float* __restrict__ dQ_all, float* __restrict__ dK_all, float* __restrict__ dV_all, int n_q,
                    int n_kv, int batch_heads, float scale, bool causal) {
  using T = BackwardTiles<d>;
  constexpr int Bc = T::Bc, Br = T::Br, ld = T::ld, ld_s = T::ld_s;
  const int tm = threadIdx.x / kGrid, tn = threadIdx.x % kGrid;  // this thread's place in the 16 × 16 grid
  const size_t bh = blockIdx.x % batch_heads;
  const int j = int(blockIdx.x) / batch_heads, kv0 = j * Bc;  // this block's K/V tile
  const auto Q = Q_all + bh * n_q * d;  // Q, dO, dQ: (N_q, d); K, V, dK, dV: (N_kv, d); L, D: (N_q)
  const auto dO = dO_all + bh * n_q * d;
  const auto dQ = dQ_all + bh * n_q * d;

  extern __shared__ __align__(16) float smem[];
  float* Kj = smem;  // K_j: (B_c, d), row stride ld
  float* Vj = Kj + Bc * ld;  // V_j: (B_c, d)
  float* Qi = Vj + Bc * ld;  // Q_i: (B_r, d)
  float* dOi = Qi + Br * ld;  // dO_i: (B_r, d)
  float* Pij = dOi + Br * ld;  // P_ij: (B_r, B_c), row stride ld_s
  float* dSij = Pij + Br * ld_s;  // dS_ij: (B_r, B_c)
  float* Li = dSij + Br * ld_s;  // L_i: (B_r)
  float* Di = Li + Br;  // D_i: (B_r)

  float dKj[T::kPerThread] = {}, dVj[T::kPerThread] = {};  // line 7: elements threadIdx.x + 256·n

  // Line 6: load K_j, V_j once.
  load_rows<d>(Kj, K_all + bh * n_kv * d, kv0, Bc, n_kv);
  load_rows<d>(Vj, V_all + bh * n_kv * d, kv0, Bc, n_kv);
  // Causal: query tiles that end before kv0 see none of this tile's keys.
  const int Tr = (n_q + Br - 1) / Br, i_first = causal ? kv0 / Br : 0;
  for (int i = i_first; i < Tr; ++i) {  // line 8: query tiles
    const int q0 = i * Br;
    // Line 9: load Q_i, dO_i, L_i, D_i.
    load_rows<d>(Qi, Q, q0, Br, n_q);
    load_rows<d>(dOi, dO, q0, Br, n_q);
    common::cuda::cp_async_commit();
    for (int r = threadIdx.x; r < Br; r += kBackwardThreads) {  // L_i, D_i: 0 past N_q, where P_ij is 0 anyway
      Li[r] = q0 + r < n_q ? L_all[bh * n_q + q0 + r] : 0.0f;
      Di[r] = q0 + r < n_q ? D_all[bh * n_q + q0 + r] : 0.0f;
    }
    common::cuda::cp_async_wait<0>();
    __syncthreads();  // every thread's copies and loads have landed

    p_and_ds<d>(Qi, dOi, Kj, Vj, Li, Di, Pij, dSij, q0, kv0, n_q, n_kv, scale, causal, tm, tn);
    __syncthreads();  // P_ij and dS_ij are read by other threads

    // Lines 12 and 16: dV_j += P_ijᵀ dO_i, dK_j += dS_ijᵀ Q_i (scaled once, at the end).
#pragma unroll
    for (int n = 0; n < T::kPerThread; ++n) {
      const int e = threadIdx.x + kBackwardThreads * n, c = e / d, k = e % d;
      for (int q = 0; q < Br; ++q) {
        dVj[n] = fmaf(Pij[q * ld_s + c], dOi[q * ld + k], dVj[n]);
        dKj[n] = fmaf(dSij[q * ld_s + c], Qi[q * ld + k], dKj[n]);
      }
    }
    // Line 15: dQ_i += scale · dS_ij K_j. Every block of this head adds to dQ_i at
    // the same time: atomicAdd makes each addition whole, in an order set by timing.
    for (int e = threadIdx.x; e < Br * d; e += kBackwardThreads) {
      const int q = e / d, k = e % d;
      if (q0 + q >= n_q) continue;
      float dq = 0.0f;
      for (int c = 0; c < Bc; ++c) dq = fmaf(dSij[q * ld_s + c], Kj[c * ld + k], dq);
      atomicAdd(dQ + size_t(q0 + q) * d + k, scale * dq);
    }
    __syncthreads();  // the next iteration overwrites Q_i, dO_i, P_ij and dS_ij
  }
  // Line 18: write dK_j, dV_j once.
#pragma unroll
  for (int n = 0; n < T::kPerThread; ++n) {
    const int e = threadIdx.x + kBackwardThreads * n, key = kv0 + e / d;
    if (key >= n_kv) continue;
    dK_all[(bh * n_kv + key) * d + e % d] = scale * dKj[n];
    dV_all[(bh * n_kv + key) * d + e % d] = dVj[n];
  }
}
//! [kernel]

//! [launch]
/// D first, then the main kernel: one block per (K/V tile, batch·head).
template <int d>
void launch_backward(const common::DeviceBackwardArgs& a) {
  using T = BackwardTiles<d>;
  const common::Shape& s = a.shape;
  const auto stream = static_cast<cudaStream_t>(a.stream);
  const auto q = static_cast<const float*>(a.q), k = static_cast<const float*>(a.k), v = static_cast<const float*>(a.v),
             o = static_cast<const float*>(a.o), d_o = static_cast<const float*>(a.d_o);
  const auto dq = static_cast<float*>(a.dq), dk = static_cast<float*>(a.dk), dv = static_cast<float*>(a.dv);
  auto D = static_cast<float*>(a.workspace);  // D: (B, H, N_q)
  common::cuda::launch_row_dot(d_o, o, D, s.lse_elements(), d, stream);
  CUDA_CHECK(cudaMemsetAsync(dq, 0, size_t(s.q_elements()) * sizeof(float), stream));
  CUDA_CHECK(cudaFuncSetAttribute(backward_kernel<d>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(T::smem_bytes)));
  const unsigned kv_tiles = unsigned((s.seq_kv + T::Bc - 1) / T::Bc);
  backward_kernel<d><<<kv_tiles* unsigned(s.batch_heads()), kBackwardThreads, T::smem_bytes, stream>>>(
      q, k, v, d_o, a.lse, D, dq, dk, dv, int(s.seq_q), int(s.seq_kv), int(s.batch_heads()), a.scale, a.causal);
  CUDA_CHECK_LAUNCH();
}
//! [launch]

}  // namespace

common::Figures backward_resources(int64_t head_dim) {
  return HeadDims::dispatch(head_dim, [](auto d) {
    using T = BackwardTiles<d()>;
    return common::cuda::kernel_resources(backward_kernel<d()>, kBackwardThreads, T::smem_bytes,
                                          {{"B_c", T::Bc}, {"B_r", T::Br}});
  });
}

void launch_backward(const common::DeviceBackwardArgs& args) {
  if (args.precision != common::Precision::fp32) {
    throw common::InputError("step27_backward_tiled_scores computes in fp32 only");
  }
  HeadDims::dispatch(args.shape.head_dim, [&](auto d) { launch_backward<d()>(args); });
}

int64_t backward_workspace_bytes(const common::Shape& shape, bool /*deterministic*/) {
  return shape.lse_elements() * int64_t(sizeof(float));  // D
}

}  // namespace step27
