#!/usr/bin/env bash
# ownership.sh STEP — the "who owns what" figure of a GPU step, as Graphviz dot.
#
#   docs/figures/ownership.sh 06 | dot -Tsvg > step06_ownership.svg
#
# Draws, at d = 128, which block owns which query rows, and inside a block which
# warp (colour) and which lane (number in the cell) owns each entry of S_ij and
# of O_i. The rules below are read off the kernels (stepNN_*/attention.cu); a
# step whose mapping changes needs its rule here.
#
#   steps 04, 05, 06: 1024 threads = 32 warps; B_r = B_c = 32 at d = 128.
#     S_ij[r][c]: warp r mod 32, lane c mod 32 (rows warp + 32·t, columns lane + 32·n)
#     O_i[r][k]:  warp r mod 32, lane k mod 32 (columns lane + 32·n)
#   steps 07, 08: 128 threads = 4 warps of 4 × 8 lanes; B_r = 64, B_c = 32 at d = 128.
#     row r: warp r / 16, row_lane r mod 4 (row(t) = 16·warp + 4·t + row_lane)
#     S_ij[r][c]: lane = 8·row_lane + c mod 8            (columns col_lane + 8·n)
#     O_i[r][k]:  lane = 8·row_lane + (k / 4) mod 8      (float4s 4·col_lane + 32·n)
#   step 09: as steps 07 and 08 (the elements are 16-bit, the mapping is the same).
#   step 10: 128 threads = 4 warps of 8 × 4 lanes, the mma's C layout; B_r = B_c = 64.
#     row r: warp r / 16, row_lane r mod 8 (row(t) = 16·warp + 8·t + row_lane)
#     S_ij[r][c]: lane = 4·row_lane + (c mod 8) / 2      (columns 8·(n/2) + 2·col_lane + n mod 2)
#     O_i[r][k]:  lane = 4·row_lane + (k mod 8) / 2      (the same layout over d)
#   step 11: as step 10 with 32 rows a warp (two 16-row mma tiles); B_r = 128, B_c = 32 at d = 128.
#     row r: warp r / 32, row_lane r mod 8 (row(t) = 32·warp + 8·t + row_lane, t = 0..3)
#   steps 12, 13: as step 11 with B_c = 64 at d = 128 (13 changes the softmax's arithmetic, no owner).
#   step 14: as step 13; the block → tile order depends on the mask.
#   step 15: as step 14 (TMA brings the tiles; who computes what is unchanged).
#   steps 16 … 20: 2 warpgroups of 4 warps compute (wgmma), 16 rows a warp, the mma's C layout
#     repeated every 8 columns; B_r = B_c = 128 at d = 128 (steps 17 … 20: + 1 producer warpgroup;
#     18 … 20 change when a consumer issues and waits, not what it owns).
#     row r: warp r / 16, row_lane r mod 8 (row(t) = 16·warp + 8·t + row_lane, t = 0, 1)
#   step 21: as step 20 at d = 128 (drawn); at d = 64, 3 consumer warpgroups, B_r = 192.
set -euo pipefail
step=${1:?usage: ownership.sh STEP (04 to 21)}

case $step in
  04|05|06) family=warp_rows ;;
  07|08|09) family=lane_tiles ;;
  10|11|12|13|14|15|16|17|18|19|20|21) family=mma ;;
  *) echo "ownership.sh: no rule for step $step (04 to 21)" >&2; exit 2 ;;
esac

