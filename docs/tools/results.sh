#!/usr/bin/env bash
# results.sh REPO OUTDIR — the data of the "Results" and "FA1 vs FA2" pages.
#
# Reads the CSV files under REPO/docs/results/ (written by the benchmark programs and
# the GPU round) and writes into OUTDIR:
#   results_tables.md   the current measurements, each file with where it was
#                       measured (the file's row in docs/results/README.md), the
#                       commit that added it, its plots and its table (a table
#                       of more than 20 rows folded, so the page stays short)
#   results_archive.md  the files of docs/results/archive/, as one line with a link
#                       each: older measurements stay reachable without filling the
#                       page (nothing else reads them: their step numbers are the
#                       old ones, which docs/results/README.md maps to today's)
#   results_*.png       plots (gnuplot) of the current files: TFLOP/s (or the time
#                       where the file has no TFLOP/s) against N per step and
#                       baseline, and working memory against N where the CSV has
#                       peak_bytes; one set per (B, H, d, causal) in the file
#   fa_numbers.md       step05_cuda_registers against step06_fa2: the newest
#                       current/gpu_steps_*.csv's times, grids and causal savings, and
#                       any B·H sweep of both (else: "not measured yet")
#
# Current: docs/results/*.csv and docs/results/current/*.csv; the archive: every CSV
# under docs/results/archive/.
#
# A CSV is recognised by its columns, not its name: it needs `step` (the step or
# baseline: step01_naive, ..., cublas_standard, torch_sdpa_flash, ...), `seq` (N,
# or seq_q), and `time_ms` and/or `tflops`; batch, heads, head_dim, causal and
# peak_bytes are used when present. See docs/results.md for the columns.
set -euo pipefail

repo=$1
out=$2
results="$repo/docs/results"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

md="$out/results_tables.md"
: > "$md"
rm -f "$out"/results_*.png

# The row of docs/results/README.md's table that names FILE, as "- key: value" lines.
provenance() {
  local file=$1
  [[ -f "$results/README.md" ]] || return 0
  awk -F'|' -v file="$file" '
    # Cells keep their backticks: a command stays code (Doxygen would turn its
    # "--" into a dash in text). The file column may name several files.
    function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
    /^\|/ && !header { for (i = 2; i < NF; i++) h[i] = trim($i); header = 1; next }
    /^\| *-/ { next }
    /^\|/ && index($2, "`" file "`") { for (i = 3; i < NF; i++) printf "- **%s:** %s\n", h[i], trim($i); found = 1 }
    END { if (!found) print "- (no row for this file in `docs/results/README.md`)" }' "$results/README.md"
}

# commit_of PATH: the commit that added PATH (relative to docs/results).
commit_of() {
  local rel="docs/results/$1" c
  if command -v git >/dev/null 2>&1 && c=$(git -C "$repo" log -1 --format='%h, %ad' --date=short -- "$rel" 2>/dev/null) && [[ -n "$c" ]]; then
    echo "$c"
  else
    echo "not committed yet"
  fi
}

# CSV -> Markdown table, numbers rounded to 4 significant digits.
csv_table() {
  awk -F',' '
    function fmt(x) { if (x ~ /^-?[0-9]+\.[0-9]+([eE][-+]?[0-9]+)?$/ || x ~ /^-?[0-9]+[eE][-+]?[0-9]+$/) return sprintf("%.4g", x); return x }
    NR == 1 { line = "|"; sep = "|"
              for (i = 1; i <= NF; i++) { line = line " " $i " |"; sep = sep (i == 1 ? " --- |" : " ---: |") }
              print line; print sep; next }
    { line = "|"; for (i = 1; i <= NF; i++) line = line " " fmt($i) " |"; print line }' "$1"
}

