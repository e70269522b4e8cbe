#!/usr/bin/env python3
"""Checks the CUDA steps against PyTorch on the GPU, then times both side by side.

Usage: scripts/check_pytorch.py BUILD_BIN_DIR OUTDIR [--skip-bench] [--bench-n 512,1024,...]
       scripts/check_pytorch.py BUILD_BIN_DIR OUTDIR --dtype bf16|fp16 [--csv PATH] [--bench-n 1024,4096,16384]

Without --dtype (or with --dtype fp32), the float32 mode:

1. Correctness. For each shape below (causal and not, N_q != N_kv, a non-default
   scale) it draws Q, K, V with torch, saves them as OUTDIR/inputs/q.npy, k.npy,
   v.npy ([B, H, N, d] float32, C order), runs every CUDA step program present in
   BUILD_BIN_DIR (stepNN_* from step 4 on, the GPU ladder) with
   `--load DIR --save DIR2`, and compares its o.npy and lse.npy with
   torch.nn.functional.scaled_dot_product_attention and torch.logsumexp of the
   scaled scores, both computed in float64 on the GPU.

   Tolerance (the project's rule, with PyTorch standing in for step01): a step's
   max |error| against the float64 reference must be at most
   2 x the max |error| of PyTorch's own float32 result (math backend, TF32 off)
   on the same inputs + 1e-5. A tail-tile or masking bug gives errors near 1e-3,
   a hundred times above that floor. Any mismatch: exit status 1.

2. Timing. On the benchmark shapes (B=4, H=16, d in {64, 128}, N in 512 ... 16384,
   causal off and on) it times SDPA with each backend forced through
   torch.nn.attention.sdpa_kernel (MATH, EFFICIENT_ATTENTION, FLASH_ATTENTION,
   CUDNN_ATTENTION; a backend that rejects float32 is reported "unsupported",
   one that runs out of memory "out of memory"), median of CUDA-event times after
   a warm-up, and times each step program through its `--json --repeat R` output,
   in the same session. Writes OUTDIR/pytorch_compare.csv (the columns docs/results.md
   reads: step, seq, tflops, time_ms, batch, heads, head_dim, causal) and prints a table.

With --dtype bf16 or fp16, the same two parts for every step program that computes in
that precision (those that accept `--dtype`; the others are listed as skipped):

1. Correctness, by FlashAttention-2's same-precision rule. Q, K, V are drawn in float32,
   rounded to the dtype by torch (.to(dtype), round to nearest even, as the steps round
   on upload) and saved as float32 .npy of those rounded values, so the program sees
   exactly the 16-bit inputs SDPA sees. Reference: O and L in float64 from those inputs.
   Yardsticks: SDPA's math backend run in the dtype itself (O), and fp32 logsumexp of
   the inputs' fp32 scores (L). Tolerance: max |O - O_ref| <= 2 x SDPA-math's
   + u x max(1, max |O_ref|), u the dtype's unit roundoff (2^-8 bf16, 2^-11 fp16: the
   step's O is rounded to the dtype); max |L - L_ref| <= 2 x fp32's + 1e-5 x max(1, max |L_ref|).
   Shapes: causal and not, N_q != N_kv both ways, d 64 and 128, a non-default scale.

2. Timing, in the same run: B=4, H=16, d in {64, 128}, N in --bench-n (default 1024,
   4096, 16384), causal off and on; every SDPA backend forced by sdpa_kernel
   (FLASH_ATTENTION, EFFICIENT_ATTENTION, CUDNN_ATTENTION, MATH; MATH is skipped above
   N=8192, where its S alone needs B*H*N^2*2 bytes) on tensors of the dtype, and each
   step program with `--dtype D --json --repeat R` (the kernel alone, CUDA events). TFLOP/s
   counts 4*B*H*N_q*N_kv*d, halved when causal (common/'s count). Prints a table and
   writes the CSV (--csv, default OUTDIR/pytorch_compare_<dtype>.csv) with columns gpu,
   date, dtype, kernel, batch, heads, N, d, causal, median_ms, tflops, note.
"""
import argparse
import csv
import datetime
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

