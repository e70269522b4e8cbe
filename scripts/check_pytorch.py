#!/usr/bin/env python3
"""Checks the CUDA steps against PyTorch on the GPU, then times both side by side.

Usage: scripts/check_pytorch.py BUILD_BIN_DIR OUTDIR [--skip-bench] [--bench-n 512,1024,...]

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
"""
import argparse
import csv
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
        shape = f"B={B} H={H} Nq={n_q} Nkv={n_kv} d={d}" + (" causal" if causal else "") + (
            f" scale={scale}" if scale is not None else "")
        for step in steps:
            flags = ["--load", in_dir, "--save", res_dir, "--scale", repr(sc)] + (["--causal"] if causal else [])
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
    w = csv.DictWriter(f, fieldnames=["gpu", "step", "batch", "heads", "seq", "head_dim", "causal", "time_ms", "tflops", "note"])
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--skip-bench", action="store_true", help="only the correctness check")
    ap.add_argument("--bench-n", default="512,1024,2048,4096,8192,16384", help="sequence lengths to time")
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
    failures = check(a.bin_dir, a.out_dir, steps)
    print(f"correctness: {failures} mismatch(es)")
    if not a.skip_bench:
        bench(a.bin_dir, a.out_dir, steps, [int(n) for n in a.bench_n.split(",")])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
