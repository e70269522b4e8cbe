#!/usr/bin/env python3
"""What one call costs from PyTorch: the last forward step's operator and attention_forward beside SDPA.

Usage: scripts/gpu/per_call.py [--python-dir build-gpu/python] [--csv PATH] [--step NAME]

A small problem's time is the host's: at B=1, H=1, N=128, d=64 the kernel runs for a few
microseconds and a call costs what Python, the dispatcher and the launch cost around it. Three
sections, in this one process, every kernel timed the same way:

1. launch_bound (B=1, H=1, N=128, d=64, not causal, the step's dtype): per_call is the host's
   wall clock over K calls made back to back, the stream waited for once at the end, divided by
   K (K = 2000; the median of 11 repetitions after 200 warm-up calls, taken in rounds: one
   repetition of every call a round, so that a slow spell of the host's, which moves these
   figures by tens of per cent, falls on all of them alike). Timed: SDPA as a user calls
   it (sdpa_default, no backend forced) and with each backend forced that accepts the shape
   (sdpa_flash, sdpa_efficient, sdpa_cudnn, sdpa_math); the step's torch operator
   (torch.ops.flash_steps.STEP: the dispatcher and custom_op, as torch.compile and autograd
   meet it); flash_steps.pytorch.scaled_dot_product_attention without a step (default_step's
   choice, memoised; an eager call with no gradient to record runs the step directly, without
   the operator: the path a user's eager call takes); STEP.attention_forward on the CUDA tensors (no
   scan, the default) and with check_finite=True (a scan and a wait). Each row's ratio_to_sdpa
   is its per_call over sdpa_default's, ratio_to_fastest_sdpa over the fastest SDPA row's.
   The cuda_graph rows (the same call captured K times in a CUDA graph and replayed: the GPU's
   time alone, check_pytorch.py's time_sustained) say how much of per_call the GPU needs.
2. host_phases (the same shape): where the operator's per_call goes. The module's own phases
   (flash_steps._native.host_timing: borrowing and checking q, k, v and the outputs, the step's
   launch, inside it the tensor maps and the shared-memory attribute), in microseconds per call,
   and the Python pieces timed alone, each over K calls (median of 5): the dispatcher and
   custom_op around the operator's body (the operator's per_call minus its body's called
   directly), the body, the allocation of O and L, to_dlpack of five tensors, the stream's handle.
3. graph_vs_eager (B*N = 16384, H=16, N = 1024 and 4096, d = 64 and 128, causal off and on): the
   operator back_to_back and replayed from a CUDA graph (check_pytorch.py's time_sustained: ~0.75 s
   of warm-up, K calls between two CUDA events, median of 5), and SDPA's FlashAttention-2 backend
   the same way; ratio_to_graph = cuda_graph's time over back_to_back's (1.0: the eager operator
   is as fast as its graph).

Prints the tables and the ratios and writes one CSV (LF line ends), by default
docs/results/current/per_call_GPU_DATE.csv, with columns gpu, date, commit, torch, section,
method, kernel, dtype, batch, heads, N, d, causal, calls, reps, median_us, ratio_to_sdpa,
ratio_to_fastest_sdpa, ratio_to_graph, note.
"""
import argparse
import contextlib
import csv
import datetime
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_pytorch as cp  # noqa: E402  (time_sustained, the SDPA backends, the commit, the import of flash_steps)

CALLS = 2000  # K: calls per repetition of the per_call timing
WARMUP = 200
REPETITIONS = 5
INTERLEAVED_REPETITIONS = 11  # launch_bound's rounds: one repetition of every call a round
LAUNCH_BOUND = dict(batch=1, heads=1, N=128, d=64, causal=False)
TOKENS = 16384  # B * N of the graph_vs_eager shapes
GRAPH_NS = (1024, 4096)
GRAPH_DS = (64, 128)
GRAPH_HEADS = 16
FIELDS = ["gpu", "date", "commit", "torch", "section", "method", "kernel", "dtype", "batch", "heads", "N", "d",
          "causal", "calls", "reps", "median_us", "ratio_to_sdpa", "ratio_to_fastest_sdpa", "ratio_to_graph", "note"]


