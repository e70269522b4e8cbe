#!/usr/bin/env bash
# The whole GPU round in one call, on the GPU machine:
#   scripts/gpu/round.sh OUTDIR
# configure + build (build-gpu, sm_90), GPU tests (must pass, never skip),
# compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over every GPU
# step's test executable on the conformance shapes, the compiler's resource
# report, the benchmark (CSV), one ncu profile per step at N=4096, d=128; logs
# under OUTDIR and a summary table at the end. Any failure stops the round with
# a non-zero exit. FLASH_ROUND_PHASES picks phases after the build (default:
# "tests resources bench ncu sanitizer"), so that a round that would not fit one
# 10-minute call can be split in two. Headers the GPU machine lacks (CLI11,
# nlohmann-json) travel in .carry/deps (apt-get download + dpkg -x here).
# FLASH_SAN_MODE=programs runs the sanitizers on each step's program over four
# small shapes (every d, tails, causal) instead of the whole test suite: minutes
# instead of tens of minutes, for a round that must fit a short lease; FLASH_SAN_JOBS=N runs
# N programs under the sanitizers at a time (default 1). FLASH_SAN_STEPS and
# FLASH_NCU_STEPS (e.g. "step11 step14") limit the sanitizer and ncu phases to some steps.
#
# The perf phase (not in the default phases; FLASH_ROUND_PHASES=perf) times every GPU step
# at sustained clocks, each kernel and its baseline the same way in one process, by two
# methods (back_to_back: K calls between two events after a warm-up; cuda_graph: the K calls
# captured in a CUDA graph and replayed; median of 5 repetitions):
#  1. build-gpu/bin/gpu_bench --sections steps: steps 4-21 and cuBLAS at B=4, H=16, N=4096,
#     d 64 and 128, causal and not, fp32 for steps 4-8 and bf16 for the others, written to
#     docs/results/current/gpu_steps_<GPU>_<date>.csv (the step pages' "measured" tables);
#  2. scripts/gpu/check_pytorch.py --dtype bf16: the torch operators of steps 9-21 beside every
#     SDPA backend at N = 1024, 4096, 16384, d 64 and 128, causal and not, written to
#     docs/results/current/pytorch_compare_bf16_<GPU>_<date>.csv (the "compare" tables);
#     FLASH_PERF_FP16=1 adds the same in fp16 (about 4 more minutes).
# Expected time on an H100, by the timing's own budget (per kernel and point: ~0.75 s of
# warm-up + 2 x 5 repetitions of ~50 ms + a capture): gpu_bench ~2 min (76 kernel-points,
# the slow fp32 steps 4-5 at ~10 s each), check_pytorch ~5 min (12 points x 17 kernels, the
# N = 16384 points of the slower steps longest): about 7-8 minutes, plus the build. To
# restrict it: FLASH_PERF_STEPS (step numbers, e.g. "9,17,21"), FLASH_PERF_N (check_pytorch's
# lengths, e.g. "4096"), FLASH_PERF_DIMS (check_pytorch's d, e.g. "128"), FLASH_PERF_SEQ
# (gpu_bench's N, default 4096). FLASH_PYTHON: the python3 with torch (default python3).
#
# The backward phase (not in the default phases; FLASH_ROUND_PHASES=backward) times the backward
# steps the same way: build-gpu/bin/gpu_bench --sections backward (their kernels: forward, backward
# with dQ by atomics and deterministic, B=4, H=16, N 1024 and 4096, d 64 and 128, causal and not)
# into docs/results/current/gpu_backward_<GPU>_<date>.csv, then scripts/gpu/backward_compare.py
# (their torch operators beside SDPA's EFFICIENT_ATTENTION backward in fp32, and beside its FLASH
# and CUDNN backward in bf16, in one process each; the same shapes, and N = 16384 too with
# FLASH_BACKWARD_LONG=1) into docs/results/current/backward_compare_<GPU>_<date>.csv and
# backward_compare_bf16_<GPU>_<date>.csv (each _run2, _run3, ... when the name is taken): the step
# pages' "backward" tables.
# About 2 + 2 + 3 minutes on an H100 (twice that with FLASH_BACKWARD_LONG=1); it needs the targets
# gpu_bench and flash_steps_python.
# FLASH_BUILD_TARGETS: build only these targets (e.g. for the perf phase alone:
# "gpu_bench flash_steps_python" and the step programs, which check_pytorch.py asks which
# precisions they take); default: everything.
# At the end the round's data files are also copied, named by date, to
# FLASH_ROUND_RESULTS (default docs/results/current, where the step pages, the plots and
# the docs tools read them; a name already taken gets _run2, _run3, ...): gpu_steps,
# gpu_bench, gpu_resources, gpu_sanitizer, gpu_tests and ncu, as far as their phases ran.
set -euo pipefail

