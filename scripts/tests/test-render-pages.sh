#!/usr/bin/env bash
# test-render-pages.sh — scripts/docs/render-pages on a small made-up repository: a block
# written as one line fills in, and what follows it up to the next block survives
# (a one-line block once swallowed everything up to the next block's end marker), and
# a run block inside a list item keeps the item's indentation (the Answers lists of
# steps 11 and 12 once restarted at "1." after a run); the backward table's SDPA columns
# (fp32 beside EFFICIENT, 16 bits beside FLASH and CUDNN),
# and the speed blocks of docs/measuring_speed.md.
# Registered with ctest (label cpu); exits 1 with a diff when a case fails.
set -euo pipefail
render=$(cd "$(dirname "$0")/../docs" && pwd)/render-pages
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/step01_x" "$tmp/step02_x" "$tmp/docs/results/runs"
printf "# Python\n" >"$tmp/docs/python.md"
printf '# machine, 2026-01-01, commit abc\n$ build/bin/a\nA\n' >"$tmp/docs/results/runs/a.txt"
printf '# machine, 2026-01-01, commit abc\n$ build/bin/b\nB\n' >"$tmp/docs/results/runs/b.txt"
printf 'int f() {\n  //! [body]\n  return 1;\n  //! [body]\n}\n' >"$tmp/step01_x/code.cpp"
# A page with one-line blocks before filled ones, and text between them.
cat >"$tmp/step01_x/README.md" <<'PAGE'
# Page
<!-- run: a -->
text after a one-line run block
<!-- run: b -->
```text
old
```
Run on old.
<!-- /run -->
<!-- snippet: step01_x/code.cpp body -->
text after a one-line snippet
```bash
echo a fence that is not the snippet's
```
<!-- snippet: step01_x/code.cpp body -->
```cpp
old
```
<!-- /snippet -->
the end
PAGE
# A run block inside a list item: indented like its opening line, so the list goes on.
cat >"$tmp/step02_x/README.md" <<'PAGE'
# Page
1. An answer with a run:

   <!-- run: a -->
2. The next answer.
PAGE
python3 "$render" "$tmp" >/dev/null
failures=0
for indented in '   ```text' '   $ build/bin/a' '   A' '   <!-- /run -->'; do
  grep -qxF -- "$indented" "$tmp/step02_x/README.md" || { echo "FAIL: not indented in a list item: '$indented'"; failures=$((failures + 1)); }
done
for kept in "text after a one-line run block" "text after a one-line snippet" "echo a fence that is not the snippet's" "the end"; do
  grep -qxF "$kept" "$tmp/step01_x/README.md" || { echo "FAIL: lost the line '$kept'"; failures=$((failures + 1)); }
done
for filled in "^A$" "^B$"; do
  grep -q "$filled" "$tmp/step01_x/README.md" || { echo "FAIL: no run output /$filled/"; failures=$((failures + 1)); }
