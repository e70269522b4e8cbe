/// \file step06_fa2/attention.cu
/// \brief Step 6 — FlashAttention-2 forward on the GPU, fp32.
///
/// This step extends step 5 (Algorithm 1 with the working set in registers) by
/// the three changes of FlashAttention-2 (Dao 2023, Algorithm 1 there):
///  1. The loops swap. A block owns one query tile Q_i and sweeps every K_j, V_j
///     tile (the inner loop); the grid covers (query tile × batch·head), so even
///     one head gives T_r independent blocks. Warps split the rows of Q_i, so no
///     warp ever needs another warp's partial O_i.
///  2. O_i, m_i and l_i stay in registers for the whole sweep. O_i is kept
///     unnormalised: a new tile only rescales it by exp(m_old − m_new); the
///     division by l_i happens once at the end, and O_i and L_i = m_i + log l_i
///     are written to global memory once. There are no O, l, m round trips.
///  3. Causal: K/V tiles entirely above the diagonal are skipped, never loaded
///     or masked; only tiles that cross the diagonal (or the end of K) are masked.
/// Why: step 5 reads and writes O, l, m in global memory for every (j, i) and
/// rescales O by l each time, and it has only B·H blocks; FA2 removes that
/// traffic and those divisions, fills the GPU at any B·H, and halves causal work.
///
/// Two engineering changes make the new structure pay off, each said where it is:
/// K_j, V_j arrive by cp.async, double-buffered (tile j+1 is in flight while tile
/// j is used; step 5 prefetches only Q_i); and P̃_ij goes to the thread that
/// needs it through shared memory (one float4 per 4 columns) instead of shuffles. Scores
/// and O use plain fp32 FFMA: TF32 tensor cores would not pass the fp32 tolerance.
///
/// Run: build/bin/step06_fa2 --batch 4 --heads 16 --seq-q 4096 --seq-kv 4096 --head-dim 128 --repeat 20
///      build/bin/step06_fa2 --seq-q 1000 --seq-kv 333 --head-dim 64 --causal --check
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

