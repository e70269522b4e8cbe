#!/usr/bin/env bash
# scripts/experiments/step26_variants.sh — step 26's backward: how many queries a pass of S_ijᵀ
# and dP_ijᵀ takes from d = 96 on (GPU machine, after a build of build-gpu, e.g.
# FLASH_ROUND_PHASES=none scripts/gpu/round.sh OUT).
#
# A pass of B_p queries is one wgmma of N = B_p a k-step for each of S_ijᵀ and dP_ijᵀ, both
# operands read from shared memory. At N = 32 a wgmma reads 3 bytes of shared memory per 32
# multiply-adds (64 × 16 of K_j or V_j and 32 × 16 of Q_i or dO_i), at N = 64 2 bytes per 32:
# at the tensor cores' rate the first needs more than the 128 bytes a clock an SM's shared
# memory gives. Rebuilds a scratch copy of step26_backward_hopper with its backward.cu changed
# (scripts/experiments/variants.sh: the working tree left alone) and times the backward at B=4,
# H=16, N=4096, bf16, causal and not (a single launch at a time, the same for every variant;
# gpu_bench --sections backward times the one kept, sustained):
#   V0 step 26 as it is
#   V1 B_p = 32 from d = 96 on (S_ijᵀ, dP_ijᵀ, dK_j, dV_j: 160 accumulator registers a thread)
#   V2 B_p = 64 at every d, one pass a query tile (192 accumulator registers; nvcc 13.0: no spill)
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/experiments/variants.sh
variants_of step26_backward_hopper backward.cu
export VARIANT_ARGS="--backward"
run V0_step26
VARIANT_DIMS=128 run V1_Bp32_from_d96 's/static constexpr int Bp = .*;/static constexpr int Bp = W <= 64 ? 64 : 32;/' \
  's/constexpr int kAccumulatorRegisters = .*;/constexpr int kAccumulatorRegisters = 160;/' || true
VARIANT_DIMS=128 run V2_Bp64 's/static constexpr int Bp = .*;/static constexpr int Bp = 64;/' \
  's/constexpr int kAccumulatorRegisters = .*;/constexpr int kAccumulatorRegisters = 192;/' || true
