#!/usr/bin/env bash
# scripts/step20_variants.sh — step 16's ablation: each overlap switched off in turn (GPU
# machine, after a build of build-gpu, e.g. FLASH_ROUND_PHASES=none scripts/gpu_round.sh OUT).
#
# Builds step20_intra_warpgroup_overlap with one or both of its two overlaps undone (sed on attention.cu,
# restored at the end) and times each at B=4, H=16, N=4096, bf16, d 64 and 128, causal
# and not, as FlashAttention-3's paper does for its own kernel:
#   A0 step 16 as it is: ping-pong between the warpgroups and the softmax under P̃V
#   A1 no ping-pong: the named barriers that take turns removed
#   A2 no overlap inside a warpgroup: wait for P̃_i,j−1 V_j−1 as well before the softmax
#   A3 neither: S_ij and P̃_i,j−1 V_j−1 still issued back to back, but one wait for both
# The step page's ablation table shows its output (docs/results/runs/step20_variants.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/variants.sh
variants_of step20_intra_warpgroup_overlap
no_pingpong=('s|{ named_barrier_sync(kTurn + wg, kWarps \* kWarpSize); }|{}|'
             's|{ named_barrier_arrive(kTurn + 1 - wg, kWarps \* kWarpSize); }|{}|'
             's|if (wg == 1) named_barrier_arrive(kTurn, kWarps \* kWarpSize);||')
no_overlap='s|wgmma_wait<1>();  // S_ij is in|wgmma_wait<0>();  // S_ij is in|'
run A0_step16
run A1_no_pingpong "${no_pingpong[@]}"
run A2_no_softmax_overlap "$no_overlap"
run A3_neither "${no_pingpong[@]}" "$no_overlap"
