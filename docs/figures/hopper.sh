#!/usr/bin/env bash
# hopper.sh FIGURE — one figure per Hopper idea (steps 15–21), as Graphviz dot.
#
#   docs/figures/hopper.sh swizzle | dot -Tsvg:cairo > hopper_swizzle.svg
#
#   swizzle     the 128-byte swizzle: where TMA puts the 16-byte chunks of 8 rows
#               (common/cuda/wgmma.hpp, swizzle(): chunk c of row r -> c XOR (r mod 8))
#   descriptor  the wgmma shared-memory matrix descriptor: fields and bit positions
#               (wgmma.hpp, make_descriptor()), with K_j's as an example
#   stages      the hand-off of a stage between the producer and the consumers:
#               full and empty mbarriers and their phases (step 17)
#   issue_order one consumer warpgroup's iterations in step 17 (two waits a tile) and
#               in step 18 (S_ij and P̃_i,j−1 V_j−1 back to back, one wait)
#   pingpong    two consumer warpgroups taking turns on the tensor cores (step 19)
#   overlap     one consumer warpgroup's iterations in step 19 (as step 18: the softmax
#               after both products) and in step 20 (the softmax under P̃_i,j−1 V_j−1)
#   ring        the ring of turns of three consumer warpgroups at d = 64 (step 21)
#
# The timelines are schematic (durations in made-up units: a GEMM 2, a softmax 3,
# a wait 1); the measured effect of each idea is on its step's page.
set -euo pipefail
figure=${1:?usage: hopper.sh swizzle|descriptor|stages|issue_order|pingpong|overlap|ring}

font='fontname="Helvetica"'
# One colour per 16-byte chunk (logical index 0..7).
chunk_colour=('#1f5f9f' '#cfe2f3' '#d9ead3' '#fff2cc' '#f4cccc' '#d9d2e9' '#fce5cd' '#d0e0e3')

# cell LABEL UNITS COLOUR: one cell of a timeline row, UNITS columns wide.
cell() {
  local label=$1 units=$2 colour=$3 width=$(( $2 * 46 ))
  if [[ -z "$label" ]]; then
    printf '<td colspan="%d" width="%d" border="0"></td>' "$units" "$width"
  else
    printf '<td colspan="%d" width="%d" bgcolor="%s">%s</td>' "$units" "$width" "$colour" "$label"
  fi
}
# ruler UNITS: the row of unit columns that fixes the table's grid.
ruler() {
  local i
  for ((i = 0; i < $1; i++)); do printf '<td width="46" border="0"></td>'; done
}
tc='#1f5f9f'; tc2='#6fa8dc'; soft='#fff2cc'; wait_='#eeeeee'; waitb='#f4cccc'

case $figure in
swizzle)
  row() {  # row R SWIZZLED: the 8 chunks of row R as stored (logical chunk in each slot)
    local r=$1 sw=$2 p c colour font_colour
    printf '<tr><td align="right"><b>row %d</b></td>' "$r"
    for ((p = 0; p < 8; p++)); do
      c=$(( sw ? (p ^ (r % 8)) : p ))
      colour=${chunk_colour[$c]}
      font_colour=$([[ $c -eq 0 ]] && echo '#ffffff' || echo '#000000')
      printf '<td bgcolor="%s" width="54"><font color="%s">r%d c%d</font></td>' "$colour" "$font_colour" "$r" "$c"
    done
    printf '</tr>\n'
  }
  header() {
    local p
    printf '<tr><td></td>'
    for ((p = 0; p < 8; p++)); do printf '<td><font point-size="9">banks %d–%d</font></td>' $((4 * p)) $((4 * p + 3)); done
    printf '</tr>\n'
  }
  cat <<DOT
digraph hopper_swizzle {
  graph [rankdir=TB, $font, fontsize=12, labelloc=t, ranksep=0.5,
         label=<<b>The 128-byte swizzle: 8 rows of a tile, 16-byte chunks (8 bf16 each)</b><br/>A 128-byte row of shared memory is one pass over the 32 banks (4 bytes each). Cell "r3 c5" is chunk 5 of row 3 (columns 40–47).<br/>TMA stores chunk c of row r at chunk c XOR (r mod 8) (common/cuda/wgmma.hpp, swizzle()).<br/>wgmma, given the same mode in its descriptor, undoes it as it reads.>];
  node [shape=plaintext, $font, fontsize=10];
  plain [label=<<table border="0" cellborder="1" cellspacing="0" cellpadding="4">
<tr><td colspan="9"><b>without a swizzle</b>: the 8 rows of chunk 0 (dark) all in banks 0–3,<br/>so one 8×16-byte core matrix read by wgmma or ldmatrix takes 8 passes</td></tr>
$(header; for r in 0 1 2 3 4 5 6 7; do row "$r" 0; done)</table>>];
  swizzled [label=<<table border="0" cellborder="1" cellspacing="0" cellpadding="4">
<tr><td colspan="9"><b>with the 128-byte swizzle</b>: chunk 0 of the 8 rows in 8 different<br/>groups of 4 banks, so the core matrix is read in one pass</td></tr>
$(header; for r in 0 1 2 3 4 5 6 7; do row "$r" 1; done)</table>>];
  plain -> swizzled [label="TMA writes,\nwgmma reads back", fontsize=10, $font];
}
DOT
  ;;

