#!/usr/bin/env bash
# scripts/step14_variants.sh — step 12's choices, measured (GPU machine, after a build
# of build-gpu, e.g. FLASH_ROUND_PHASES=none scripts/gpu_round.sh OUT).
#
# Builds step14_block_order in turn with one of its choices undone (sed on
# attention.cu, restored at the end) and times each at B=4, H=16, N=4096, bf16, d 64 and
# 128, causal and not, with the registers, spill bytes, tiles and blocks per SM the
# program reports:
#   V0 step 12 as it is
#   V1 step 11's B_c: 64, and 32 at d = 128
#   V2 exp2f (ex2.approx without .ftz) in place of exp2_ftz
#   V3 m_i and l_i in registers, as in step 11 (the compiler spills)
#   V4 blocks always in step 11's order: the longest tiles of every head first
#   V5 blocks always head by head: one head's tiles side by side
# The step page's notes table shows its output (docs/results/runs/step14_variants.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/variants.sh
variants_of step14_block_order
order='s|const size_t bh = causal ? blockIdx.x % batch_heads : blockIdx.x / Tr;|const size_t bh = ORDER_BH;|'
order_i='s|const int i = Tr - 1 - int(causal ? blockIdx.x / batch_heads : blockIdx.x % Tr);|const int i = Tr - 1 - int(ORDER_I);|'
run V0_step12
run V1_step11_Bc 's|  static constexpr int Bc = d <= 64 ? 128 : 64;|  static constexpr int Bc = d < 128 ? 64 : 32;|'
run V2_exp2f 's|common::cuda::exp2_ftz(|exp2f(|g'
run V3_m_l_in_registers 's|__shared__ float mi\[kRows\]\[kThreads\], li\[kRows\]\[kThreads\];|float mi[kRows][1], li[kRows][1];|' \
  's|\[t\]\[tid\]|[t][0]|g'
run V4_longest_first "$order" "$order_i" 's|ORDER_BH|blockIdx.x % batch_heads|' 's|ORDER_I|blockIdx.x / batch_heads|'
run V5_head_by_head "$order" "$order_i" 's|ORDER_BH|blockIdx.x / Tr|' 's|ORDER_I|blockIdx.x % Tr|'
