#!/usr/bin/env python3
"""Checks the CUDA steps against PyTorch on the GPU, then times their torch operators beside SDPA's backends.

Usage: scripts/gpu/check_pytorch.py BUILD_BIN_DIR OUTDIR [--dtype fp32|bf16|fp16] [--csv PATH]
           [--bench-n 1024,4096,16384] [--head-dims 64,128] [--steps 9,12,17] [--skip-check | --skip-bench]
           [--tokens T] [--backends cudnn,flash] [--python-dir DIR]

1. Correctness (skipped with --skip-check). For each shape below (causal and not,
   N_q != N_kv both ways, a non-default scale) Q, K, V are drawn with torch and saved as
   OUTDIR/inputs*/q.npy, k.npy, v.npy ([B, H, N, d] float32, C order); every CUDA step
   program in BUILD_BIN_DIR (stepNN_* from step 4 on) that computes in the dtype runs with
   `--load DIR --save DIR2`, and its o.npy and lse.npy are compared with O and L computed
   in float64 on the GPU. Any mismatch: exit status 1.
   - fp32 (the default): a step's max |error| against the float64 reference must be at most
     2 x the max |error| of PyTorch's own float32 result (math backend, TF32 off) on the
     same inputs + 1e-5. A tail-tile or masking bug gives errors near 1e-3.
   - bf16, fp16: FlashAttention-2's same-precision rule. Q, K, V are rounded to the dtype by
     torch (round to nearest even, as the steps round on upload) and saved as float32 .npy
     of those rounded values, so the program sees exactly the 16-bit inputs SDPA sees.
     Yardsticks: SDPA's math backend run in the dtype itself (O), fp32 logsumexp of the
     inputs' fp32 scores (L). Tolerance: max |O - O_ref| <= 2 x SDPA-math's + u x max(1,
     max |O_ref|), u the dtype's unit roundoff (2^-8 bf16, 2^-11 fp16); max |L - L_ref| <=
     2 x fp32's + 1e-5 x max(1, max |L_ref|).

2. Timing (skipped with --skip-bench): B=4 (or --tokens / N), H=16, d in --head-dims, N in --bench-n, causal
   off and on, tensors of the dtype. Every SDPA backend forced by sdpa_kernel
   (FLASH_ATTENTION, EFFICIENT_ATTENTION, CUDNN_ATTENTION, MATH; MATH is skipped above
   N=8192, where its S alone needs B*H*N^2 elements; a backend that refuses the dtype is
   "unsupported") and each step's torch operator (flash_steps.pytorch: the kernel on the
   current stream, the path a user calls; from --python-dir, by default BUILD_BIN_DIR/../python)
   are timed the same way, in this one process, by time_sustained():
   - back_to_back: about 0.75 s of warm-up calls, then K calls between two CUDA events;
     per call = elapsed / K;
   - cuda_graph: the same K calls captured once into a CUDA graph and replayed; per call =
     elapsed / K. A step operator that cannot be captured is a failure (exit 1), reported
     with the error; it is never timed another way instead.
   Each is the median of 5 repetitions (K is chosen so that one repetition lasts ~50 ms).
   Before timing, each step's O is compared with SDPA's on the same inputs (max |dO|, a
   sanity check: a non-finite O is a failure). TFLOP/s counts 4*B*H*N_q*N_kv*d, halved when
   causal (common/'s count). Prints a table and writes the CSV (--csv, default
   OUTDIR/pytorch_compare_<dtype>.csv) row by row, with columns
   gpu, date, commit, dtype, method, kernel, batch, heads, N, d, causal, calls, reps,
   median_ms, tflops, max_abs_diff_vs_sdpa, note.
   The programs' own `--repeat` timing (one launch at a time, the GPU idle before each)
   is a quick look and is not used here.
"""
import argparse
import csv
import datetime
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


TORCH_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
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

