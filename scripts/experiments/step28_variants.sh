#!/usr/bin/env bash
# scripts/experiments/step28_variants.sh — step 28's backward with one or two blocks per SM
# (GPU machine, after a build of build-gpu, e.g. FLASH_ROUND_PHASES=none scripts/gpu/round.sh OUT).
#
# Step 28 compiles its backward kernel for two blocks an SM at d <= 64 (16 warps, a thread
# capped at 128 registers) and one above, and at d <= 64 leaves the loop of S_ij's and dP_ij's
# products (rows_times_rows) rolled: unrolled under the cap, the kernel spills. Rebuilds a
# scratch copy of step28_backward_tiled_gradients with its backward.cu changed
# (scripts/experiments/variants.sh: the working tree left alone) and times the backward at
# B=4, H=16, N=4096, fp32, d = 64 and 128, causal and not (a single launch at a time, the same
# for every variant; gpu_bench --sections backward times the one kept, sustained):
#   V0 step 28 as it is
#   V1 one block an SM at every d (as step 27), the loop unrolled 4 times everywhere
#   V2 two blocks an SM at d <= 64 with the loop unrolled 4 times there too (spills)
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/experiments/variants.sh
variants_of step28_backward_tiled_gradients backward.cu
export VARIANT_ARGS="--backward --dtype fp32"
run V0_step28
run V1_one_block 's/^constexpr int kBlocksPerSm = d <= 64 ? 2 : 1;/constexpr int kBlocksPerSm = 1;/'
run V2_two_blocks_unrolled 's/constexpr int kUnroll = kBlocksPerSm<d> == 2 ? 1 : 4;/constexpr int kUnroll = 4;/'