def under(backend):
    """sdpa_kernel(backend), entered once around a timing (its cost is no part of a call's); nothing for None."""
    return sdpa_kernel(backend) if backend is not None else contextlib.nullcontext()


def sustained(table, where, name, call, backend):
    """check_pytorch.py's time_sustained of call() under backend: (K, {method: ms per call}), or None after a row
    that says why it could not be timed."""
    try:
        with under(backend):
            return cp.time_sustained(call)
    except (RuntimeError, cp.CaptureError) as e:
        table.row(**where, method="cuda_graph", kernel=name, note=cp.short_error(e))
        return None


def per_call_us(call, calls=CALLS):
    """Host wall clock per call over `calls` back-to-back calls, the stream waited for at the end (median of 5)."""
    for _ in range(WARMUP):
        call()
    torch.cuda.synchronize()
    return statistics.median(one_repetition_us(call, calls) for _ in range(REPETITIONS))


def one_repetition_us(call, calls=CALLS):
    """Host wall clock per call over `calls` back-to-back calls, the stream waited for at the end."""
    start = time.perf_counter()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def interleaved_per_call_us(calls_by_name, repetitions=INTERLEAVED_REPETITIONS):
    """per_call_us of every (call, backend) in calls_by_name, the repetitions taken in turns (one
    of each call, then the next round), so that a slow spell of the host's falls on every call
    alike instead of on whichever was being timed: {name: median us, or the RuntimeError}."""
    measured, times = {}, {}
    for name, (call, backend) in calls_by_name.items():
        try:
            with under(backend):
                for _ in range(WARMUP):
                    call()
            torch.cuda.synchronize()
            times[name] = []
        except RuntimeError as e:
            torch.cuda.synchronize()
            measured[name] = e
    for _ in range(repetitions):
        for name in times:
            call, backend = calls_by_name[name]
            with under(backend):
                times[name].append(one_repetition_us(call))
    measured.update({name: statistics.median(t) for name, t in times.items()})
    return measured


def host_only_us(call, calls=CALLS):
    """Host wall clock per call of host work that enqueues nothing (median of 5)."""
    for _ in range(WARMUP):
        call()
    times = []
    for _ in range(REPETITIONS):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


class Table:
    """The CSV, written row by row (a run cut short keeps what it measured), and the printed table."""

    def __init__(self, path, common):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.file = open(path, "w", newline="")
        self.writer = csv.DictWriter(self.file, fieldnames=FIELDS, lineterminator="\n")
        self.writer.writeheader()
        self.common = common
        self.path = path

    def row(self, **fields):
        row = {**self.common, **fields}
        self.writer.writerow({k: row.get(k, "") for k in FIELDS})
        self.file.flush()
        ratios = " ".join(f"{k}={row[k]}" for k in ("ratio_to_sdpa", "ratio_to_fastest_sdpa", "ratio_to_graph")
                          if row.get(k) not in (None, ""))
        shape = f"B{row.get('batch')} H{row.get('heads')} N{row.get('N')} d{row.get('d')}" + \
            (" causal" if row.get("causal") else "")
        value = f"{float(row['median_us']):10.2f} us" if row.get("median_us") not in (None, "") else f"{'':>13}"
        print(f"{row['section']:15} {row['method']:12} {row['kernel']:46} {shape:24} {value} {ratios} {row.get('note', '')}")
        sys.stdout.flush()

    def close(self):
        self.file.close()
        print(f"wrote {self.path}")


def make_qkv(batch, heads, n, d, dtype, seed=2026):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return tuple(torch.randn(batch, heads, n, d, device="cuda", generator=gen).to(dtype) for _ in range(3))


