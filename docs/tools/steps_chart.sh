#!/usr/bin/env bash
# steps_chart.sh REPO OUTDIR — the front page's chart: TFLOP/s of every GPU step,
# causal and not, beside the baselines, at d = 128.
#
# Reads the newest REPO/docs/results/current/gpu_steps_*.csv (columns gpu, kernel, batch,
# heads, seq_q, seq_kv, head_dim, causal, ..., tflops; one row per step and mask,
# written by scripts/gpu/round.sh), so a step appears as soon as its rows do.
# Baselines: every row of any other CSV in docs/results/current whose kernel/step is not
# a step (cublas_standard, torch_sdpa_*, sdpa_* of check_pytorch.py in bf16/fp16,
# named with their dtype; not a backward's rows, such as sdpa_efficient:backward) measured
# on the same GPU and problem (B, H, N, d); where
# several files have one, the newest file's. docs/results/archive/ is not read (its step
# numbers are not today's). Writes
#   OUTDIR/steps_tflops.svg   the chart (gnuplot; a log axis, every point labelled with its
#                             value, the legend below the plot)
#   OUTDIR/steps_chart.md     the \image line and where each bar comes from
set -euo pipefail
repo=$1
out=$2
results=$repo/docs/results/current
d=128
md=$out/steps_chart.md
svg=$out/steps_tflops.svg
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

steps_csv=$(ls "$results"/gpu_steps_*.csv 2>/dev/null | sort | tail -1 || true)
if [[ -z "$steps_csv" ]]; then
  echo "No \`docs/results/current/gpu_steps_*.csv\` yet: the chart appears when a GPU round is recorded." > "$md"
  rm -f "$svg"
  exit 0
fi
steps_name=$(basename "$steps_csv")

# The steps at d, as tab-separated lines (the GPU name has spaces):
# kernel, causal, TFLOP/s, gpu|batch|heads|seq_q|seq_kv|head_dim, file.
awk -F',' -v d="$d" -v file="$steps_name" '
  { sub(/\r$/, "") }
  NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
  $c["head_dim"] == d { print $c["kernel"] (c["dtype"] && $c["dtype"] != "fp32" ? " (" $c["dtype"] ")" : "") "\t" $c["causal"] "\t" $c["tflops"] "\t" $c["gpu"] "|" $c["batch"] "|" $c["heads"] "|" $c["seq_q"] "|" $c["seq_kv"] "|" $c["head_dim"] "\t" file }' \
  "$steps_csv" > "$tmp/steps"
if [[ ! -s "$tmp/steps" ]]; then
  echo "\`${steps_name}\` has no row at d = ${d} yet." > "$md"
  rm -f "$svg"
  exit 0
fi
problem=$(cut -f4 "$tmp/steps" | sort -u | head -1)

# The precisions the steps ran in (gpu_steps' dtype column; fp32 without one): a
# baseline in another precision (fp16 when no step ran in fp16) is left out.
dtypes=" $(awk -F',' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } { print (c["dtype"] ? $c["dtype"] : "fp32") }' "$steps_csv" | sort -u | tr '\n' ' ')"

