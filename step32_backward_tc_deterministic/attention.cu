/// \file step32_backward_tc_deterministic/attention.cu
/// \brief Step 32 — step 14's forward, bf16 and fp16 on the tensor cores (the backward is in backward.cu).
///
/// Step 14 improves on step 13 by choosing the order in which the T_r · B·H query tiles meet
/// the GPU. Blocks start roughly in index order, a wave of as many as the SMs hold at a
/// time. Causal tiles differ in length (tile i sees i + 1 K/V tiles), so the longest tiles
/// of every head go first, as in step 13, and the short ones fill the last wave. Tiles
/// without the mask are all alike, so one head's tiles now run side by side: they read the
/// same K and V at about the same time, which then come from L2 instead of HBM.
///
/// Run: build/bin/step32_backward_tc_deterministic --batch 4 --heads 16 --seq-q 4096 --seq-kv 4096 --head-dim 128 --repeat 20
///      build/bin/step32_backward_tc_deterministic --seq-q 1000 --seq-kv 333 --head-dim 64 --causal --dtype fp16 --check
#include <cuda_runtime.h>

#include <cmath>

#include "attention.hpp"
#include "common/cuda/convert.cuh"
#include "common/cuda/cp_async.cuh"
#include "common/cuda/cuda_check.cuh"
#include "common/cuda/exp2.cuh"
#include "common/cuda/fragments.hpp"
#include "common/cuda/gpu_step.cuh"
#include "common/cuda/mma.cuh"
#include "common/cuda/scale_sign.cuh"