# Which rows and columns the figure shows ("…" stands for those left out).
case $family in
  warp_rows)
    rows="0 1 2 3 4 5 … 31"
    s_cols="0 1 2 3 4 5 6 7 … 31"
    o_cols="0 1 2 3 4 5 … 31 32 33 … 127"
    Br=32 Bc=32 warps=32 threads=1024 ;;
  lane_tiles)
    rows="0 1 2 3 4 5 6 7 … 15 16 17 … 63"
    s_cols="0 1 2 3 4 5 6 7 8 9 … 31"
    o_cols="0 1 2 3 4 5 6 7 8 … 31 32 … 127"
    Br=64 Bc=32 warps=4 threads=128 ;;
  mma)
    rows="0 1 2 … 7 8 9 … 15 16 17 … 63"
    s_cols="0 1 2 3 4 5 6 7 8 9 … 63"
    o_cols="0 1 2 3 4 5 6 7 8 9 … 127"
    Br=64 Bc=64 warps=4 threads=128 rows_per_warp=16
    if (( 10#$step >= 11 && 10#$step <= 15 )); then
      rows="0 1 … 7 8 … 15 16 … 31 32 33 … 127"
      s_cols="0 1 2 3 4 5 6 7 8 9 … 31"
      Br=128 Bc=32 rows_per_warp=32
    fi
    if (( 10#$step >= 12 && 10#$step <= 15 )); then s_cols="0 1 2 3 4 5 6 7 8 9 … 63"; Bc=64; fi
    if (( 10#$step >= 16 )); then
      rows="0 1 … 7 8 … 15 16 … 63 64 65 … 127"
      s_cols="0 1 2 3 4 5 6 7 8 9 … 127"
      Br=128 Bc=128 warps=8 threads=256
      if (( 10#$step >= 17 )); then warps=12 threads=384; fi
    fi ;;
esac

case $step in
  04) blocks="B·H blocks: block b·h owns one head — all T_r query tiles, all N_q rows of O"
      where="S_ij, O_i, m_i, l_i in shared memory; O, l, m in HBM between K/V tiles" ;;
  05) blocks="B·H blocks: block b·h owns one head — all T_r query tiles, all N_q rows of O"
      where="S_ij and O_i in the owners' registers; O, l, m in HBM between K/V tiles" ;;
  06) blocks="T_r·B·H blocks: block x owns query tile i = T_r − 1 − ⌊x / BH⌋ of head x mod BH (B_r rows of O)"
      where="S_ij, O_i, m_i, l_i in the owners' registers for the whole sweep over j" ;;
  07) blocks="T_r·B·H blocks: block x owns query tile i = T_r − 1 − ⌊x / BH⌋ of head x mod BH (B_r rows of O)"
      where="each thread: a 4 × B_c/8 tile of S_ij and 4 × d/8 of O_i (float4s) in registers" ;;
  08) blocks="T_r·B·H blocks: block x owns query tile i = T_r − 1 − ⌊x / BH⌋ of head x mod BH (B_r rows of O)"
      where="as step 7; P̃_ij also goes through shared memory (each warp its own rows)" ;;
  09) blocks="T_r·B·H blocks: block x owns query tile i = T_r − 1 − ⌊x / BH⌋ of head x mod BH (B_r rows of O)"
      where="as step 8, with Q_i, K_j, V_j, P̃_ij in 16 bits (bf16 or fp16) and S_ij, O_i, m_i, l_i in fp32" ;;
  10) blocks="T_r·B·H blocks: block x owns query tile i = T_r − 1 − ⌊x / BH⌋ of head x mod BH (B_r rows of O)"
      where="each warp: 16 rows, one mma.m16n8k16 C fragment per 8 columns; each lane: 2 rows × 2 neighbouring columns per 8" ;;
  11) blocks="T_r·B·H blocks: block x owns query tile i = T_r − 1 − ⌊x / BH⌋ of head x mod BH (B_r rows of O)"
      where="each warp: 32 rows, two mma tiles of 16; each lane: 4 rows × 2 neighbouring columns per 8; P̃_ij stays in these registers" ;;
  12) blocks="T_r·B·H blocks: block x owns query tile i = T_r − 1 − ⌊x / BH⌋ of head x mod BH (B_r rows of O)"
      where="as step 11 with B_c = 64: each lane 4 rows × 2 neighbouring columns per 8 of 64 keys; m_i, l_i in shared memory, a slot per thread" ;;
  13) blocks="T_r·B·H blocks: block x owns query tile i = T_r − 1 − ⌊x / BH⌋ of head x mod BH (B_r rows of O)"
      where="as step 12; the scale moves inside the exponential, no entry changes owner" ;;
  14) blocks="T_r·B·H blocks: causal, block x owns tile T_r − 1 − ⌊x / BH⌋ of head x mod BH; without the mask, tile T_r − 1 − (x mod T_r) of head ⌊x / T_r⌋"
      where="as step 13: each lane 4 rows × 2 neighbouring columns per 8 of 64 keys; m_i, l_i in shared memory, a slot per thread" ;;
  15) blocks="T_r·B·H blocks, ordered as in step 14"
      where="as step 14; Q_i, K_j, V_j arrive by TMA into 128-byte-swizzled shared memory" ;;
  16) blocks="T_r·B·H blocks, ordered as in step 14"
      where="warpgroup w = warps 4w … 4w + 3: rows 64w … 64w + 63, one wgmma's M; each lane: 2 rows × 2 neighbouring columns per 8" ;;
  17) blocks="T_r·B·H blocks, ordered as in step 14; warps 8 … 11 (the producer) own no entry, they issue the copies"
      where="as step 16: the two consumer warpgroups own the rows; the producer owns the K/V stages until they land" ;;
  18) blocks="T_r·B·H blocks, ordered as in step 14; warps 8 … 11 (the producer) own no entry, they issue the copies"
      where="as step 17; S_ij is issued with the previous tile's P̃V behind it, one wait a tile" ;;
  19) blocks="T_r·B·H blocks, ordered as in step 14; warps 8 … 11 (the producer) own no entry, they issue the copies"
      where="as step 18; the two consumer warpgroups take turns on the tensor cores (ping-pong)" ;;
  20) blocks="T_r·B·H blocks, ordered as in step 14; warps 8 … 11 (the producer) own no entry, they issue the copies"
      where="as step 19; each warpgroup's softmax of S_ij runs under its own P̃_i,j−1 V_j−1" ;;
  21) blocks="T_r·B·H blocks: one head's tiles side by side, longest first (causal at d = 64: the longest of every head first); warps 8 … 11 (the producer) own no entry"
      where="as step 20 at d = 128; at d = 64 three consumer warpgroups (warps 0 … 11, B_r = 192) and the producer's warps 12 … 15" ;;