descriptor)
  cat <<DOT
digraph hopper_descriptor {
  graph [$font, fontsize=12, labelloc=t,
         label=<<b>The wgmma shared-memory matrix descriptor: 64 bits instead of a pointer</b><br/>PTX ISA, "Matrix Descriptor Format"; common/cuda/wgmma.hpp, make_descriptor() packs it and decode_descriptor() reads it back.<br/>Each byte quantity is stored as encode(x) = (x &amp; 0x3FFFF) &gt;&gt; 4: 14 bits in units of 16 bytes. The bits left white are 0.>];
  node [shape=plaintext, $font, fontsize=10];
  bits [label=<<table border="0" cellborder="1" cellspacing="0" cellpadding="6">
<tr><td><b>bits</b></td><td>63–62</td><td>61–52</td><td>51–49</td><td>48–46</td><td>45–32</td><td>31–30</td><td>29–16</td><td>15–14</td><td>13–0</td></tr>
<tr><td><b>field</b></td><td bgcolor="#f4cccc">swizzle mode</td><td></td><td bgcolor="#d9d2e9">base offset</td><td></td><td bgcolor="#d9ead3">encode(stride<br/>byte offset)</td><td></td><td bgcolor="#fff2cc">encode(leading<br/>byte offset)</td><td></td><td bgcolor="#cfe2f3">encode(start<br/>address)</td></tr>
<tr><td align="left"><b>meaning</b></td><td>0 none, 1 128 B,<br/>2 64 B, 3 32 B</td><td></td><td>where the swizzle<br/>pattern starts<br/>when not at a<br/>multiple of its atom</td><td></td><td>from one group of<br/>8 rows (a core<br/>matrix) to the next</td><td></td><td>between core matrices<br/>along K (unused when<br/>swizzled K-major:<br/>"assumed 1")</td><td></td><td>shared-memory address<br/>of the operand's<br/>first byte</td></tr>
<tr><td align="left"><b>K<sub>j</sub> as B of S<sub>ij</sub> = Q<sub>i</sub>K<sub>j</sub><sup>T</sup></b><br/>(K-major, 128-byte swizzle,<br/>k_major_sw128)</td><td>1</td><td></td><td>0 (tiles aligned<br/>to 1024 bytes)</td><td></td><td>1024 / 16 = 64<br/>(8 rows × 128 B)</td><td></td><td>16 / 16 = 1</td><td></td><td>(K<sub>j</sub> + 2k + 128·B<sub>c</sub>·⌊k/64⌋) / 16<br/>for columns k … k + 15</td></tr>
</table>>];
}
DOT
  ;;

stages)
  cat <<DOT
digraph hopper_stages {
  graph [rankdir=TB, $font, fontsize=12, labelloc=t, nodesep=0.5, ranksep=0.5,
         label=<<b>Step 17: a stage of K<sub>j</sub>, V<sub>j</sub> handed between the producer and the consumers</b><br/>Tile j uses stage s = j mod 2 for the (j div 2)-th time; each use completes each of the stage's<br/>barriers once, so the phase (parity) to wait for is (j div 2) mod 2. An mbarrier's wait returns once<br/>the phase with that parity has completed: no counter is reset between uses.>];
  node [$font, fontsize=10, shape=box, style="rounded,filled", fillcolor="#ffffff"];
  edge [$font, fontsize=9];
  producer [fillcolor="#d9d2e9", label=<<b>producer warpgroup</b> (warps 8–11, 24 registers)<br/>one thread, for tile j ≥ 2:<br/>wait empty[s], parity (j div 2 − 1) mod 2<br/>then TMA K<sub>j</sub> → K stage s, V<sub>j</sub> → V stage s>];
  subgraph cluster_stage {
    label=<<b>stage s</b> in shared memory>; style="rounded"; color="#888888"; $font; fontsize=10;
    buffers [fillcolor="#eeeeee", label=<K<sub>j</sub>: (B<sub>c</sub>, d) · V<sub>j</sub>: (B<sub>c</sub>, d)<br/>swizzled 128-byte rows>];
    k_full [fillcolor="#d9ead3", label=<k_full[s], v_full[s]<br/>count 1 + expected bytes:<br/>complete when the bytes land>];
    empty [fillcolor="#f4cccc", label=<empty[s]<br/>count 8: one arrival<br/>per consumer warp>];
  }
  consumers [fillcolor="#cfe2f3", label=<<b>consumer warpgroups 0 and 1</b> (warps 0–7, 240 registers)<br/>wait k_full[s], parity (j div 2) mod 2 → S<sub>ij</sub> = Q<sub>i</sub>K<sub>j</sub><sup>T</sup><br/>wait v_full[s], same parity → P̃<sub>ij</sub>V<sub>j</sub><br/>after their wgmmas: lane 0 of each warp arrives at empty[s]>];
  producer -> buffers [label="cp.async.bulk.tensor"];
  buffers -> k_full [style=dashed, label="the copy engine\ncounts the bytes"];
  k_full -> consumers [label="phase completes:\nthe tile has landed"];
  consumers -> empty [label="8 arrivals:\nthe stage is read"];
  empty -> producer [constraint=false, label="phase completes:\nthe stage may be overwritten"];
}
DOT
  ;;

