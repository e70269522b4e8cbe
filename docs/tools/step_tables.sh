#!/usr/bin/env bash
# step_tables.sh REPO OUTDIR LABEL... — each GPU step page's "measured" table.
#
# Reads the newest REPO/docs/results/gpu_steps_*.csv (written by
# scripts/gpu_round.sh's perf phase: one row per step, head dim and mask at
# B=4, H=16, N=4096) and writes OUTDIR/LABEL_measured.html for every LABEL
# (step04, step05, ...): an HTML table of that step's rows, with the GPU, the
# date and the commit that added the file; "not measured yet" for a step the
# file does not have. The pages include it with \htmlinclude, so that no
# measured number is ever typed into a page.
set -euo pipefail

repo=$1
out=$2
shift 2
csv=$(ls "$repo"/docs/results/gpu_steps_*.csv 2>/dev/null | sort | tail -n 1 || true)
name=${csv##*/}
date=${name#gpu_steps_}
date=${date%.csv}
commit="not committed yet"
if [[ -n $csv ]] && c=$(git -C "$repo" log -1 --format=%h -- "docs/results/$name" 2>/dev/null) && [[ -n $c ]]; then
  commit="commit $c"
fi

for label in "$@"; do
  html="$out/${label}_measured.html"
  if [[ -z $csv ]] || ! grep -q "^[^,]*,${label}_" "$csv"; then
    echo "<p class=\"measured\"><em>Not measured yet: no row for ${label} in docs/results/gpu_steps_*.csv.</em></p>" >"$html.tmp"
    mv "$html.tmp" "$html"
    continue
  fi
  awk -F',' -v label="$label" -v file="$name" -v date="$date" -v commit="$commit" '
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    index($col["kernel"], label "_") == 1 {
      if (!rows++) {
        gpu = $col["gpu"]
        printf "<table class=\"measured\">\n<caption>%s, fp32, B = %s, H = %s, N_q = N_kv = %s; median of %s timed launches. ", gpu, $col["batch"], $col["heads"], $col["seq_q"], $col["runs"]
        printf "From <code>docs/results/%s</code> (%s, %s), written by <code>scripts/gpu_round.sh</code>.</caption>\n", file, date, commit
        print "<tr><th>d</th><th>mask</th><th>B_r × B_c</th><th>threads / block</th><th>registers / thread</th><th>shared memory / block</th><th>blocks / SM</th><th>local memory</th><th>ms</th><th>TFLOP/s</th></tr>"
      }
      printf "<tr><td>%s</td><td>%s</td><td>%s × %s</td><td>%s</td><td>%s</td><td>%.1f KiB</td><td>%s</td><td>%s B</td><td>%.3f</td><td>%.2f</td></tr>\n",
        $col["head_dim"], ($col["causal"] == 1 ? "causal" : "none"), $col["B_r"], $col["B_c"], ("threads" in col ? $col["threads"] : "—"), $col["registers"],
        $col["smem_bytes"] / 1024, $col["blocks_per_sm"], $col["local_bytes"], $col["median_ms"], $col["tflops"]
    }
    END { if (rows) print "</table>" }' "$csv" >"$html.tmp"
  mv "$html.tmp" "$html"
done
