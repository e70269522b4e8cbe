#!/usr/bin/env bash
# training_chart.sh REPO OUTDIR — the backward page's figures: the loss curves of the tiny
# transformer trained once with SDPA's attention and once with a backward step's.
#
# Reads the newest (by the date in the name) of REPO/docs/results/current/
#   training_<GPU>_<date>.csv        fp32: step 29 beside SDPA's EFFICIENT_ATTENTION backend
#   training_bf16_<GPU>_<date>.csv   bf16 (autocast): step 32 beside SDPA's FLASH_ATTENTION
#   training_hopper_bf16_<GPU>_<date>.csv
#                                    bf16, 2 heads of d = 64: step 33 beside FLASH_ATTENTION
# (columns step, loss_sdpa, loss_step; written by python/examples/train_tiny_transformer.py
# --csv, --dtype bf16 --csv and --dtype bf16 --heads 2 --csv). Writes
#   OUTDIR/training_loss.svg        the fp32 figure (gnuplot): both losses against the training
#                                   step, and below them their difference, step's minus SDPA's
#   OUTDIR/training_loss_bf16.svg   the same for the bf16 file, when there is one
#   OUTDIR/training_loss_hopper_bf16.svg
#                                   the same for the Hopper bf16 file, when there is one
#   OUTDIR/training_chart.md        for each figure the \image line, and what the file says: the
#                                   steps, the largest difference and the last 50 steps' means
set -euo pipefail
repo=$1
out=$2
results=$repo/docs/results/current
md=$out/training_chart.md
svg=$out/training_loss.svg
svg_bf16=$out/training_loss_bf16.svg
svg_hopper=$out/training_loss_hopper_bf16.svg
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
date_re='[0-9]{4}-[0-9]{2}-[0-9]{2}'

# newest: of the files listed on stdin, one a line, the one whose name has the latest date
# (the same date: the last by name, so that a _run2 comes after its first run); nothing for none.
newest() {
  local f
  while IFS= read -r f; do
    echo "$(basename "$f" | grep -oE "$date_re" | head -1 || true) $f"
  done | sort | tail -1 | cut -d' ' -f2-
}

# figure CSV SVG PREFIX TITLE STEP BACKEND: draws SVG from CSV (named PREFIX<GPU>_<date>.csv);
# sets name, gpu, day and the figures the text below the plot gives: steps, max_diff (the
# largest |step - SDPA|), tail_n, mean_sdpa and mean_step (the means of the last tail_n steps).
figure() {
  local csv=$1 svg=$2 prefix=$3 title=$4 step=$5 backend=$6
  local dat=$tmp/$(basename "$svg" .svg).dat
  name=$(basename "$csv")
  # training_H100_80GB_HBM3_2026-11-26.csv, training_bf16_H200_2026-11-28.csv -> "H100 80GB HBM3", "H200"
  gpu=$(echo "$name" | sed -E "s/^${prefix}//; s/_${date_re}(_run[0-9]+)?\.csv\$//; s/_/ /g")
  day=$(echo "$name" | grep -oE "$date_re" || echo "?")

  # step, loss SDPA, loss step, step - SDPA: tab-separated, from the columns by name.
  awk -F',' '
    { sub(/\r$/, "") }
    NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i
              if (!c["step"] || !c["loss_sdpa"] || !c["loss_step"]) { print "no step, loss_sdpa, loss_step columns" > "/dev/stderr"; exit 1 }
              next }
    { printf "%s\t%s\t%s\t%.9g\n", $c["step"], $c["loss_sdpa"], $c["loss_step"], $c["loss_step"] - $c["loss_sdpa"] }' \
    "$csv" > "$dat"
  read -r steps max_diff tail_n mean_sdpa mean_step < <(awk -F'\t' '
    { n++; d = $4 < 0 ? -$4 : $4; if (d > max) max = d; s[n] = $2; t[n] = $3 }
    END { k = n < 50 ? n : 50; for (i = n - k + 1; i <= n; i++) { ms += s[i]; mt += t[i] }
          printf "%d %.2g %d %.2f %.2f\n", n, max, k, ms / k, mt / k }' "$dat")

  gnuplot <<EOF
set terminal svg size 940,620 dynamic font "sans,12" background '#ffffff'
set output '$svg'
set datafile separator '\t'
set multiplot
set lmargin 12
set rmargin 4
set size 1, 0.66
set origin 0, 0.34
set title "${title}\n${gpu}, ${day}" noenhanced
set ylabel 'cross-entropy loss'
set format x ''
set grid
set key outside top center horizontal noenhanced
plot '$dat' using 1:2 with lines lw 5 lc rgb '#bbbbbb' title 'SDPA (${backend})', \
     '' using 1:3 with lines lw 1.5 dt 2 lc rgb '#1f5f9f' title '${step} (forward and backward)'
set size 1, 0.34
set origin 0, 0
unset title
set format x '%g'
set xlabel 'training step'
set ylabel '${step} − SDPA'
set format y '%g'
set key off
plot '$dat' using 1:4 with lines lw 1.5 lc rgb '#b45f06' notitle, 0 with lines lc rgb '#444444' notitle
unset multiplot
EOF
}