# The current files and the archive, as paths relative to docs/results/.
(cd "$results" && find . -name '*.csv' -printf '%P\n' 2>/dev/null | sort) > "$tmp/all"
grep -v '^archive/' "$tmp/all" > "$tmp/current" || true
grep '^archive/' "$tmp/all" > "$tmp/archive" || true
: > "$out/results_archive.md"
if [[ -s "$tmp/archive" ]]; then
  {
    echo "| file | program, machine, date (from \`docs/results/README.md\`) |"
    echo "| --- | --- |"
    while IFS= read -r rel; do
      printf '| [%s](repo/docs/results/%s) | %s |\n' "$rel" "$rel" \
        "$(provenance "$(basename "$rel")" | sed 's/^- \*\*[^*]*:\*\* //' | paste -sd';' - | sed 's/;/; /g; s/|/\\|/g')"
    done < "$tmp/archive"
  } > "$out/results_archive.md"
else
  echo "No older measurement is kept." > "$out/results_archive.md"
fi

# The newest measurements first (by the date in the name; undated files last).
# A long table, folded: CSV -> an HTML table inside <details> (Doxygen's Markdown
# cannot hold a table in <details>, so the whole block is HTML), numbers rounded to 4
# significant digits as in csv_table.
csv_folded() {
  echo "\\htmlonly"
  awk -F',' -v rows="$(($(wc -l < "$1") - 1))" '
    function fmt(x) { if (x ~ /^-?[0-9]+\.[0-9]+([eE][-+]?[0-9]+)?$/ || x ~ /^-?[0-9]+[eE][-+]?[0-9]+$/) return sprintf("%.4g", x); return x }
    function esc(x) { gsub(/&/, "\\&amp;", x); gsub(/</, "\\&lt;", x); gsub(/>/, "\\&gt;", x); return x }
    { sub(/\r$/, "") }
    NR == 1 { printf "<details class=\"results-table\"><summary>The measurements: %d rows (click to show)</summary>\n<table class=\"markdownTable\">\n<tr class=\"markdownTableHead\">", rows
              for (i = 1; i <= NF; i++) printf "<th class=\"markdownTableHead%s\">%s</th>", (i == 1 ? "None" : "Right"), esc($i)
              print "</tr>"; next }
    { printf "<tr class=\"markdownTableRow%s\">", (NR % 2 ? "Odd" : "Even")
      for (i = 1; i <= NF; i++) printf "<td class=\"markdownTableBody%s\">%s</td>", (i == 1 ? "None" : "Right"), esc(fmt($i))
      print "</tr>" }
    END { print "</table></details>" }' "$1"
  echo "\\endhtmlonly"
}
# A table of more than this many rows is folded (the page stays a page).
fold_rows=20

plot_count=0
csvs=()
while IFS= read -r rel; do csvs+=("$results/$rel"); done < <(
  awk '{ d = match($0, /20[0-9][0-9]-[0-9][0-9]-[0-9][0-9](_run[0-9]+)?/) ? substr($0, RSTART, RLENGTH) : "0"; print d "\t" $0 }' \
    "$tmp/current" | sort -t$'\t' -k1,1r -k2,2 | cut -f2)