issue_order|overlap)
  n=18
  timeline() {  # timeline TITLE TC_CELLS WG_CELLS
    printf '<tr><td colspan="%d" align="left" border="0"><b>%s</b></td></tr>\n' "$((n + 1))" "$1"
    printf '<tr><td align="right" border="0">tensor cores</td>%s</tr>\n' "$2"
    printf '<tr><td align="right" border="0">warpgroup</td>%s</tr>\n' "$3"
  }
  gap() { printf '<tr><td colspan="%d" height="10" border="0"></td></tr>\n' "$((n + 1))"; }
  s() { cell "S<sub>ij</sub>" 2 "$tc"; }
  sn() { cell "S<sub>i,j+1</sub>" 2 "$tc"; }
  pv() { cell "P̃<sub>ij</sub>V<sub>j</sub>" 2 "$tc2"; }
  pvp() { cell "P̃<sub>i,j−1</sub>V<sub>j−1</sub>" 2 "$tc2"; }
  # Step 17: issue S_ij, wait, softmax, issue P̃_ij V_j, wait.
  two_waits() {
    timeline "$1" \
      "$(s)$(cell '' 4 '')$(pv)$(cell '' 1 '')$(sn)$(cell '' 4 '')$(cell "P̃<sub>i,j+1</sub>V<sub>j+1</sub>" 2 "$tc2")$(cell '' 1 '')" \
      "$(cell 'issue, wait' 2 "$wait_")$(cell wait 1 "$waitb")$(cell "softmax of S<sub>ij</sub>" 3 "$soft")$(cell 'issue, wait' 2 "$wait_")$(cell wait 1 "$waitb")$(cell 'issue, wait' 2 "$wait_")$(cell wait 1 "$waitb")$(cell "softmax of S<sub>i,j+1</sub>" 3 "$soft")$(cell 'issue, wait' 2 "$wait_")$(cell wait 1 "$waitb")"
  }
  # Steps 18 and 19: S_ij and P̃_i,j−1 V_j−1 issued together, one wait for both, then the softmax.
  one_wait() {
    timeline "$1" \
      "$(s)$(pvp)$(cell '' 4 '')$(sn)$(pv)$(cell '' 6 '')" \
      "$(cell 'issue both, wait' 4 "$wait_")$(cell wait 1 "$waitb")$(cell "softmax of S<sub>ij</sub>" 3 "$soft")$(cell 'issue both, wait' 4 "$wait_")$(cell wait 1 "$waitb")$(cell "softmax of S<sub>i,j+1</sub>" 3 "$soft")$(cell '' 2 '')"
  }
  # Step 20: the same order, a wait for S_ij alone; the softmax runs under P̃_i,j−1 V_j−1.
  under() {
    timeline "$1" \
      "$(s)$(pvp)$(cell '' 2 '')$(sn)$(pv)$(cell '' 2 '')$(cell "S<sub>i,j+2</sub>" 2 "$tc")$(cell "P̃V" 2 "$tc2")$(cell '' 2 '')" \
      "$(cell 'issue, wait' 2 "$wait_")$(cell wait 1 "$waitb")$(cell "softmax of S<sub>ij</sub>" 3 "$soft")$(cell 'issue, wait' 2 "$wait_")$(cell wait 1 "$waitb")$(cell "softmax of S<sub>i,j+1</sub>" 3 "$soft")$(cell 'issue, wait' 2 "$wait_")$(cell wait 1 "$waitb")$(cell '' 3 '')"
  }
  if [[ $figure == issue_order ]]; then
    rows="$(two_waits "Step 17: issue S<sub>ij</sub>, wait, softmax, issue P̃<sub>ij</sub>V<sub>j</sub>, wait: two waits a tile")