# Baselines on the same problem, newest file first.
: > "$tmp/base"
for csv in $(ls "$results"/*.csv 2>/dev/null | sort -r); do
  [[ "$csv" == "$steps_csv" ]] && continue
  awk -F',' -v file="$(basename "$csv")" -v want="$problem" -v dtypes="$dtypes" '
    { sub(/\r$/, "") }
    NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i
              k = c["kernel"] ? c["kernel"] : c["step"]
              q = c["seq_q"] ? c["seq_q"] : c["seq"] ? c["seq"] : c["N"]
              kv = c["seq_kv"] ? c["seq_kv"] : q
              hd = c["head_dim"] ? c["head_dim"] : c["d"]
              ok = k && q && hd && c["gpu"] && c["batch"] && c["heads"] && c["causal"] && c["tflops"]
              next }
    ok && $c["tflops"] != "" && $k !~ /^step[0-9]/ && $k !~ /:(backward|autograd)/ && (!c["dtype"] || index(dtypes, " " $c["dtype"] " ")) {
      key = $c["gpu"] "|" $c["batch"] "|" $c["heads"] "|" $q "|" $kv "|" $hd
      # A baseline in bf16 or fp16 (check_pytorch.py --dtype) is named with its dtype.
      name = $k (c["dtype"] && $c["dtype"] != "fp32" ? " (" $c["dtype"] ")" : "")
      if (key == want) print name "\t" $c["causal"] "\t" $c["tflops"] "\t" key "\t" file }' "$csv" >> "$tmp/base"
done
# One file per baseline: the first (newest) that has it.
awk -F'\t' '!($1 in file) { file[$1] = $5 } $5 == file[$1]' "$tmp/base" > "$tmp/base1"

# Chart data: index, label, TFLOP/s not causal, TFLOP/s causal, 1 for a baseline.
awk -F'\t' '
  FNR == 1 { part++ }
  { name = $1; if (!(name in idx)) { idx[name] = ++n; label[n] = name; base[n] = (part == 2) }
    v[name, $2 + 0] = $3 }
  END { for (i = 1; i <= n; i++) { nm = label[i]
          printf "%d\t%s\t%s\t%s\t%d\n", i - 1, nm, ((nm, 0) in v ? v[nm, 0] : "NaN"), ((nm, 1) in v ? v[nm, 1] : "NaN"), base[i] } }' \
  "$tmp/steps" "$tmp/base1" > "$tmp/chart.dat"

IFS='|' read -r gpu batch heads seq_q seq_kv head_dim <<<"$problem"
n_bars=$(wc -l < "$tmp/chart.dat")
# A log axis: the fp32 steps (a few TFLOP/s) and the tensor-core steps (hundreds)
# on one chart, each readable; the range brackets the data with room for the labels.
read -r ymin ymax < <(awk -F'\t' '{ for (i = 3; i <= 4; i++) if ($i != "NaN" && $i > 0) {
    if (!n++ || $i < lo) lo = $i; if ($i > hi) hi = $i } }
  END { printf "%g %g\n", lo / 2, hi * 2 }' "$tmp/chart.dat")
# Drawn at the size the site shows it (no scaling), so that the labels stay 11 px.
gnuplot <<EOF
set terminal svg size 940,600 dynamic font "sans,12" background '#ffffff'
set output '$svg'
set datafile separator '\t'
set title "TFLOP/s per step and baseline (log scale)\n${gpu}, B = ${batch}, H = ${heads}, N = ${seq_q}, d = ${head_dim}" noenhanced
set ylabel 'TFLOP/s'
set logscale y
set yrange [${ymin}:${ymax}]
set format y '%g'
set xrange [-0.6:${n_bars} - 0.4]
set grid ytics mytics
set xtics rotate by -40 left noenhanced nomirror font ',11'
set key outside below horizontal noenhanced
set bmargin 11
set rmargin 6
plot '$tmp/chart.dat' using 1:(\$5 > 0 ? NaN : \$3):xtic(2) with linespoints pt 7 ps 1.1 lw 2 lc rgb '#1f5f9f' title 'step, not causal', \
     '' using 1:(\$5 > 0 ? NaN : \$4) with linespoints pt 5 ps 1.0 lw 2 dt 2 lc rgb '#e69138' title 'step, causal', \
     '' using 1:(\$5 > 0 ? \$3 : NaN) with points pt 9 ps 1.6 lc rgb '#444444' title 'baseline, not causal', \
     '' using 1:(\$5 > 0 ? \$4 : NaN) with points pt 11 ps 1.6 lc rgb '#999999' title 'baseline, causal', \
     '' using 1:3:(sprintf('%.3g', \$3)) with labels offset 0, 0.9 font ',11' tc rgb '#1f5f9f' notitle, \
     '' using 1:4:(sprintf('%.3g', \$4)) with labels offset 0, -0.9 font ',11' tc rgb '#b45f06' notitle
EOF

{
  echo "\\image html steps_tflops.svg \"TFLOP/s of each GPU step (blue: not causal, orange: causal) and of the baselines (grey) on one problem, log scale\""
  echo
  echo "Generated during the docs build from \`docs/results/current/\`: the steps from"
  echo "[${steps_name}](repo/docs/results/current/${steps_name}) (the newest GPU round; a new step"
  echo "appears here when its rows do)$( [[ -s "$tmp/base1" ]] && echo ", the baselines from" || echo "; no baseline CSV has this problem." )"
  if [[ -s "$tmp/base1" ]]; then
    cut -f1,5 "$tmp/base1" | sort -u | awk -F'\t' '{ f[$2] = f[$2] (f[$2] ? ", " : "") "`" $1 "`" } END { for (x in f) print "- [" x "](repo/docs/results/current/" x "): " f[x] }' | sort
    echo
    echo "Baselines come from their own sessions (the file's date), on the same GPU model and problem."
  fi
  echo "Per-step tables: @ref results."
} > "$md"