for csv in "${csvs[@]}"; do
  rel=${csv#"$results"/}
  name=$(basename "$csv")
  stem=${name%.csv}
  anchor=$(echo "results_$stem" | tr -c 'A-Za-z0-9_\n' '_')
  header=$(head -1 "$csv" | tr -d '\r')
  # col NAME... -> the index of the first of these columns that the file has.
  col() { echo "$header" | awk -F',' -v want="$*" '{ n = split(want, w, " ")
            for (k = 1; k <= n; k++) for (i = 1; i <= NF; i++) if ($i == w[k]) { print i; exit } }'; }
  c_step=$(col step kernel); c_seq=$(col seq seq_q)
  c_tflops=$(col tflops); c_time=$(col time_ms median_ms); c_mem=$(col peak_bytes)
  c_b=$(col batch); c_h=$(col heads); c_d=$(col head_dim); c_causal=$(col causal)
  c_gpu=$(col gpu); c_section=$(col section)

  {
    echo "### ${name} {#${anchor}}"
    echo
    provenance "$name"
    if [[ -n "$c_gpu" ]]; then
      echo "- **GPU (from the file):** $(awk -F',' -v c="$c_gpu" 'NR > 1 && !seen[$c]++ { printf "%s%s", (n++ ? ", " : ""), $c }' "$csv")"
    fi
    echo "- **commit:** $(commit_of "$rel")"
    echo "- **file:** [docs/results/${rel}](repo/docs/results/${rel})"
    echo
  } >> "$md"

  if [[ -z "$c_step" || -z "$c_seq" || ( -z "$c_tflops" && -z "$c_time" ) ]]; then
    echo "(Not plotted: the file lacks a \`step\`, \`seq\` or \`time_ms\`/\`tflops\` column.)" >> "$md"
    echo >> "$md"
    if (( $(wc -l < "$csv") - 1 > fold_rows )); then csv_folded "$csv" >> "$md"; else csv_table "$csv" >> "$md"; fi
    echo >> "$md"
    continue
  fi

  # One group of plots per problem family (B, H, d, causal) in the file.
  awk -F',' -v b="$c_b" -v h="$c_h" -v d="$c_d" -v c="$c_causal" -v sec="$c_section" '
    NR > 1 { key = (sec ? $sec ": " : "") (b ? "B=" $b " " : "") (h ? "H=" $h " " : "") (d ? "d=" $d " " : "") (c ? ($c == 1 || $c == "true" ? "causal" : "not causal") : "")
             sub(/ $/, "", key); if (!(key in seen)) { seen[key] = 1; print key } }' "$csv" > "$tmp/groups"

  g=0
  single_n=()
  while IFS= read -r group; do
    g=$((g + 1))
    # Rows of this group, as "step seq tflops time_ms peak_bytes" (missing = NaN).
    awk -F',' -v b="$c_b" -v h="$c_h" -v d="$c_d" -v c="$c_causal" -v sec="$c_section" -v want="$group" \
        -v s="$c_step" -v n="$c_seq" -v t="$c_tflops" -v ms="$c_time" -v mem="$c_mem" '
      NR > 1 { key = (sec ? $sec ": " : "") (b ? "B=" $b " " : "") (h ? "H=" $h " " : "") (d ? "d=" $d " " : "") (c ? ($c == 1 || $c == "true" ? "causal" : "not causal") : "")
               sub(/ $/, "", key)
               if (key == want) print $s, $n, (t ? $t : "NaN"), (ms ? $ms : "NaN"), (mem ? $mem : "NaN") }' \
      "$csv" | sort -k1,1 -k2,2n > "$tmp/rows"
    # A family measured at one N only (e.g. a sweep over B·H) is in the table, not plotted.
    if [[ $(cut -d' ' -f2 "$tmp/rows" | sort -u | wc -l) -lt 2 ]]; then
      single_n+=("$group")
      continue
    fi
    steps=$(cut -d' ' -f1 "$tmp/rows" | awk '!seen[$0]++')
    for s in $steps; do awk -v s="$s" '$1 == s' "$tmp/rows" > "$tmp/$s.dat"; done

    # TFLOP/s, or GFLOP/s when every value is below 1 TFLOP/s (the CPU steps).
    scale=1; unit="TFLOP/s"
    if [[ -n "$c_tflops" ]] && awk '$3 != "NaN" && $3 >= 1 { exit 1 }' "$tmp/rows"; then scale=1000; unit="GFLOP/s"; fi

    plot_one() {  # plot_one KIND YCOL YEXPR YLABEL LOGY
      local kind=$1 ycol=$2 yexpr=$3 ylabel=$4 logy=$5 png="results_${stem}_${1}_${g}.png" cmd="" s
      for s in $steps; do
        # A series with no value in this column (an SDPA backend that does not
        # run fp32, say) stays in the table but not in the plot.
        awk -v col="$ycol" '$col != "NaN" && $col != "" { found = 1 } END { exit !found }' "$tmp/$s.dat" || continue
        cmd+="'$tmp/$s.dat' using 2:($yexpr) with linespoints lw 2 pt 7 title '$s' noenhanced, "
      done
      [[ -n $cmd ]] || return 0
      gnuplot <<EOF
set terminal pngcairo size 900,540 font "sans,11"
set output '$out/$png'
set title '${name}: ${group}' noenhanced
set logscale x 2
set format x '2^{%L}'
$( [[ $logy == 1 ]] && echo "set logscale y 2" || echo "set yrange [0:*]" )
$( [[ $logy == 1 ]] && echo "set offsets graph 0.03, graph 0.03, graph 0.05, graph 0.05" || echo "set offsets graph 0.03, graph 0.03, graph 0.05, 0" )
set xlabel 'N = N_q = N_{kv}'
set ylabel '$ylabel'
set key outside right top
set grid
plot ${cmd%, }
EOF
      echo "\\image html $png \"${name}, ${group}: ${ylabel} against N\"" >> "$md"
      echo >> "$md"
      plot_count=$((plot_count + 1))
    }
    echo "#### ${group}" >> "$md"
    echo >> "$md"
    # One speed plot: TFLOP/s where the file has it (the time is in the table).
    if [[ -n "$c_tflops" ]]; then
      plot_one throughput 3 "\$3*$scale" "$unit" 0
    else
      plot_one time 4 "\$4" "time (ms)" 1
    fi
    if [[ -n "$c_mem" ]] && awk '$5 != "NaN" && $5 > 0 { found = 1 } END { exit !found }' "$tmp/rows"; then
      plot_one memory 5 "\$5/1048576" "working memory (MiB)" 1
    fi
  done < "$tmp/groups"

  if [[ ${#single_n[@]} -gt 0 ]]; then
    printf 'Measured at a single N, so only in the table: %s.\n\n' "$(IFS=';'; echo "${single_n[*]}" | sed 's/;/; /g')" >> "$md"
  fi
  if (( $(wc -l < "$csv") - 1 > fold_rows )); then
    csv_folded "$csv" >> "$md"
  else
    echo "The measurements:" >> "$md"
    echo >> "$md"
    csv_table "$csv" >> "$md"
  fi
  echo >> "$md"
done

if [[ ${#csvs[@]} -eq 0 ]]; then
  echo "No benchmark has been recorded in \`docs/results/\` yet." >> "$md"
fi

# --- FA1 (step05) against FA2 (step06), and the parts of the difference -------
# 1. The newest gpu_steps_*.csv (today's steps, one run): each problem's times,
#    the grids, and what the causal mask saves in each step.
# 2. Any file with a B·H sweep of both (section "sweep"): the ratio as step05's
#    grid of B·H blocks fills the GPU.
fa="$out/fa_numbers.md"
: > "$fa"
steps_csv=$(grep -E '^current/gpu_steps_[^/]*\.csv$' "$tmp/current" | sort | tail -1 || true)
[[ -n "$steps_csv" ]] && steps_csv=$results/$steps_csv
if [[ -n "$steps_csv" ]]; then
  sname=${steps_csv#"$results"/}
  awk -F',' -v file="$sname" '
    { sub(/\r$/, "") }
    NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    $c["kernel"] ~ /^step0[56]_(cuda_registers|fa2)$/ {
      s = substr($c["kernel"], 1, 6); d = $c["head_dim"]; m = $c["causal"] + 0
      t[s, d, m] = $c["median_ms"]; br[s, d] = $c["B_r"]; bh = $c["batch"] * $c["heads"]; nq = $c["seq_q"]
      if (!(d in seen)) { seen[d] = 1; ds[++nd] = d }
      gpu = $c["gpu"]; b = $c["batch"]; h = $c["heads"]; n = $c["seq_q"] }
    END {
      if (!nd) { print "**Not measured yet:** `" file "` has no step05/step06 rows."; exit }
      printf "From [%s](repo/docs/results/%s), one run: %s, B = %s, H = %s, N = %s.\n\n", file, file, gpu, b, h, n
      print "| d | mask | step05 ms | step06 ms | step05 / step06 | step05 grid (blocks) | step06 grid (blocks) |"
      print "| ---: | --- | ---: | ---: | ---: | ---: | ---: |"
      for (k = 1; k <= nd; k++) { d = ds[k]
        for (m = 0; m <= 1; m++) {
          if (!(("step05", d, m) in t) || !(("step06", d, m) in t)) continue
          printf "| %s | %s | %.4g | %.4g | %.2f | %d | %d |\n", d, (m ? "causal" : "none"), t["step05", d, m], t["step06", d, m],
                 t["step05", d, m] / t["step06", d, m], bh, int((nq + br["step06", d] - 1) / br["step06", d]) * bh } }
      print ""
      print "What the causal mask saves, in each step (the time without the mask over the time with it):"
      print ""
      print "| d | step05: none / causal | step06: none / causal | step06 causal speed-up over step05, divided by the unmasked one |"
      print "| ---: | ---: | ---: | ---: |"
      for (k = 1; k <= nd; k++) { d = ds[k]
        if (!(("step05", d, 1) in t) || !(("step06", d, 1) in t) || !(("step05", d, 0) in t) || !(("step06", d, 0) in t)) continue
        printf "| %s | %.2f | %.2f | %.2f |\n", d, t["step05", d, 0] / t["step05", d, 1], t["step06", d, 0] / t["step06", d, 1],
               (t["step05", d, 1] / t["step06", d, 1]) / (t["step05", d, 0] / t["step06", d, 0]) }
    }' "$steps_csv" >> "$fa"
  echo >> "$fa"
fi
while IFS= read -r rel; do
  csv=$results/$rel
  awk -F',' -v file="$rel" '
    { sub(/\r$/, "") }
    NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; if (!c["kernel"] || !c["section"]) exit; next }
    $c["section"] == "sweep" && $c["kernel"] ~ /^step0[56]_(cuda_registers|fa2)$/ && $c["causal"] == 0 {
      s = substr($c["kernel"], 1, 6); bh = $c["batch"] * $c["heads"]; t[s, bh] = $c["median_ms"]
      if (!(bh in seen)) { seen[bh] = 1; order[++n] = bh }
      desc = "N = " $c["seq_q"] ", d = " $c["head_dim"] ", not causal, " $c["gpu"] }
    END {
      if (!n) exit
      printf "The B·H sweep of [%s](repo/docs/results/%s) (%s; the kernels of that date, see the file'"'"'s row in @ref results):\n\n", file, file, desc
      print "| B·H | step05 ms | step06 ms | step05 / step06 |"
      print "| ---: | ---: | ---: | ---: |"
      for (k = 1; k <= n; k++) { x = order[k]
        if ((("step05", x) in t) && (("step06", x) in t))
          printf "| %d | %.4g | %.4g | %.2f |\n", x, t["step05", x], t["step06", x], t["step05", x] / t["step06", x] } }' \
    "$csv" > "$tmp/sweep.md"
  if [[ -s "$tmp/sweep.md" ]]; then
    cat "$tmp/sweep.md" >> "$fa"
    echo >> "$fa"
  fi
done < "$tmp/current"
if [[ ! -s "$fa" ]]; then
  echo "**Not measured yet.** No CSV in \`docs/results/\` or \`docs/results/current/\` times \`step05_cuda_registers\` and \`step06_fa2\` on the same problem." > "$fa"
fi
