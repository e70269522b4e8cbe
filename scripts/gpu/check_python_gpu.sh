#!/usr/bin/env bash
# Everything GPU-side of the Python front end, in one call, on the GPU machine:
#   scripts/gpu/check_python_gpu.sh OUTDIR
# Needs: nvcc, CMake, ninja, and a python3 on the PATH with torch (CUDA), numpy, pytest
# and, for the model, transformers. pybind11: FLASH_PYBIND11_INCLUDE=<dir holding
# pybind11/pybind11.h> if set (e.g. PyTorch's torch/include); else pip's if this python3
# has it; else Debian's (pybind11-dev, e.g. in .carry/deps), and when that one is older
# than the interpreter needs (2.11 for Python 3.12, 2.12 for NumPy 2) python/CMakeLists.txt
# takes the newer copy PyTorch ships in torch/include. The configure line in build.log
# says which pybind11 the module was built with.
# Headers the machine lacks (CLI11, nlohmann-json, dlpack) travel in .carry/deps
# (apt-get download + dpkg -x on a Debian machine).
#
# 1. configures build-python (sm_90) for that python3 and builds the module only
#    (flash_steps_python: the steps' libraries, not their programs and tests);
# 2. runs the Python tests, each with a JUnit XML file, where a skip is a failure here:
#    the CPU ones, the GPU steps from PyTorch against SDPA (streams, DLPack, bad
#    tensors), opcheck and the fake op, torch.compile(fullgraph=True), gradients through
#    the steps with a backward (against SDPA's, opcheck with gradients, a compiled training
#    step, CUDA graphs), the training example's test, a transformers Llama on every GPU
#    step against SDPA;
# 3. runs the two scripts a reader runs: python/examples/llama_on_a_step.py (logits
#    difference and time per forward, SDPA and step08 in float32, SDPA and step21 in
#    bfloat16), train_tiny_transformer.py (loss curves of SDPA and step29) and
#    compile_one_step.py.
# Writes OUTDIR/*.log, OUTDIR/junit_*.xml, OUTDIR/llama.csv, OUTDIR/training.csv and OUTDIR/results.csv
# (check, status, tests passed/failed/skipped, seconds), and prints a summary. About
# 3 minutes on an H100 (most of it the CUDA build); exits 1 on the first failure.
set -euo pipefail