def gpu_steps(bin_dir):
    """The GPU step programs in bin_dir: stepNN_name with NN >= 04, in ladder order."""
    names = []
    for name in sorted(os.listdir(bin_dir)):
        if re.fullmatch(r"step(\d\d)_[a-z0-9_]+", name) and not name.endswith("_tests") and int(name[4:6]) >= 4:
            names.append(name)
    return names

# (B, H, N_q, N_kv, d, causal, scale or None for 1/sqrt(d))
CHECK_SHAPES = [
    (2, 3, 1000, 1000, 64, False, None),
    (2, 3, 1000, 1000, 64, True, None),
    (1, 4, 777, 1500, 128, True, None),
    (1, 4, 1500, 777, 128, True, None),
    (2, 2, 333, 1025, 96, False, None),
    (2, 2, 1025, 333, 96, True, None),
    (1, 2, 257, 100, 32, True, 0.3),
    (4, 16, 1024, 1024, 128, True, None),
]

BACKENDS = [
    ("math", SDPBackend.MATH),
    ("efficient", SDPBackend.EFFICIENT_ATTENTION),
    ("flash", SDPBackend.FLASH_ATTENTION),
    ("cudnn", SDPBackend.CUDNN_ATTENTION),
]


def reference(q, k, v, causal, scale):
    """O and L in float64 on the GPU."""
    q64, k64, v64 = q.double(), k.double(), v.double()
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal, scale=scale)
    s = (q64 @ k64.transpose(-2, -1)) * scale
    if causal:  # top-left aligned, as SDPA's is_causal: query i sees keys j <= i
        n_q, n_kv = s.shape[-2], s.shape[-1]
        hidden = torch.ones(n_q, n_kv, dtype=torch.bool, device=s.device).triu(1)
        s = s.masked_fill(hidden, float("-inf"))
    return o, torch.logsumexp(s, dim=-1)


def torch_fp32(q, k, v, causal, scale):
    """PyTorch's own float32 standard attention (math backend, TF32 off): the error yardstick."""
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    s = (q @ k.transpose(-2, -1)) * scale
    if causal:
        hidden = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool, device=s.device).triu(1)
        s = s.masked_fill(hidden, float("-inf"))
    return o, torch.logsumexp(s, dim=-1)


def max_err(a, b):
    return (a.double() - b.double()).abs().max().item()