def launch_bound(table, flash_steps, fsp, step, dtype):
    shape = LAUNCH_BOUND
    q, k, v = make_qkv(shape["batch"], shape["heads"], shape["N"], shape["d"], dtype)
    causal = shape["causal"]
    where = dict(section="launch_bound", dtype=dtype_name(dtype), batch=shape["batch"], heads=shape["heads"],
                 N=shape["N"], d=shape["d"], causal=int(causal))
    op = getattr(torch.ops.flash_steps, step.name)
    calls = {}  # kernel -> (call, backend or None)
    calls["sdpa_default"] = (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), None)
    for name, backend in cp.SDPA_BACKENDS:
        calls[name] = (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), backend)
    calls[f"torch.ops.flash_steps.{step.name}"] = (lambda: op(q, k, v, causal, None), None)
    calls["flash_steps.pytorch.scaled_dot_product_attention"] = (
        lambda: fsp.scaled_dot_product_attention(q, k, v, is_causal=causal), None)
    calls[f"{step.short_name}.attention_forward"] = (lambda: step.attention_forward(q, k, v, causal=causal), None)
    calls[f"{step.short_name}.attention_forward(check_finite=True)"] = (
        lambda: step.attention_forward(q, k, v, causal=causal, check_finite=True), None)

    measured = interleaved_per_call_us(calls)
    for name, us in measured.items():
        if isinstance(us, RuntimeError):
            measured[name] = None
            table.row(**where, method="per_call", kernel=name, note=cp.short_error(us))
    sdpa = measured.get("sdpa_default")
    fastest = min(us for name, us in measured.items() if name.startswith("sdpa_") and us is not None)
    for name, us in measured.items():
        if us is None:
            continue
        table.row(**where, method="per_call", kernel=name, calls=CALLS, reps=INTERLEAVED_REPETITIONS, median_us=f"{us:.2f}",
                  ratio_to_sdpa=f"{us / sdpa:.3f}" if sdpa else "", ratio_to_fastest_sdpa=f"{us / fastest:.3f}")
    if sdpa:
        for name in (f"torch.ops.flash_steps.{step.name}", "flash_steps.pytorch.scaled_dot_product_attention",
                     f"{step.short_name}.attention_forward"):
            if measured.get(name):
                print(f"{name}: {measured[name] / sdpa:.2f} x SDPA's per-call cost (sdpa_default, "
                      f"{sdpa:.1f} us; target <= 1.25), {measured[name] / fastest:.2f} x the fastest SDPA backend's")
    # The GPU's own time per call, without the host: the same call replayed from a CUDA graph.
    for name in ("sdpa_flash", f"torch.ops.flash_steps.{step.name}"):
        timed = sustained(table, where, name, *calls[name])
        if timed:
            table.row(**where, method="cuda_graph", kernel=name, calls=timed[0], reps=cp.REPETITIONS,
                      median_us=f"{timed[1]['cuda_graph'] * 1e3:.2f}")
    return q, k, v


def host_phases(table, flash_steps, fsp, step, q, k, v):
    where = dict(section="host_phases", dtype=dtype_name(q.dtype), batch=q.shape[0], heads=q.shape[1],
                 N=q.shape[2], d=q.shape[3], causal=0)
    op = getattr(torch.ops.flash_steps, step.name)
    torch_calls = flash_steps._torch_calls()
    to_dlpack, raw_stream = torch_calls[1], torch_calls[2]
    o, lse = torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)
    device = q.get_device()
    nbytes = step.workspace_bytes(step.check_inputs(q, k, v), causal=False) if step.needs_workspace else 0
    workspace = q.new_empty(nbytes, dtype=torch.uint8) if nbytes else None  # allocated once, as O and L

    def body():  # the operator's body itself, which the eager path of attention() also runs
        return fsp._body(step, q, k, v, False, None)

    def launch_only():  # the module's call alone, on outputs allocated once
        step._native.launch(to_dlpack(q), to_dlpack(k), to_dlpack(v), to_dlpack(o), to_dlpack(lse),
                            to_dlpack(workspace) if workspace is not None else None,
                            causal=False, scale=None, stream=raw_stream(device))

    op_us = per_call_us(lambda: op(q, k, v, False, None))
    body_us = per_call_us(body)
    pieces = [
        ("python", "operator (custom_op, dispatcher, body)", op_us),
        ("python", "dispatcher and custom_op around the body", op_us - body_us),
        ("python", "body: flash_steps.pytorch._body", body_us),
        ("python", "native launch with to_dlpack, outputs given", per_call_us(launch_only)),
        ("python", "allocate O and L (empty_like, new_empty)",
         host_only_us(lambda: (torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)))),
        ("python", "to_dlpack of five tensors", host_only_us(lambda: [to_dlpack(t) for t in (q, k, v, o, lse)])),
        ("python", "current stream's handle", host_only_us(lambda: raw_stream(device))),
    ]
    for method, name, us in pieces:
        table.row(**where, method=method, kernel=name, calls=CALLS, reps=REPETITIONS, median_us=f"{us:.2f}")
    # The module's phases, timed inside it over K operator calls.
    for _ in range(WARMUP):
        op(q, k, v, False, None)
    torch.cuda.synchronize()
    flash_steps._native.host_times()  # the totals start from zero
    flash_steps._native.host_timing(True)
    try:
        for _ in range(CALLS):
            op(q, k, v, False, None)
        torch.cuda.synchronize()
    finally:
        flash_steps._native.host_timing(False)
    for phase, (count, total_us) in sorted(flash_steps._native.host_times().items()):
        table.row(**where, method="native", kernel=phase, calls=count, reps=1, median_us=f"{total_us / CALLS:.3f}",
                  note=f"{count / CALLS:g} runs a call")


