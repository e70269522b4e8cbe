/// \file step03_simulated_threads/attention.cpp
/// \brief Step 3 — FlashAttention-1, Algorithm 1, as a CUDA kernel on a simulator that checks and counts.
///
/// This step extends step 2 (Algorithm 1 on the CPU) by writing it the way a
/// GPU runs it, as the kernel that step 4 runs on a real GPU, line for line:
///  1. The grid has one thread block per (batch, head), as in the paper's
///     FlashAttention-1; a block of kThreads threads walks the K/V tiles j (outer
///     loop) and the Q tiles i (inner loop) of its head. Loads, stores and the
///     scores are split element by element over the threads; a warp (32 threads)
///     takes a row for the softmax and reduces it with warp shuffles.
///  2. Q_i, K_j, V_j, S_ij and O_i, m_i, l_i live in the block's shared memory
///     (the paper's SRAM); O, l and m live in global memory (HBM) and are read
///     and written back on every (j, i), exactly as lines 8 and 12–13 say.
///  3. Threads that read what other threads wrote wait at a barrier first
///     (`syncthreads`, CUDA's `__syncthreads`).
/// Why: on a GPU, threads and shared memory bring new bugs — a missing barrier,
/// overlapping buffers, an off-by-one guard — that give wrong answers only
/// sometimes. The simulator (simulator.hpp) runs the kernel's threads as OS
/// threads and checks every access, so these bugs are reported with the
/// buffer, index, threads and barrier phase, before step 4 runs on a GPU.
/// It also counts global traffic, which must equal step 2's closed form.
/// `scripts/diff-steps 03 04` shows what step 4 changes: simulator calls become
/// CUDA keywords, scalar loads become float4, the tiles become compile-time.
///
/// Run: build/bin/step03_simulated_threads --seq-q 256 --seq-kv 256 --head-dim 64 --check
///      build/bin/step03_simulated_threads --seq-q 100 --seq-kv 37 --head-dim 8 --sram-floats 256 --causal
#include "attention.hpp"

#include <algorithm>
#include <cmath>

#include "common/io_complexity.hpp"
#include "common/workspace.hpp"

