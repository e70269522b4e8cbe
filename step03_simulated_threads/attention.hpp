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
  int d = 1;  ///< head dimension
  int Bc = 1;  ///< rows of K_j, V_j (columns of S_ij)
  int Br = 1;  ///< rows of Q_i, O_i, S_ij
  int ld = 1;  ///< row stride of Q_i, K_j, V_j, O_i in shared memory (d + 1)
  /// Shared memory: K_j, V_j (B_c, ld); Q_i, O_i (B_r, ld); S_ij (B_r, B_c);
  /// m_i, l_i, m_i^new, l_i^new and the two line-12 factors (B_r) each.
  int64_t smem_bytes() const {
    return (int64_t{2} * Bc * ld + int64_t{2} * Br * ld + int64_t{Br} * Bc + int64_t{6} * Br) * 4;
  }
};

/// The tiles of Algorithm 1 for the budget M (`--sram-floats`) and `shape` (attention.cpp).
Tiles make_tiles(int64_t sram_floats, const common::Shape& shape);

/// The number of threads in a block (step 4: 1024; see attention.cpp).
int threads_per_block();

/// A launch's tensors in the simulator's global memory (step 4: common::DeviceArgs).
struct LaunchArgs {
  common::Shape shape;  ///< sizes
  bool causal = false;  ///< top-left aligned mask
  float scale = 1.0f;  ///< softmax scale
  sim::Ptr<const float> q;  ///< Q: (B, H, N_q, d)
  sim::Ptr<const float> k;  ///< K: (B, H, N_kv, d)
  sim::Ptr<const float> v;  ///< V: (B, H, N_kv, d)
  sim::Ptr<float> o;  ///< O: (B, H, N_q, d)
  sim::Ptr<float> lse;  ///< L: (B, H, N_q)
  sim::Ptr<float> l;  ///< l: (B, H, N_q), a working array in "HBM"
  sim::Ptr<float> m;  ///< m: (B, H, N_q), a working array in "HBM"
  sim::Device* device = nullptr;  ///< the simulator that runs the launch
};

/// A kernel launch on the simulator, for the tiles T; returns its counters.
using LaunchFn = sim::Counters (*)(const LaunchArgs& args, const Tiles& T);

/// The host side (run.cpp): validates, derives the tiles from
/// `options.sram_floats`, places the tensors in the simulator's global memory,
/// calls `launch`, and fills `result.traffic` and `result.extra` from the counters
/// beside Algorithm 1's closed form and the paper's bound.
common::Result run_on_simulator(LaunchFn launch, const common::Problem& problem, const common::Options& options);

/// Computes O and L with the step's kernel on the simulator: tiles from
/// `options.sram_floats` (M; 0 = the default), one block of threads_per_block()
/// threads per (batch, head). Fills `result.traffic` from the simulator's
/// counters and `result.extra` with them beside Algorithm 1's closed form and
/// the paper's bound; shows progress on stderr when `options.progress`. Throws
/// sim::CheckFailed when a check finds something.
common::Result attention_forward(const common::Problem& problem, const common::Options& options = {});

/// This step as the program driver, the tour and the benchmarks see it.
common::StepInfo describe();

}  // namespace step03
