/// \file step06_fa2/attention.cu
/// \brief Step 6 — FlashAttention-2 forward on the GPU, fp32.
///
/// This step extends step 5 (FlashAttention-1 with its accumulators in
/// registers) by the three changes of FlashAttention-2 (Dao 2023):
///  1. The loops swap. Each thread block owns one query tile Q_i and sweeps all
///     K_j, V_j tiles (the inner loop); the grid covers (query tile × batch·head),
///     so even one head gives T_r independent blocks. Warps split the query rows
///     of the tile, so no warp ever needs another warp's partial O.
///  2. O_i stays unnormalised in registers for the whole sweep: each new tile
///     only rescales it by exp(m_old − m_new); the division by l_i happens once,
///     at the end, and O_i, L_i = m_i + log l_i are written to global memory once.
///  3. Causal: K/V tiles entirely above the diagonal are skipped, not masked;
///     only tiles that straddle the diagonal (or the end of K) are masked.
/// Why: step 5 still writes O, m, l back to global memory after every K/V tile
/// and rescales O by l each time; FA2 removes that traffic and those divisions,
/// and does no work at all for the masked half of a causal problem.
///
/// K_j, V_j come into shared memory with cp.async, double-buffered: tile j+1 is
/// in flight while tile j is being used. Scores and O use plain fp32 FFMA (TF32
/// tensor cores would not pass the project's fp32 tolerance rule).
///
/// Run: build/bin/step06_fa2 --batch 4 --heads 16 --seq-q 4096 --seq-kv 4096 --head-dim 128 --repeat 20
///      build/bin/step06_fa2 --seq-q 1000 --seq-kv 333 --head-dim 64 --causal --check
#include "attention.hpp"

#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "common/cuda/cuda_check.cuh"
#include "common/cuda/device_buffer.cuh"

namespace step06 {

namespace {

//! [tile config]
/// Tile shapes of one head dimension D, all compile-time. A block is 4 warps;
/// warp w owns query rows 16w … 16w+15 of the tile; inside a warp, lane
/// = 8·tr + tc, and the thread owns rows tr, tr+4, tr+8, tr+12 of its warp's 16
/// (strided, so a warp's four rows fall in different shared-memory banks).
template <int D>
struct Tiles {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int Br = 16 * kWarps;          ///< query rows per block
  static constexpr int Bc = D <= 64 ? 64 : 32;    ///< key rows per K/V tile (smaller at large D: registers, smem)
  static constexpr int kRows = 4;                 ///< query rows per thread
  static constexpr int kCols = Bc / 8;            ///< S columns per thread: tc, tc+8, …
  static constexpr int kOut = D / 32;             ///< float4 columns of O per thread: 4tc + 32c
  static constexpr int kQKStride = D + 4;         ///< Q_i, K_j row stride: +4 floats moves each row 4 banks
  static constexpr int kVStride = D;              ///< V_j rows are read whole by a warp: no padding needed
  static constexpr int kPStride = Bc + 8;         ///< P̃_ij row stride: rows tr = 0..3 land 8 banks apart
  static constexpr int kStages = 2;               ///< K_j, V_j buffers: load j+1 while using j

  static constexpr int kQiFloats = Br * kQKStride;
  static constexpr int kKjFloats = Bc * kQKStride;
  static constexpr int kVjFloats = Bc * kVStride;
  static constexpr int kPFloats = Br * kPStride;
  static constexpr size_t kSmemBytes =
      sizeof(float) * (kQiFloats + kStages * (kKjFloats + kVjFloats) + kPFloats);