namespace step32 {

namespace {

constexpr int kThreads = 128;  // threads per block: 4 warps of 32 rows each
constexpr int kWarps = kThreads / 32;  // warps per block
constexpr int kWarpSize = 32;
constexpr int kPad = 8;  // ld = d + 8: the 8 rows one ldmatrix matrix reads start in different banks
constexpr int kStages = 2;  // K_j, V_j buffers: tile j + 1 loads while tile j is used
using HeadDims = common::cuda::HeadDims<32, 64, 96, 128>;  // one kernel instantiation each

//! [tiles]
// A warp is 8 × 4 lanes, the mma's C layout: lane = row_lane · 4 + col_lane
// (groupID, threadID_in_group). The 4 lanes of a quad share a row; a thread owns 4 rows,
// 2 in each of its warp's two 16-row mma tiles (kMTiles).
constexpr int kRowLanes = 8, kColLanes = 4, kRowsPerThread = 4, kMTiles = 2;
// The register budget: of a thread's 255 registers, its fp32 accumulators of S_ij and O_i take
// at most this many; the rest hold fragments, addresses and the softmax's temporaries.
constexpr int kAccumulatorRegisters = 192;

/// The tiles for head dimension d: a warp's 32 rows are two mmas' M, so
/// B_r = 4 warps · 32 = 128. A thread holds 4 × B_c/4 of S_ij and 4 × d/4 of O_i
/// in fp32 registers: B_c + d = 192 at d = 64 and 128 fills the registers.
template <int d>
struct Tiles {
  static constexpr int Bc = d <= 64 ? 128 : 64;  // keys: as many as the registers hold beside O_i
  static constexpr int Br = kWarps * kRowLanes * kRowsPerThread;
  static_assert(kRowsPerThread * (Bc + d) / kColLanes <= kAccumulatorRegisters, "S_ij and O_i spill");
  static constexpr int ld = d + kPad;  // row stride of Q_i, K_j, V_j in shared memory
  /// Shared memory: kStages × K_j, V_j (B_c, ld); Q_i (B_r, ld); 2 bytes an element.
  static constexpr size_t smem_bytes = (size_t(2) * kStages * Bc * ld + size_t(Br) * ld) * 2;
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

using common::cuda::ldmatrix_x4;
using common::cuda::mma_m16n8k16;
using common::mma::RowCol;

//! [load tile]
/// Starts loading rows row0 … row0 + B − 1 of an (n_rows, d) matrix in HBM into a
/// (B, ld) tile in SRAM, 16 bytes (8 elements) per cp.async: the copies land in the
/// background, without passing through registers. Rows past n_rows become zeros.
template <int d, class T>
__device__ void load_tile(T* tile, const T* matrix, int row0, int B, int n_rows) {
  constexpr int ld = Tiles<d>::ld;
#pragma unroll
  for (int e = threadIdx.x; e < B * d / 8; e += kThreads) {
    const int r = e / (d / 8), k = 8 * (e % (d / 8));
    const bool inside = row0 + r < n_rows;  // a zero-filling copy reads nothing, but needs a valid address
    common::cuda::cp_async_16(tile + r * ld + k, matrix + size_t(inside ? row0 + r : 0) * d + k, inside);
  }
}
//! [load tile]

/// FlashAttention-2 for one query tile of one (batch, head) per block. Q, K, V, O, L as in the contract.
//! [kernel]
template <class T, int d>  // T: __nv_bfloat16 or __half
__global__ void __launch_bounds__(kThreads, 1)  // 1 block per SM at least: up to 65536 / kThreads registers each
    attention_kernel(const T* __restrict__ Q_all, const T* __restrict__ K_all, const T* __restrict__ V_all,
                     T* __restrict__ O_all, float* __restrict__ L_all, int n_q, int n_kv, int batch_heads, float scale,
                     bool causal) {
  constexpr int Bc = Tiles<d>::Bc, Br = Tiles<d>::Br, ld = Tiles<d>::ld;
  // A thread's slice (fragments.hpp, c_m16n8): rows row(t) of the tile, columns col(n) of S_ij and of O_i.
  constexpr int kRows = kRowsPerThread, kSCols = Bc / kColLanes, kOCols = d / kColLanes;
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int row_lane = lane / kColLanes, col_lane = lane % kColLanes;
  const auto row = [&](int t) { return warp * kRowLanes * kRows + t * kRowLanes + row_lane; };
  const auto col = [&](int n) { return 8 * (n / 2) + 2 * col_lane + n % 2; };  // 2 neighbours per 8 columns
  // The rows and columns each lane addresses for ldmatrix: A (Q_i) and .trans B (V_j); B from K_j.
  const RowCol a_at = common::mma::ldmatrix_x4_address(lane), k_at = common::mma::ldmatrix_x4_address_nk(lane);
  const int Tr = (n_q + Br - 1) / Br;  // T_r query tiles
  // |scale| · log2 e: S_ij in base 2, the scale applied inside each exponential. A scale that
  // is not positive goes into Q_i instead (its sign: common/cuda/scale_sign.cuh).
  const float scale_log2 = common::cuda::exp2_factor(scale);

  //! [shared memory]
  extern __shared__ __align__(16) unsigned char smem_bytes[];  // the block's dynamic shared memory
  const auto smem = reinterpret_cast<T*>(smem_bytes);
  auto Kbuf = smem;  // kStages × K_j: (B_c, d), row stride ld, in shared memory
  auto Vbuf = Kbuf + kStages * Bc * ld;  // kStages × V_j: (B_c, d), row stride ld
  auto Qi = Vbuf + kStages * Bc * ld;  // Q_i: (B_r, d), row stride ld
  //! [shared memory]
  //! [registers]
  float Oi[kRows][kOCols];  // O_i: this thread's rows row(t), columns col(n), fp32 accumulators
  float Sij[kRows][kSCols];  // S_ij, then P̃_ij in place: rows row(t), columns col(n)
  //! [registers]
  // m_i (base 2) and l_i (this lane's part) of the thread's 4 rows: touched once a tile, so they
  // wait in shared memory, a slot per thread, and leave the registers to O_i and S_ij.
  __shared__ float mi[kRows][kThreads], li[kRows][kThreads];

  //! [algorithm 1]
  // Line 3's body: query tile i of head bh. Which tile this block takes is the block order, below.
  const auto query_tile = [&](size_t bh, int i) {
    // Q, O: (N_q, d); K, V: (N_kv, d); L: (N_q) in global memory: head bh's.
    const auto Q = Q_all + bh * n_q * d;
    const auto K = K_all + bh * n_kv * d;
    const auto V = V_all + bh * n_kv * d;
    const auto O = O_all + bh * n_q * d;
    const auto L = L_all + bh * n_q;
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
      for (int n = 0; n < kOCols; ++n) Oi[t][n] = 0.0f;
      li[t][tid] = 0.0f;
      mi[t][tid] = -INFINITY;
    }
    for (int j = 0; j < Tc; ++j) {  // line 6: K/V tiles, the inner loop
      const int kv0 = j * Bc, cols = min(Bc, n_kv - kv0);  // the last tile may be short
      const T* Kj = Kbuf + (j % kStages) * Bc * ld;  // K_j, V_j: this tile's stage
      const T* Vj = Vbuf + (j % kStages) * Bc * ld;
      if (j + 1 < Tc) {  // line 7 for tile j + 1, into the stage that tile j − 1 is done with
        load_tile<d>(Kbuf + ((j + 1) % kStages) * Bc * ld, K, kv0 + Bc, Bc, n_kv);
        load_tile<d>(Vbuf + ((j + 1) % kStages) * Bc * ld, V, kv0 + Bc, Bc, n_kv);
        common::cuda::cp_async_commit();
        common::cuda::cp_async_wait<1>();  // all groups but the newest have landed: tile j
      } else {
        common::cuda::cp_async_wait<0>();
      }
      if (j == 0 && scale <= 0.0f) {  // this thread's own copies of Q_i have landed
        common::cuda::fold_scale_sign<kThreads, d, ld>(Qi, Br, scale);
      }
      __syncthreads();  // every thread's copies of tile j have landed before anyone reads them

      //! [two tiles a warp]
      // Line 8: S_ij = scale · Q_i K_jᵀ on the tensor cores: per 16 of d, one ldmatrix
      // of each of the warp's two 16-row tiles of Q_i (A), and per 16 keys one of K_j
      // (B of two 8-key mmas), used by both tiles: 4 mmas per K_j fragment.
#pragma unroll
      for (int t = 0; t < kRows; ++t) {
#pragma unroll
        for (int n = 0; n < kSCols; ++n) Sij[t][n] = 0.0f;
      }
#pragma unroll
      for (int k = 0; k < d; k += 16) {
        uint32_t q[kMTiles][4];
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) ldmatrix_x4(q[m], Qi + (warp * 32 + 16 * m + a_at.row) * ld + k + a_at.col);
#pragma unroll
        for (int n = 0; n < kSCols; n += 4) {  // keys 4n … 4n + 15: this thread's columns n … n + 3
          uint32_t kb[4];
          ldmatrix_x4(kb, Kj + (4 * n + k_at.row) * ld + k + k_at.col);
#pragma unroll
          for (int m = 0; m < kMTiles; ++m) {  // rows row(2m), row(2m + 1): tile m's C fragment
            float* s0 = Sij[2 * m];
            float* s1 = Sij[2 * m + 1];
            mma_m16n8k16<T>(s0[n], s0[n + 1], s1[n], s1[n + 1], q[m], kb[0], kb[1]);
            mma_m16n8k16<T>(s0[n + 2], s0[n + 3], s1[n + 2], s1[n + 3], q[m], kb[2], kb[3]);
          }
        }
      }
      //! [two tiles a warp]
      // Hidden entries (past N_kv, or above the causal diagonal) are −∞. Only a tile
      // that crosses the diagonal or the end of K has any; rows past N_q are never stored.
      if (kv0 + Bc > n_kv || (causal && kv0 + Bc - 1 > q0)) {
#pragma unroll
        for (int t = 0; t < kRows; ++t) {
          const int visible = causal ? min(cols, q0 + row(t) - kv0 + 1) : cols;  // keys kv0 … kv0 + visible − 1
#pragma unroll
          for (int n = 0; n < kSCols; ++n) {
            if (col(n) >= visible) Sij[t][n] = -INFINITY;
          }
        }
      }

      //! [softmax]
      // Line 9, 4 lanes per row, in base 2 with the scale s = scale_log2 applied inside the
      // exponentials: m_new = max(m_i, s · rowmax(S_ij)), P̃_ij = 2^(s · S_ij − m_new) in place (one
      // fma and one ex2 an entry), l_i ← 2^(m_i − m_new) l_i + rowsum(P̃_ij); O_i's rescale.
#pragma unroll
      for (int t = 0; t < kRows; ++t) {
        float m_tilde = -INFINITY;
#pragma unroll
        for (int n = 0; n < kSCols; ++n) m_tilde = fmaxf(m_tilde, Sij[t][n]);
        m_tilde = row_max(m_tilde);
        // Every row sees key 0 in tile j = 0, so m_new is finite from then on.
        const float m_new = fmaxf(mi[t][tid], scale_log2 * m_tilde);
        float l_tilde = 0.0f;
#pragma unroll
        for (int n = 0; n < kSCols; ++n) {
          Sij[t][n] = common::cuda::exp2_ftz(fmaf(Sij[t][n], scale_log2, -m_new));  // hidden: 2^−∞ = 0
          l_tilde += Sij[t][n];
        }
        {  // in every lane: each keeps the row's m_i and its own part of l_i
          const float alpha = common::cuda::exp2_ftz(mi[t][tid] - m_new);  // FA2's only rescale; 0 in tile 0 (m_i = −∞)
          li[t][tid] = alpha * li[t][tid] + l_tilde;
          mi[t][tid] = m_new;
#pragma unroll
          for (int n = 0; n < kOCols; ++n) Oi[t][n] *= alpha;
        }
      }
      //! [softmax]

      //! [P in registers]
      // Line 10: O_i ← O_i + P̃_ij V_j, no division, on the tensor cores. Per 16 keys c … c + 15,
      // a thread's 4 columns of P̃_ij among them, rows row(2m) and row(2m + 1), rounded to T in
      // pairs, are tile m's A fragment (fragments.hpp); per 16 of d one ldmatrix of V_j,
      // transposed (B), used by both tiles.
#pragma unroll
      for (int c = 0; c < Bc; c += 16) {
        const int n0 = c / kColLanes;  // this thread's first column index among keys c … c + 15
        uint32_t p[kMTiles][4];
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) {
          const float* s0 = Sij[2 * m];
          const float* s1 = Sij[2 * m + 1];
          p[m][0] = common::cuda::pack2<T>(s0[n0], s0[n0 + 1]);
          p[m][1] = common::cuda::pack2<T>(s1[n0], s1[n0 + 1]);
          p[m][2] = common::cuda::pack2<T>(s0[n0 + 2], s0[n0 + 3]);
          p[m][3] = common::cuda::pack2<T>(s1[n0 + 2], s1[n0 + 3]);
        }
#pragma unroll
        for (int n = 0; n < kOCols; n += 4) {  // columns 4n … 4n + 15 of O_i
          uint32_t v[4];
          common::cuda::ldmatrix_x4_trans(v, Vj + (c + a_at.row) * ld + 4 * n + a_at.col);
#pragma unroll
          for (int m = 0; m < kMTiles; ++m) {
            float* o0 = Oi[2 * m];
            float* o1 = Oi[2 * m + 1];
            mma_m16n8k16<T>(o0[n], o0[n + 1], o1[n], o1[n + 1], p[m], v[0], v[1]);
            mma_m16n8k16<T>(o0[n + 2], o0[n + 3], o1[n + 2], o1[n + 3], p[m], v[2], v[3]);
          }
        }
      }
      //! [P in registers]
      // Iteration j + 1 loads tile j + 2 over this stage: every warp must have
      // finished reading it.
      __syncthreads();
    }
    // Lines 12–14: O_i ← diag(l_i)⁻¹ O_i and L_i = m_i + log l_i, each written to HBM once.
#pragma unroll
    for (int t = 0; t < kRows; ++t) {
      const int r = row(t);
      const float l_row = row_sum(li[t][tid]), inv_l = 1.0f / l_row;  // the 4 lanes' parts of l_i, added once
      if (r >= rows) continue;  // a row past the tile: never stored
#pragma unroll
      for (int n = 0; n < kOCols; n += 2) {  // two neighbouring columns, rounded to T, in one 4-byte store
        *reinterpret_cast<uint32_t*>(O + size_t(q0 + r) * d + col(n)) =
            common::cuda::pack2<T>(Oi[t][n] * inv_l, Oi[t][n + 1] * inv_l);
      }
      if (col_lane == 0) L[q0 + r] = mi[t][tid] * common::cuda::kLn2 + logf(l_row);  // m_i · ln 2: base e
    }
  };
  //! [block order]
  // Line 3: query tiles, in parallel, one a block. Causal tiles differ in length, so the longest
  // tiles of every head go first; tiles without the mask are all alike, so one head's tiles run
  // side by side and share its K and V in L2.
  const size_t bh = causal ? blockIdx.x % batch_heads : blockIdx.x / Tr;
  const int i = Tr - 1 - int(causal ? blockIdx.x / batch_heads : blockIdx.x % Tr);
  query_tile(bh, i);
  //! [block order]
  //! [algorithm 1]
}
//! [kernel]

