#!/usr/bin/env bash
# scripts/step17_causal_order.sh — the trial behind step 17's causal block order (GPU machine,
# after a build of build-gpu, e.g. FLASH_ROUND_PHASES=none scripts/gpu_round.sh OUT).
#
# Rebuilds step17_tiles_by_head_dim with every causal block in one order, then the other
# (sed on attention.cu, restored at the end), and times each, causal, bf16, B=4, H=16, at
# N = 4096 and 16384, d = 64 and 128:
#   longest-first  the longest tiles of every head first (step 12's causal order)
#   head-by-head   one head's tiles side by side, longest first (the unmasked order)
# Step 17 takes the faster per d; the step page shows docs/results/runs/step17_causal_order.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
file=step17_tiles_by_head_dim/attention.cu
orig=$(mktemp)
cp "$file" "$orig"
trap 'cp "$orig" "$file"; rm -f "$orig"; ninja -C build-gpu step17_tiles_by_head_dim >/dev/null 2>&1 || true' EXIT
echo "order          N      d    TFLOP/s"
for order in longest-first head-by-head; do
  rule=$([[ $order == longest-first ]] && echo causal || echo false)
  cp "$orig" "$file"
  sed -i "s|const bool longest_first = causal \&\& d <= 64;|const bool longest_first = $rule;|" "$file"
  if cmp -s "$file" "$orig"; then echo "$order: the change did not apply"; exit 1; fi
  ninja -C build-gpu step17_tiles_by_head_dim >/dev/null
  for n in 4096 16384; do for d in 64 128; do
    tflops=$(timeout 60 build-gpu/bin/step17_tiles_by_head_dim --batch 4 --heads 16 --seq-q $n --seq-kv $n \
      --head-dim $d --causal --repeat 10 --json | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["tflops"], 1))')
    printf '%-14s %-6s %-4s %s\n' "$order" "$n" "$d" "$tflops"
  done; done
done
