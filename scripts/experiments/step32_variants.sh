#!/usr/bin/env bash
# scripts/experiments/step32_variants.sh — step 32's backward (the tiles of steps 30 to 32): the query tile B_r at d = 64, and
# dQ's reductions (GPU machine, after a build of build-gpu, e.g. FLASH_ROUND_PHASES=none
# scripts/gpu/round.sh OUT).
#
# Rebuilds a scratch copy of step32_backward_tc_deterministic with its backward.cu changed
# (scripts/experiments/variants.sh: the working tree left alone) and times the backward at B=4,
# H=16, N=4096, bf16, causal and not (a single launch at a time, the same for every variant;
# gpu_bench --sections backward times the one kept, sustained):
#   V0 step 32 as it is: B_r = 128 at d <= 64, 64 above; dQ's terms added 4 floats a reduction
#      on sm_90 (d = 64 and 128)
#   V1 B_r = 64 at d = 64 too: twice the iterations, each with its two barriers, its wait for
#      the next tile and its dQ_i term (d = 64)
#   V2 dQ's terms added one float a reduction, as before sm_90 (d = 128)
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/experiments/variants.sh
variants_of step32_backward_tc_deterministic backward.cu
export VARIANT_ARGS="--backward"
run V0_step32
VARIANT_DIMS=64 run V1_br64_at_d64 's/static constexpr int Br = d <= 64 ? 128 : 64;/static constexpr int Br = 64;/'
VARIANT_DIMS=128 run V2_scalar_reductions 's/^#if __CUDA_ARCH__ >= 900$/#if 0/'
