/// \file step03_simulated_threads/attention.cpp
/// \brief Step 3 — Algorithm 1 as a CUDA kernel, run on a simulator that checks and counts.
///
/// This step extends step 2 by writing the same Algorithm 1 the way a GPU runs it:
///  1. One block per (batch, head); the block's threads share the work. Thread
///     tid owns row tid of Q_i, O_i and S_ij (rows tid, tid + blockDim.x, ... when
///     B_r is larger than the block); every tile load is split over all threads.
///  2. The tiles K_j, V_j, Q_i, O_i, S_ij, l_i, m_i live in the block's shared
///     memory, carved by hand into named views; O, l, m live in global memory and
///     are read and written back on every (j, i), as in step 2.
///  3. Threads that read what other threads wrote wait at a barrier first
///     (`syncthreads`, CUDA's `__syncthreads`).
/// Why: on a GPU, threads and shared memory bring new bugs — a missing barrier,
/// overlapping buffers, an off-by-one guard — that give wrong answers only
/// sometimes. The simulator (simulator.hpp) runs the kernel's threads as OS
/// threads and checks every access, so these bugs are reported with the
/// buffer, index, threads and barrier phase, before step 4 runs on a GPU.
/// It also counts global traffic, which must equal step 2's closed form.
///
/// Run: build/bin/step03_simulated_threads --seq-q 256 --seq-kv 256 --head-dim 64 --check
///      build/bin/step03_simulated_threads --seq-q 100 --seq-kv 37 --head-dim 8 --sram-floats 256 --causal
#include "attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/io_complexity.hpp"
#include "common/workspace.hpp"