out=${1:?usage: scripts/gpu/round.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/../.."
build=build-gpu
phases=" ${FLASH_ROUND_PHASES:-tests resources bench ncu sanitizer} "
want() { [[ $phases == *" $1 "* ]]; }
declare -a summary=()
note() { summary+=("$(printf '%-28s %s' "$1" "$2")"); }
# picked LIST PROGRAM: whether PROGRAM's step (stepNN) is in LIST ("step11 step14"); an empty LIST picks every step.
picked() { [[ -z $1 || " $1 " == *" $(basename "$2" | cut -c1-6) "* ]]; }
# unused_name BASE EXT: BASE.EXT, or BASE_run2.EXT, _run3, ... when that name is taken: a round never
# overwrites an earlier round's file (the pages cite files by name).
unused_name() {
  local to="$1.$2" run=1
  while [[ -e $to ]]; do run=$((run + 1)); to="$1_run$run.$2"; done
  echo "$to"
}
fail() {
  echo "gpu_round: FAILED: $1 (log: $2)" >&2
  tail -n 40 "$2" >&2 || true
  exit 1
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >"$out/gpu.txt"
echo "== $(tail -n 1 "$out/gpu.txt"), $(date -u +%F)"

echo "== configure and build"
prefix=()
[[ -d .carry/deps/usr ]] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.carry/deps/usr")
targets=()
# shellcheck disable=SC2206  # a list of target names, split on spaces
[[ -n ${FLASH_BUILD_TARGETS:-} ]] && targets=(--target $FLASH_BUILD_TARGETS)
{ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 "${prefix[@]}" \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 &&
  cmake --build "$build" -j "$(nproc)" "${targets[@]}"; } >"$out/build.log" 2>&1 ||
  fail "build" "$out/build.log"
note build ok
# The GPU steps: step 4 on (steps 1-3 run on the CPU).
gpu_programs=()
for prog in "$build"/bin/step[0-9][0-9]_*; do
  name=$(basename "$prog")
  [[ $name == *_tests || ${name:4:2} < 04 ]] && continue
  gpu_programs+=("$prog")
done

if want tests; then
  echo "== GPU tests"
  ctest --test-dir "$build" -L gpu --output-on-failure -j 1 --timeout 300 >"$out/ctest_gpu.log" 2>&1 || fail "GPU tests" "$out/ctest_gpu.log"
  # "skipped" would mean the tests did not run on the GPU: that is a failure here.
  if grep -q "Skipped\|Not Run" "$out/ctest_gpu.log"; then fail "GPU tests were skipped" "$out/ctest_gpu.log"; fi
  note "GPU tests" "$(grep -o '[0-9]*% tests passed.*' "$out/ctest_gpu.log")"
fi

# Where the perf and backward phases write (docs/results/current/<kind>_<GPU>_<date>.csv), and
# the commit measured, which their CSVs carry.
gpu_name=$(tail -n 1 "$out/gpu.txt" | cut -d, -f1 | sed 's/^ *//; s/ *$//')
gpu_tag=$(echo "$gpu_name" | sed 's/^NVIDIA //; s/[^A-Za-z0-9.-]\{1,\}/_/g')
day=$(date -u +%F)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -z $(git status --porcelain --untracked-files=no 2>/dev/null) ]] || commit="$commit+dirty"

