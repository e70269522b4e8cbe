/// \file step03_simulated_threads/attention.hpp
/// \brief step03_simulated_threads: Algorithm 1 as a CUDA-style kernel, run and checked on a simulator.
#pragma once

#include <cstdint>

#include "common/problem.hpp"
#include "common/step.hpp"
#include "simulator.hpp"

/// Step 3: FlashAttention-1, Algorithm 1, written as a CUDA kernel and run on sim::Device.
namespace step03 {

/// The default on-chip budget M: 2^14 floats = 64 KiB, step 4's shared memory
/// for K_j, V_j, Q_i, O_i. At d = 64 it gives B_c = B_r = 64, as on the GPU.
inline constexpr int64_t kDefaultSramFloats = int64_t{1} << 14;

/// The tiles of Algorithm 1 and their layout in shared memory, chosen at run
/// time (step 4: `Tiles<d>`, at compile time). Passed to the kernel by value.
struct Tiles {
  int d = 1;   ///< head dimension
  int Bc = 1;  ///< rows of K_j, V_j (columns of S_ij)
  int Br = 1;  ///< rows of Q_i, O_i, S_ij
  int ld = 1;  ///< row stride of Q_i, K_j, V_j, O_i in shared memory (d + padding)
  /// Shared memory: K_j, V_j (B_c, ld); Q_i, O_i (B_r, ld); S_ij (B_r, B_c);
  /// m_i, l_i, m_i^new, l_i^new and the two line-12 factors (B_r) each.
  int64_t smem_floats() const {
    return int64_t{2} * Bc * ld + int64_t{2} * Br * ld + int64_t{Br} * Bc + int64_t{6} * Br;
  }
};

/// The signature of an Algorithm 1 kernel: Q, K, V in, O and L out, l and m as
/// "HBM" working arrays; all (B, H, ...) tensors, one block per (batch, head).
using Kernel = void (*)(sim::Global<const float> Q_all, sim::Global<const float> K_all,
                        sim::Global<const float> V_all, sim::Global<float> O_all, sim::Global<float> l_all,
                        sim::Global<float> m_all, sim::Global<float> L_all, int n_q, int n_kv, float scale,
                        bool causal, Tiles T);

/// The number of threads in a block (step 4: 1024; see attention.cpp).
int threads_per_block();

/// The launcher: tiles from `options.sram_floats` (M; 0 = the default), one
/// block of threads_per_block() threads per (batch, head), then `kernel` on the
/// simulator. Fills `result.traffic` from the simulator's counters and
/// `result.extra` with them beside Algorithm 1's closed form and the paper's
/// bound. Throws sim::CheckFailed when a check finds something.
common::Result run_kernel(Kernel kernel, const common::Problem& problem, const common::Options& options = {});

/// Computes O and L with the step's kernel (run_kernel on its attention_kernel).
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step03