done
[[ $(grep -c "^  return 1;$\|^return 1;$" "$tmp/step01_x/README.md") -eq 2 ]] || { echo "FAIL: the snippet is not shown twice"; failures=$((failures + 1)); }
grep -q "^old$" "$tmp/step01_x/README.md" && { echo "FAIL: a stale body was kept"; failures=$((failures + 1)); }
python3 "$render" --check "$tmp" >/dev/null || { echo "FAIL: --check after rendering"; failures=$((failures + 1)); }
# The backward table: SDPA's figures come from the same-run file of the same GPU when there is
# one (its ratio is the operator's over SDPA's), else from the kernels' file, said to be a
# separate process. Made-up figures: 30 and 24 TFLOP/s give the ratio 1.25.
# has PATTERN MESSAGE: a failure with MESSAGE unless step03's page has a line matching PATTERN.
has() { grep -q -- "$1" "$tmp/step03_x/README.md" || { echo "FAIL: $2"; failures=$((failures + 1)); }; }
mkdir -p "$tmp/step03_x" "$tmp/docs/results/current"
printf '# Page\n<!-- backward: step03 -->\nafter the backward table\n' >"$tmp/step03_x/README.md"
gpu="NVIDIA H100 80GB HBM3"
{
  echo "gpu,date,section,method,kernel,dtype,batch,heads,seq_q,seq_kv,head_dim,causal,calls,reps,median_ms,tflops,commit"
  for what in forward:40 backward:32 backward_deterministic:20 ; do
    echo "$gpu,2026-01-01,backward,back_to_back,step03_x:${what%%:*},fp32,4,16,1024,1024,64,0,9,5,1.0,${what#*:},abc"
  done
  echo "$gpu,2026-01-01,backward,back_to_back,sdpa_efficient:backward,fp32,4,16,1024,1024,64,0,9,5,1.0,16,abc"
} >"$tmp/docs/results/current/gpu_backward_H100_2026-01-01.csv"
python3 "$render" "$tmp" >/dev/null
has "^| 1024 | 64 | none | 40.0 | 32.0 | 0.80 | 20.0 | 0.62 | 16.0 | 2.00 |$" "the backward table without a same-run file"
has "not a same-run comparison" "the fallback does not say SDPA was timed in another process"
{
  echo "gpu,date,commit,dtype,method,kernel,batch,heads,N,d,causal,calls,reps,median_ms,tflops,max_abs_diff_vs_sdpa,note"
  for method in back_to_back cuda_graph; do
    echo "$gpu,2026-01-02,def,fp32,$method,step03_x:backward,4,16,1024,64,0,9,5,1.0,30,1e-6,"
    echo "$gpu,2026-01-02,def,fp32,$method,sdpa_efficient:backward,4,16,1024,64,0,9,5,1.0,24,,"
  done
  echo "NVIDIA H200,2026-01-03,def,fp32,cuda_graph,sdpa_efficient:backward,4,16,1024,64,0,9,5,1.0,99,,"
} >"$tmp/docs/results/current/backward_compare_H100_2026-01-02.csv"
python3 "$render" "$tmp" >/dev/null
has "^| 1024 | 64 | none | 40.0 | 32.0 | 0.80 | 20.0 | 0.62 | 30.0 | 24.0 | 1.25 |$" "the backward table with a same-run file"
has "backward_compare_H100_2026-01-02.csv" "the backward table does not name its same-run file"
has "^after the backward table$" "lost the line after the backward table"
python3 "$render" --check "$tmp" >/dev/null || { echo "FAIL: --check after rendering the backward table"; failures=$((failures + 1)); }
# A 16-bit backward step: beside SDPA's FLASH and CUDNN backends, each with its ratio, from the
# rows of its own dtype only (an fp32 row of the same kernel in the same file is not its figure).
# Made-up figures: the operator's 60 over FLASH's 50 and cuDNN's 120.
has4() { grep -q -- "$1" "$tmp/step04_x/README.md" || { echo "FAIL: $2"; failures=$((failures + 1)); }; }
mkdir -p "$tmp/step04_x"
printf '# Page\n<!-- backward: step04 -->\n' >"$tmp/step04_x/README.md"
{
  echo "gpu,date,section,method,kernel,dtype,batch,heads,seq_q,seq_kv,head_dim,causal,calls,reps,median_ms,tflops,commit"
  for what in forward:80 backward:64 backward_deterministic:40 ; do
    echo "$gpu,2026-01-04,backward,cuda_graph,step04_x:${what%%:*},bf16,4,16,1024,1024,128,1,9,5,1.0,${what#*:},abc"
  done
} >"$tmp/docs/results/current/gpu_backward_H100_2026-01-04.csv"
{
  echo "gpu,date,commit,dtype,method,kernel,batch,heads,N,d,causal,calls,reps,median_ms,tflops,max_abs_diff_vs_sdpa,note"
  echo "$gpu,2026-01-04,def,bf16,cuda_graph,step04_x:backward,4,16,1024,128,1,9,5,1.0,60,1e-3,"
  echo "$gpu,2026-01-04,def,bf16,cuda_graph,sdpa_flash:backward,4,16,1024,128,1,9,5,1.0,50,,"
  echo "$gpu,2026-01-04,def,bf16,cuda_graph,sdpa_cudnn:backward,4,16,1024,128,1,9,5,1.0,120,,"
  echo "$gpu,2026-01-04,def,fp32,cuda_graph,step04_x:backward,4,16,1024,128,1,9,5,1.0,7,1e-6,"
} >"$tmp/docs/results/current/backward_compare_bf16_H100_2026-01-04.csv"
python3 "$render" "$tmp" >/dev/null
has4 "^| 1024 | 128 | causal | 80.0 | 64.0 | 0.80 | 40.0 | 0.62 | 60.0 | 50.0 | 1.20 | 120.0 | 0.50 |$" \
  "the 16-bit backward table beside FLASH and CUDNN"