esac

awk -v family="$family" -v rows="$rows" -v s_cols="$s_cols" -v o_cols="$o_cols" \
    -v Br="$Br" -v Bc="$Bc" -v warps="$warps" -v threads="$threads" \
    -v blocks="$blocks" -v where="$where" -v step="$step" -v rows_per_warp="${rows_per_warp:-16}" '
  function warp_of(r) { return family == "warp_rows" ? r % 32 : family == "mma" ? int(r / rows_per_warp) : int(r / 16) }
  function lane_of(matrix, r, c) {
    if (family == "warp_rows") return c % 32
    if (family == "mma") return 4 * (r % 8) + int((c % 8) / 2)
    return 8 * (r % 4) + (matrix == "S" ? c % 8 : int(c / 4) % 8)
  }
  function colour(w) { return palette[w % 8 + 1] }
  # One matrix as an HTML-like table: a header row of column indices, then per
  # row its index, its warp, and the owning lane of each cell shown.
  function table(matrix, title, cols,   nr, nc, R, C, i, j, t, w) {
    nr = split(rows, R, " "); nc = split(cols, C, " ")
    t = "<table border=\"0\" cellborder=\"1\" cellspacing=\"0\" cellpadding=\"3\">"
    t = t "<tr><td colspan=\"" (nc + 2) "\" border=\"0\"><b>" title "</b></td></tr>"
    t = t "<tr><td border=\"0\">row</td><td border=\"0\">warp</td>"
    for (j = 1; j <= nc; j++) t = t "<td border=\"0\"><font point-size=\"9\">" C[j] "</font></td>"
    t = t "</tr>"
    for (i = 1; i <= nr; i++) {
      if (R[i] == "…") {
        t = t "<tr><td border=\"0\">…</td><td border=\"0\"></td>"
        for (j = 1; j <= nc; j++) t = t "<td border=\"0\">" (C[j] == "…" ? "⋱" : "⋮") "</td>"
        t = t "</tr>"
        continue
      }
      w = warp_of(R[i])
      t = t "<tr><td border=\"0\">" R[i] "</td><td border=\"0\" bgcolor=\"" colour(w) "\">" w "</td>"
      for (j = 1; j <= nc; j++) {
        if (C[j] == "…") { t = t "<td border=\"0\">…</td>"; continue }
        t = t "<td bgcolor=\"" colour(w) "\">" lane_of(matrix, R[i], C[j]) "</td>"
      }
      t = t "</tr>"
    }
    return t "</table>"
  }
  function subs(s) { gsub(/_ij/, "<sub>ij</sub>", s); gsub(/_i/, "<sub>i</sub>", s)
                     gsub(/_r/, "<sub>r</sub>", s); gsub(/_c/, "<sub>c</sub>", s)
                     gsub(/_q/, "<sub>q</sub>", s); return s }
  BEGIN {
    blocks = subs(blocks); where = subs(where)
    split("#cfe2f3 #fce5cd #d9ead3 #f4cccc #ead1dc #fff2cc #d0e0e3 #e6e6e6", palette, " ")
    print "digraph ownership {"
    print "  graph [rankdir=LR, fontname=\"Helvetica\", fontsize=12, nodesep=0.3, ranksep=0.3, labelloc=t,"
    print "         label=<<b>Step " step ": who owns what</b> (d = 128: B<sub>r</sub> = " Br ", B<sub>c</sub> = " Bc "; " threads " threads = " warps " warps per block)<br/>" blocks "<br/>" where "<br/><font point-size=\"10\">cell colour: the owning warp · number in the cell: the owning lane</font>>];"
    print "  node [shape=plain, fontname=\"Helvetica\", fontsize=10];"
    print "  S [label=<" table("S", "S<sub>ij</sub>, then P̃<sub>ij</sub>: B<sub>r</sub> × B<sub>c</sub> (columns: keys of tile j)", s_cols) ">];"
    print "  O [label=<" table("O", "O<sub>i</sub>: B<sub>r</sub> × d (columns: head dimension)", o_cols) ">];"
    print "  S -> O [style=invis];"
    print "}"
  }'
