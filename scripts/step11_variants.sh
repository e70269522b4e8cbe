#!/usr/bin/env bash
# scripts/step11_variants.sh — step 11's design choices, measured (GPU machine, after a build
# of build-gpu, e.g. FLASH_ROUND_PHASES=none scripts/gpu_round.sh OUT).
#
# Builds step11_feeding_tensor_cores in turn with one of its constants changed (sed on
# attention.cu, restored at the end) and times each at B=4, H=16, N=4096, bf16, d 64 and
# 128, causal and not, with the registers, spill bytes, tiles and blocks per SM the
# program reports:
#   V0 step 11 as it is (B_r = 128 from 4 warps of 32 rows; B_c = 64, 32 at d = 128)
#   V1 B_c = 64 at d = 128 too (more registers than a thread has: a small spill)
#   V2 8 warps of 16 rows (B_r = 128, one mma tile a warp), B_c = 64
#   V4 4 warps of 16 rows (B_r = 64: step 10's tiles with P~_ij in registers), B_c = 64
#   V5 B_c = 32 at every d
# The step page's notes table shows its output (docs/results/runs/step11_variants.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
f=step11_feeding_tensor_cores/attention.cu
orig=$(mktemp)
cp "$f" "$orig"
trap 'cp "$orig" "$f"; rm -f "$orig"' EXIT
run() {
  local name=$1 d c
  shift
  cp "$orig" "$f"
  for e in "$@"; do sed -i "$e" "$f"; done
  if ! ninja -C build-gpu step11_feeding_tensor_cores >"/tmp/step11_$name.log" 2>&1; then
    echo "$name: build failed"; tail -n 5 "/tmp/step11_$name.log"; return
  fi
  for d in 64 128; do for c in "" --causal; do
    timeout 60 build-gpu/bin/step11_feeding_tensor_cores --batch 4 --heads 16 --seq-q 4096 --seq-kv 4096 \
      --head-dim $d $c --repeat 20 --json |
      python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('$name', r['head_dim'], 'causal' if r['causal'] else 'full', round(r['tflops'],1), 'regs', r.get('registers'), 'local', r.get('local_bytes'), 'Br', r.get('B_r'), 'Bc', r.get('B_c'), 'blocks/SM', r.get('blocks_per_sm'))"
  done; done
}
bc_64='s/  static constexpr int Bc = d < 128 ? 64 : 32;/  static constexpr int Bc = 64;/'
one_tile=('s/kRowsPerThread = 4, kMTiles = 2/kRowsPerThread = 2, kMTiles = 1/' 's/warp \* 32 + 16 \* m/warp * 16 + 16 * m/')
run V0_step11
run V1_Bc64_spill "$bc_64"
run V2_8warps_16rows 's/constexpr int kThreads = 128;/constexpr int kThreads = 256;/' "${one_tile[@]}" "$bc_64"
run V4_4warps_16rows "${one_tile[@]}" "$bc_64"
run V5_Bc32_all 's/  static constexpr int Bc = d < 128 ? 64 : 32;/  static constexpr int Bc = 32;/'