out=${1:?usage: scripts/gpu/check_python_gpu.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../.."
build=${FLASH_PYTHON_BUILD:-build-python}  # e.g. build-gpu, to reuse what gpu_round.sh built
python=$(command -v python3)
results="$out/results.csv"
echo "check,status,passed,failed,skipped,seconds" >"$results"
fail() {
  echo "check_python_gpu: FAILED: $1 (log: $2)" >&2
  tail -n 40 "$2" >&2 || true
  exit 1
}

{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  "$python" -c "import sys, torch, numpy; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'numpy', numpy.__version__)"
  "$python" -c "import transformers, transformers.masking_utils as m; print('transformers', transformers.__version__, 'AttentionInterface', hasattr(transformers, 'AttentionInterface'), 'AttentionMaskInterface', hasattr(m, 'AttentionMaskInterface'))" || echo "transformers: not importable"
  "$python" -c "import pybind11; print('pybind11', pybind11.__version__)" || echo "pybind11: not importable (CMake finds it under CMAKE_PREFIX_PATH)"
  "$python" -c "import importlib.util as u, os, re; d = os.path.join(list(u.find_spec('torch').submodule_search_locations)[0], 'include', 'pybind11', 'detail', 'common.h'); print('torch/include pybind11', '.'.join(re.findall(r'#define PYBIND11_VERSION_(?:MAJOR|MINOR|PATCH) (\S+)', open(d).read())))" || echo "torch/include: no pybind11 headers"
} >"$out/versions.txt" 2>&1 || fail "python3 lacks torch, numpy or pybind11" "$out/versions.txt"
cat "$out/versions.txt"

echo "== configure and build the module"
start=$SECONDS
prefix=()
[[ -d .carry/deps/usr ]] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.carry/deps/usr")
# pybind11: as the header says (an explicit FLASH_PYBIND11_INCLUDE, pip's, Debian's or PyTorch's).
if [[ -n ${FLASH_PYBIND11_INCLUDE:-} ]]; then
  prefix+=(-DFLASH_PYBIND11_INCLUDE="$FLASH_PYBIND11_INCLUDE")
elif pybind11_dir=$("$python" -m pybind11 --cmakedir 2>/dev/null); then
  prefix+=(-Dpybind11_DIR="$pybind11_dir")
fi
{ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 "${prefix[@]}" \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DPython_EXECUTABLE="$python" &&
  cmake --build "$build" -j "$(nproc)" --target flash_steps_python; } >"$out/build.log" 2>&1 ||
  fail "build" "$out/build.log"
grep -q "Python module: .*flash_steps for" "$out/build.log" || fail "the Python module was not configured" "$out/build.log"
grep -A1 "Python module: .*flash_steps for" "$out/build.log" | tee -a "$out/versions.txt"
echo "build,ok,,,,$((SECONDS - start))" >>"$results"
export PYTHONPATH="$PWD/$build/python" PYTHONDONTWRITEBYTECODE=1

# run_tests NAME FILE [run.py options]: one pytest file; any failure or skip fails the round.
run_tests() {
  local name=$1 file=$2
  shift 2
  local log="$out/$name.log" xml="$out/junit_$name.xml" start=$SECONDS status=0
  echo "== $name ($file)"
  "$python" python/tests/run.py "$@" "python/tests/$file" "--junitxml=$xml" >"$log" 2>&1 || status=$?
  [[ $status -eq 77 ]] && fail "$name was skipped (no GPU, torch or transformers?)" "$log"
  local counts
  counts=$("$python" - "$xml" <<'PY'
import sys
import xml.etree.ElementTree as ET
suite = ET.parse(sys.argv[1]).getroot()
suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
tests, failed = int(suite.get("tests")), int(suite.get("failures")) + int(suite.get("errors"))
skipped = int(suite.get("skipped"))
print(f"{tests - failed - skipped},{failed},{skipped}")
PY
  ) || counts=",,"
  echo "$name,$([[ $status -eq 0 ]] && echo ok || echo FAILED),$counts,$((SECONDS - start))" >>"$results"
  [[ $status -eq 0 ]] || fail "$name" "$log"
  tail -n 1 "$log"
  # A skipped test is one that did not run on this GPU machine: a failure here. The
  # exceptions: the two-GPU test on a machine with one, the no-GPU test on a GPU, and a
  # shape whose d a step is not compiled for (the Hopper steps: 64 and 128 only).
  if grep "SKIPPED" "$log" | grep -v -e "needs two GPUs" -e "this machine has a GPU" -e "is not compiled for d =" |
    grep -q .; then
    fail "$name skipped tests" "$log"
  fi
}

run_tests cpu_numpy test_numpy_steps.py
run_tests cpu_bad_inputs test_bad_inputs.py
run_tests cpu_transformers_adapter test_transformers_adapter.py
run_tests gpu_torch test_torch_gpu.py --gpu --requires torch
run_tests gpu_compile_and_fake_op test_torch_compile.py --gpu --requires torch
run_tests gpu_backward test_torch_backward.py --gpu --requires torch
run_tests gpu_training test_training_gpu.py --gpu --requires torch
run_tests gpu_transformers_model test_transformers_gpu.py --gpu --requires torch,transformers

echo "== python/examples/llama_on_a_step.py"
start=$SECONDS
"$python" python/examples/llama_on_a_step.py --csv "$out/llama.csv" >"$out/llama.log" 2>&1 ||
  fail "llama_on_a_step.py" "$out/llama.log"
cat "$out/llama.log"
echo "example_llama,ok,,,,$((SECONDS - start))" >>"$results"
start=$SECONDS
"$python" python/examples/llama_on_a_step.py --step step21 --dtype bfloat16 --csv "$out/llama.csv" \
  >"$out/llama_bf16.log" 2>&1 || fail "llama_on_a_step.py --dtype bfloat16" "$out/llama_bf16.log"
cat "$out/llama_bf16.log"
echo "example_llama_bf16,ok,,,,$((SECONDS - start))" >>"$results"

echo "== python/examples/train_tiny_transformer.py"
start=$SECONDS
"$python" python/examples/train_tiny_transformer.py --csv "$out/training.csv" >"$out/training.log" 2>&1 ||
  fail "train_tiny_transformer.py" "$out/training.log"
cat "$out/training.log"
echo "example_training,ok,,,,$((SECONDS - start))" >>"$results"

echo "== python/examples/compile_one_step.py"
start=$SECONDS
"$python" python/examples/compile_one_step.py >"$out/compile.log" 2>&1 || fail "compile_one_step.py" "$out/compile.log"
cat "$out/compile.log"
echo "example_compile,ok,,,,$((SECONDS - start))" >>"$results"

echo
echo "== summary ($out)"
column -s, -t <"$results" 2>/dev/null || cat "$results"
