#!/usr/bin/env bash
# training_chart.sh REPO OUTDIR — the backward page's figure: the loss curves of the tiny
# transformer trained once with SDPA's attention and once with a backward step's.
#
# Reads the newest REPO/docs/results/current/training_<GPU>_<date>.csv (columns step,
# loss_sdpa, loss_step; written by python/examples/train_tiny_transformer.py --csv). Writes
#   OUTDIR/training_loss.svg   the figure (gnuplot): both losses against the training step,
#                              and below them their difference, step's minus SDPA's
#   OUTDIR/training_chart.md   the \image line, and what the file says: the steps, the
#                              largest difference and the last 50 steps' means
set -euo pipefail
repo=$1
out=$2
md=$out/training_chart.md
svg=$out/training_loss.svg
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

csv=$(ls "$repo"/docs/results/current/training_*.csv 2>/dev/null | sort | tail -1 || true)
if [[ -z "$csv" ]]; then
  echo "No \`docs/results/current/training_*.csv\` yet: the figure appears when a training run is recorded." > "$md"
  rm -f "$svg"
  exit 0
fi
name=$(basename "$csv")
# training_H100_80GB_HBM3_2026-11-26.csv -> "H100 80GB HBM3", "2026-11-26"
gpu=$(echo "$name" | sed -E 's/^training_(.*)_[0-9]{4}-[0-9]{2}-[0-9]{2}(_run[0-9]+)?\.csv$/\1/; s/_/ /g')
day=$(echo "$name" | grep -oE '[0-9]{4}-[0-9]{2}-[0-9]{2}' || echo "?")

# step, loss SDPA, loss step, step - SDPA: tab-separated, from the columns by name.
awk -F',' '
  { sub(/\r$/, "") }
  NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i
            if (!c["step"] || !c["loss_sdpa"] || !c["loss_step"]) { print "no step, loss_sdpa, loss_step columns" > "/dev/stderr"; exit 1 }
            next }
  { printf "%s\t%s\t%s\t%.9g\n", $c["step"], $c["loss_sdpa"], $c["loss_step"], $c["loss_step"] - $c["loss_sdpa"] }' \
  "$csv" > "$tmp/loss.dat"
# The figures the text below the plot gives: steps, max |difference|, the last 50 steps' means.
read -r steps max_diff tail_n mean_sdpa mean_step < <(awk -F'\t' '
  { n++; d = $4 < 0 ? -$4 : $4; if (d > max) max = d; s[n] = $2; t[n] = $3 }
  END { k = n < 50 ? n : 50; for (i = n - k + 1; i <= n; i++) { ms += s[i]; mt += t[i] }
        printf "%d %.2g %d %.2f %.2f\n", n, max, k, ms / k, mt / k }' "$tmp/loss.dat")

gnuplot <<EOF
set terminal svg size 940,620 dynamic font "sans,12" background '#ffffff'
set output '$svg'
set datafile separator '\t'
set multiplot
set lmargin 12
set rmargin 4
set size 1, 0.66
set origin 0, 0.34
set title "Training loss of the tiny transformer, SDPA's attention and step 24's\n${gpu}, ${day}" noenhanced
set ylabel 'cross-entropy loss'
set format x ''
set grid
set key outside top center horizontal noenhanced
plot '$tmp/loss.dat' using 1:2 with lines lw 5 lc rgb '#bbbbbb' title 'SDPA (EFFICIENT_ATTENTION)', \
     '' using 1:3 with lines lw 1.5 dt 2 lc rgb '#1f5f9f' title 'step 24 (forward and backward)'
set size 1, 0.34
set origin 0, 0
unset title
set format x '%g'
set xlabel 'training step'
set ylabel 'step 24 − SDPA'
set format y '%.0e'
set key off
plot '$tmp/loss.dat' using 1:4 with lines lw 1.5 lc rgb '#b45f06' notitle, 0 with lines lc rgb '#444444' notitle
unset multiplot
EOF

{
  echo "\\image html training_loss.svg \"The tiny transformer's loss, step by step, trained with SDPA's attention and with step 24's (above), and their difference (below)\""
  echo
  echo "Generated during the docs build from [${name}](repo/docs/results/current/${name})"
  echo "(\`python/examples/train_tiny_transformer.py --csv\`, ${gpu}, ${day}, ${steps} training steps). The"
  echo "curves lie on each other: the lower panel shows step 24's loss minus SDPA's, at most ${max_diff}"
  echo "in size; the means of the last ${tail_n} steps are ${mean_sdpa} (SDPA) and ${mean_step} (step 24)."
} > "$md"
