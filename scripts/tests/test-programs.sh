#!/usr/bin/env bash
# test-programs.sh BIN_DIR — every program of the build against bad and edge
# inputs, as a new user would type them. The contract: bad input gets one line
# on stderr and exit code 2, never a crash, a hang, a partial file or a wrong
# answer; --help exits 0. Registered with ctest (label cpu); prints one line per
# failed expectation and exits 1 if there was any.
set -u
bin=${1:?usage: test-programs.sh BIN_DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
small=(--heads 1 --seq-q 8 --seq-kv 8 --head-dim 8)

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect CODE PROGRAM ARGS...: the exit code is CODE; for CODE 2, stderr is one line.
expect() {
  local want=$1 prog=$2
  shift 2
  local code
  timeout 60 "$bin/$prog" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  code=$?
  if [[ $code -ne $want ]]; then
    fail "$prog $* exited $code, expected $want: $(head -c 300 "$tmp/err")"
  elif [[ $want -eq 2 && $(wc -l <"$tmp/err") -ne 1 ]]; then
    fail "$prog $* wrote $(wc -l <"$tmp/err") lines on stderr, expected one: $(head -c 300 "$tmp/err")"
  fi
}

# An .npy file with header text $2 and $3 bytes of data.
npy() {
  local header=$2 pad
  pad=$(( (64 - (10 + ${#header} + 1) % 64) % 64 ))
  {
    printf '\x93NUMPY\x01\x00'
    printf "\\x$(printf %02x $(( (${#header} + pad + 1) % 256 )))\\x$(printf %02x $(( (${#header} + pad + 1) / 256 )))"
    printf '%s%*s\n' "$header" "$pad" ""
    head -c "$3" /dev/zero
  } >"$1"
}

cpu_steps=(step01_naive step02_tiled_cpu step03_simulated_threads step25_backward_cpu)
gpu_steps=()
for p in "$bin"/step[0-9][0-9]_*; do
  name=$(basename "$p")
  [[ $name == *_tests || ! -x $p ]] && continue
  [[ " ${cpu_steps[*]} " == *" $name "* ]] || gpu_steps+=("$name")
done
have_gpu=0
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && have_gpu=1

for prog in "${cpu_steps[@]}" "${gpu_steps[@]}" tour cpu_bench gpu_bench precision_errors; do
  [[ -x $bin/$prog ]] || continue
  expect 0 "$prog" --help
  expect 2 "$prog" --bogus
done

for prog in "${cpu_steps[@]}" "${gpu_steps[@]}"; do
  [[ -x $bin/$prog ]] || continue
  for bad in "--heads 0" "--heads 3x" "--heads -1" "--heads 2147483648" "--seq-q ''" "--scale nan" "--scale inf" \
             "--scale 1e39" "--repeat -1" "--repeat 3x" "--seed -1" "--load ''" "--save ''" "--fixture ''" \
             "--fixture nope" "--load /nonexistent" "--seq-q" "--json --trace" \
             "--fixture hand_worked_n2_d1 --seq-q 4" "--fixture hand_worked_n2_d1 --heads 2" \
             "--fixture two_by_two_m9 --seed 3" "--load $tmp --batch 2" \
             "--heads 100000 --seq-q 100000 --seq-kv 100000" "--dtype fp8" "--dtype ''" "--dtype"; do
    eval "expect 2 $prog $bad"
  done
  # A step refuses a precision it does not compute in (--help lists its own).
  for dtype in bf16 fp16; do
    "$bin/$prog" --help | grep -q "this step: .*$dtype" || expect 2 "$prog" --dtype "$dtype"
  done
done

# The CPU steps: any finite scale runs and is checked against the fp64 reference.
for prog in "${cpu_steps[@]}"; do
  for scale in -1 0 1e-40 -0.25 5; do expect 0 "$prog" "${small[@]}" --scale "$scale" --check; done
  # Finite inputs that overflow fp32 inside the step: never a PASS.
  expect 1 "$prog" --heads 1 --seq-q 8 --seq-kv 8 --head-dim 64 --scale 3e38 --check
  grep -q "check.*PASS" "$tmp/out" && fail "$prog passed a check with non-finite output"
  expect 0 "$prog" --heads 1 --seq-q 8 --seq-kv 8 --head-dim 64 --scale 3e38
  grep -q "warning" "$tmp/err" || fail "$prog said nothing about non-finite output"
  # Standard output that cannot be written is an error.
  "$bin/$prog" "${small[@]}" --json >/dev/full 2>/dev/null && fail "$prog --json >/dev/full exited 0"
  "$bin/$prog" "${small[@]}" >/dev/full 2>/dev/null && fail "$prog >/dev/full exited 0"
done

prog=step01_naive
# --save: a link to /dev/full, an unwritable lse.npy, a file in place of the directory.
mkdir -p "$tmp/s1" && ln -s /dev/full "$tmp/s1/o.npy"
expect 2 $prog "${small[@]}" --save "$tmp/s1"
[[ -e $tmp/s1/lse.npy ]] && fail "a refused save left lse.npy"
mkdir -p "$tmp/s2/lse.npy"
expect 2 $prog "${small[@]}" --save "$tmp/s2"
[[ -e $tmp/s2/o.npy ]] && fail "a failed save left o.npy"
: >"$tmp/s3"
expect 2 $prog "${small[@]}" --save "$tmp/s3"
expect 0 $prog "${small[@]}" --save "$tmp/s4"
[[ -s $tmp/s4/o.npy && -s $tmp/s4/lse.npy ]] || fail "--save did not write o.npy and lse.npy"
ls -A "$tmp/s4" | grep -q tmp && fail "--save left a temporary file"
# A save into a full file system: exit 2 and no file (only where a small tmpfs can be mounted).
if mkdir -p "$tmp/full" && mount -t tmpfs -o size=64k tmpfs "$tmp/full" 2>/dev/null; then
  expect 2 $prog --heads 4 --seq-q 512 --seq-kv 8 --head-dim 64 --save "$tmp/full"
  [[ -n $(ls -A "$tmp/full") ]] && fail "a save into a full file system left: $(ls -A "$tmp/full")"
  umount "$tmp/full"
fi

# --load: a tiny file claiming a huge array, a FIFO, NaN, mismatched shapes.
mkdir -p "$tmp/l1"
npy "$tmp/l1/q.npy" "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 2147483647, 1), }" 0
cp "$tmp/l1/q.npy" "$tmp/l1/k.npy" && cp "$tmp/l1/q.npy" "$tmp/l1/v.npy"
start=$(date +%s)
expect 2 $prog --load "$tmp/l1"
(( $(date +%s) - start > 5 )) && fail "a tiny .npy with a huge header took more than 5 s to refuse"
mkdir -p "$tmp/l2" && mkfifo "$tmp/l2/q.npy"
npy "$tmp/l2/k.npy" "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 2, 1), }" 8
cp "$tmp/l2/k.npy" "$tmp/l2/v.npy"
expect 2 $prog --load "$tmp/l2"
mkdir -p "$tmp/l3"
npy "$tmp/l3/q.npy" "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 2, 1), }" 0
printf '\x00\x00\xc0\x7f\x00\x00\x80\x3f' >>"$tmp/l3/q.npy"  # NaN, 1.0
cp "$tmp/l2/k.npy" "$tmp/l3/k.npy" && cp "$tmp/l2/k.npy" "$tmp/l3/v.npy"
expect 2 $prog --load "$tmp/l3"
grep -q "finite" "$tmp/err" || fail "a NaN input was not named as such: $(cat "$tmp/err")"

# --trace is bounded by what it prints.
expect 2 step02_tiled_cpu --trace --heads 1 --seq-q 64 --seq-kv 64 --head-dim 100000
expect 0 step02_tiled_cpu --fixture hand_worked_n2_d1 --trace

# The tour and the CPU benchmark: sizes too large are refused, never a crash.
expect 2 tour --seq 1048576 --heads 1048576
expect 2 tour --seq
expect 2 tour --head-dim 0
(ulimit -v 8000000; expect 2 cpu_bench --heads 200000 --max-seq 512 --csv "$tmp/b.csv")
[[ -e $tmp/b.csv ]] && fail "cpu_bench left a CSV after refusing"
(ulimit -v 4000000; expect 2 cpu_bench --heads 20000 --max-seq 512 --csv "$tmp/c.csv")
[[ -e $tmp/c.csv ]] && fail "cpu_bench left a CSV after refusing"
for bad in "--repeat 3x" "--repeat 0" "--heads 4x" "--max-seq -5" "--csv ''" "--csv $tmp/nodir/x.csv"; do
  eval "expect 2 cpu_bench $bad"
done
for bad in "--heads 0" "--heads 65" "--max-seq 100" "--max-seq 8192" "--seed -1" "--csv ''" "--csv $tmp/nodir/x.csv"; do
  eval "expect 2 precision_errors $bad"
done
expect 0 precision_errors --max-seq 256 --csv "$tmp/p.csv"
[[ $(wc -l <"$tmp/p.csv") -eq 13 ]] || fail "precision_errors --max-seq 256 wrote $(wc -l <"$tmp/p.csv") CSV lines, expected 13"

# Without a GPU the GPU programs say so in one line and exit 2.
if [[ $have_gpu -eq 0 ]]; then
  for prog in "${gpu_steps[@]}" gpu_bench; do
    [[ -x $bin/$prog ]] || continue
    if [[ $prog == gpu_bench ]]; then expect 2 "$prog"; else expect 2 "$prog" --head-dim 64 --heads 1; fi
    grep -q "NVIDIA GPU" "$tmp/err" || fail "$prog without a GPU: $(cat "$tmp/err")"
  done
  expect 0 tour --seq 64 --head-dim 7 --max-seconds 30
fi

if [[ $failures -gt 0 ]]; then
  echo "$failures failed expectations"
  exit 1
fi
echo "all program checks passed"
