#!/usr/bin/env bash
# scripts/experiments/step26_variants.sh — step 26's backward at d = 64 with two blocks per SM
# (GPU machine, after a build of build-gpu, e.g. FLASH_ROUND_PHASES=none scripts/gpu/round.sh OUT).
#
# Step 26 compiles its backward kernels for one block per SM: 168 registers a thread at d = 64,
# so 8 warps an SM. Two blocks (16 warps, 128 registers) spill when the products' loops are
# unrolled as they are. Rebuilds a scratch copy of step26_backward_fp32 with its backward.cu
# changed (scripts/experiments/variants.sh: the working tree left alone) and times the backward
# at B=4, H=16, N=4096, fp32, d = 64 and 128, causal and not (a single launch at a time, the
# same for every variant; gpu_bench --sections backward times the one kept, sustained):
#   V0 step 26 as it is
#   V1 two blocks per SM at d <= 64, the products' loops not unrolled there (nvcc 13.0, sm_90:
#      128 registers, no spill at d = 32 and 64; d = 96 and 128 as V0)
#   V2 two blocks per SM at d <= 64, the loops unrolled as in V0 (24 bytes spilled at d = 64)
#   V3 two blocks per SM at d <= 64, only S_ij's and dP_ij's loop (rows_times_rows) not unrolled
#      there (128 registers, no spill at d = 32 and 64)
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/experiments/variants.sh
variants_of step26_backward_fp32 backward.cu
export VARIANT_ARGS="--backward --dtype fp32"
per_d=('s/^constexpr int kBlocksPerSm = 1;/template <int d>\nconstexpr int kBlocksPerSm = d <= 64 ? 2 : 1;/'
       's/__launch_bounds__(kBackwardThreads, kBlocksPerSm)/__launch_bounds__(kBackwardThreads, kBlocksPerSm<d>)/')
run V0_step24
run V1_2_blocks_not_unrolled "${per_d[@]}" 's/#pragma unroll \([24]\)$/#pragma unroll(kBlocksPerSm<d> == 2 ? 1 : \1)/'
run V2_2_blocks_spilling "${per_d[@]}"
run V3_2_blocks_products_unrolled "${per_d[@]}" 's/^#pragma unroll 4$/#pragma unroll(kBlocksPerSm<d> == 2 ? 1 : 4)/; 0,/kBlocksPerSm<d> == 2 ? 1 : 4/! s/#pragma unroll(kBlocksPerSm<d> == 2 ? 1 : 4)/#pragma unroll 4/'