if want perf; then
  # Sustained timing only: the programs' --repeat (one launch, the GPU idle before it) is a
  # quick look and never goes into these files. Results live in docs/results/current/.
  results=${FLASH_ROUND_RESULTS:-docs/results/current}
  mkdir -p "$results"
  steps_csv="$results/gpu_steps_${gpu_tag}_${day}.csv"
  echo "== perf 1/2: gpu_bench, steps 4-21 beside cuBLAS at B=4, H=16, N=${FLASH_PERF_SEQ:-4096} ($gpu_name)"
  start=$SECONDS
  "$build"/bin/gpu_bench --sections steps --seq "${FLASH_PERF_SEQ:-4096}" ${FLASH_PERF_STEPS:+--steps "$FLASH_PERF_STEPS"} \
    --csv "$out/gpu_steps.csv" >"$out/perf_gpu_bench.txt" 2>&1 || fail "perf: gpu_bench" "$out/perf_gpu_bench.txt"
  # The commit measured, as a last column: the pages' captions name it.
  awk -v commit="$commit" 'NR == 1 { print $0 ",commit"; next } { print $0 "," commit }' "$out/gpu_steps.csv" >"$steps_csv"
  note "perf: gpu_bench" "$(($(grep -c '' "$steps_csv") - 1)) rows in $steps_csv ($((SECONDS - start)) s)"
  # check_pytorch.py: the torch operators of the 16-bit steps (9 on) beside SDPA. Correctness is
  # the tests phase's (and each timed O is compared with SDPA's); --skip-check keeps this phase short.
  torch_steps=${FLASH_PERF_STEPS:-9,10,11,12,13,14,15,16,17,18,19,20,21}
  dtypes=(bf16)
  [[ ${FLASH_PERF_FP16:-0} == 1 ]] && dtypes+=(fp16)
  for dtype in "${dtypes[@]}"; do
    compare_csv="$results/pytorch_compare_${dtype}_${gpu_tag}_${day}.csv"
    echo "== perf 2/2: check_pytorch.py, torch operators of steps $torch_steps beside SDPA, $dtype"
    start=$SECONDS
    PYTHONPATH="$PWD/$build/python" "${FLASH_PYTHON:-python3}" scripts/gpu/check_pytorch.py "$build/bin" "$out/pytorch_$dtype" \
      --dtype "$dtype" --skip-check --steps "$torch_steps" --bench-n "${FLASH_PERF_N:-1024,4096,16384}" \
      --head-dims "${FLASH_PERF_DIMS:-64,128}" --csv "$compare_csv" >"$out/perf_pytorch_$dtype.txt" 2>&1 ||
      fail "perf: check_pytorch.py $dtype" "$out/perf_pytorch_$dtype.txt"
    note "perf: SDPA $dtype" "$(($(grep -c '' "$compare_csv") - 1)) rows in $compare_csv ($((SECONDS - start)) s)"
  done
fi

if want backward; then
  # The backward steps (today steps 26 to 31): their kernels, forward and backward in both dQ modes
  # (gpu_bench --sections backward), then their torch operators beside SDPA's EFFICIENT_ATTENTION
  # backward in one process (backward_compare.py); each CSV one GPU, both by the same timing.
  results=${FLASH_ROUND_RESULTS:-docs/results/current}
  mkdir -p "$results"
  backward_csv=$(unused_name "$results/gpu_backward_${gpu_tag}_${day}" csv)
  compare_csv=$(unused_name "$results/backward_compare_${gpu_tag}_${day}" csv)
  echo "== backward 1/2: gpu_bench --sections backward ($gpu_name)"
  start=$SECONDS
  "$build"/bin/gpu_bench --sections backward --csv "$out/gpu_backward.csv" >"$out/backward_gpu_bench.txt" 2>&1 ||
    fail "backward: gpu_bench" "$out/backward_gpu_bench.txt"
  awk -v commit="$commit" 'NR == 1 { print $0 ",commit"; next } { print $0 "," commit }' "$out/gpu_backward.csv" >"$backward_csv"
  note "backward: kernels" "$(($(grep -c '' "$backward_csv") - 1)) rows in $backward_csv ($((SECONDS - start)) s)"
  long=()
  [[ ${FLASH_BACKWARD_LONG:-0} == 1 ]] && long=(--long)
  echo "== backward 2/3: backward_compare.py, the fp32 torch operators beside SDPA's EFFICIENT_ATTENTION backward"
  start=$SECONDS
  "${FLASH_PYTHON:-python3}" scripts/gpu/backward_compare.py "$compare_csv" --python-dir "$build/python" \
    "${long[@]}" >"$out/backward_compare.txt" 2>&1 || fail "backward: backward_compare.py" "$out/backward_compare.txt"
  note "backward: fp32 operators" "$(($(grep -c '' "$compare_csv") - 1)) rows in $compare_csv ($((SECONDS - start)) s)"
  echo "== backward 3/3: backward_compare.py --dtype bf16, the 16-bit operators beside SDPA's FLASH and CUDNN backward"
  start=$SECONDS
  compare_bf16_csv=$(unused_name "$results/backward_compare_bf16_${gpu_tag}_${day}" csv)
  "${FLASH_PYTHON:-python3}" scripts/gpu/backward_compare.py "$compare_bf16_csv" --dtype bf16 \
    --python-dir "$build/python" "${long[@]}" >"$out/backward_compare_bf16.txt" 2>&1 ||
    fail "backward: backward_compare.py --dtype bf16" "$out/backward_compare_bf16.txt"
  note "backward: bf16 operators" \
    "$(($(grep -c '' "$compare_bf16_csv") - 1)) rows in $compare_bf16_csv ($((SECONDS - start)) s)"