has4 "SDPA's FLASH_ATTENTION and CUDNN_ATTENTION backward (bf16)" "the 16-bit table does not name the backends"
grep -q "^| 1024 | 64 | none | 40.0 | 32.0 | 0.80 | 20.0 | 0.62 | 30.0 | 24.0 | 1.25 |$" "$tmp/step03_x/README.md" ||
  { echo "FAIL: the fp32 table changed when a 16-bit file came"; failures=$((failures + 1)); }
grep -q "Forward and backward" "$tmp/step04_x/README.md" &&
  { echo "FAIL: a forward + backward table without forward_backward rows"; failures=$((failures + 1)); }
# With forward_backward rows in the same-run file (and back_to_back ones, which the table's
# method leaves out): a second table, the operator beside each backend with its ratio; a
# backend without a row at that point shows dashes.
{
  echo "$gpu,2026-01-04,def,bf16,cuda_graph,step04_x:forward_backward,4,16,1024,128,1,9,5,1.0,90,1e-3,"
  echo "$gpu,2026-01-04,def,bf16,back_to_back,step04_x:forward_backward,4,16,1024,128,1,9,5,1.0,11,1e-3,"
  echo "$gpu,2026-01-04,def,bf16,cuda_graph,sdpa_flash:forward_backward,4,16,1024,128,1,9,5,1.0,60,,"
  echo "$gpu,2026-01-04,def,bf16,cuda_graph,sdpa_cudnn:forward_backward,4,16,1024,128,1,9,5,1.0,150,,"
  echo "$gpu,2026-01-04,def,bf16,cuda_graph,step04_x:forward_backward,4,16,1024,64,0,9,5,1.0,70,1e-3,"
  echo "$gpu,2026-01-04,def,bf16,cuda_graph,sdpa_flash:forward_backward,4,16,1024,64,0,9,5,1.0,35,,"
} >>"$tmp/docs/results/current/backward_compare_bf16_H100_2026-01-04.csv"
python3 "$render" "$tmp" >/dev/null
has4 "^| 1024 | 128 | causal | 90.0 | 60.0 | 1.50 | 150.0 | 0.60 |$" "the forward + backward table beside FLASH and CUDNN"
has4 "^| 1024 | 64 | none | 70.0 | 35.0 | 2.00 | — | — |$" "a forward + backward point with no cuDNN row"
has4 "^| 1024 | 128 | causal | 80.0 | 64.0 | 0.80 | 40.0 | 0.62 | 60.0 | 50.0 | 1.20 | 120.0 | 0.50 |$" \
  "the backward table changed when forward + backward rows came"
# The speed blocks of docs/measuring_speed.md: a single launch from a sample run beside the two
# sustained methods of the same kernel and shape, a comparison file's SDPA rows and last step,
# and the per-call file, which says it is not measured yet until it exists.
mkdir -p "$tmp/docs/results/current"
cat >"$tmp/docs/results/runs/step21_perf.txt" <<'RUN'
# GPU X, 2026-01-01, commit abc
$ build/bin/step21_x --batch 2 --heads 3 --seq-q 64 --seq-kv 64 --head-dim 128 --repeat 10
  time                       0.500 ms (kernel only, CUDA events, median of 10 runs; single launch, GPU idle before each: a quick look)
  TFLOP/s                    4.5