def run_step(binary, args):
    """Runs a step program; returns (exit status, stdout, stderr)."""
    p = subprocess.run([binary] + args, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def describe_shape(B, H, n_q, n_kv, d, causal, scale):
    """The problem as the table's shape column shows it."""
    return f"B={B} H={H} Nq={n_q} Nkv={n_kv} d={d}" + (" causal" if causal else "") + (
        f" scale={scale}" if scale is not None else "")


def check_programs(bin_dir, steps, flags, res_dir, shape, ref_o, ref_l, tol_o, tol_l):
    """Runs each step's program with `flags` (which load the inputs and save into res_dir), prints
    one row per step and returns how many failed: a failed run, a wrong shape, an error over tolerance."""
    failures = 0
    for step in steps:
        for f in ("o.npy", "lse.npy"):
            if os.path.exists(os.path.join(res_dir, f)):
                os.remove(os.path.join(res_dir, f))
        rc, _, err = run_step(os.path.join(bin_dir, step), flags)
        if rc != 0:
            print(f"{step:24} {shape:42} program failed (exit {rc}): {err.strip()}")
            failures += 1
            continue
        o = torch.from_numpy(np.load(os.path.join(res_dir, "o.npy"))).cuda()
        lse = torch.from_numpy(np.load(os.path.join(res_dir, "lse.npy"))).cuda()
        if o.shape != ref_o.shape or lse.shape != ref_l.shape:
            print(f"{step:24} {shape:42} wrong output shape {tuple(o.shape)} {tuple(lse.shape)}")
            failures += 1
            continue
        e_o, e_l = max_err(o, ref_o), max_err(lse, ref_l)
        ok = e_o <= tol_o and e_l <= tol_l  # NaN compares false: fails
        failures += 0 if ok else 1
        print(f"{step:24} {shape:42} {e_o:9.2e} {tol_o:9.2e} {e_l:9.2e} {tol_l:9.2e}  {'ok' if ok else 'MISMATCH'}")
    return failures


def check(bin_dir, out_dir, steps):
    in_dir = os.path.join(out_dir, "inputs")
    res_dir = os.path.join(out_dir, "results")
    os.makedirs(in_dir, exist_ok=True)
    os.makedirs(res_dir, exist_ok=True)
    gen = torch.Generator(device="cuda").manual_seed(2026)
    failures = 0
    print(f"{'step':24} {'shape':42} {'err O':>9} {'tol O':>9} {'err L':>9} {'tol L':>9}  verdict")
    for B, H, n_q, n_kv, d, causal, scale in CHECK_SHAPES:
        sc = scale if scale is not None else 1.0 / math.sqrt(d)
        q = torch.randn(B, H, n_q, d, device="cuda", generator=gen)
        k = torch.randn(B, H, n_kv, d, device="cuda", generator=gen)
        v = torch.randn(B, H, n_kv, d, device="cuda", generator=gen)
        for name, t in (("q", q), ("k", k), ("v", v)):
            np.save(os.path.join(in_dir, f"{name}.npy"), t.cpu().numpy().astype(np.float32))
        ref_o, ref_l = reference(q, k, v, causal, sc)
        t32_o, t32_l = torch_fp32(q, k, v, causal, sc)
        tol_o = 2 * max_err(t32_o, ref_o) + 1e-5
        tol_l = 2 * max_err(t32_l, ref_l) + 1e-5
        shape = describe_shape(B, H, n_q, n_kv, d, causal, scale)
        flags = ["--load", in_dir, "--save", res_dir, "--scale", repr(sc)] + (["--causal"] if causal else [])
        failures += check_programs(bin_dir, steps, flags, res_dir, shape, ref_o, ref_l, tol_o, tol_l)
    return failures


def flops(B, H, n, d, causal):
    f = 4.0 * B * H * n * n * d
    return f / 2 if causal else f


def time_sdpa(backend, q, k, v, causal, reps):
    """Median CUDA-event time (ms) of one SDPA call with `backend` forced, or a reason it cannot run."""
    try:
        with sdpa_kernel(backend):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # warm-up
            torch.cuda.synchronize()
            times = []
            for _ in range(reps):
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                stop.record()
                stop.synchronize()
                times.append(start.elapsed_time(stop))
        return float(np.median(times)), ""
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return None, "out of memory"
    except RuntimeError as e:
        torch.cuda.empty_cache()
        return None, "unsupported" if "No available kernel" in str(e) or "not supported" in str(e).lower() else str(e).splitlines()[0][:60]


def bench(bin_dir, out_dir, steps, ns):
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    gpu = torch.cuda.get_device_name()
    path = os.path.join(out_dir, "pytorch_compare.csv")
    f = open(path, "w", newline="")  # written row by row, so a run cut short keeps what it measured
    w = csv.DictWriter(f, fieldnames=["gpu", "step", "batch", "heads", "seq", "head_dim", "causal", "time_ms", "tflops", "note"],
                       lineterminator="\n")  # LF: the site check refuses CRLF in a linked CSV
    w.writeheader()
    for d in (64, 128):
        for causal in (False, True):
            for n in ns:
                B, H = 4, 16
                reps = 10 if n <= 4096 else 3
                q = torch.randn(B, H, n, d, device="cuda")
                k = torch.randn(B, H, n, d, device="cuda")
                v = torch.randn(B, H, n, d, device="cuda")
                for name, backend in BACKENDS:
                    ms, why = time_sdpa(backend, q, k, v, causal, reps)
                    rows.append(dict(gpu=gpu, step=f"torch_sdpa_{name}", batch=B, heads=H, seq=n, head_dim=d, causal=int(causal),
                                     time_ms=ms, tflops=flops(B, H, n, d, causal) / (ms * 1e-3) / 1e12 if ms else None,
                                     note=why))
                del q, k, v
                torch.cuda.empty_cache()
                for step in steps:
                    flags = ["--batch", str(B), "--heads", str(H), "--seq-q", str(n), "--seq-kv", str(n),
                             "--head-dim", str(d), "--json", "--repeat", str(reps)] + (["--causal"] if causal else [])
                    rc, out, err = run_step(os.path.join(bin_dir, step), flags)
                    if rc != 0:
                        rows.append(dict(gpu=gpu, step=step, batch=B, heads=H, seq=n, head_dim=d, causal=int(causal), time_ms=None,
                                         tflops=None, note=err.strip().splitlines()[-1][:60] if err.strip() else f"exit {rc}"))
                        continue
                    j = json.loads(out)
                    rows.append(dict(gpu=gpu, step=step, batch=B, heads=H, seq=n, head_dim=d, causal=int(causal),
                                     time_ms=j["time_ms"], tflops=j["tflops"], note=""))
                for r in rows[-len(BACKENDS) - len(steps):]:
                    w.writerow({key: (f"{val:.4f}" if isinstance(val, float) else val) for key, val in r.items()})
                f.flush()
                print_rows(rows[-len(BACKENDS) - len(steps):])
    f.close()
    print(f"wrote {path}")


def print_rows(rows):
    for r in rows:
        t = f"{r['time_ms']:10.3f} ms {r['tflops']:7.2f} TFLOP/s" if r["time_ms"] else f"{'':>10}    {r['note']}"
        print(f"d={r['head_dim']:<4} N={r['seq']:<6} {'causal' if r['causal'] else 'full  '} {r['step']:24} {t}")
    sys.stdout.flush()


# --------------------------------------------------------------------------------------
# bf16 / fp16: the steps that compute in a 16-bit precision, against SDPA in that precision.

TORCH_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}
UNIT_ROUNDOFF = {"bf16": 2.0**-8, "fp16": 2.0**-11}

