/// \file step05_cuda_registers/spill.cu
/// \brief step05's kernel built a second time, capped at 32 registers a thread: what registers are worth.
///
/// The same attention.cu, with STEP05_SPILL = 1: its `__launch_bounds__` then
/// ask for 2 blocks of 1024 threads per SM, which leaves 32 registers a thread,
/// too few for the slices of S_ij and O_i, so the compiler moves them to local
/// memory (the resource report shows the stack frame). The namespace becomes
/// step05_spill, so that both builds live in one program: the benchmark runs
/// them side by side.
/// (Both macros are set for this file alone in CMakeLists.txt: STEP05_SPILL=1,
/// step05=step05_spill.)
#include "attention.cu"