RUN
cat >"$tmp/docs/results/current/gpu_steps_X_2026-01-01.csv" <<'CSV'
gpu,date,section,method,kernel,dtype,batch,heads,seq_q,seq_kv,head_dim,causal,calls,reps,median_ms,tflops,commit
GPU X,2026-01-01,steps,back_to_back,step21_x,bf16,2,3,64,64,128,0,7,5,0.600,3.75,abc
GPU X,2026-01-01,steps,cuda_graph,step21_x,bf16,2,3,64,64,128,0,7,5,0.550,4.1,abc
GPU X,2026-01-01,steps,cuda_graph,step21_x,bf16,2,3,64,64,64,0,7,5,9.999,1.0,abc
CSV
cat >"$tmp/docs/results/current/pytorch_compare_bf16_X_2026-01-01.csv" <<'CSV'
gpu,date,commit,dtype,method,kernel,batch,heads,N,d,causal,calls,reps,median_ms,tflops,max_abs_diff_vs_sdpa,note
GPU X,2026-01-01,abc,bf16,back_to_back,sdpa_flash,4,16,4096,128,0,9,5,1.700,320.0,,
GPU X,2026-01-01,abc,bf16,cuda_graph,sdpa_flash,4,16,4096,128,0,9,5,1.600,340.0,,
GPU X,2026-01-01,abc,bf16,back_to_back,sdpa_cudnn,4,16,4096,128,1,,,,,,out of memory
GPU X,2026-01-01,abc,bf16,back_to_back,step20_y,4,16,4096,128,0,9,5,1.000,550.0,0.01,
GPU X,2026-01-01,abc,bf16,back_to_back,step21_x,4,16,4096,128,0,9,5,0.990,555.0,0.01,
GPU X,2026-01-01,abc,bf16,cuda_graph,step21_x,4,16,4096,128,0,9,5,0.930,590.0,0.01,
CSV
cat >"$tmp/docs/measuring_speed.md" <<'PAGE'
# Speed
<!-- speed: methods step21_perf -->
between the blocks
<!-- speed: pytorch bf16 N=4096 d=128 -->
<!-- speed: per_call -->
the end of the page
PAGE
python3 "$render" "$tmp" >/dev/null
speed_page="$tmp/docs/measuring_speed.md"
for expected in '| single launch | one launch, the GPU idle before it (median of 10) | 0.500 | 4.5 | 0.91 |' \
  '| back_to_back | K calls in a row after a warm-up (K = 7, median of 5) | 0.600 | 3.8 | 1.09 |' \
  '| cuda_graph | K calls replayed from a CUDA graph (K = 7, median of 5) | 0.550 | 4.1 | 1.00 |' \
  '| `sdpa_flash` | none | 1.700 | 1.600 | 320.0 | 340.0 |' \
  '| `sdpa_cudnn` | causal | out of memory | — | — | — |' \
  '| `step21_x` | none | 0.990 | 0.930 | 555.0 | 590.0 |' \
  '*Not yet measured: `scripts/gpu/per_call.py` writes docs/results/current/per_call_GPU_DATE.csv, and this block shows it.*' \
  'between the blocks' 'the end of the page'; do
  grep -qxF -- "$expected" "$speed_page" || { echo "FAIL: no line '$expected'"; failures=$((failures + 1)); }
