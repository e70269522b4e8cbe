/// \file step03_simulated_threads/run.cpp
/// \brief Step 3's host side: the problem's tensors in the simulator's global memory, the launch, the counters.
///
/// What common/cuda/gpu_step.cu does for the GPU steps (upload, launch,
/// download), done here for the simulator: its global memory is the host's,
/// and what it adds is counting. attention.cpp keeps what step 4 has too: the
/// kernel, the tiles and the launch.
#include "attention.hpp"
#include "common/io_complexity.hpp"
#include "common/workspace.hpp"
#include "simulator.hpp"

namespace step03 {

common::Result run_on_simulator(LaunchFn launch, const common::Problem& problem, const common::Options& options) {
  common::validate(problem);
  const common::Shape& shape = problem.shape;
  const int64_t M = common::sram_budget(options, kDefaultSramFloats);
  const Tiles T = make_tiles(M, shape);
  common::Result result = common::allocate_result(shape);
  common::Workspace<float> l_and_m(static_cast<size_t>(2 * shape.lse_elements()));  // l, m: (B, H, N_q) each

  // The tensors in the simulator's global memory (CUDA: cudaMalloc and cudaMemcpy).
  sim::Device device;
  LaunchArgs a{shape,
               problem.causal,
               problem.scale,
               device.global("Q", problem.q),
               device.global("K", problem.k),
               device.global("V", problem.v),
               device.global("O", result.o.data(), shape.q_elements()),
               device.global("L", result.lse.data(), shape.lse_elements()),
               device.global("l", l_and_m.data(), shape.lse_elements()),
               device.global("m", l_and_m.data() + shape.lse_elements(), shape.lse_elements()),
               &device};
  const common::Algorithm1Tiles t = common::algorithm1_tiles(M, shape);
  device.show_progress(options.progress, 1 + 4 * t.Tc * t.Tr);  // a block's barriers: 1, then 4 per (j, i)
  const sim::Counters counters = launch(a, T);

  result.traffic = common::Traffic{counters.global_read_bytes(), counters.global_write_bytes()};
  const common::Traffic closed = common::algorithm1_traffic(shape, t);
  result.extra = {{"B_c", double(T.Bc)},
                  {"B_r", double(T.Br)},
                  {"sram_floats", double(M)},
                  {"threads_per_block", double(threads_per_block())},
                  {"shared_bytes_per_block", double(T.smem_bytes())}};
  for (const auto& counted : counters.named()) result.extra.push_back(counted);
  result.extra.insert(result.extra.end(), {{"closed_form_read_bytes", double(closed.hbm_read_bytes)},
                                           {"closed_form_write_bytes", double(closed.hbm_write_bytes)},
                                           {"paper_bound_bytes", common::flash_attention_bound_bytes(shape, M)}});
  return result;
}

}  // namespace step03
