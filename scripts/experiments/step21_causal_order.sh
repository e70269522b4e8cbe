#!/usr/bin/env bash
# scripts/experiments/step21_causal_order.sh — the trial behind step 21's causal block order
# (GPU machine, after a build of build-gpu, e.g. FLASH_ROUND_PHASES=none scripts/gpu/round.sh OUT).
#
# Rebuilds a scratch copy of step21_tiles_by_head_dim with every causal block in one order,
# then the other (scripts/experiments/variants.sh: sed on the copy's attention.cu, the
# working tree left alone), and times each, causal, bf16, B=4, H=16, at N = 4096 and
# 16384, d = 64 and 128:
#   longest_first  the longest tiles of every head first (step 14's causal order)
#   head_by_head   one head's tiles side by side, longest first (the unmasked order)
# Step 21 takes the faster per d; the step page shows docs/results/runs/step21_causal_order.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/experiments/variants.sh
variants_of step21_tiles_by_head_dim
export VARIANT_N="4096 16384" VARIANT_MASKS="--causal"
rule='s|const bool longest_first = causal \&\& d <= 64;|const bool longest_first = ORDER;|'
run longest_first "$rule" 's|ORDER|causal|'
run head_by_head "$rule" 's|ORDER|false|'