# (B, H, N_q, N_kv, d, causal, scale or None for 1/sqrt(d))
HALF_CHECK_SHAPES = [
    (2, 3, 1000, 1000, 64, False, None),
    (2, 3, 1000, 1000, 64, True, None),
    (1, 4, 777, 1500, 128, True, None),
    (1, 4, 1500, 777, 128, False, None),
    (2, 2, 333, 1025, 64, True, None),
    (1, 2, 257, 100, 128, True, 0.3),
    (4, 16, 1024, 1024, 128, True, None),
]

HALF_BACKENDS = [
    ("sdpa_flash", SDPBackend.FLASH_ATTENTION),
    ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION),
    ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION),
    ("sdpa_math", SDPBackend.MATH),
]
MATH_MAX_N = 8192  # above this, the math backend's S (B*H*N^2 elements) is skipped


def steps_computing_in(bin_dir, steps, dtype):
    """The step programs that accept --dtype `dtype` (a tiny run each), and the others' messages."""
    takes, others = [], {}
    for step in steps:
        rc, _, err = run_step(os.path.join(bin_dir, step), ["--batch", "1", "--heads", "1", "--seq-q", "16",
                                                             "--seq-kv", "16", "--head-dim", "64", "--dtype", dtype])
        if rc == 0:
            takes.append(step)
        else:
            others[step] = err.strip().splitlines()[-1] if err.strip() else f"exit {rc}"
    return takes, others