namespace step06 {

namespace {

constexpr int kThreads = 128;             // threads per block
constexpr int kWarps = kThreads / 32;     // warps per block
constexpr int kWarpSize = 32;
constexpr int kPad = 4;                   // floats of padding per row (see Tiles::ld)
constexpr int kStages = 2;                // K_j, V_j buffers: tile j+1 loads while tile j is used

//! [mapping]
// A warp is 4 × 8 lanes: lane = row_lane · 8 + col_lane. Row r of a tile
// belongs to the 8 lanes of one row_lane; they split its columns.
constexpr int kRowLanes = 4;
constexpr int kColLanes = 8;
constexpr int kRowsPerThread = 4;  // rows of S_ij and O_i per thread

/// The tiles for head dimension d. B_r = 4 warps × 4 row lanes × 4 rows = 64;
/// B_c = 64 for d <= 64 and 32 above (registers: a thread holds 4 × B_c/8 of
/// S_ij and 4 × d/8 of O_i; shared memory: two blocks per SM).
template <int d>
struct Tiles {
  static_assert(d % 32 == 0, "d must be a multiple of 32 (8 column lanes × one float4 per 32 columns)");
  static constexpr int Br = kWarps * kRowLanes * kRowsPerThread;
  static constexpr int Bc = d <= 64 ? 64 : 32;
  static constexpr int kSCols = Bc / kColLanes;       // S_ij columns per thread: cg + 8·n
  static constexpr int kOCols = d / (4 * kColLanes);  // float4s of O_i per thread: 4·cg + 32·n
  /// Row stride of Q_i, K_j, V_j in shared memory: d + 4 floats, so the float4s
  /// that the 8 column lanes read from 8 different rows start in different banks.
  static constexpr int ld = d + kPad;
  /// Row stride of P̃_ij: B_c + 8, so the 4 row lanes' rows start 8 banks apart.
  static constexpr int ld_p = Bc + 2 * kPad;
  /// Shared memory: Q_i (B_r, ld); kStages × K_j, V_j (B_c, ld); P̃_ij (B_r, ld_p).
  static constexpr size_t smem_bytes =
      (size_t(Br) * ld + size_t(kStages) * 2 * Bc * ld + size_t(Br) * ld_p) * sizeof(float);
  static_assert((Br * d / 4) % kThreads == 0 && (Bc * d / 4) % kThreads == 0,
                "every thread copies the same number of 16-byte pieces of a tile");
};
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

__device__ float component(float4 v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }

using common::cuda::cp_async_16;     // the cp.async helpers live in common/cuda/cp_async.cuh
using common::cuda::cp_async_commit;
using common::cuda::cp_async_wait;

//! [async copy]
/// Starts copying rows row0 … row0 + kRows − 1 of a (n_rows, d) matrix into a
/// (kRows, ld) shared tile; rows at or past n_rows become zeros.
template <int d, int kRows>
__device__ void load_tile_async(float* tile, const float* matrix, int row0, int n_rows) {
  constexpr int d4 = d / 4, ld = Tiles<d>::ld;
#pragma unroll
  for (int e = threadIdx.x; e < kRows * d4; e += kThreads) {
    const int r = e / d4, k4 = e % d4;
    const bool inside = row0 + r < n_rows;
    // A zero-filling copy reads nothing, but its address must still be a valid one.
    cp_async_16(tile + r * ld + 4 * k4, matrix + size_t(inside ? row0 + r : 0) * d + 4 * k4, inside);
  }
}
//! [async copy]

/// FlashAttention-2 for one query tile of one (batch, head) per block.
/// Grid: (T_r, B·H). Q, O: (B·H, N_q, d); K, V: (B·H, N_kv, d); L: (B·H, N_q).
template <int d>
__global__ void __launch_bounds__(kThreads)
    attention_kernel(const float* __restrict__ Q_all, const float* __restrict__ K_all,
                     const float* __restrict__ V_all, float* __restrict__ O_all, float* __restrict__ L_all, int n_q,
                     int n_kv, float scale, bool causal) {
  using T = Tiles<d>;
  constexpr int Bc = T::Bc, Br = T::Br, ld = T::ld, ld_p = T::ld_p, kSCols = T::kSCols, kOCols = T::kOCols;
  constexpr int TR = kRowsPerThread;
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int rl = lane / kColLanes, cg = lane % kColLanes;  // row lane, column lane

  //! [grid]
  // Causal query tiles differ in work (tile i sweeps about i + 1 tiles of K/V);
  // blocks start roughly in blockIdx order, so the longest go first.
  const int i = gridDim.x - 1 - blockIdx.x;  // this block's query tile
  const size_t bh = blockIdx.y;              // this block's (batch, head)
  const int q0 = i * Br, rows = min(Br, n_q - q0);
  const float* Q = Q_all + bh * n_q * d;     // Q, O: (N_q, d); K, V: (N_kv, d); L: (N_q) in global memory
  const float* K = K_all + bh * n_kv * d;
  const float* V = V_all + bh * n_kv * d;
  float* O = O_all + bh * n_q * d;
  float* L = L_all + bh * n_q;
  //! [grid]

  //! [causal skip]
  // Causal: the last row of this tile sees keys up to its own index, so the K/V
  // tiles past it are skipped outright — never loaded, never masked.
  const int kv_end = causal ? min(n_kv, q0 + rows) : n_kv;
  const int Tc = (kv_end + Bc - 1) / Bc;  // K/V tiles this block sweeps
  //! [causal skip]

  //! [registers]
  extern __shared__ float4 smem4[];  // float4: 16-byte alignment for the tiles
  float* Qi = reinterpret_cast<float*>(smem4);  // Q_i: (B_r, d), row stride ld, in shared memory
  float* Kj = Qi + Br * ld;                     // K_j: kStages × (B_c, d), row stride ld
  float* Vj = Kj + kStages * Bc * ld;           // V_j: kStages × (B_c, d), row stride ld
  float* Pij = Vj + kStages * Bc * ld;          // P̃_ij: (B_r, B_c), row stride ld_p; each warp its own rows

  float4 Oi[TR][kOCols];  // O_i, unnormalised: (TR, d/8) in registers — rows row(t), columns 4·cg + 32·n .. +3
  float Sij[TR][kSCols];  // S_ij, then P̃_ij: (TR, B_c/8) in registers — columns cg + 8·n
  float mi[TR];           // m_i of this thread's rows (the whole row's max: equal in its 8 lanes)
  float li[TR];           // l_i of this thread's rows, over this thread's columns only (summed at the end)
  // Row t of this thread's slice within the tile: warps take 16 rows each.
  const auto row = [&](int t) { return warp * kRowLanes * TR + t * kRowLanes + rl; };
#pragma unroll
  for (int t = 0; t < TR; ++t) {
    mi[t] = -INFINITY;
    li[t] = 0.0f;
#pragma unroll
    for (int n = 0; n < kOCols; ++n) Oi[t][n] = make_float4(0, 0, 0, 0);
  }
  //! [registers]

  // Q_i once, for the whole sweep, and K_0, V_0: one group of copies.
  load_tile_async<d, Br>(Qi, Q, q0, n_q);
  load_tile_async<d, Bc>(Kj, K, 0, n_kv);
  load_tile_async<d, Bc>(Vj, V, 0, n_kv);
  cp_async_commit();

  //! [fa2 loop]
  for (int j = 0; j < Tc; ++j) {  // K/V tiles, the inner loop of FA2
    const int kv0 = j * Bc;
    const float* Ks = Kj + (j % kStages) * Bc * ld;
    const float* Vs = Vj + (j % kStages) * Bc * ld;
    if (j + 1 < Tc) {
      // Tile j + 1 into the other stage, which iteration j − 1 has finished with.
      load_tile_async<d, Bc>(Kj + ((j + 1) % kStages) * Bc * ld, K, kv0 + Bc, n_kv);
      load_tile_async<d, Bc>(Vj + ((j + 1) % kStages) * Bc * ld, V, kv0 + Bc, n_kv);
      cp_async_commit();
      cp_async_wait<1>();  // all but the newest group have landed: Q_i and tile j
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // every thread's copies of tile j have landed before anyone reads them

    // S_ij = Q_i K_jᵀ, this thread's TR × B_c/8 entries. Per float4 step of d,
    // TR + B_c/8 shared loads feed TR · B_c/8 · 4 FMAs.
#pragma unroll
    for (int t = 0; t < TR; ++t) {
#pragma unroll
      for (int n = 0; n < kSCols; ++n) Sij[t][n] = 0.0f;
    }
#pragma unroll 4
    for (int k4 = 0; k4 < d / 4; ++k4) {
      float4 q[TR];
#pragma unroll
      for (int t = 0; t < TR; ++t) q[t] = reinterpret_cast<const float4*>(Qi + row(t) * ld)[k4];
#pragma unroll
      for (int n = 0; n < kSCols; ++n) {
        const float4 k = reinterpret_cast<const float4*>(Ks + (cg + kColLanes * n) * ld)[k4];
#pragma unroll
        for (int t = 0; t < TR; ++t) {
          Sij[t][n] = fmaf(q[t].x, k.x, Sij[t][n]);
          Sij[t][n] = fmaf(q[t].y, k.y, Sij[t][n]);
          Sij[t][n] = fmaf(q[t].z, k.z, Sij[t][n]);
          Sij[t][n] = fmaf(q[t].w, k.w, Sij[t][n]);
        }
      }
    }

    // Online softmax. Only a tile that crosses the diagonal or the end of K has
    // hidden entries (past N_kv, or above the causal diagonal): they become −∞.
    const bool masked = kv0 + Bc > n_kv || (causal && kv0 + Bc - 1 > q0);
#pragma unroll
    for (int t = 0; t < TR; ++t) {
      const int r = row(t);
      float m_tilde = -INFINITY;
#pragma unroll
      for (int n = 0; n < kSCols; ++n) {
        const int c = cg + kColLanes * n;
        const bool hidden = masked && (kv0 + c >= n_kv || (causal && kv0 + c > q0 + r));
        Sij[t][n] = hidden ? -INFINITY : scale * Sij[t][n];
        m_tilde = fmaxf(m_tilde, Sij[t][n]);
      }
      // m_new = max(m_i, rowmax(S_ij)). Every row sees key 0 in tile 0, so m_new is
      // finite from the first tile on and no exponent below is ever NaN.
      const float m_new = fmaxf(mi[t], row_max(m_tilde));
      // FA2's only per-tile rescale: exp(m_i − m_new), 0 in tile 0 (m_i = −∞).
      const float alpha = expf(mi[t] - m_new);
      float l_tilde = 0.0f;
#pragma unroll
      for (int n = 0; n < kSCols; ++n) {
        const float p = expf(Sij[t][n] - m_new);  // P̃_ij = exp(S_ij − m_new); hidden → 0
        Pij[r * ld_p + cg + kColLanes * n] = p;
        l_tilde += p;
      }
      // Each lane rescales its own part of l_i by the same alpha; the 8 parts
      // of a row are added once, at the end, not once per tile.
      li[t] = alpha * li[t] + l_tilde;
      mi[t] = m_new;
#pragma unroll
      for (int n = 0; n < kOCols; ++n) {
        Oi[t][n] = make_float4(alpha * Oi[t][n].x, alpha * Oi[t][n].y, alpha * Oi[t][n].z, alpha * Oi[t][n].w);
      }
    }
    // The P̃_ij values a lane needs for P̃_ij V_j were written by the other lanes
    // of its row: they must have landed in shared memory (only this warp's rows).
    __syncwarp();

    // O_i += P̃_ij V_j, no division: this thread's TR × d/8 entries. Per 4
    // columns of P̃_ij, TR + 4 · d/32 shared loads feed TR · d/8 · 4 FMAs.
#pragma unroll 2
    for (int c4 = 0; c4 < Bc; c4 += 4) {
      float4 p[TR];
#pragma unroll
      for (int t = 0; t < TR; ++t) p[t] = *reinterpret_cast<const float4*>(Pij + row(t) * ld_p + c4);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
#pragma unroll
        for (int n = 0; n < kOCols; ++n) {
          const float4 v = reinterpret_cast<const float4*>(Vs + (c4 + c) * ld)[cg + kColLanes * n];
#pragma unroll
          for (int t = 0; t < TR; ++t) Oi[t][n] = fma4(component(p[t], c), v, Oi[t][n]);
        }
      }
    }
    // Iteration j + 1 loads tile j + 2 over this stage and rewrites P̃_ij:
    // every warp must have finished reading both.
    __syncthreads();
  }
  //! [fa2 loop]

  //! [epilogue]
  // Once per row: l_i = the sum of its 8 lanes' parts, O_i / l_i and L_i = m_i + log l_i,
  // each written to global memory exactly once.
#pragma unroll
  for (int t = 0; t < TR; ++t) {
    const float l_row = row_sum(li[t]);
    if (row(t) >= rows) continue;  // a tail row of the last tile: computed on zeros, never stored
    const size_t q = size_t(q0 + row(t));
    const float inv_l = 1.0f / l_row;
#pragma unroll
    for (int n = 0; n < kOCols; ++n) {
      const float4 o = Oi[t][n];
      reinterpret_cast<float4*>(O + q * d)[cg + kColLanes * n] =
          make_float4(inv_l * o.x, inv_l * o.y, inv_l * o.z, inv_l * o.w);
    }
    if (cg == 0) L[q] = mi[t] + logf(l_row);
  }
  //! [epilogue]
}

//! [launch]
/// Launches the kernel for head dimension d: one block per (query tile, batch·head),
/// the shared memory of Tiles<d>, raised above the default 48 KB.
template <int d>
void launch(const common::Problem& problem, common::cuda::DeviceProblem& dev) {
  using T = Tiles<d>;
  const common::Shape& s = problem.shape;
  CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<d>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(T::smem_bytes)));
  const dim3 grid(static_cast<unsigned>((s.seq_q + T::Br - 1) / T::Br), static_cast<unsigned>(s.batch_heads()));
  attention_kernel<d><<<grid, kThreads, T::smem_bytes>>>(dev.q.data(), dev.k.data(), dev.v.data(), dev.o.data(),
                                                         dev.lse.data(), static_cast<int>(s.seq_q),
                                                         static_cast<int>(s.seq_kv), problem.scale, problem.causal);
  CUDA_CHECK_LAUNCH();
}
//! [launch]