$(gap)
$(one_wait "Step 18: issue S<sub>ij</sub> and P̃<sub>i,j−1</sub>V<sub>j−1</sub> back to back, one wait for both, then the softmax of S<sub>ij</sub>")"
    title="One consumer warpgroup's iterations, by the order it issues its wgmmas"
  else
    rows="$(one_wait "Step 19 (as step 18, between its turns): one wait for both products, then the softmax of S<sub>ij</sub>")
$(gap)
$(under "Step 20: the same order, but wait for S<sub>ij</sub> alone (wgmma_wait&lt;1&gt;): the softmax runs under P̃<sub>i,j−1</sub>V<sub>j−1</sub>")"
    title="One consumer warpgroup's iterations: the softmax after both products, or under the second"
  fi
  cat <<DOT
digraph hopper_$figure {
  graph [$font, fontsize=12, labelloc=t,
         label=<<b>$title</b><br/>Schematic: a GEMM 2 units, a softmax 3, a wait for the tensor cores to drain 1 (red). The measured effect of each order is on the step's page.>];
  node [shape=plaintext, $font, fontsize=10];
  t [label=<<table border="0" cellborder="1" cellspacing="0" cellpadding="5">
<tr><td border="0"></td>$(ruler $n)</tr>
$rows
</table>>];
}
DOT
  ;;

pingpong)
  n=16
  cat <<DOT
digraph hopper_pingpong {
  graph [$font, fontsize=12, labelloc=t,
         label=<<b>Step 19: ping-pong, two consumer warpgroups take turns on the tensor cores</b><br/>Each warpgroup waits at its named barrier before it issues its wgmmas (S and P̃V of one tile) and then opens the other's (bar.sync / bar.arrive):<br/>while one computes its softmax, the tensor cores run the other's products. Schematic: a GEMM 2 units, a softmax 3, a turn 4.>];
  node [shape=plaintext, $font, fontsize=10];
  t [label=<<table border="0" cellborder="1" cellspacing="0" cellpadding="5">
<tr><td border="0"></td>$(ruler $n)</tr>
<tr><td align="right" border="0">tensor cores</td>$(cell "WG 0: S, P̃V" 4 "$tc")$(cell "WG 1: S, P̃V" 4 "$tc2")$(cell "WG 0: S, P̃V" 4 "$tc")$(cell "WG 1: S, P̃V" 4 "$tc2")</tr>
<tr><td align="right" border="0">warpgroup 0</td>$(cell "its turn: issue, wait" 4 "$wait_")$(cell "softmax" 3 "$soft")$(cell "turn?" 1 "$waitb")$(cell "its turn: issue, wait" 4 "$wait_")$(cell "softmax" 3 "$soft")$(cell "" 1 "")</tr>
<tr><td align="right" border="0">warpgroup 1</td>$(cell "waits for its turn" 4 "$waitb")$(cell "its turn: issue, wait" 4 "$wait_")$(cell "softmax" 3 "$soft")$(cell "turn?" 1 "$waitb")$(cell "its turn: issue, wait" 4 "$wait_")</tr>
</table>>];
}
DOT
  ;;

ring)
  cat <<DOT
digraph hopper_ring {
  graph [layout=circo, $font, fontsize=12, labelloc=t, mindist=1.4,
         label=<<b>Step 21 at d = 64: the turns of three consumer warpgroups form a ring</b><br/>Warpgroup w waits at named barrier kTurn + w, issues its wgmmas,<br/>then opens the turn of warpgroup (w + 1) mod 3. Before tile 0 the last warpgroup<br/>opens warpgroup 0's first turn, and it skips its own final opening.<br/>With two consumers the ring is step 19's ping-pong. Each warpgroup computes<br/>its softmax during the other two's turns: at d = 64 a GEMM costs half<br/>what it costs at d = 128, the softmax the same.>];
  node [$font, fontsize=10, shape=box, style="rounded,filled"];
  edge [$font, fontsize=10];
  wg0 [fillcolor="#1f5f9f", fontcolor="#ffffff", label=<<b>consumer warpgroup 0</b><br/>rows 0–63 of B<sub>r</sub> = 192<br/>waits at kTurn + 0>];
  wg1 [fillcolor="#6fa8dc", label=<<b>consumer warpgroup 1</b><br/>rows 64–127<br/>waits at kTurn + 1>];
  wg2 [fillcolor="#cfe2f3", label=<<b>consumer warpgroup 2</b><br/>rows 128–191<br/>waits at kTurn + 2>];
  wg0 -> wg1 [xlabel="  bar.arrive kTurn + 1  "];
  wg1 -> wg2 [xlabel="  bar.arrive kTurn + 2  "];
  wg2 -> wg0 [xlabel="  bar.arrive kTurn + 0  "];
}
DOT
  ;;
*)
  echo "hopper.sh: no figure '$figure' (swizzle, descriptor, stages, issue_order, pingpong, overlap, ring)" >&2
  exit 2
  ;;
esac