SDPA_BACKENDS = [
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


# --------------------------------------------------------------------------------------
# Timing: one function for every kernel, SDPA's backends and the steps alike.

# [sustained]
METHODS = ("back_to_back", "cuda_graph")
REPETITIONS = 5        # each figure is the median of this many repetitions
WARMUP_MS = 750.0      # calls before timing: the GPU reaches the clocks it holds under load
REPETITION_MS = 50.0   # one repetition's length: event resolution and host gaps do not count
MIN_CALLS, MAX_CALLS = 2, 200  # K, calls per repetition (and per graph)
MAX_WARMUP_CALLS = 5000


class CaptureError(RuntimeError):
    """A call that cannot be captured into a CUDA graph (it synchronises, or allocates or copies through the host)."""


def events_ms(enqueue):
    """Milliseconds between two CUDA events on the current stream around what enqueue() enqueues."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    enqueue()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop)


def time_sustained(call, capture=True):
    """Times call() (one call, enqueued on the current stream) at sustained clocks, both ways.

    Returns (K, {"back_to_back": ms per call, "cuda_graph": ms per call}): back_to_back is K
    calls between two events after ~WARMUP_MS of warm-up calls; cuda_graph is the same K calls
    captured once into a CUDA graph and replayed (once untimed first). Each is the median of
    REPETITIONS repetitions of elapsed / K. Raises CaptureError when the capture fails: the
    caller reports it, never timing another way instead. With capture=False only back_to_back
    is measured (for a call known not to be capturable, such as autograd's backward of a graph
    built outside the capture)."""
    def calls(n):
        def run():
            for _ in range(n):
                call()  # each output dropped at once: the memory in use stays one call's, whatever n
        return run

    first = events_ms(call)  # sizes the warm-up only: the GPU may be cold
    warmup = min(MAX_WARMUP_CALLS, max(1, math.ceil(WARMUP_MS / max(first, 1e-4))))
    per_call = events_ms(calls(warmup)) / warmup
    k = min(MAX_CALLS, max(MIN_CALLS, math.ceil(REPETITION_MS / max(per_call, 1e-4))))
    ms = {"back_to_back": float(np.median([events_ms(calls(k)) / k for _ in range(REPETITIONS)]))}
    if not capture:
        return k, ms

    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):  # captures on a side stream; what call() allocates comes from the graph's pool
            calls(k)()
    except Exception as e:  # noqa: BLE001 - whatever stopped the capture is reported, with its type
        try:
            torch.cuda.synchronize()
        except RuntimeError:
            pass  # the capture's own error is the one to report
        raise CaptureError(f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}") from e
    events_ms(graph.replay)  # the first replay: untimed
    ms["cuda_graph"] = float(np.median([events_ms(graph.replay) / k for _ in range(REPETITIONS)]))
    del graph
    return k, ms
# [sustained]


def short_error(e):
    """One line for a CSV note: what a backend or step said when it refused to run."""
    if isinstance(e, torch.OutOfMemoryError):
        return "out of memory"
    text = str(e).strip()
    if "No available kernel" in text or "not supported" in text.lower():
        return "unsupported"
    return (text.splitlines()[0] if text else type(e).__name__)[:100]


def import_step_ops(python_dir):
    """flash_steps and its PyTorch operators, from python_dir (the build's python/ folder); exits 2, saying why, if
    they cannot be imported."""
    sys.path.insert(0, os.path.abspath(python_dir))
    try:
        import flash_steps
        import flash_steps.pytorch as fsp
    except Exception as e:  # noqa: BLE001 - any failure to import is the same answer: which folder, and why
        print(f"check_pytorch.py: cannot import flash_steps.pytorch from {python_dir} ({type(e).__name__}: {e}); "
              f"build the target flash_steps_python, or pass --python-dir", file=sys.stderr)
        sys.exit(2)
    return flash_steps, fsp


def commit_of_checkout():
    """The short commit hash of this checkout (with '+dirty' when files differ), or 'unknown'."""
    repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    try:
        head = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def bench(step_ops, dtype, ns, head_dims, csv_path, tokens=None, backends=None):
    """Times every SDPA backend and every step operator in step_ops ({name: op}) by both methods; writes csv_path row
    by row. Returns the number of failures (a step operator that fails, gives a non-finite O or cannot be captured).
    tokens: B = tokens / N at each N (None: B = 4); backends: the SDPA backends' names to time (None: all); a step
    that is not compiled for a d gets a row saying so, not a failure."""
    t = TORCH_DTYPE[dtype]
    gpu = torch.cuda.get_device_name()
    date = datetime.date.today().isoformat()
    commit = commit_of_checkout()
    torch.backends.cuda.matmul.allow_tf32 = False  # the math backend in fp32 computes in fp32
    fields = ["gpu", "date", "commit", "dtype", "method", "kernel", "batch", "heads", "N", "d", "causal", "calls",
              "reps", "median_ms", "tflops", "max_abs_diff_vs_sdpa", "note"]
    os.makedirs(os.path.dirname(os.path.abspath(csv_path)), exist_ok=True)
    f = open(csv_path, "w", newline="")  # written row by row: a run cut short keeps what it measured
    w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")  # LF, as every CSV in docs/results
    w.writeheader()
    H = 16
    failures = 0
    print(f"\ntiming: {gpu}, {dtype}, B={f'{tokens}/N' if tokens else 4}, H={H}, commit {commit}; every kernel in this process, by both methods: "
          f"back_to_back ({WARMUP_MS / 1e3:.2f} s of warm-up, then K calls between two events) and cuda_graph "
          f"(the K calls captured in a CUDA graph, replayed); ms per call, median of {REPETITIONS}")
    print(f"{'d':>4} {'N':>6} {'mask':6} {'kernel':26} {'method':12} {'K':>4} {'ms/call':>9} {'TFLOP/s':>8} "
          f"{'max|dO|':>9}")
    for d in head_dims:
        for causal in (False, True):
            for n in ns:
                B = max(1, tokens // n) if tokens else 4
                gen = torch.Generator(device="cuda").manual_seed(2026)
                q, k, v = (torch.randn(B, H, n, d, device="cuda", generator=gen).to(t) for _ in range(3))
                reference = None  # SDPA's O on these inputs, from the first backend that runs
                rows = []
                for name, backend in SDPA_BACKENDS:
                    if backends and name.removeprefix("sdpa_") not in backends:
                        continue
                    if backend == SDPBackend.MATH and n > MATH_MAX_N:
                        rows.append(dict(kernel=name, note=f"skipped: S alone is {B * H * n * n * q.element_size() / 2**30:.0f} GiB"))
                        continue
                    def call():
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    try:
                        with sdpa_kernel(backend):  # entered once: its cost is no part of a call's
                            o = call()
                            torch.cuda.synchronize()
                            if reference is None:
                                reference = o
                            del o
                            calls, ms = time_sustained(call)
                        rows.append(dict(kernel=name, calls=calls, ms=ms))
                    except CaptureError as e:
                        rows.append(dict(kernel=name, note=f"cannot be captured in a CUDA graph: {e}"))
                    except (RuntimeError, torch.OutOfMemoryError) as e:
                        torch.cuda.synchronize()
                        torch.cuda.empty_cache()
                        rows.append(dict(kernel=name, note=short_error(e)))
                for name, op in step_ops.items():
                    def call(op=op):
                        return op(q, k, v, causal, None)
                    try:
                        o, _ = call()
                        torch.cuda.synchronize()
                    except Exception as e:  # noqa: BLE001 - a step that fails here is a failure, said in full
                        if "is not compiled in" in str(e) or "does not support head_dim" in str(e):  # said, not a failure
                            rows.append(dict(kernel=name, note=f"unsupported: {short_error(e)}"))
                            continue
                        print(f"check_pytorch.py: {name} failed at d={d} N={n} causal={causal}: "
                              f"{type(e).__name__}: {e}", file=sys.stderr)
                        failures += 1
                        rows.append(dict(kernel=name, note=f"failed: {short_error(e)}"))
                        continue
                    diff = (o.float() - reference.float()).abs().max().item() if reference is not None else None
                    del o
                    if diff is not None and not math.isfinite(diff):
                        print(f"check_pytorch.py: {name} gave a non-finite O at d={d} N={n} causal={causal}",
                              file=sys.stderr)
                        failures += 1
                    try:
                        calls, ms = time_sustained(call)
                        rows.append(dict(kernel=name, calls=calls, ms=ms, diff=diff))
                    except CaptureError as e:
                        print(f"check_pytorch.py: {name}'s torch operator cannot be captured in a CUDA graph at d={d} "
                              f"N={n}: {e}", file=sys.stderr)
                        failures += 1
                        rows.append(dict(kernel=name, diff=diff, note=f"cannot be captured in a CUDA graph: {e}"))
                del q, k, v, reference
                torch.cuda.empty_cache()
                for r in rows:
                    for method in METHODS:
                        ms = r.get("ms", {}).get(method)
                        row = dict(gpu=gpu, date=date, commit=commit, dtype=dtype, method=method, kernel=r["kernel"],
                                   batch=B, heads=H, N=n, d=d, causal=int(causal), calls=r.get("calls", ""),
                                   reps=REPETITIONS if ms else "", median_ms=f"{ms:.4f}" if ms else "",
                                   tflops=f"{flops(B, H, n, d, causal) / (ms * 1e-3) / 1e12:.4f}" if ms else "",
                                   max_abs_diff_vs_sdpa=f"{r['diff']:.3e}" if r.get("diff") is not None else "",
                                   note=r.get("note", ""))
                        w.writerow(row)
                        shown = (f"{row['calls']:>4} {ms:9.3f} {float(row['tflops']):8.1f} {row['max_abs_diff_vs_sdpa']:>9}"
                                 if ms else f"{'':>4} {'':>9} {'':>8}  {row['note']}")
                        print(f"{d:>4} {n:>6} {'causal' if causal else 'full':6} {r['kernel']:26} {method:12} {shown}")
                f.flush()
                sys.stdout.flush()
    f.close()
    print(f"wrote {csv_path}")
    return failures


def picked(name, steps):
    """Whether step `name` (stepNN_...) is in `steps` (numbers or names, comma-separated; None: every step)."""
    if not steps:
        return True
    for want in steps.split(","):
        if want == name or (want.isdigit() and name.startswith(f"step{int(want):02d}_")):
            return True
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bin_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--skip-bench", action="store_true", help="only the correctness check")
    ap.add_argument("--bench-n", default=None, help="sequence lengths to time (default 1024,4096,16384)")
    ap.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32",
                    help="the precision to check and time the steps in (the steps that compute in it)")
    ap.add_argument("--csv", default=None, help="the CSV to write (default OUTDIR/pytorch_compare_<dtype>.csv)")
    ap.add_argument("--skip-check", action="store_true", help="only the timing (each step's O is still compared "
                    "with SDPA's on the timed inputs)")
    ap.add_argument("--head-dims", default="64,128", help="head dimensions to time (default 64,128)")
    ap.add_argument("--steps", default=None, help="only these steps (numbers or names, comma-separated, e.g. 9,17)")
    ap.add_argument("--tokens", type=int, default=None, help="B = TOKENS / N at each N (default: B = 4)")
    ap.add_argument("--backends", default=None, help="only these SDPA backends (e.g. cudnn,flash; default: all)")
    ap.add_argument("--python-dir", default=None,
                    help="the folder holding the flash_steps package (default BUILD_BIN_DIR/../python)")
    a = ap.parse_args()
    if a.skip_bench and a.skip_check:
        ap.error("--skip-bench and --skip-check leave nothing to do")
    if not torch.cuda.is_available():
        print("check_pytorch.py needs a CUDA GPU and PyTorch built with CUDA", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 yardstick must be fp32
    steps = [s for s in gpu_steps(a.bin_dir) if picked(s, a.steps)]
    if not steps:
        print(f"no CUDA step programs in {a.bin_dir}" + (f" among --steps {a.steps}" if a.steps else ""),
              file=sys.stderr)
        return 2
    os.makedirs(a.out_dir, exist_ok=True)
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, steps: {' '.join(steps)}")
    takes, others = steps_computing_in(a.bin_dir, steps, a.dtype)
    for step, why in others.items():
        print(f"{step}: skipped ({why})")
    if not takes:
        print(f"no step program in {a.bin_dir} computes in {a.dtype}", file=sys.stderr)
        return 2
    print(f"steps in {a.dtype}: {' '.join(takes)}")
    failures = 0
    if not a.skip_check:
        failures = check(a.bin_dir, a.out_dir, takes) if a.dtype == "fp32" else check_half(a.bin_dir, a.out_dir, takes, a.dtype)
        print(f"correctness ({a.dtype}): {failures} mismatch(es)")
    if not a.skip_bench:
        _, fsp = import_step_ops(a.python_dir or os.path.join(a.bin_dir, "..", "python"))
        missing = [s for s in takes if s not in fsp.OPS]
        if missing:
            print(f"check_pytorch.py: the flash_steps module has no operator for {' '.join(missing)} (built from "
                  f"another tree?); its operators: {' '.join(fsp.OPS)}", file=sys.stderr)
            return 2
        csv_path = a.csv or os.path.join(a.out_dir, f"pytorch_compare_{a.dtype}.csv")
        failures += bench({s: fsp.OPS[s] for s in takes}, a.dtype, [int(n) for n in (a.bench_n or "1024,4096,16384").split(",")],
                          [int(d) for d in a.head_dims.split(",")], csv_path, a.tokens,
                          a.backends.split(",") if a.backends else None)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

