#!/usr/bin/env bash
# scripts/gpu/sanitize_backward.sh PROGRAM OUTFILE [SHAPES_FP16]
# compute-sanitizer over a backward step's program with --backward --check (GPU machine):
# four tools (memcheck, racecheck, synccheck, initcheck) x two modes (dQ by atomics, and
# --deterministic where the step offers it) x four shapes that reach d = 32 (where compiled), 64, 96 (where compiled)
# and 128, causal and not, tails in both lengths, a negative scale, B·H = 2. A step that
# computes in bf16 and fp16 runs each shape in its default dtype and the 64 and 128 shapes in
# fp16 too. A d the step is not compiled for is skipped and said so. Writes OUTFILE: a first
# line naming the GPU, date, commit and what ran, then one line a run: tool, mode, arguments,
# exit status and the tool's summary. Exits 1 at the first run with an error or a failed check.
set -euo pipefail
prog=${1:?usage: scripts/gpu/sanitize_backward.sh PROGRAM OUTFILE}
out=${2:?usage: scripts/gpu/sanitize_backward.sh PROGRAM OUTFILE}
shapes=("--batch 1 --heads 1 --seq-q 33 --seq-kv 31 --head-dim 32"
        "--batch 2 --heads 1 --seq-q 77 --seq-kv 150 --head-dim 64 --causal"
        "--batch 1 --heads 1 --seq-q 65 --seq-kv 70 --head-dim 96 --causal"
        "--batch 1 --heads 2 --seq-q 130 --seq-kv 65 --head-dim 128 --scale -0.3")
if "$prog" --help | tr -s " \n" " " | grep -q "this step: bf16, fp16"; then
  shapes+=("${shapes[1]} --dtype fp16" "${shapes[3]} --dtype fp16")
fi
modes=("")
if "$prog" --help | grep -q -- "--deterministic"; then
  modes+=(--deterministic)
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -z $(git status --porcelain --untracked-files=no 2>/dev/null) ]] || commit="$commit+dirty"
echo "# $gpu, $(date -u +%F), commit $commit: compute-sanitizer on $(basename "$prog") --backward --check, four tools x ${#modes[@]} mode(s) (dQ by atomics$( ((${#modes[@]} > 1)) && echo ", --deterministic")) x the shapes below. Each line: tool, mode, arguments, exit status, the tool's summary." >"$out"
log=$(mktemp)
for tool in memcheck racecheck synccheck initcheck; do
  for mode in "${modes[@]}"; do
    for shape in "${shapes[@]}"; do
      # shellcheck disable=SC2086
      if [[ $("$prog" $shape --repeat 0 2>&1 >/dev/null || true) == *"head_dim "*"(supported:"* ]]; then
        echo "$tool $mode [$shape] skipped: d not compiled in" >>"$out"
        continue
      fi
      rc=0
      # shellcheck disable=SC2086
      timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 1 "$prog" $shape $mode --backward --check \
        --repeat 0 >"$log" 2>&1 || rc=$?
      echo "$tool $mode [$shape] rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -n 1)" >>"$out"
      if ((rc != 0)); then
        tail -n 30 "$log" >&2
        echo "sanitize_backward: $tool $mode [$shape] failed (rc=$rc)" >&2
        exit 1
      fi
    done
  done
done
rm -f "$log"
echo "sanitize_backward: $(grep -c 'rc=0' "$out") clean runs, $(grep -c 'skipped' "$out") skipped: $out"