# The fp32 runs are training_<GPU>_<date>.csv: every training_*.csv but the 16-bit ones (Hopper's too).
csv=$(ls "$results"/training_*.csv 2>/dev/null | grep -vE '/training_(hopper_)?(bf16|fp16)_[^/]*$' | newest || true)
csv_bf16=$(ls "$results"/training_bf16_*.csv 2>/dev/null | newest || true)
csv_hopper=$(ls "$results"/training_hopper_bf16_*.csv 2>/dev/null | newest || true)
if [[ -z "$csv" && -z "$csv_bf16" && -z "$csv_hopper" ]]; then
  echo "No \`docs/results/current/training_*.csv\` yet: the figure appears when a training run is recorded." > "$md"
  rm -f "$svg" "$svg_bf16" "$svg_hopper"
  exit 0
fi

if [[ -n "$csv" ]]; then
  figure "$csv" "$svg" training_ "Training loss of the tiny transformer, SDPA's attention and step 29's" \
    "step 29" EFFICIENT_ATTENTION
  {
    echo "\\image html training_loss.svg \"The tiny transformer's loss, step by step, trained with SDPA's attention and with step 29's (above), and their difference (below)\""
    echo
    echo "Generated during the docs build from [${name}](repo/docs/results/current/${name})"
    echo "(\`python/examples/train_tiny_transformer.py --csv\`, ${gpu}, ${day}, ${steps} training steps). The"
    echo "curves lie on each other: the lower panel shows step 29's loss minus SDPA's, at most ${max_diff}"
    echo "in size; the means of the last ${tail_n} steps are ${mean_sdpa} (SDPA) and ${mean_step} (step 29)."
  } > "$md"
else
  echo "No fp32 \`docs/results/current/training_<GPU>_<date>.csv\` yet: its figure appears when an fp32 run is recorded." > "$md"
  rm -f "$svg"
fi

if [[ -n "$csv_bf16" ]]; then
  figure "$csv_bf16" "$svg_bf16" training_bf16_ \
    "Training loss of the tiny transformer in bf16, SDPA's attention and step 32's" "step 32" FLASH_ATTENTION
  {
    echo
    echo "\\image html training_loss_bf16.svg \"The tiny transformer's loss in bf16 (autocast over float32 weights), trained with SDPA's FLASH_ATTENTION backend and with step 32's (above), and their difference (below)\""
    echo
    echo "Generated during the docs build from [${name}](repo/docs/results/current/${name})"
    echo "(\`python/examples/train_tiny_transformer.py --dtype bf16 --csv\`, ${gpu}, ${day}, ${steps} training"
    echo "steps). In bf16 the lower panel shows step 32's loss minus SDPA's, at most ${max_diff} in size;"
    echo "the means of the last ${tail_n} steps are ${mean_sdpa} (SDPA) and ${mean_step} (step 32)."
  } >> "$md"
else
  rm -f "$svg_bf16"
fi

if [[ -n "$csv_hopper" ]]; then
  figure "$csv_hopper" "$svg_hopper" training_hopper_bf16_ \
    "Training loss of the tiny transformer in bf16 at d = 64, SDPA's attention and step 33's" "step 33" FLASH_ATTENTION
  {
    echo
    echo "\\image html training_loss_hopper_bf16.svg \"The tiny transformer's loss in bf16 (autocast over float32 weights) with 2 heads of d = 64, trained with SDPA's FLASH_ATTENTION backend and with step 33's (above), and their difference (below)\""
    echo
    echo "Generated during the docs build from [${name}](repo/docs/results/current/${name})"
    echo "(\`python/examples/train_tiny_transformer.py --dtype bf16 --heads 2 --csv\`, ${gpu}, ${day}, ${steps}"
    echo "training steps). With 2 heads of d = 64 the lower panel shows step 33's loss minus SDPA's,"
    echo "at most ${max_diff} in size; the means of the last ${tail_n} steps are ${mean_sdpa} (SDPA) and ${mean_step} (step 33)."
  } >> "$md"
else
  rm -f "$svg_hopper"
fi