def check_half(bin_dir, out_dir, steps, dtype):
    t = TORCH_DTYPE[dtype]
    in_dir = os.path.join(out_dir, "inputs_" + dtype)
    res_dir = os.path.join(out_dir, "results_" + dtype)
    os.makedirs(in_dir, exist_ok=True)
    os.makedirs(res_dir, exist_ok=True)
    gen = torch.Generator(device="cuda").manual_seed(2026)
    print(f"tolerance ({dtype}): max|O - O_ref| <= 2 x SDPA-math {dtype}'s + {UNIT_ROUNDOFF[dtype]:.3g} x max(1, max|O_ref|);"
          f" max|L - L_ref| <= 2 x fp32 logsumexp's + 1e-5 x max(1, max|L_ref|); refs in fp64 of the {dtype} inputs")
    print(f"{'step':24} {'shape':42} {'err O':>9} {'tol O':>9} {'err L':>9} {'tol L':>9}  verdict")
    failures = 0
    for B, H, n_q, n_kv, d, causal, scale in HALF_CHECK_SHAPES:
        sc = scale if scale is not None else 1.0 / math.sqrt(d)
        q, k, v = (torch.randn(B, H, n, d, device="cuda", generator=gen).to(t) for n in (n_q, n_kv, n_kv))
        for name, x in (("q", q), ("k", k), ("v", v)):  # the rounded values, exactly, as float32
            np.save(os.path.join(in_dir, f"{name}.npy"), x.float().cpu().numpy())
        ref_o, ref_l = reference(q, k, v, causal, sc)
        with sdpa_kernel(SDPBackend.MATH):
            o16 = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sc)
        _, l32 = torch_fp32(q.float(), k.float(), v.float(), causal, sc)
        tol_o = 2 * max_err(o16, ref_o) + UNIT_ROUNDOFF[dtype] * max(1.0, ref_o.abs().max().item())
        tol_l = 2 * max_err(l32, ref_l) + 1e-5 * max(1.0, ref_l.abs().max().item())
        shape = describe_shape(B, H, n_q, n_kv, d, causal, scale)
        flags = ["--load", in_dir, "--save", res_dir, "--scale", repr(sc), "--dtype", dtype] + (
            ["--causal"] if causal else [])
        failures += check_programs(bin_dir, steps, flags, res_dir, shape, ref_o, ref_l, tol_o, tol_l)
    return failures