/// The launcher for head dimension d, chosen at run time from the compiled set.
using Launcher = void (*)(const common::Problem&, common::cuda::DeviceProblem&);

Launcher launcher_for(int64_t d) {
  switch (d) {
    case 32: return launch<32>;
    case 64: return launch<64>;
    case 96: return launch<96>;
    case 128: return launch<128>;
    default: return nullptr;  // unreachable after require_head_dim
  }
}

/// B_c, B_r, shared memory, and the compiler's registers and local (spill)
/// bytes, and the blocks per SM they allow, for the report.
template <int d>
std::vector<std::pair<std::string, double>> tiles_report() {
  cudaFuncAttributes attributes{};
  CUDA_CHECK(cudaFuncGetAttributes(&attributes, attention_kernel<d>));
  CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<d>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(Tiles<d>::smem_bytes)));
  int blocks_per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, attention_kernel<d>, kThreads,
                                                           Tiles<d>::smem_bytes));
  return {{"B_c", double(Tiles<d>::Bc)},
          {"B_r", double(Tiles<d>::Br)},
          {"smem_bytes", double(Tiles<d>::smem_bytes)},
          {"registers", double(attributes.numRegs)},
          {"local_bytes", double(attributes.localSizeBytes)},
          {"blocks_per_sm", double(blocks_per_sm)}};
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
  const std::string name = "step06_fa2";
  common::validate(problem);
  common::require_head_dim(problem.shape.head_dim, kHeadDims, name);
  common::cuda::require_gpu(name);
  const common::Shape& s = problem.shape;
  if (s.batch_heads() > 65535) {
    throw common::InputError(name + ": batch*heads = " + std::to_string(s.batch_heads()) +
                             " is more than the grid's y dimension holds (at most 65535)");
  }

  // No working arrays: m and l never leave the chip.
  common::cuda::DeviceProblem dev(problem, 0, name);
  const Launcher launcher = launcher_for(s.head_dim);
  common::Result result = common::allocate_result(s);
  result.kernel_ms = common::cuda::run_and_time(options, [&] { launcher(problem, dev); });
  dev.download(result);
  result.extra = tiles_report_for(s.head_dim);
  return result;
}

common::StepInfo describe() {
  common::StepInfo info;
  info.name = "step06_fa2";
  info.title = "FlashAttention-2: Q tiles outside, K/V inside; O_i, m_i, l_i in registers, one rescale; causal skip";
  info.forward = [](const common::Problem& p, const common::Options& o) { return attention_forward(p, o); };
  info.head_dims = kHeadDims;
  info.needs_gpu = true;
  return info;
}

}  // namespace step06
