#!/usr/bin/env bash
# io_complexity.sh OUTDIR STEP_PROGRAM[@MAX_N[@MIN_M]]... — the data of the "IO complexity" page.
#
# Runs every given step program (those that count HBM traffic: step02, step03)
# with `--sram-floats M --json` over a sweep of M (N fixed; from MIN_M when given)
# and a sweep of N (M fixed; up to MAX_N when given). The limits are for slow
# programs such as step03's simulator, whose time grows with the number of tile
# pairs T_r·T_c: at N = 512 and M = 1024 (B_c = B_r = 4) that is 16 384 pairs,
# each a round of barriers among its OS threads, which ran for tens of minutes.
# Writes into OUTDIR:
#   io_table_m.md, io_table_n.md         Markdown tables: counted bytes beside the formulas
#   io_traffic_vs_m.png, io_traffic_vs_n.png   the same as log-log plots (gnuplot)
# The JSON fields used: step, sram_floats, B_c, B_r, seq_q, hbm_read_bytes,
# hbm_write_bytes, and where the program prints them closed_form_read_bytes,
# closed_form_write_bytes, paper_bound_bytes, standard_attention_bytes
# (shown as "—" when missing).
set -euo pipefail

out=$1
shift
[[ $# -ge 1 ]] || { echo "io_complexity.sh: no step program given" >&2; exit 2; }

# The problem: one head, d = 64, as in step02's page.
d=64
n_fixed=512
m_values=(1024 4096 16384 65536 262144)
m_fixed=16384
n_values=(128 256 512 1024 2048 4096)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One JSON object per line -> one tab-separated line of the fields above.
fields='step sram_floats B_c B_r seq_q hbm_read_bytes hbm_write_bytes closed_form_read_bytes closed_form_write_bytes paper_bound_bytes standard_attention_bytes'
to_tsv() {
  awk -v fields="$fields" '
    function field(obj, key,   re, s) {
      re = "\"" key "\": *(\"[^\"]*\"|[^,}]*)"
      if (!match(obj, re)) {
        if (key ~ /^(closed_form|paper_bound|standard_attention)/) return "NaN"
        print "io_complexity.sh: no \"" key "\" in: " obj > "/dev/stderr"; exit 1
      }
      s = substr(obj, RSTART, RLENGTH)
      sub(/^"[^"]*": */, "", s); gsub(/"/, "", s)
      return s
    }
    { n = split(fields, f, " "); line = ""
      for (i = 1; i <= n; i++) line = line (i > 1 ? "\t" : "") field($0, f[i])
      print line }'
}

for arg in "$@"; do
  IFS=@ read -r prog max_n min_m <<<"$arg"
  max_n=${max_n:-${n_values[-1]}}
  min_m=${min_m:-${m_values[0]}}
  for m in "${m_values[@]}"; do
    [[ $m -ge $min_m ]] || continue
    "$prog" --batch 1 --heads 1 --seq-q "$n_fixed" --seq-kv "$n_fixed" --head-dim "$d" \
      --sram-floats "$m" --json | to_tsv >> "$tmp/m.tsv"
  done
  for n in "${n_values[@]}"; do
    [[ $n -le $max_n ]] || continue
    "$prog" --batch 1 --heads 1 --seq-q "$n" --seq-kv "$n" --head-dim "$d" \
      --sram-floats "$m_fixed" --json | to_tsv >> "$tmp/n.tsv"
  done
done

# Markdown table; the last column says whether the count equals the closed form.
table() {
  awk -F'\t' -v first="$2" '
    function group(x,   s) { if (x == "NaN") return "—"; s = sprintf("%d", x); while (s ~ /[0-9][0-9][0-9][0-9]/) sub(/[0-9][0-9][0-9]($| )/, " &", s); return s }
    BEGIN {
      print "| step | " first " | B_c | B_r | counted (bytes) | closed form | counted = closed form | 4·N²d²/M | counted / (4·N²d²/M) | standard attention |"
      print "| --- | ---: | ---: | ---: | ---: | ---: | :---: | ---: | ---: | ---: |"
    }
    { counted = $6 + $7; closed = ($8 == "NaN" ? "NaN" : $8 + $9)
      x = (first == "M (floats)") ? $2 : $5
      printf "| `%s` | %s | %s | %s | %s | %s | %s | %s | %.1f | %s |\n", $1, group(x), $3, $4,
             group(counted), group(closed), (closed == "NaN" ? "—" : counted == closed ? "yes" : "**no**"),
             group($10), counted / $10, group($11) }' "$1"
}
table "$tmp/m.tsv" "M (floats)" > "$out/io_table_m.md"
table "$tmp/n.tsv" "N" > "$out/io_table_n.md"

# Plot data: one file per step (x, counted, closed form, paper bound, standard).
plot() {  # plot TSV XCOL XLABEL TITLE PNG
  local tsv=$1 xcol=$2 xlabel=$3 title=$4 png=$5 cmd="" first=1 step
  for step in $(cut -f1 "$tsv" | awk '!seen[$0]++'); do
    awk -F'\t' -v s="$step" -v x="$xcol" '$1 == s { print $x, $6 + $7, ($8 == "NaN" ? "NaN" : $8 + $9), $10, $11 }' \
      "$tsv" > "$tmp/$step.$xcol.dat"
    if [[ $first -eq 1 ]]; then
      cmd+="'$tmp/$step.$xcol.dat' using 1:3 with lines lw 2 dt 2 lc rgb '#444444' title 'closed form of Algorithm 1', "
      cmd+="'' using 1:4 with lines lw 2 lc rgb '#2a9d8f' title 'paper: N²d²/M (×4 bytes)', "
      cmd+="'' using 1:5 with lines lw 2 lc rgb '#e76f51' title 'standard attention: Θ(Nd + N²)', "
      first=0
    fi
    cmd+="'$tmp/$step.$xcol.dat' using 1:2 with points pt 7 ps 1.3 title 'counted by $step' noenhanced, "
  done
  gnuplot <<EOF
set terminal pngcairo size 900,540 font "sans,11"
set output '$png'
set title '$title'
set logscale xy 2
set format y '2^{%L}'
set format x '2^{%L}'
set xlabel '$xlabel'
set ylabel 'HBM traffic (bytes, read + written)'
set key below center box maxrows 3
set grid
set offsets graph 0.03, graph 0.03, graph 0.05, graph 0.05
plot ${cmd%, }
EOF
}
plot "$tmp/m.tsv" 2 "M, on-chip budget (floats)" \
  "HBM traffic against M (B = H = 1, N = $n_fixed, d = $d)" "$out/io_traffic_vs_m.png"
plot "$tmp/n.tsv" 5 "N = N_q = N_{kv}" \
  "HBM traffic against N (B = H = 1, M = $m_fixed floats, d = $d)" "$out/io_traffic_vs_n.png"