fi

if want resources; then
  echo "== resource report"
  res="$out/resources.txt"
  : >"$res"
  for obj in "$build"/step*/CMakeFiles/*_lib.dir/*.cu.o; do
    echo "--- $obj" >>"$res"
    cuobjdump --dump-resource-usage "$obj" | grep -E "Function|REG" | sed 's/Function \(.*\):/\1/' | c++filt >>"$res"
    # Which arithmetic the kernels compile to: tensor-core HMMA, or fp32 FFMA.
    echo "SASS instructions: $(cuobjdump --dump-sass "$obj" | grep -oE '\b(HMMA|HGMMA|FFMA|LDSM|UTMALDG)[.A-Z0-9]*' |
      sed 's/\..*//' | sort | uniq -c | tr -s ' ' | tr '\n' ',')" >>"$res"
  done
  note resources "$(grep -c 'REG' "$res") kernels, $(grep -E 'STACK:[1-9]' "$res" | wc -l) with a stack frame"
fi

if want bench; then
  echo "== benchmark"
  "$build"/bin/gpu_bench --csv "$out/gpu_bench.csv" >"$out/gpu_bench.txt" 2>&1 ||
    fail benchmark "$out/gpu_bench.txt"
  note benchmark "$(grep -c '' "$out/gpu_bench.csv") CSV lines"
fi

if want ncu; then
  echo "== ncu (one launch per step, N=4096, d=128, B=4, H=16)"
  : >"$out/ncu.txt"
  for prog in "${gpu_programs[@]}"; do
    picked "${FLASH_NCU_STEPS:-}" "$prog" || continue
    echo "--- $(basename "$prog")" >>"$out/ncu.txt"
    ncu --clock-control none -k regex:attention_kernel -c 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section LaunchStats \
      --metrics l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__inst_executed_op_ffma.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,dram__bytes_write.sum \
      "$prog" --batch 4 --heads 16 --seq-q 4096 --seq-kv 4096 --head-dim 128 --repeat 0 >>"$out/ncu.txt" 2>&1 ||
      fail "ncu on $(basename "$prog")" "$out/ncu.txt"
  done
  note ncu "$(grep -c '^---' "$out/ncu.txt") profiles"
fi