namespace step03 {

using sim::blockIdx;
using sim::shfl_xor_sync;
using sim::syncthreads;
using sim::threadIdx;
using std::min;

namespace {

constexpr int kThreads = 64;              // threads per block (OS threads here: few keep the simulator fast)
constexpr int kWarps = kThreads / 32;     // warps per block
constexpr int kWarpSize = 32;
constexpr int kPad = 4;                   // floats of padding per row (see Tiles::ld)

//! [tiles]
/// The tiles of Algorithm 1 for head dimension d, from the budget M (--sram-floats).
Tiles make_tiles(int64_t sram_floats, const common::Shape& shape) {
  // Line 1: B_c = ⌈M/4d⌉, B_r = min(B_c, d), exactly as in step 2 (so the counted
  // traffic is step 2's closed form for any M). Step 4 fixes M and d at compile
  // time and rounds B_c down to whole warps, so that the 32 lanes of a warp read
  // 32 different rows of K_j; the loops need no such rounding (lanes past B_c
  // hold −∞ and 0), and here d may be any d ≥ 1, not only a multiple of 32.
  const common::Algorithm1Tiles t = common::algorithm1_tiles(sram_floats, shape);
  Tiles T;
  T.d = int(shape.head_dim);
  T.Bc = int(t.Bc);
  T.Br = int(t.Br);
  // Row stride d + 4 floats, as in step 4 (where it spreads a warp's float4 rows
  // over the memory banks; the simulator has no banks, but keeps the layout).
  T.ld = T.d + kPad;
  return T;
}
//! [tiles]

/// The largest `x` of the warp's 32 lanes, in every lane.
float warp_max(float x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) x = fmaxf(x, shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

/// The sum of `x` over the warp's 32 lanes, in every lane.
float warp_sum(float x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) x += shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

/// Algorithm 1 for one (batch, head) per block. Q, K, V, O, L as in the
/// contract; l and m are (B, H, N_q) working arrays in global memory.
//! [kernel]
void attention_kernel(sim::Global<const float> Q_all, sim::Global<const float> K_all,
                      sim::Global<const float> V_all, sim::Global<float> O_all, sim::Global<float> l_all,
                      sim::Global<float> m_all, sim::Global<float> L_all, int n_q, int n_kv, float scale,
                      bool causal, Tiles T) {
  const int Bc = T.Bc, Br = T.Br, ld = T.ld, d = T.d;
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int Tc = (n_kv + Bc - 1) / Bc, Tr = (n_q + Br - 1) / Br;

  // This block's head: Q, O: (N_q, d); K, V: (N_kv, d); l, m, L: (N_q) in global memory.
  const size_t bh = blockIdx.x;
  const auto Q = Q_all.slice(bh * n_q * d, n_q * d);
  const auto K = K_all.slice(bh * n_kv * d, n_kv * d);
  const auto V = V_all.slice(bh * n_kv * d, n_kv * d);
  const auto O = O_all.slice(bh * n_q * d, n_q * d);
  const auto l = l_all.slice(bh * n_q, n_q);
  const auto m = m_all.slice(bh * n_q, n_q);
  const auto L = L_all.slice(bh * n_q, n_q);

  //! [shared memory]
  const sim::SharedArena smem = sim::dynamic_shared();  // the block's dynamic shared memory, carved into named views
  const sim::Shared Kj = smem.view("Kj", 0, Bc * ld);                         // K_j: (B_c, d), row stride ld, in shared memory
  const sim::Shared Vj = smem.view("Vj", Kj.offset() + Bc * ld, Bc * ld);     // V_j: (B_c, d), row stride ld
  const sim::Shared Qi = smem.view("Qi", Vj.offset() + Bc * ld, Br * ld);     // Q_i: (B_r, d), row stride ld
  const sim::Shared Oi = smem.view("Oi", Qi.offset() + Br * ld, Br * ld);     // O_i: (B_r, d), row stride ld
  const sim::Shared Sij = smem.view("Sij", Oi.offset() + Br * ld, Br * Bc);   // S_ij, then P̃_ij in place: (B_r, B_c)
  const sim::Shared mi = smem.view("mi", Sij.offset() + Br * Bc, Br);         // m_i: (B_r)
  const sim::Shared li = smem.view("li", mi.offset() + Br, Br);               // l_i: (B_r)
  const sim::Shared mi_new = smem.view("mi_new", li.offset() + Br, Br);       // m_i^new: (B_r)
  const sim::Shared li_new = smem.view("li_new", mi_new.offset() + Br, Br);   // l_i^new: (B_r)
  const sim::Shared keep = smem.view("keep", li_new.offset() + Br, Br);       // diag(l_i^new)⁻¹ diag(l_i) e^(m_i − m_i^new): (B_r)
  const sim::Shared add = smem.view("add", keep.offset() + Br, Br);           // diag(l_i^new)⁻¹ e^(m̃_ij − m_i^new): (B_r)
  //! [shared memory]

  // Line 2: O = 0, l = 0, m = −∞ in global memory.
  for (int e = tid; e < n_q * d; e += kThreads) O[e] = 0.0f;
  for (int r = tid; r < n_q; r += kThreads) {
    l[r] = 0.0f;
    m[r] = -INFINITY;
  }
  syncthreads();  // the block's own global writes are visible to all its threads after a barrier

  //! [algorithm 1]
  for (int j = 0; j < Tc; ++j) {  // line 5: K/V tiles, outer loop
    const int kv0 = j * Bc, cols = min(Bc, n_kv - kv0);  // the last tile may be short
    // Line 6: load K_j, V_j from HBM to SRAM. Rows past the end are zero, so the
    // fixed-length loops below multiply zeros there, never stale values.
    for (int e = tid; e < Bc * d; e += kThreads) {
      const int c = e / d, k = e % d;
      const bool inside = c < cols;
      const float zero = 0.0f;
      Kj[c * ld + k] = inside ? K[size_t(kv0 + c) * d + k] : zero;
      Vj[c * ld + k] = inside ? V[size_t(kv0 + c) * d + k] : zero;
    }

    for (int i = 0; i < Tr; ++i) {  // line 7: Q tiles, inner loop
      const int q0 = i * Br, rows = min(Br, n_q - q0);
      // Line 8: load Q_i, O_i, l_i, m_i from HBM to SRAM.
      for (int e = tid; e < rows * d; e += kThreads) {
        const int r = e / d, k = e % d;
        Qi[r * ld + k] = Q[size_t(q0 + r) * d + k];
        Oi[r * ld + k] = O[size_t(q0 + r) * d + k];
      }
      for (int r = tid; r < rows; r += kThreads) {
        li[r] = l[q0 + r];
        mi[r] = m[q0 + r];
      }
      syncthreads();  // K_j, V_j, Q_i, O_i, l_i, m_i complete before anyone reads them

      // Line 9: S_ij = scale · Q_i K_jᵀ. Neighbouring threads compute neighbouring
      // columns of one row: Q_i's row is shared, K_j's rows are different rows.
      // Hidden entries (past N_kv, or above the causal diagonal) are −∞.
      for (int e = tid; e < Br * Bc; e += kThreads) {
        const int r = e / Bc, c = e % Bc;
        float s = -INFINITY;
        if (r < rows && c < cols && !(causal && kv0 + c > q0 + r)) {
          float dot = 0.0f;
          for (int k = 0; k < d; ++k) dot = fmaf(Qi[r * ld + k], Kj[c * ld + k], dot);
          s = scale * dot;
        }
        Sij[r * Bc + c] = s;
      }
      syncthreads();  // all of S_ij is written before a warp reduces a row of it

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
      syncthreads();  // P̃_ij and the factors are complete before line 12 reads them

      // Line 12: O_i ← keep · O_i + add · P̃_ij V_j; write O_i back to HBM. A
      // thread owns one element of O_i (step 4: four neighbouring ones, a float4).
      for (int e = tid; e < rows * d; e += kThreads) {
        const int r = e / d, k = e % d;
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
      // Line 13: write l_i^new, m_i^new back to HBM.
      for (int r = tid; r < rows; r += kThreads) {
        l[q0 + r] = li_new[r];
        m[q0 + r] = mi_new[r];
      }
      // Faster threads would otherwise load the next Q_i, O_i (or, after the
      // last i, the next K_j, V_j) over tiles that slower threads still read.
      syncthreads();
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

}  // namespace

int threads_per_block() { return kThreads; }

common::Result run_kernel(Kernel kernel, const common::Problem& problem, const common::Options& options) {
  common::validate(problem);
  const common::Shape& shape = problem.shape;
  const int64_t M = options.sram_floats > 0 ? options.sram_floats : kDefaultSramFloats;

  //! [launch]
  const Tiles T = make_tiles(M, shape);
  common::Result result = common::allocate_result(shape);
  common::Workspace<float> l_hbm(static_cast<size_t>(shape.lse_elements()));  // l: (B, H, N_q) in "HBM"
  common::Workspace<float> m_hbm(static_cast<size_t>(shape.lse_elements()));  // m: (B, H, N_q) in "HBM"

  sim::Device device;
  const auto Q = device.global("Q", problem.q);
  const auto K = device.global("K", problem.k);
  const auto V = device.global("V", problem.v);
  const auto O = device.global("O", result.o.data(), shape.q_elements());
  const auto l = device.global("l", l_hbm.data(), shape.lse_elements());
  const auto m = device.global("m", m_hbm.data(), shape.lse_elements());
  const auto L = device.global("L", result.lse.data(), shape.lse_elements());

  // One block of kThreads threads per (batch, head), the shared memory of the tiles.
  const sim::dim3 grid{unsigned(shape.batch_heads())};
  const sim::dim3 block{unsigned(kThreads)};
  const int64_t shared_bytes = T.smem_floats() * int64_t(sizeof(float));
  const sim::Counters counters = device.launch(grid, block, shared_bytes, kernel, Q, K, V, O, l, m, L,
                                               int(shape.seq_q), int(shape.seq_kv), problem.scale, problem.causal, T);
  //! [launch]

  result.traffic = common::Traffic{counters.global_read_bytes(), counters.global_write_bytes()};
  const common::Traffic closed = common::algorithm1_traffic(shape, common::algorithm1_tiles(M, shape));
  result.extra = {{"B_c", double(T.Bc)},
                  {"B_r", double(T.Br)},
                  {"sram_floats", double(M)},
                  {"threads_per_block", double(block.count())},
                  {"shared_bytes_per_block", double(shared_bytes)}};
  for (const sim::Counters::Tensor& t : counters.global) {  // the directions a tensor is moved in
    if (t.read_bytes > 0) result.extra.push_back({t.name + "_read_bytes", double(t.read_bytes)});
    if (t.write_bytes > 0) result.extra.push_back({t.name + "_write_bytes", double(t.write_bytes)});
  }
  result.extra.insert(result.extra.end(),
                      {{"smem_read_bytes", double(counters.smem_read_bytes)},
                       {"smem_write_bytes", double(counters.smem_write_bytes)},
                       {"barriers", double(counters.barriers)},
                       {"shuffles", double(counters.shuffles)},
                       {"closed_form_read_bytes", double(closed.hbm_read_bytes)},
                       {"closed_form_write_bytes", double(closed.hbm_write_bytes)},
                       {"paper_bound_bytes", common::flash_attention_bound_bytes(shape, M)}});
  return result;
}

common::Result attention_forward(const common::Problem& problem, const common::Options& options) {
  return run_kernel(attention_kernel, problem, options);
}

common::StepInfo describe() {
  common::StepInfo info;
  info.name = "step03_simulated_threads";
  info.title = "Algorithm 1 as a CUDA kernel on a simulator: threads, warps, barriers, shared memory, checked and counted";
  info.forward = [](const common::Problem& p, const common::Options& o) { return attention_forward(p, o); };
  info.uses_sram_budget = true;
  info.default_sram_floats = kDefaultSramFloats;
  return info;
}

}  // namespace step03