def graph_vs_eager(table, step, dtype):
    op = getattr(torch.ops.flash_steps, step.name)
    ratios = []
    for d in GRAPH_DS:
        if step.head_dims and d not in step.head_dims:
            continue
        for n in GRAPH_NS:
            batch = TOKENS // n
            q, k, v = make_qkv(batch, GRAPH_HEADS, n, d, dtype)
            for causal in (False, True):
                where = dict(section="graph_vs_eager", dtype=dtype_name(dtype), batch=batch, heads=GRAPH_HEADS, N=n,
                             d=d, causal=int(causal))
                for name, call, backend in (
                        (f"torch.ops.flash_steps.{step.name}", lambda: op(q, k, v, causal, None), None),
                        ("sdpa_flash", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                         SDPBackend.FLASH_ATTENTION)):
                    timed = sustained(table, where, name, call, backend)
                    if not timed:
                        continue
                    k_calls, ms = timed
                    ratio = ms["cuda_graph"] / ms["back_to_back"]
                    if backend is None:
                        ratios.append(ratio)
                    for method in cp.METHODS:
                        table.row(**where, method=method, kernel=name, calls=k_calls, reps=cp.REPETITIONS,
                                  median_us=f"{ms[method] * 1e3:.2f}",
                                  ratio_to_graph=f"{ratio:.3f}" if method == "back_to_back" else "")
            del q, k, v
            torch.cuda.empty_cache()
    return ratios


def dtype_name(dtype):
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python-dir", default="build-gpu/python", help="the build's python/ folder (flash_steps)")
    ap.add_argument("--csv", default=None, help="the CSV to write (default docs/results/current/per_call_GPU_DATE.csv)")
    ap.add_argument("--step", default=None, help="the step to time (default: the last forward GPU step built)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("per_call.py: PyTorch sees no CUDA GPU", file=sys.stderr)
        return 2
    flash_steps, fsp = cp.import_step_ops(args.python_dir)
    step = flash_steps.step(args.step or fsp.DEFAULT_STEP)
    dtype = getattr(torch, step.dtypes[0])
    gpu = torch.cuda.get_device_name()
    date = datetime.date.today().isoformat()
    csv_path = args.csv or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "results",
                                        "current", f"per_call_{gpu.replace('NVIDIA ', '').replace(' ', '_')}_{date}.csv")
    table = Table(csv_path, dict(gpu=gpu, date=date, commit=cp.commit_of_checkout(), torch=torch.__version__))
    print(f"per_call.py: {gpu}, torch {torch.__version__}, {step.name} in {dtype_name(dtype)}")
    q, k, v = launch_bound(table, flash_steps, fsp, step, dtype)
    host_phases(table, flash_steps, fsp, step, q, k, v)
    ratios = graph_vs_eager(table, step, dtype)
    table.close()
    if ratios:
        print(f"{step.name}'s operator, back_to_back against its own CUDA graph at N >= 1024: speed ratio "
              f"{min(ratios):.3f} (worst) to {max(ratios):.3f} (target >= 0.95)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