def bench_half(bin_dir, steps, dtype, ns, csv_path):
    t = TORCH_DTYPE[dtype]
    gpu = torch.cuda.get_device_name()
    date = datetime.date.today().isoformat()
    fields = ["gpu", "date", "dtype", "kernel", "batch", "heads", "N", "d", "causal", "median_ms", "tflops", "note"]
    os.makedirs(os.path.dirname(os.path.abspath(csv_path)), exist_ok=True)
    f = open(csv_path, "w", newline="")  # written row by row: a run cut short keeps what it measured
    w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")  # LF, as every CSV in docs/results
    w.writeheader()
    B, H = 4, 16
    print(f"\n{'d':>4} {'N':>6} {'mask':6} {'kernel':26} {'median ms':>10} {'TFLOP/s':>8}  ({dtype}, B={B}, H={H}, {gpu})")
    for d in (64, 128):
        for causal in (False, True):
            for n in ns:
                reps = 20 if n <= 4096 else 5
                rows = []
                q, k, v = (torch.randn(B, H, n, d, device="cuda").to(t) for _ in range(3))
                for name, backend in HALF_BACKENDS:
                    if backend == SDPBackend.MATH and n > MATH_MAX_N:
                        ms, why = None, f"skipped: S alone is {B * H * n * n * 2 / 2**30:.0f} GiB"
                    else:
                        ms, why = time_sdpa(backend, q, k, v, causal, reps)
                    rows.append(dict(kernel=name, median_ms=ms, note=why))
                del q, k, v
                torch.cuda.empty_cache()
                for step in steps:
                    flags = ["--batch", str(B), "--heads", str(H), "--seq-q", str(n), "--seq-kv", str(n), "--head-dim",
                             str(d), "--dtype", dtype, "--json", "--repeat", str(reps)] + (["--causal"] if causal else [])
                    rc, out, err = run_step(os.path.join(bin_dir, step), flags)
                    if rc != 0:
                        rows.append(dict(kernel=step, median_ms=None,
                                         note=err.strip().splitlines()[-1][:60] if err.strip() else f"exit {rc}"))
                    else:
                        rows.append(dict(kernel=step, median_ms=json.loads(out)["time_ms"], note=""))
                for r in rows:
                    ms = r["median_ms"]
                    r.update(gpu=gpu, date=date, dtype=dtype, batch=B, heads=H, N=n, d=d, causal=int(causal),
                             tflops=flops(B, H, n, d, causal) / (ms * 1e-3) / 1e12 if ms else None)
                    w.writerow({key: (f"{val:.4f}" if isinstance(val, float) else val) for key, val in r.items()})
                    shown = f"{ms:10.3f} {r['tflops']:8.1f}" if ms else f"{'':>10} {'':>8}  {r['note']}"
                    print(f"{d:>4} {n:>6} {'causal' if causal else 'full':6} {r['kernel']:26} {shown}")
                f.flush()
                sys.stdout.flush()
    f.close()
    print(f"wrote {csv_path}")


def main_half(a, steps):
    takes, others = steps_computing_in(a.bin_dir, steps, a.dtype)
    for step, why in others.items():
        print(f"{step}: skipped ({why})")
    if not takes:
        print(f"no step program in {a.bin_dir} computes in {a.dtype}", file=sys.stderr)
        return 2
    print(f"steps in {a.dtype}: {' '.join(takes)}")
    failures = check_half(a.bin_dir, a.out_dir, takes, a.dtype)
    print(f"correctness ({a.dtype}): {failures} mismatch(es)")
    if not a.skip_bench:
        csv_path = a.csv or os.path.join(a.out_dir, f"pytorch_compare_{a.dtype}.csv")
        bench_half(a.bin_dir, takes, a.dtype, [int(n) for n in (a.bench_n or "1024,4096,16384").split(",")], csv_path)
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--skip-bench", action="store_true", help="only the correctness check")
    ap.add_argument("--bench-n", default=None,
                    help="sequence lengths to time (fp32: 512,...,16384; bf16/fp16: 1024,4096,16384)")
    ap.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32",
                    help="the precision to check and time the steps in (bf16/fp16: the steps that compute in it)")
    ap.add_argument("--csv", default=None, help="bf16/fp16: the CSV to write (default OUTDIR/pytorch_compare_<dtype>.csv)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("check_pytorch.py needs a CUDA GPU and PyTorch built with CUDA", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 yardstick must be fp32
    steps = gpu_steps(a.bin_dir)
    if not steps:
        print(f"no CUDA step programs in {a.bin_dir}", file=sys.stderr)
        return 2
    os.makedirs(a.out_dir, exist_ok=True)
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, steps: {' '.join(steps)}")
    if a.dtype != "fp32":
        return main_half(a, steps)
    # fp32: the step programs that compute in fp32 (a bf16/fp16-only step refuses it by name).
    steps, others = steps_computing_in(a.bin_dir, steps, "fp32")
    for step, why in others.items():
        print(f"{step}: skipped ({why})")
    failures = check(a.bin_dir, a.out_dir, steps)
    print(f"correctness: {failures} mismatch(es)")
    if not a.skip_bench:
        bench(a.bin_dir, a.out_dir, steps, [int(n) for n in (a.bench_n or "512,1024,2048,4096,8192,16384").split(",")])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