done
grep -q "step20_y" "$speed_page" && { echo "FAIL: a step below the last is in the comparison"; failures=$((failures + 1)); }
grep -q "9.999" "$speed_page" && { echo "FAIL: a row of another shape is in the methods table"; failures=$((failures + 1)); }
cat >"$tmp/docs/results/current/per_call_X_2026-01-01.csv" <<'CSV'
gpu,date,commit,torch,section,method,kernel,dtype,batch,heads,N,d,causal,calls,reps,median_us,ratio_to_sdpa,ratio_to_fastest_sdpa,ratio_to_graph,note
GPU X,2026-01-01,abc,2.9,launch_bound,per_call,sdpa_default,bf16,1,1,128,64,0,2000,5,30.00,1.000,1.100,,
GPU X,2026-01-01,abc,2.9,launch_bound,per_call,torch.ops.flash_steps.step21_x,bf16,1,1,128,64,0,2000,5,36.00,1.200,1.320,,
GPU X,2026-01-01,abc,2.9,host_phases,native,step launch,bf16,1,1,128,64,0,2000,1,4.250,,,,1 runs a call
GPU X,2026-01-01,abc,2.9,graph_vs_eager,back_to_back,torch.ops.flash_steps.step21_x,bf16,16,16,1024,64,0,50,5,100.00,,,0.970,
GPU X,2026-01-01,abc,2.9,graph_vs_eager,cuda_graph,torch.ops.flash_steps.step21_x,bf16,16,16,1024,64,0,50,5,97.00,,,,
CSV
if python3 "$render" --check "$tmp" >/dev/null 2>&1; then
  echo "FAIL: --check passed with a new per_call file not yet shown"; failures=$((failures + 1))
fi
python3 "$render" "$tmp" >/dev/null
for expected in '| `torch.ops.flash_steps.step21_x` | per_call | 36.0 | 1.200 | 1.320 |' \
  '| step launch | native | 4.25 |' \
  '| `torch.ops.flash_steps.step21_x` | 16 × 1024 | 64 | none | 100.0 | 97.0 | 0.970 |'; do
  grep -qxF -- "$expected" "$speed_page" || { echo "FAIL: no line '$expected'"; failures=$((failures + 1)); }
done
python3 "$render" --check "$tmp" >/dev/null || { echo "FAIL: --check after rendering the speed blocks"; failures=$((failures + 1)); }
# The sweep block: a step over N at one d beside the step before it and SDPA's backends, from the
# newest pytorch_sweep file; made-up figures 300 / 250 give 1.20 against cuDNN and 1.50 against the step before.
mkdir -p "$tmp/step05_x"
printf '# Page\n<!-- sweep: step05 bf16 d=64 -->\nafter the sweep\n' >"$tmp/step05_x/README.md"
{
  echo "gpu,date,commit,dtype,method,kernel,batch,heads,N,d,causal,calls,reps,median_ms,tflops,max_abs_diff_vs_sdpa,note"
  for k in step05_x:300 step04_y:200 sdpa_cudnn:250 sdpa_flash:150; do
    echo "GPU X,2026-01-01,abc,bf16,cuda_graph,${k%%:*},16,16,1024,64,0,9,5,1.0,${k#*:},,"
  done
  echo "GPU X,2026-01-01,abc,bf16,cuda_graph,step04_y,16,16,1024,96,0,,,,,,unsupported: no d = 96"
} >"$tmp/docs/results/current/pytorch_sweep_bf16_GPU_X_2026-01-01.csv"
python3 "$render" "$tmp" >/dev/null
grep -q "^| none | 1024 | 16 | 300.0 | 200.0 | 150.0 | 250.0 | 1.20 | 1.50 |$" "$tmp/step05_x/README.md" ||
  { echo "FAIL: the sweep row"; failures=$((failures + 1)); }
grep -q "^after the sweep$" "$tmp/step05_x/README.md" || { echo "FAIL: the sweep block ate what follows"; failures=$((failures + 1)); }
if [[ $failures -gt 0 ]]; then
  cat "$tmp/step01_x/README.md" "$tmp/step03_x/README.md" "$tmp/step04_x/README.md" "$tmp/step05_x/README.md" "$speed_page"
  exit 1
fi
echo "render-pages: one-line blocks fill in and keep what follows them; run blocks keep their indentation;" \
  "the backward table takes SDPA's figures from the same-run file of its GPU and dtype, else says they are not same-run;" \
  "speed blocks show the sample run, the CSVs and a placeholder for the per-call file"
