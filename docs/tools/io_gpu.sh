#!/usr/bin/env bash
# io_gpu.sh REPO OUTDIR — the GPU steps' DRAM traffic, model beside measurement.
#
# Reads the newest REPO/docs/results/ncu_*.txt (one Nsight Compute profile per GPU
# step at B = 4, H = 16, N_q = N_kv = 4096, d = 128, not causal; written by
# scripts/gpu_round.sh) and the newest gpu_steps_*.csv (each step's B_r, B_c and
# precision at that shape), and writes OUTDIR/io_table_gpu.md: per step, the bytes
# its loop order moves between HBM and the chip if nothing is found in the L2 cache,
# beside ncu's dram__bytes_read.sum and dram__bytes_write.sum.
#
# The model, per (batch, head), elements of e bytes (4 in fp32, 2 in bf16/fp16):
#   FlashAttention-1's order (steps 4 and 5: one block per head, K/V tiles outside):
#     Algorithm 1 as written (common::algorithm1_traffic, 4-byte elements):
#     read  2·N_kv·d + T_c·(2·N_q·d + 2·N_q) + 2·N_q,
#     write (N_q·d + 2·N_q) + T_c·(N_q·d + 2·N_q) + N_q,   T_c = ⌈N_kv/B_c⌉;
#   FlashAttention-2's order (step 6 on: one block per query tile, O_i on chip):
#     read  N_q·d·e (Q) + T_r·2·N_kv·d·e (K and V once per query tile),
#     write N_q·d·e (O) + 4·N_q (L),   T_r = ⌈N_q/B_r⌉;
#   and what any order must move: Q, K, V read once, O and L written once.
set -euo pipefail

repo=$1
out=$2
results="$repo/docs/results"
# docs/results/current/ when it exists (what the pages read), else docs/results/ itself.
[[ -d "$results/current" ]] && results=$results/current
ncu=$(ls "$results"/ncu_*.txt 2>/dev/null | sort | tail -n 1 || true)
steps=$(ls "$results"/gpu_steps_*.csv 2>/dev/null | sort | tail -n 1 || true)
table="$out/io_table_gpu.md"
if [[ -z $ncu || -z $steps ]]; then
  echo "*Not measured yet: no ncu_*.txt or gpu_steps_*.csv in docs/results.*" > "$table"
  exit 0
fi

awk -v ncu_name="${ncu#"$repo"/docs/results/}" -v steps_name="${steps#"$repo"/docs/results/}" '
  function bytes(value, unit) {
    gsub(/,/, "", value)
    if (unit == "Tbyte") return value * 1e12
    if (unit == "Gbyte") return value * 1e9
    if (unit == "Mbyte") return value * 1e6
    if (unit == "Kbyte") return value * 1e3
    return value
  }
  function gb(x) { return sprintf("%.2f", x / 1e9) }
  function ceil_div(a, b) { return int((a + b - 1) / b) }
  # The tiles and precision of each step at d = 128, not causal.
  FNR == 1 && FILENAME ~ /gpu_steps_/ { for (i = 1; i <= NF; i++) col[$i] = i; next }
  FILENAME ~ /gpu_steps_/ {
    if ($col["head_dim"] == 128 && $col["causal"] == 0) {
      name = $col["kernel"]
      Br[name] = $col["B_r"]; Bc[name] = $col["B_c"]
      e[name] = ($col["dtype"] == "fp32" || $col["dtype"] == "") ? 4 : 2
      bh[name] = $col["batch"] * $col["heads"]; n[name] = $col["seq_q"]; nkv[name] = $col["seq_kv"]
    }
    next
  }
  /^--- step/ { step = $2; order[++count] = step; next }
  $1 == "dram__bytes_read.sum" { rd[step] = bytes($3, $2); next }
  $1 == "dram__bytes_write.sum" { wr[step] = bytes($3, $2); next }
  END {
    print "| step | loop order | element | B_r × B_c | model: read (GB) | ncu: DRAM read (GB) | measured / model | model: written (GB) | ncu: DRAM written (GB) | Q, K, V read once (GB) |"
    print "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for (k = 1; k <= count; k++) {
      s = order[k]
      if (!(s in Br) || !(s in rd)) continue
      d = 128; nq = n[s]; nk = nkv[s]
      number = substr(s, 5, 2) + 0
      if (number <= 5) {
        tc = ceil_div(nk, Bc[s])
        r = (2 * nk * d + tc * (2 * nq * d + 2 * nq) + 2 * nq) * 4 * bh[s]
        w = ((nq * d + 2 * nq) + tc * (nq * d + 2 * nq) + nq) * 4 * bh[s]
        how = "FlashAttention-1"
      } else {
        tr = ceil_div(nq, Br[s])
        r = (nq * d + tr * 2 * nk * d) * e[s] * bh[s]
        w = (nq * d * e[s] + 4 * nq) * bh[s]
        how = "FlashAttention-2"
      }
      once = (nq + 2 * nk) * d * e[s] * bh[s]
      printf "| `%s` | %s | %s | %s × %s | %s | %s | %.2f | %s | %s | %s |\n", s, how,
             (e[s] == 4 ? "fp32" : "bf16"), Br[s], Bc[s], gb(r), gb(rd[s]), rd[s] / r, gb(w), gb(wr[s]), gb(once)
    }
    printf "\nB = 4, H = 16, N_q = N_kv = 4096, d = 128, not causal. ncu: [docs/results/%s](repo/docs/results/%s); tiles and precision: [docs/results/%s](repo/docs/results/%s). GB = 10⁹ bytes.\n", ncu_name, ncu_name, steps_name, steps_name
  }
' FS=, "$steps" 'FS= ' "$ncu" > "$table.tmp"
mv "$table.tmp" "$table"