namespace step03 {

using sim::blockDim;
using sim::blockIdx;
using sim::syncthreads;
using sim::threadIdx;

namespace {
constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
}  // namespace

int64_t shared_floats(const KernelParams& p) { return 2 * p.Bc * p.d + 2 * p.Br * p.d + p.Br * p.Bc + 2 * p.Br; }

//! [kernel]
void flash_attention_1(sim::Global<const float> q, sim::Global<const float> k, sim::Global<const float> v,
                       sim::Global<float> o, sim::Global<float> l_hbm, sim::Global<float> m_hbm,
                       sim::Global<float> lse, KernelParams p) {
  const int64_t N_q = p.N_q, N_kv = p.N_kv, d = p.d, Bc = p.Bc, Br = p.Br;
  const int64_t tid = threadIdx.x, threads = blockDim.x;
  const int64_t bh = blockIdx.x;  // one block per (batch, head)

  // This block's head in global memory.
  const auto Q = q.slice(bh * N_q * d, N_q * d);     // Q: (N_q, d)
  const auto K = k.slice(bh * N_kv * d, N_kv * d);   // K: (N_kv, d)
  const auto V = v.slice(bh * N_kv * d, N_kv * d);   // V: (N_kv, d)
  const auto O = o.slice(bh * N_q * d, N_q * d);     // O: (N_q, d)
  const auto l = l_hbm.slice(bh * N_q, N_q);          // l: (N_q)
  const auto m = m_hbm.slice(bh * N_q, N_q);          // m: (N_q)
  const auto L = lse.slice(bh * N_q, N_q);            // L: (N_q)

  //! [shared layout]
  // Shared memory, carved by hand from the block's one dynamic allocation.
  const sim::SharedArena smem = sim::dynamic_shared();
  const sim::Shared Kj = smem.view("Kj", 0, Bc * d);                               // Kj: (Bc, d)
  const sim::Shared Vj = smem.view("Vj", Bc * d, Bc * d);                          // Vj: (Bc, d)
  const sim::Shared Qi = smem.view("Qi", 2 * Bc * d, Br * d);                      // Qi: (Br, d)
  const sim::Shared Oi = smem.view("Oi", 2 * Bc * d + Br * d, Br * d);             // Oi: (Br, d)
  const sim::Shared Sij = smem.view("Sij", 2 * Bc * d + 2 * Br * d, Br * Bc);      // Sij: (Br, Bc)
  const sim::Shared li = smem.view("li", 2 * Bc * d + 2 * Br * d + Br * Bc, Br);   // li: (Br)
  const sim::Shared mi = smem.view("mi", 2 * Bc * d + 2 * Br * d + Br * Bc + Br, Br);  // mi: (Br)
  //! [shared layout]

  // Line 2: O = 0, l = 0, m = −∞ in global memory, split over the threads.
  for (int64_t e = tid; e < N_q * d; e += threads) O[e] = 0.0f;
  for (int64_t r = tid; r < N_q; r += threads) {
    l[r] = 0.0f;
    m[r] = kMinusInf;
  }
  syncthreads();  // line 8 reads rows of O, l, m that other threads set

  for (int64_t j = 0; j < p.Tc; ++j) {  // line 5: K/V tiles, outer loop
    const int64_t kv0 = j * Bc, cols = std::min(Bc, N_kv - kv0);  // the last tile may be short
    //! [load K_j V_j]
    // Line 6: load K_j, V_j from global to shared memory, split over the threads.
    for (int64_t e = tid; e < Bc * d; e += threads) {
      const int64_t c = e / d;
      if (c < cols) {  // tail guard: the rows past N_kv do not exist
        Kj[e] = K[kv0 * d + e];
        Vj[e] = V[kv0 * d + e];
      }
    }
    syncthreads();  // every thread reads all of K_j and V_j below
    //! [load K_j V_j]

    for (int64_t i = 0; i < p.Tr; ++i) {  // line 7: Q tiles, inner loop
      const int64_t q0 = i * Br, rows = std::min(Br, N_q - q0);
      // Line 8: load Q_i, O_i, l_i, m_i, split over the threads.
      for (int64_t e = tid; e < rows * d; e += threads) {
        Qi[e] = Q[q0 * d + e];
        Oi[e] = O[q0 * d + e];
      }
      for (int64_t r = tid; r < rows; r += threads) {
        li[r] = l[q0 + r];
        mi[r] = m[q0 + r];
      }
      syncthreads();  // thread tid works on row tid of Q_i and O_i, which other threads loaded

      //! [rows]
      for (int64_t r = tid; r < rows; r += threads) {  // thread tid owns row r of Q_i, O_i, S_ij
        // Line 9: S_ij = scale · Q_i K_jᵀ, masked where key kv0 + c is after query q0 + r.
        // Line 10: m̃_ij = rowmax(S_ij), kept in a register.
        float mij = kMinusInf;
        for (int64_t c = 0; c < cols; ++c) {
          float s = kMinusInf;
          if (!p.causal || kv0 + c <= q0 + r) {
            s = 0.0f;
            for (int64_t x = 0; x < d; ++x) s += Qi[r * d + x] * Kj[c * d + x];
            s *= p.scale;
          }
          Sij[r * Bc + c] = s;
          mij = std::max(mij, s);
        }
        // Line 10: P̃_ij = exp(S_ij − m̃_ij) in place of S_ij, l̃_ij = rowsum(P̃_ij).
        // A causal row can be fully masked in this tile (m̃_ij = −∞): its P̃ is 0.
        float lij = 0.0f;
        for (int64_t c = 0; c < cols; ++c) {
          const float P = mij == kMinusInf ? 0.0f : std::exp(Sij[r * Bc + c] - mij);
          Sij[r * Bc + c] = P;
          lij += P;
        }
        // Line 11: m_i^new = max(m_i, m̃_ij), l_i^new = e^(m_i − m_i^new) l_i + e^(m̃_ij − m_i^new) l̃_ij.
        const float m_old = mi[r], l_old = li[r];
        const float mi_new = std::max(m_old, mij);
        const float alpha = std::exp(m_old - mi_new);  // rescales the old
        const float beta = std::exp(mij - mi_new);     // rescales the new
        const float li_new = alpha * l_old + beta * lij;
        // Line 12: O_i ← diag(l_i^new)⁻¹ (diag(l_i) e^(m_i − m_i^new) O_i + e^(m̃_ij − m_i^new) P̃_ij V_j).
        // The diagonal factors are formed first, so a row with nothing new in
        // this tile gets exactly 1 and 0 and its O_i is not rounded again.
        const float keep = alpha * l_old / li_new;
        const float add = beta / li_new;
        for (int64_t x = 0; x < d; ++x) {
          float pv = 0.0f;
          for (int64_t c = 0; c < cols; ++c) pv += Sij[r * Bc + c] * Vj[c * d + x];
          Oi[r * d + x] = keep * Oi[r * d + x] + add * pv;
        }
        li[r] = li_new;
        mi[r] = mi_new;
      }
      //! [rows]
      syncthreads();  // the write-back below is split over the threads: row r of O_i is thread r's

      // Lines 12–13: write O_i, l_i, m_i back to global memory.
      for (int64_t e = tid; e < rows * d; e += threads) O[q0 * d + e] = Oi[e];
      for (int64_t r = tid; r < rows; r += threads) {
        l[q0 + r] = li[r];
        m[q0 + r] = mi[r];
      }
      syncthreads();  // the next loads overwrite Q_i, O_i (and K_j, V_j) that slower threads may still read
    }
  }

  // The log-sum-exp of each score row, kept for the backward pass: L = m + log(l).
  // (The last barrier above also orders the final write-back of l, m before these reads.)
  for (int64_t r = tid; r < N_q; r += threads) L[r] = m[r] + std::log(l[r]);
}
//! [kernel]

common::Result run_kernel(Kernel kernel, const common::Problem& problem, const common::Options& options) {
  common::validate(problem);
  const common::Shape& shape = problem.shape;
  const int64_t M = options.sram_floats > 0 ? options.sram_floats : kDefaultSramFloats;

  //! [launch]
  // Line 1: B_c = ⌈M/4d⌉, B_r = min(⌈M/4d⌉, d), exactly as in step 2.
  const common::Algorithm1Tiles tiles = common::algorithm1_tiles(M, shape);
  KernelParams p;
  p.N_q = shape.seq_q;
  p.N_kv = shape.seq_kv;
  p.d = shape.head_dim;
  p.Bc = tiles.Bc;
  p.Br = tiles.Br;
  p.Tc = tiles.Tc;
  p.Tr = tiles.Tr;
  p.scale = problem.scale;
  p.causal = problem.causal;

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

  const sim::dim3 grid(unsigned(shape.batch_heads()));          // one block per (batch, head)
  const sim::dim3 block(unsigned(std::min(p.Br, kMaxThreads)));  // one thread per row of Q_i
  const int64_t shared_bytes = shared_floats(p) * int64_t(sizeof(float));
  const sim::Counters counters = device.launch(grid, block, shared_bytes, kernel, Q, K, V, O, l, m, L, p);
  //! [launch]

  result.traffic = common::Traffic{counters.global_read_bytes(), counters.global_write_bytes()};
  const common::Traffic closed = common::algorithm1_traffic(shape, tiles);
  result.extra = {{"B_c", double(p.Bc)},
                  {"B_r", double(p.Br)},
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
                       {"closed_form_read_bytes", double(closed.hbm_read_bytes)},
                       {"closed_form_write_bytes", double(closed.hbm_write_bytes)},
                       {"paper_bound_bytes", common::flash_attention_bound_bytes(shape, M)}});
  return result;
}

common::Result attention_forward(const common::Problem& problem, const common::Options& options) {
  return run_kernel(flash_attention_1, problem, options);
}

common::StepInfo describe() {
  common::StepInfo info;
  info.name = "step03_simulated_threads";
  info.title = "Algorithm 1 as a CUDA kernel on a simulator: threads, barriers, shared memory, checked and counted";
  info.forward = [](const common::Problem& p, const common::Options& o) { return attention_forward(p, o); };
  info.uses_sram_budget = true;
  info.default_sram_floats = kDefaultSramFloats;
  return info;
}

}  // namespace step03
