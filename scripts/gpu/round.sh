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
# instead of tens of minutes, for a round that must fit a short lease. FLASH_SAN_STEPS and
# FLASH_NCU_STEPS (e.g. "step11 step14") limit the sanitizer and ncu phases to some steps.
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
{ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 "${prefix[@]}" \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 &&
  cmake --build "$build" -j "$(nproc)"; } >"$out/build.log" 2>&1 || fail "build" "$out/build.log"
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

if want perf; then
  echo "== each GPU step at B=4, H=16, N=4096 (JSON lines, a table)"
  : >"$out/perf.jsonl"
  for prog in "${gpu_programs[@]}"; do
    for d in 64 128; do
      for causal in "" --causal; do
        timeout 120 "$prog" --batch 4 --heads 16 --seq-q 4096 --seq-kv 4096 --head-dim $d $causal --repeat 10 --json \
          >>"$out/perf.jsonl" 2>>"$out/perf.err" || fail "perf run of $(basename "$prog")" "$out/perf.err"
      done
    done
  done
  # The table on stdout, and gpu_steps.csv: the file the step pages' "measured" tables
  # come from (scripts/docs/render-pages), one row per step, d and mask.
  python3 - "$out/perf.jsonl" "$out/gpu.txt" "$out/gpu_steps.csv" <<'PY'
import csv, json, sys
gpu = open(sys.argv[2]).read().splitlines()[-1].split(",")[0].strip()
cols = ["gpu", "kernel", "batch", "heads", "seq_q", "seq_kv", "head_dim", "causal", "runs", "median_ms",
        "tflops", "registers", "local_bytes", "smem_bytes", "blocks_per_sm", "B_r", "B_c", "threads", "dtype"]
with open(sys.argv[3], "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(cols)
    for line in open(sys.argv[1]):
        r = json.loads(line)
        print(f"{r['step']:28s} {r['dtype']} d={r['head_dim']:<4d} {'causal' if r['causal'] else 'full  '} "
              f"{r['time_ms']:9.3f} ms {r['tflops']:7.2f} TFLOP/s  regs={r.get('registers')} local={r.get('local_bytes')}")
        w.writerow([gpu, r["step"], r["batch"], r["heads"], r["seq_q"], r["seq_kv"], r["head_dim"], int(r["causal"]),
                    r["timed_runs"], f"{r['time_ms']:.4f}", f"{r['tflops']:.3f}"] +
                   [int(r[k]) if r.get(k) is not None else "" for k in cols[11:-1]] + [r["dtype"]])
PY
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
    for prog in "${gpu_programs[@]}"; do
      picked "${FLASH_SAN_STEPS:-}" "$prog" || continue
      prog_shapes=("${shapes[@]}")
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
            echo "--- $(basename "$prog") $tool $shape: skipped, d not compiled in" >>"$san_log"
            continue
          fi
          echo "--- $(basename "$prog") $tool $shape" >>"$san_log"
          # shellcheck disable=SC2086
          timeout 120 compute-sanitizer --tool "$tool" --error-exitcode 1 "$prog" $shape --check --repeat 0 \
            >>"$san_log" 2>&1 || fail "compute-sanitizer $tool on $(basename "$prog") $shape" "$san_log"
        done
        note "$(basename "$prog") $tool" "$(grep -c 'ERROR SUMMARY: 0 errors\|0 hazards displayed' "$san_log") clean so far ($((SECONDS - start)) s)"
      done
    done
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
  echo "== benchmark, N=4096 d=128 B·H=64 (grid section)"
  awk -F, 'NR == 1 || ($2 == "grid" && $6 == 4096 && $8 == 128) { printf "%-22s %-6s %-4s %-10s %-8s %-17s %s\n", $3, $9, $10, $11, $12, $13, $14 }' "$out/gpu_bench.csv"
fi
# The data files under the names docs/results/README.md lists, in docs/results/current/.
results=${FLASH_ROUND_RESULTS:-docs/results/current}
mkdir -p "$results"
day=$(date -u +%F)
for pair in gpu_steps.csv:gpu_steps gpu_bench.csv:gpu_bench resources.txt:gpu_resources \
            sanitizer.log:gpu_sanitizer ctest_gpu.log:gpu_tests ncu.txt:ncu; do
  from=$out/${pair%%:*}
  [[ -s $from ]] || continue
  ext=${from##*.}; [[ $ext == log ]] && ext=txt
  to=$results/${pair#*:}_$day.$ext run=1
  while [[ -e $to ]]; do run=$((run + 1)); to=$results/${pair#*:}_${day}_run$run.$ext; done
  cp "$from" "$to"
  note "${pair#*:}" "$to"
done

echo
echo "== summary ($out)"
printf '%s\n' "${summary[@]}"
