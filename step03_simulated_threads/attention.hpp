/// \file step03_simulated_threads/attention.hpp
/// \brief step03_simulated_threads: Algorithm 1 as a CUDA-style kernel, run and checked on a simulator.
#pragma once

#include <cstdint>

#include "common/problem.hpp"
#include "common/step.hpp"
#include "simulator.hpp"

/// Step 3: FlashAttention-1, Algorithm 1, written as a CUDA kernel and run on sim::Device.
namespace step03 {

/// The default on-chip budget M: 2^14 floats = 64 KiB, a GPU's shared memory per
/// block. At d = 64 it gives B_c = B_r = 64: tiles large enough that a block
/// passes few barriers (each one wakes every OS thread of the block), which
/// keeps the simulator fast.
inline constexpr int64_t kDefaultSramFloats = int64_t{1} << 14;

/// The most threads in a block. One thread per row of Q_i would need B_r
/// threads; more than this many OS threads per block only slows the simulator
/// down, so thread tid then owns rows tid, tid + 128, ... (CUDA allows 1024).
inline constexpr int64_t kMaxThreads = 128;

/// The sizes a kernel needs, passed by value like a CUDA kernel's arguments.
struct KernelParams {
  int64_t N_q = 1;   ///< query rows
  int64_t N_kv = 1;  ///< key/value rows
  int64_t d = 1;     ///< head dimension
  int64_t Bc = 1;    ///< rows of K_j, V_j
  int64_t Br = 1;    ///< rows of Q_i, O_i
  int64_t Tc = 1;    ///< number of K/V tiles
  int64_t Tr = 1;    ///< number of Q tiles
  float scale = 1;   ///< softmax scale
  bool causal = false;  ///< top-left causal mask
};

/// The signature of an Algorithm 1 kernel: Q, K, V in, O and L out, l and m as
/// "HBM" working arrays; all (B, H, ...) tensors, one block per (batch, head).
using Kernel = void (*)(sim::Global<const float> Q, sim::Global<const float> K, sim::Global<const float> V,
                        sim::Global<float> O, sim::Global<float> l, sim::Global<float> m, sim::Global<float> L,
                        KernelParams p);

/// The step's kernel: Algorithm 1 with one block per (batch, head), thread tid
/// owning row tid of Q_i, O_i and S_ij, tiles in shared memory, O, l, m in global
/// memory read and written back on every (j, i). Launched by run_kernel.
void flash_attention_1(sim::Global<const float> q, sim::Global<const float> k, sim::Global<const float> v,
                       sim::Global<float> o, sim::Global<float> l_hbm, sim::Global<float> m_hbm,
                       sim::Global<float> lse, KernelParams p);

/// Floats of shared memory a block of the kernel uses: K_j, V_j (B_c × d each),
/// Q_i, O_i (B_r × d each), S_ij (B_r × B_c), l_i, m_i (B_r each).
int64_t shared_floats(const KernelParams& p);

/// The launcher: tiles from `options.sram_floats` (M; 0 = the default), one
/// block of min(B_r, kMaxThreads) threads per (batch, head), then `kernel` on
/// the simulator. Fills `result.traffic` from the simulator's counters and
/// `result.extra` with them beside Algorithm 1's closed form and the paper's
/// bound. Throws sim::CheckFailed when a check finds something.
common::Result run_kernel(Kernel kernel, const common::Problem& problem, const common::Options& options = {});

/// Computes O and L with the step's kernel (run_kernel on flash_attention_1).
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step03