//! [launch]
/// Launches the kernel for element type T and head dimension d: one block of
/// kThreads threads per (query tile, batch·head) on a 1-D grid (any B·H fits),
/// the shared memory of Tiles<d> (raised above the default 48 KB).
template <class T, int d>
void launch(const common::DeviceArgs& a) {
  const common::Shape& shape = a.shape;
  const dim3 grid(unsigned((shape.seq_q + Tiles<d>::Br - 1) / Tiles<d>::Br * shape.batch_heads())), block(kThreads);
  const size_t shared_bytes = Tiles<d>::smem_bytes;
  common::cuda::allow_shared_memory(attention_kernel<T, d>, shared_bytes);
  attention_kernel<T, d><<<grid, block, shared_bytes, common::cuda::stream_of(a)>>>(
      a.q_as<T>(), a.k_as<T>(), a.v_as<T>(), a.o_as<T>(), a.lse, int(shape.seq_q), int(shape.seq_kv),
      int(shape.batch_heads()), a.scale, a.causal);
  CUDA_CHECK_LAUNCH();
}
//! [launch]

/// The tiles and the compiler's resources of the kernel for head dimension d (bf16; fp16's are the same).
template <int d>
common::Figures resources() {
  return common::cuda::kernel_resources(attention_kernel<__nv_bfloat16, d>, kThreads, Tiles<d>::smem_bytes,
                                        {{"B_c", Tiles<d>::Bc}, {"B_r", Tiles<d>::Br}});
}

}  // namespace