if want sanitizer; then
  echo "== compute-sanitizer"
  san_log="$out/sanitizer.log"
  : >"$san_log"
  if [[ ${FLASH_SAN_MODE:-tests} == programs ]]; then
    # Each step's program, one launch checked against the fp64 reference, on shapes
    # that reach every compiled d, tails in both lengths, causal masks and B·H > 1.
    shapes=("--batch 2 --heads 1 --seq-q 100 --seq-kv 33 --head-dim 32 --causal"
            "--batch 1 --heads 2 --seq-q 31 --seq-kv 257 --head-dim 64"
            "--batch 1 --heads 2 --seq-q 257 --seq-kv 100 --head-dim 96 --causal --scale -0.5"
            "--batch 3 --heads 1 --seq-q 65 --seq-kv 129 --head-dim 128 --causal"
            "--batch 1 --heads 2 --seq-q 257 --seq-kv 100 --head-dim 128 --causal --scale -0.5")
    # san_program PROG LOG: the four tools over PROG's shapes, each run's lines appended to LOG;
    # the first error writes "FAILED: ..." there and stops PROG's runs.
    san_program() {
      local prog=$1 log=$2 tool shape start
      local -a prog_shapes=("${shapes[@]}")
      # A step that computes in fp16 as well as bf16 (its default): two shapes in fp16 too.
      if "$prog" --help | tr -s " \n" " " | grep -q "this step: bf16, fp16"; then
        prog_shapes+=("${shapes[0]} --dtype fp16" "${shapes[3]} --dtype fp16")
      fi
      for tool in memcheck racecheck synccheck initcheck; do
        start=$SECONDS
        for shape in "${prog_shapes[@]}"; do
          # A d the step is not compiled for (the Hopper steps: 64 and 128 only) is skipped, and said so.
          # shellcheck disable=SC2086
          if [[ $("$prog" $shape --repeat 0 2>&1 >/dev/null || true) == *"head_dim "*"(supported:"* ]]; then
            echo "--- $(basename "$prog") $tool $shape: skipped, d not compiled in" >>"$log"
            continue
          fi
          echo "--- $(basename "$prog") $tool $shape" >>"$log"
          # shellcheck disable=SC2086
          timeout 120 compute-sanitizer --tool "$tool" --error-exitcode 1 "$prog" $shape --check --repeat 0 \
            >>"$log" 2>&1 || { echo "FAILED: compute-sanitizer $tool on $(basename "$prog") $shape" >>"$log"; return 1; }
        done
        echo "=== $(basename "$prog") $tool: $((SECONDS - start)) s" >>"$log"
      done
    }
    # FLASH_SAN_JOBS programs at a time (default 1): the runs are small and the sanitizers'
    # time is mostly the host's, so several share the GPU; each program's log stays whole.
    san_logs=()
    for prog in "${gpu_programs[@]}"; do
      picked "${FLASH_SAN_STEPS:-}" "$prog" || continue
      while (($(jobs -rp | wc -l) >= ${FLASH_SAN_JOBS:-1})); do wait -n || true; done
      san_logs+=("$out/sanitizer_$(basename "$prog").log")
      : >"${san_logs[-1]}"
      san_program "$prog" "${san_logs[-1]}" &
    done
    wait || true
    for log in "${san_logs[@]}"; do
      prog=$(basename "$log" .log)
      skipped=$(grep -c -- '^--- .*skipped, d not compiled in$' "$log" || true)
      note "${prog#sanitizer_}" "$(grep -c 'ERROR SUMMARY: 0 errors\|0 hazards displayed' "$log" || true) clean of \
$(($(grep -c -- '^--- ' "$log" || true) - skipped)) runs, $skipped skipped"
      cat "$log" >>"$san_log"
      rm "$log"
    done
    if grep -q "^FAILED: " "$san_log"; then fail "$(grep -m 1 "^FAILED: " "$san_log" | cut -c 9-)" "$san_log"; fi
  else
    # The conformance suite under each tool, less its N = 1000 cases (the same
    # code paths as N = 257 and below, at many times the sanitizers' cost).
    for exe in "${gpu_programs[@]/%/_tests}"; do
      # FLASH_SAN_STEPS (e.g. "step04 step05") limits this phase to some steps, to split a round.
      picked "${FLASH_SAN_STEPS:-}" "$exe" || continue
      for tool in memcheck racecheck synccheck initcheck; do
        filter=(--test-case='*conformance*' --subcase-exclude='*1000*')
        echo "--- $(basename "$exe") $tool" >>"$san_log"
        start=$SECONDS
        if ! timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 1 "$exe" "${filter[@]}" >>"$san_log" 2>&1; then
          fail "compute-sanitizer $tool on $(basename "$exe")" "$san_log"
        fi
        note "$(basename "$exe" _tests) $tool" "$(grep 'ERROR SUMMARY' "$san_log" | tail -n 1) ($((SECONDS - start)) s)"
      done
    done
  fi
fi

if want bench; then
  echo
  echo "== benchmark, N=4096 d=128 B·H=64 (grid section; sustained timing, both methods)"
  awk -F, 'NR == 1 || ($3 == "grid" && $9 == 4096 && $11 == 128) { printf "%-22s %-12s %-6s %-10s %-8s %-17s %s\n", $5, $4, $12, $15, $16, $17, $18 }' "$out/gpu_bench.csv"
fi
# The data files under the names docs/results/README.md lists, in docs/results/current/.
# (The perf phase wrote its gpu_steps and pytorch_compare files there itself.) Each name says the GPU.
results=${FLASH_ROUND_RESULTS:-docs/results/current}
mkdir -p "$results"
day=$(date -u +%F)
gpu_tag=$(tail -n 1 "$out/gpu.txt" | cut -d, -f1 | sed 's/^ *//; s/ *$//; s/^NVIDIA //; s/[^A-Za-z0-9.-]\{1,\}/_/g')
for pair in gpu_bench.csv:gpu_bench resources.txt:gpu_resources \
            sanitizer.log:gpu_sanitizer ctest_gpu.log:gpu_tests ncu.txt:ncu; do
  from=$out/${pair%%:*}
  [[ -s $from ]] || continue
  ext=${from##*.}; [[ $ext == log ]] && ext=txt
  to=$(unused_name "$results/${pair#*:}_${gpu_tag}_$day" "$ext")
  cp "$from" "$to"
  note "${pair#*:}" "$to"
done

echo
echo "== summary ($out)"
printf '%s\n' "${summary[@]}"