  static_assert(D % 32 == 0, "each thread owns D/32 float4 columns of O");
  static_assert(Bc % 8 == 0, "8 column groups per warp");
  static_assert((Br * D / 4) % kThreads == 0 && (Bc * D / 4) % kThreads == 0,
                "every thread copies the same number of 16-byte chunks");
};
//! [tile config]

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kMinusInf = -INFINITY;

/// cp.async: copies 16 bytes global → shared without passing through registers;
/// with `valid` false it writes 16 zero bytes and reads nothing (tail rows).
__device__ __forceinline__ void cp_async_16(float* smem, const float* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/// Waits until at most `Pending` committed groups are still in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

/// Starts copying rows row0 … row0+Rows−1 of a (n_rows, D) matrix into a
/// (Rows, Stride) shared tile; rows at or past n_rows become zeros.
template <int D, int Rows, int Stride, int Threads>
__device__ __forceinline__ void load_tile_async(float* tile, const float* matrix, int row0, int n_rows) {
  constexpr int kChunksPerRow = D / 4;
  constexpr int kChunks = Rows * kChunksPerRow;
#pragma unroll
  for (int e = threadIdx.x; e < kChunks; e += Threads) {
    const int r = e / kChunksPerRow, c = (e % kChunksPerRow) * 4;
    const bool valid = row0 + r < n_rows;
    // A zero-filling copy reads nothing, but its address must still be a valid one.
    const float* src = matrix + static_cast<int64_t>(valid ? row0 + r : 0) * D + c;
    cp_async_16(tile + r * Stride + c, src, valid);
  }
}

__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }

__device__ __forceinline__ float component(const float4& v, int k) {
  return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

/// The max over the 8 lanes that share a row (lanes 8tr … 8tr+7).
__device__ __forceinline__ float row_max8(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
}
/// The sum over the 8 lanes that share a row.
__device__ __forceinline__ float row_sum8(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x + __shfl_xor_sync(0xffffffffu, x, 4);
}

/// One block computes O_i and L_i of query tile i of one (batch, head).
/// Grid: (T_r, B·H). Q, O: (B·H, n_q, D); K, V: (B·H, n_kv, D); L: (B·H, n_q).
template <int D>
__global__ void __launch_bounds__(Tiles<D>::kThreads)
    fa2_forward_kernel(const float* __restrict__ Q, const float* __restrict__ K, const float* __restrict__ V,
                       float* __restrict__ O, float* __restrict__ L, int n_q, int n_kv, float scale, bool causal) {
  using T = Tiles<D>;
  constexpr int Br = T::Br, Bc = T::Bc;
  extern __shared__ float4 smem_f4[];
  float* Qi = reinterpret_cast<float*>(smem_f4);          // Q_i: (Br, D+4) in shared memory
  float* Kj = Qi + T::kQiFloats;                           // K_j: kStages × (Bc, D+4)
  float* Vj = Kj + T::kStages * T::kKjFloats;              // V_j: kStages × (Bc, D)
  float* Pij = Vj + T::kStages * T::kVjFloats;             // P̃_ij: (Br, Bc+8); warp w owns rows 16w…16w+15

  //! [grid mapping]
  // Causal blocks differ in work (tile i sweeps i+1 diagonal's worth of K/V):
  // the hardware starts blocks in blockIdx order, so the longest go first.
  const int i = gridDim.x - 1 - blockIdx.x;                // query tile
  const int64_t bh = blockIdx.y;                           // batch·head
  const int q0 = i * Br;                                   // first query row of the tile
  Q += bh * n_q * D;
  O += bh * n_q * D;
  L += bh * n_q;
  K += bh * n_kv * D;
  V += bh * n_kv * D;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tr = lane / 8, tc = lane % 8;
  const int row0 = 16 * warp + tr;                         // this thread's rows: row0 + 4r, r < kRows
  float* Pw = Pij + 16 * warp * T::kPStride;               // this warp's 16 rows of P̃_ij
  //! [grid mapping]

  //! [causal range]
  // Causal: the last query row of this tile sees keys up to its own index, so
  // K/V tiles starting past it are skipped outright — never loaded, never masked.
  const int kv_end = causal ? min(n_kv, min(q0 + Br, n_q)) : n_kv;
  const int Tc = (kv_end + Bc - 1) / Bc;                   // K/V tiles this block sweeps
  //! [causal range]

  auto load_kv = [&](int j) {
    const int stage = j % T::kStages;
    load_tile_async<D, Bc, T::kQKStride, T::kThreads>(Kj + stage * T::kKjFloats, K, j * Bc, n_kv);
    load_tile_async<D, Bc, T::kVStride, T::kThreads>(Vj + stage * T::kVjFloats, V, j * Bc, n_kv);
  };
  // Q_i is loaded once for the whole sweep (rows past n_q become zeros).
  load_tile_async<D, Br, T::kQKStride, T::kThreads>(Qi, Q, q0, n_q);
  load_kv(0);
  cp_async_commit();

  //! [registers]
  float4 O_acc[T::kRows][T::kOut];  // O_i, unnormalised: (kRows, D/8) per thread, in registers
  float m[T::kRows];                // m_i: running row max (natural-log units), full row (same in the row's 8 lanes)
  float l[T::kRows];                // l_i: running row sum of this thread's columns only
#pragma unroll
  for (int r = 0; r < T::kRows; ++r) {
    m[r] = kMinusInf;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < T::kOut; ++c) O_acc[r][c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  //! [registers]

  for (int j = 0; j < Tc; ++j) {
    const int stage = j % T::kStages;
    if (j + 1 < Tc) {
      load_kv(j + 1);                // into the other stage, which iteration j−1 finished with
      cp_async_commit();
      cp_async_wait<1>();            // everything but tile j+1 has landed: Q_i and tile j
    } else {
      cp_async_wait<0>();
    }
    // Other threads' copies of tile j must have landed too before anyone reads it.
    __syncthreads();
    const float* Ks = Kj + stage * T::kKjFloats;
    const float* Vs = Vj + stage * T::kVjFloats;

    //! [scores]
    // S_ij = Q_i K_jᵀ: this thread's (kRows, kCols) slice, rows row0+4r, columns tc+8c.
    float S[T::kRows][T::kCols];
#pragma unroll
    for (int r = 0; r < T::kRows; ++r)
#pragma unroll
      for (int c = 0; c < T::kCols; ++c) S[r][c] = 0.0f;
#pragma unroll 4
    for (int k = 0; k < D; k += 4) {
      float4 q[T::kRows], kk[T::kCols];
#pragma unroll
      for (int r = 0; r < T::kRows; ++r) q[r] = load4(Qi + (row0 + 4 * r) * T::kQKStride + k);
#pragma unroll
      for (int c = 0; c < T::kCols; ++c) kk[c] = load4(Ks + (tc + 8 * c) * T::kQKStride + k);
#pragma unroll
      for (int r = 0; r < T::kRows; ++r)
#pragma unroll
        for (int c = 0; c < T::kCols; ++c) {
          S[r][c] = fmaf(q[r].x, kk[c].x, S[r][c]);
          S[r][c] = fmaf(q[r].y, kk[c].y, S[r][c]);
          S[r][c] = fmaf(q[r].z, kk[c].z, S[r][c]);
          S[r][c] = fmaf(q[r].w, kk[c].w, S[r][c]);
        }
    }
    //! [scores]

    //! [online softmax]
    // Only tiles that cross the diagonal or the end of K need a mask.
    const int kv0 = j * Bc;
    const bool masked = kv0 + Bc > n_kv || (causal && kv0 + Bc - 1 > q0);
#pragma unroll
    for (int r = 0; r < T::kRows; ++r) {
      const int q = q0 + row0 + 4 * r;
      float tile_max = kMinusInf;
#pragma unroll
      for (int c = 0; c < T::kCols; ++c) {
        const int key = kv0 + tc + 8 * c;
        float s = S[r][c] * scale;
        if (masked && (key >= n_kv || (causal && key > q))) s = kMinusInf;
        S[r][c] = s;
        tile_max = fmaxf(tile_max, s);
      }
      // m_new = max(m_old, rowmax(S_ij)). Every row sees key 0 in tile 0, so m_new
      // is finite from the first tile on and the exponents below are never NaN.
      const float m_new = fmaxf(m[r], row_max8(tile_max));
      // The only rescale FA2 keeps: exp(m_old − m_new) (0 in tile 0, where m_old = −∞).
      const float alpha = exp2f((m[r] - m_new) * kLog2e);
      m[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < T::kCols; ++c) {
        const float p = exp2f((S[r][c] - m_new) * kLog2e);  // P̃_ij = exp(S_ij − m_new); masked → 0
        Pw[(tr + 4 * r) * T::kPStride + tc + 8 * c] = p;
        sum += p;
      }
      // l is kept per thread (its own columns) and summed across the row's lanes
      // once, at the end: every lane rescales its part by the same alpha.
      l[r] = alpha * l[r] + sum;
#pragma unroll
      for (int c = 0; c < T::kOut; ++c) {
        O_acc[r][c].x *= alpha;
        O_acc[r][c].y *= alpha;
        O_acc[r][c].z *= alpha;
        O_acc[r][c].w *= alpha;
      }
    }
    // P̃_ij goes through shared memory because O's columns are split over the
    // lanes differently from S's: the lanes of this warp must see each other's P̃.
    __syncwarp();
    //! [online softmax]

    //! [pv]
    // O_i += P̃_ij V_j: this thread's (kRows, D/8) slice, columns 4tc + 32c … +3.
#pragma unroll 2
    for (int k = 0; k < Bc; k += 4) {
      float4 p[T::kRows];
#pragma unroll
      for (int r = 0; r < T::kRows; ++r) p[r] = load4(Pw + (tr + 4 * r) * T::kPStride + k);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        float4 v[T::kOut];
#pragma unroll
        for (int c = 0; c < T::kOut; ++c) v[c] = load4(Vs + (k + kk) * T::kVStride + 4 * tc + 32 * c);
#pragma unroll
        for (int r = 0; r < T::kRows; ++r) {
          const float pr = component(p[r], kk);
#pragma unroll
          for (int c = 0; c < T::kOut; ++c) {
            O_acc[r][c].x = fmaf(pr, v[c].x, O_acc[r][c].x);
            O_acc[r][c].y = fmaf(pr, v[c].y, O_acc[r][c].y);
            O_acc[r][c].z = fmaf(pr, v[c].z, O_acc[r][c].z);
            O_acc[r][c].w = fmaf(pr, v[c].w, O_acc[r][c].w);
          }
        }
      }
    }
    //! [pv]
    // Iteration j+1 starts loading tile j+2 into this stage, and rewrites P̃:
    // every warp must be done reading both first.
    __syncthreads();
  }

  //! [epilogue]
  // Once per row: l_i = Σ over the row's 8 lanes, O_i = O_i / l_i, L_i = m_i + log l_i,
  // each written to global memory exactly once.
#pragma unroll
  for (int r = 0; r < T::kRows; ++r) {
    const int q = q0 + row0 + 4 * r;
    const float l_row = row_sum8(l[r]);
    if (q >= n_q) continue;  // a tail row of the last tile: computed on zeros, never stored
    const float inv_l = 1.0f / l_row;
#pragma unroll
    for (int c = 0; c < T::kOut; ++c) {
      const float4 o = O_acc[r][c];
      *reinterpret_cast<float4*>(O + static_cast<int64_t>(q) * D + 4 * tc + 32 * c) =
          make_float4(o.x * inv_l, o.y * inv_l, o.z * inv_l, o.w * inv_l);
    }
    if (tc == 0) L[q] = m[r] + logf(l_row);
  }
  //! [epilogue]
}

/// The kernel's resource report: registers, spills, shared memory, blocks per SM.
template <int D>
void report_resources(common::Result& result) {
  cudaFuncAttributes attr{};
  CUDA_CHECK(cudaFuncGetAttributes(&attr, fa2_forward_kernel<D>));
  int blocks_per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, fa2_forward_kernel<D>,
                                                           Tiles<D>::kThreads, Tiles<D>::kSmemBytes));
  result.extra.emplace_back("registers", attr.numRegs);
  result.extra.emplace_back("local_bytes", static_cast<double>(attr.localSizeBytes));
  result.extra.emplace_back("smem_bytes", static_cast<double>(Tiles<D>::kSmemBytes));
  result.extra.emplace_back("blocks_per_sm", blocks_per_sm);
  result.extra.emplace_back("Br", Tiles<D>::Br);
  result.extra.emplace_back("Bc", Tiles<D>::Bc);
}

//! [launch]
/// Uploads, poisons the outputs, launches (and times `options.repeat` more launches).
template <int D>
void run(const common::Problem& problem, const common::Options& options, common::Result& result) {
  using T = Tiles<D>;
  const common::Shape& s = problem.shape;
  CUDA_CHECK(cudaFuncSetAttribute(fa2_forward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(T::kSmemBytes)));
  report_resources<D>(result);

  common::cuda::DeviceBuffer<float> q(problem.q), k(problem.k), v(problem.v);
  common::cuda::DeviceBuffer<float> o(result.o.size()), lse(result.lse.size());
  o.poison();  // NaN everywhere: an element the kernel does not write fails the check
  lse.poison();

  const int n_q = static_cast<int>(s.seq_q), n_kv = static_cast<int>(s.seq_kv);
  const dim3 grid(static_cast<unsigned>((n_q + T::Br - 1) / T::Br), static_cast<unsigned>(s.batch_heads()));
  const auto launch = [&] {
    fa2_forward_kernel<D><<<grid, T::kThreads, T::kSmemBytes>>>(q.data(), k.data(), v.data(), o.data(),
                                                                  lse.data(), n_q, n_kv, problem.scale,
                                                                  problem.causal);
    CUDA_CHECK_LAUNCH();
  };
  launch();
  CUDA_CHECK(cudaDeviceSynchronize());
  o.download(result.o);
  lse.download(result.lse);

  if (options.repeat > 0) {
    launch();  // warm-up
    common::cuda::EventTimer timer;
    for (int r = 0; r < options.repeat; ++r) {
      timer.start();
      launch();
      result.kernel_ms.push_back(timer.stop_ms());
    }
  }
}
//! [launch]

/// Throws InputError if the problem cannot run: too many (batch, head) pairs for
/// the grid's y dimension, or tensors that do not fit in free device memory.
void check_fits(const common::Shape& s) {
  if (s.batch_heads() > 65535) {
    throw common::InputError("step06_fa2: batch*heads = " + std::to_string(s.batch_heads()) +
                             " is more than the grid allows (at most 65535)");
  }
  const double bytes = sizeof(float) * (2.0 * s.q_elements() + 2.0 * s.kv_elements() + s.lse_elements());
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (bytes > static_cast<double>(free_bytes)) {
    throw common::InputError("step06_fa2: the problem needs " + std::to_string(bytes / (1 << 20)) +
                             " MiB of GPU memory for Q, K, V, O and L, but only " +
                             std::to_string(free_bytes >> 20) + " MiB are free; use smaller sizes");
  }
}

}  // namespace

common::Result attention_forward(const common::Problem& problem, const common::Options& options) {
  common::validate(problem);
  common::require_head_dim(problem.shape.head_dim, describe().head_dims, "step06_fa2");
  common::cuda::require_gpu("step06_fa2");
  check_fits(problem.shape);

  common::Result result = common::allocate_result(problem.shape);
  // No working memory beyond inputs and outputs: m and l never leave the chip.
  switch (problem.shape.head_dim) {
    case 32: run<32>(problem, options, result); break;
    case 64: run<64>(problem, options, result); break;
    case 96: run<96>(problem, options, result); break;
    case 128: run<128>(problem, options, result); break;
    default: break;  // require_head_dim has thrown
  }
  return result;
}

common::StepInfo describe() {
  common::StepInfo info;
  info.name = "step06_fa2";
  info.title = "FlashAttention-2: query tiles outside, K/V inside, O/m/l in registers, one rescale, causal skip";
  info.forward = [](const common::Problem& p, const common::Options& o) { return attention_forward(p, o); };
  info.head_dims = {32, 64, 96, 128};
  info.needs_gpu = true;
  return info;
}

}  // namespace step06