common::StepInfo describe() {
  common::GpuKernel kernel;
  kernel.launch = [](const common::DeviceArgs& a) {
    HeadDims::dispatch(a.shape.head_dim, [&](auto d) {
      if (a.precision == common::Precision::fp16) launch<__half, d()>(a);
      else launch<__nv_bfloat16, d()>(a);
    });
  };
  kernel.resources = [](int64_t d) { return HeadDims::dispatch(d, [](auto D) { return resources<D()>(); }); };
  kernel.launch_backward = launch_backward;
  kernel.backward_workspace_bytes = backward_workspace_bytes;
  kernel.backward_resources = backward_resources;
  common::StepInfo info = common::cuda::gpu_step(
      "step32_backward_tc_deterministic",
      "a deterministic dQ on the tensor cores' backward: a second kernel sums dQ_i over the K/V tiles in order",
      HeadDims::list(), kernel, {common::Precision::bf16, common::Precision::fp16});
  info.extends = "step14_block_order";
  return info;
}

common::Result attention_forward(const common::Problem& problem, const common::Options& options) {
  return describe().forward(problem, options);
}

common::Gradients attention_backward(const common::Problem& problem, const common::BackwardInputs& inputs,
                                     const common::Options& options) {
  return describe().backward(problem, inputs, options);
}

}  // namespace step32
