#!/usr/bin/env bash
# The whole GPU round in one call, on the GPU machine:
#   scripts/gpu_round.sh OUTDIR
# configure + build (build-gpu, sm_90), GPU tests (must pass, never skip),
# compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over every
# build-gpu/bin/step0[4-9]*_tests on the conformance shapes, the compiler's
# resource report, the benchmark (CSV), one ncu profile per step at N=4096,
# d=128; logs under OUTDIR and a summary table at the end. Any failure stops
# the round with a non-zero exit. FLASH_ROUND_PHASES picks phases after the
# build (default: "tests resources bench ncu sanitizer"), so that a round that
# would not fit one 10-minute call can be split in two.
set -euo pipefail

out=${1:?usage: scripts/gpu_round.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
build=build-gpu
phases=" ${FLASH_ROUND_PHASES:-tests resources bench ncu sanitizer} "
want() { [[ $phases == *" $1 "* ]]; }
declare -a summary=()
note() { summary+=("$(printf '%-28s %s' "$1" "$2")"); }
fail() {
  echo "gpu_round: FAILED: $1 (log: $2)" >&2
  tail -n 40 "$2" >&2 || true
  exit 1
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >"$out/gpu.txt"
echo "== $(tail -n 1 "$out/gpu.txt"), $(date -u +%F)"

echo "== configure and build"
{ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
  cmake --build "$build" -j "$(nproc)"; } >"$out/build.log" 2>&1 || fail "build" "$out/build.log"
note build ok

if want tests; then
  echo "== GPU tests"
  ctest --test-dir "$build" -L gpu --output-on-failure -j 1 >"$out/ctest_gpu.log" 2>&1 || fail "GPU tests" "$out/ctest_gpu.log"
  # "skipped" would mean the tests did not run on the GPU: that is a failure here.
  if grep -q "Skipped\|Not Run" "$out/ctest_gpu.log"; then fail "GPU tests were skipped" "$out/ctest_gpu.log"; fi
  note "GPU tests" "$(grep -o '[0-9]*% tests passed.*' "$out/ctest_gpu.log")"
fi

if want resources; then
  echo "== resource report"
  res="$out/resources.txt"
  : >"$res"
  for obj in "$build"/step0[4-9]*/CMakeFiles/*_lib.dir/*.cu.o; do
    echo "--- $obj" >>"$res"
    cuobjdump --dump-resource-usage "$obj" | grep -E "Function|REG" | sed 's/Function \(.*\):/\1/' | c++filt >>"$res"
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
  for prog in "$build"/bin/step0[4-9]_*; do
    [[ $prog == *_tests ]] && continue
    echo "--- $(basename "$prog")" >>"$out/ncu.txt"
    ncu --clock-control none -k regex:attention_kernel -c 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section LaunchStats \
      --metrics l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__inst_executed_op_ffma.sum \
      "$prog" --batch 4 --heads 16 --seq-q 4096 --seq-kv 4096 --head-dim 128 --repeat 0 >>"$out/ncu.txt" 2>&1 ||
      fail "ncu on $(basename "$prog")" "$out/ncu.txt"
  done
  note ncu "$(grep -c '^---' "$out/ncu.txt") profiles"
fi

if want sanitizer; then
  echo "== compute-sanitizer"
  # The conformance suite under each tool, less its N = 1000 cases (the same
  # code paths as N = 257 and below, at many times the sanitizers' cost).
  san_log="$out/sanitizer.log"
  : >"$san_log"
  for exe in "$build"/bin/step0[4-9]*_tests; do
    for tool in memcheck racecheck synccheck initcheck; do
      filter=(--test-case='*conformance*' --subcase-exclude='*1000*')
      echo "--- $(basename "$exe") $tool" >>"$san_log"
      if ! timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 1 "$exe" "${filter[@]}" >>"$san_log" 2>&1; then
        fail "compute-sanitizer $tool on $(basename "$exe")" "$san_log"
      fi
      note "$(basename "$exe" _tests) $tool" "$(grep 'ERROR SUMMARY' "$san_log" | tail -n 1)"
    done
  done
fi

if want bench; then
  echo
  echo "== benchmark, N=4096 d=128 B·H=64 (grid section)"
  awk -F, 'NR == 1 || ($2 == "grid" && $6 == 4096 && $8 == 128) { printf "%-22s %-6s %-4s %-10s %-8s %-17s %s\n", $3, $9, $10, $11, $12, $13, $14 }' "$out/gpu_bench.csv"
fi
echo
echo "== summary ($out)"
printf '%s\n' "${summary[@]}"
