#!/usr/bin/env bash
# scripts/experiments/step11_variants.sh — step 11's design choices, measured (GPU machine,
# after a build of build-gpu, e.g. FLASH_ROUND_PHASES=none scripts/gpu/round.sh OUT).
#
# Builds a scratch copy of step11_feeding_tensor_cores in turn with one of its constants
# changed (scripts/experiments/variants.sh: sed on the copy's attention.cu, the working
# tree left alone) and times each at B=4, H=16, N=4096, bf16, d 64 and 128, causal and
# not, with the registers, spill bytes, tiles and blocks per SM the program reports:
#   V0 step 11 as it is (B_r = 128 from 4 warps of 32 rows; B_c = 64, 32 at d = 128)
#   V1 B_c = 64 at d = 128 too (more registers than a thread has: a small spill)
#   V2 8 warps of 16 rows (B_r = 128, one mma tile a warp), B_c = 64
#   V4 4 warps of 16 rows (B_r = 64: step 10's tiles with P~_ij in registers), B_c = 64
#   V5 B_c = 32 at every d
# The step page's notes table shows its output (docs/results/runs/step11_variants.txt).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/experiments/variants.sh
variants_of step11_feeding_tensor_cores
bc_64='s/  static constexpr int Bc = d < 128 ? 64 : 32;/  static constexpr int Bc = 64;/'
one_tile=('s/kRowsPerThread = 4, kMTiles = 2/kRowsPerThread = 2, kMTiles = 1/' 's/warp \* 32 + 16 \* m/warp * 16 + 16 * m/')
run V0_step11
run V1_Bc64_spill "$bc_64"
run V2_8warps_16rows 's/constexpr int kThreads = 128;/constexpr int kThreads = 256;/' "${one_tile[@]}" "$bc_64"
run V4_4warps_16rows "${one_tile[@]}" "$bc_64"
run V5_Bc32_all 's/  static constexpr int Bc = d < 128 ? 64 : 32;/  static constexpr int Bc = 32;/'
