#!/usr/bin/env python3
"""Times the backward steps' torch operators beside SDPA's backward in their precision, in one process.

Usage: scripts/gpu/backward_compare.py CSV [--dtype fp32|bf16|fp16] [--python-dir build-gpu/python]
           [--seq 1024,4096] [--long] [--head-dims 64,128] [--steps 30]

For each GPU step with a backward pass that takes tensors of --dtype (flash_steps.pytorch.BACKWARD_OPS and
Step.dtypes: steps 26 to 29 for fp32, the default; steps 30 to 33 for bf16 and fp16) and SDPA's backends for that dtype:
  fp32        EFFICIENT_ATTENTION (xFormers' memory-efficient kernels, the one fused SDPA backend that takes
              fp32), TF32 off;
  bf16, fp16  FLASH_ATTENTION (FlashAttention-2) and CUDNN_ATTENTION (cuDNN's fused attention);
on the same tensors of the dtype (q, k, v and dO drawn by torch.randn in it), B = 4, H = 16, N_q = N_kv in
--seq (--long adds 16384), d in --head-dims, causal off and on. Three calls of each, all timed by
check_pytorch.py's time_sustained(), in this one process:

  forward   the forward: the step's operator flash_steps::<step>; SDPA's
            aten::_scaled_dot_product_{efficient,flash,cudnn}_attention (O and the logsumexp,
            as when training).
  backward  the backward alone, on the outputs its own forward saved and one dO: the
            step's flash_steps::<step>_backward (dQ by atomics); SDPA's
            aten::_scaled_dot_product_{efficient,flash,cudnn}_attention_backward, the operator
            SDPA's autograd formula calls (the arguments of FLASH's and CUDNN's are read from
            the installed torch's schema: they change between versions). Each allocates its
            dQ, dK, dV, as in training.
  forward_backward
            the forward call, then the backward call: one training step's attention
            (the backward on the outputs saved before, the same work as on the new ones).
  autograd  torch.autograd.grad of one forward's O (kept with retain_graph) for the same
            dO, each SDPA backend forced by sdpa_kernel: the backward as a user's
            loss.backward() reaches it, autograd's own work included.

Methods: back_to_back (K calls between two CUDA events after ~0.75 s of warm-up) and
cuda_graph (the same K calls captured once in a CUDA graph and replayed); median of 5
repetitions. The step and SDPA's backends of one call are timed by the same methods: when
any of them cannot be captured, all are given back_to_back only and the note says which
and why. autograd is back_to_back only: autograd's backward of a graph recorded outside a
capture runs on the forward's stream, which the capture does not own. An SDPA backend that
fails (it refuses the shape, or this torch's operator takes other arguments) is recorded as
a note in its rows, and the others are still timed.

TFLOP/s: 4*B*H*N_q*N_kv*d for the forward, 2.5 x that for backward and autograd, 3.5 x
for forward_backward, halved when causal (common/'s counts). Before timing, the step's O
and gradients are compared with SDPA's first backend's (EFFICIENT for fp32, FLASH for
bf16 and fp16; max_abs_diff_vs_sdpa: a sanity check); a non-finite O, L or gradient of
the step is a failure.
Writes CSV row by row (columns gpu, date, commit, dtype, method, kernel, batch, heads, N,
d, causal, calls, reps, median_ms, tflops, max_abs_diff_vs_sdpa, note; dtype fp32, bf16 or
fp16; kernel is "<name>:<call>", e.g. "step29_backward_deterministic:backward",
"sdpa_efficient:backward", "sdpa_flash:backward", "sdpa_cudnn:backward"): the file
scripts/docs/render-pages reads for the backward table's "operator" and "SDPA" columns
(docs/results/current/backward_compare_<GPU>_<date>.csv; a 16-bit run's, e.g.
backward_compare_bf16_<GPU>_<date>.csv: the pages read the rows of a step's own dtype).
Exit status: 0, 1 when a step failed or gave a non-finite result, 2 when nothing could run
(no GPU, no module).
"""
import argparse
import csv
import datetime
import os
import sys

B, H = 4, 16
LONG_N = 16384
# SDPA's backends each dtype is set beside: (kernel in the CSV, the SDPBackend forced, the aten operator its autograd
# formula calls). fp32: the one fused backend that takes it; 16-bit: the two a 16-bit training run picks from.
SDPA_16BIT = [("sdpa_flash", "FLASH_ATTENTION", "_scaled_dot_product_flash_attention"),
              ("sdpa_cudnn", "CUDNN_ATTENTION", "_scaled_dot_product_cudnn_attention")]
BASELINES = {"fp32": [("sdpa_efficient", "EFFICIENT_ATTENTION", "_scaled_dot_product_efficient_attention")],
             "bf16": SDPA_16BIT, "fp16": SDPA_16BIT}
# The dtypes as Step.dtypes spells them.
STEP_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
CALLS = ("forward", "backward", "forward_backward", "autograd")
FIELDS = ["gpu", "date", "commit", "dtype", "method", "kernel", "batch", "heads", "N", "d", "causal", "calls", "reps",
          "median_ms", "tflops", "max_abs_diff_vs_sdpa", "note"]
NOT_CAPTURED = ("back_to_back only: autograd's backward of a graph recorded outside a capture runs on the "
                "forward's stream and not on the capture's")


def flops(call, n, d, causal):
    """FLOPs of one call at B, H, N_q = N_kv = n: check_pytorch.py's count of the forward, x 2.5 for a backward,
    x 3.5 for both."""
    from check_pytorch import flops as forward_flops  # imports torch: only called once timing has begun
    return forward_flops(B, H, n, d, causal) * {"forward": 1.0, "forward_backward": 3.5}.get(call, 2.5)


def csv_rows(common, kernel, call, n, d, causal, timed, diff=None, note=""):
    """The CSV rows of one kernel's call: one per method timed (timed = (K, {method: ms per call})), or one row
    with only the note when nothing was timed (timed None). common holds gpu, date, commit, dtype and reps."""
    calls, ms_by_method = timed if timed else ("", {})
    shape = dict(common, kernel=f"{kernel}:{call}", batch=B, heads=H, N=n, d=d, causal=int(causal),
                 max_abs_diff_vs_sdpa="" if diff is None else f"{diff:.3e}",
                 note=note.replace(",", ";"))  # no quoted fields: the docs' awk tools split on commas
    if not ms_by_method:
        return [dict(shape, method="", calls="", reps="", median_ms="", tflops="")]
    return [dict(shape, method=method, calls=calls, median_ms=f"{ms:.4f}",
                 tflops=f"{flops(call, n, d, causal) / (ms * 1e-3) / 1e12:.4f}")
            for method, ms in ms_by_method.items()]


def parse_lengths(text, flag):
    """'1024,4096' -> [1024, 4096]; argparse's error for anything else."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{flag} takes positive integers, comma-separated; got '{text}'")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{flag} takes positive integers, comma-separated; got '{text}'")
    return values


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="the CSV to write (replaced if it exists)")
    ap.add_argument("--dtype", choices=list(BASELINES), default="fp32",
                    help="the precision: the steps that take it, beside SDPA's backends for it (default fp32)")
    ap.add_argument("--python-dir", default=os.path.join("build-gpu", "python"),
                    help="the folder holding the flash_steps package (default build-gpu/python)")
    ap.add_argument("--seq", default=[1024, 4096], type=lambda t: parse_lengths(t, "--seq"),
                    help="sequence lengths N_q = N_kv (default 1024,4096)")
    ap.add_argument("--long", action="store_true", help=f"also N = {LONG_N} (a few more minutes)")
    ap.add_argument("--head-dims", default=[64, 128], type=lambda t: parse_lengths(t, "--head-dims"),
                    help="head dimensions d (default 64,128)")
    ap.add_argument("--steps", default=None, help="only these backward steps (numbers or names, comma-separated)")
    args = ap.parse_args(argv)
    if args.long and LONG_N not in args.seq:
        args.seq.append(LONG_N)
    return args


def time_together(time_sustained, CaptureError, calls, capture):
    """Times one call of the step and of each SDPA backend, calls = [(who, call or None: that backend could not
    run)], by the same methods; returns [(K, {method: ms}) or None, one for each] and a note. With capture, every one
    gets cuda_graph too unless any cannot be captured; then all are timed back_to_back only, and the note says which
    and why: a ratio between any two of them is then a ratio of the same method."""
    if not capture:
        return [call and time_sustained(call, capture=False) for _, call in calls], NOT_CAPTURED
    results, failed = [], []
    for who, call in calls:
        if call is None:
            results.append(None)
            continue
        try:
            results.append(time_sustained(call))
        except CaptureError as e:
            failed.append(f"{who}'s call cannot be captured in a CUDA graph ({e})")
            results.append(time_sustained(call, capture=False))
    if not failed:
        return results, ""
    return ([r and (r[0], {"back_to_back": r[1]["back_to_back"]}) for r in results],
            "back_to_back only: " + "; ".join(failed))


def by_schema(op, **values):
    """op's positional arguments in the order of its schema, each taken by name from values (one values lacks: its
    default). SDPA's private operators change their arguments between torch versions (cuDNN's gained attn_bias and
    compute_log_sumexp), so the installed torch's schema says what to pass, and what it asks that values lacks is
    an error that names it."""
    schema = op.default._schema
    args = []
    for a in schema.arguments:
        if a.kwarg_only:
            break  # scale=None, the default 1/sqrt(d)
        if a.name in values:
            args.append(values[a.name])
        elif a.has_default_value():
            args.append(a.default_value)
        else:
            raise TypeError(f"{schema.name} asks for '{a.name}' ({a.type}), which backward_compare.py does not pass")
    return args


def sdpa_calls(backend, aten_op, q, k, v, d_o, leaves, causal):
    """SDPA's backend `backend`: the operators its autograd formula pairs (aten::<aten_op>, its forward with the
    logsumexp, as when training, and aten::<aten_op>_backward: dQ, dK, dV, no bias, no dropout), and the same
    through autograd. Returns ({call: a function making it}, its O, its (dQ, dK, dV)); raises whatever SDPA says."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    forward, backward = getattr(torch.ops.aten, aten_op), getattr(torch.ops.aten, aten_op + "_backward")
    if backend == "EFFICIENT_ATTENTION":  # fp32: the operators' own order (O, L, seed, offset; then a grad mask)
        sdpa_o, sdpa_lse, seed, offset = forward(q, k, v, None, True, 0.0, causal)
        wanted = [True, True, True, False]
        calls = {"forward": lambda: forward(q, k, v, None, True, 0.0, causal),
                 "backward": lambda: backward(d_o, q, k, v, None, sdpa_o, sdpa_lse, seed, offset, 0.0, wanted,
                                              causal)}
    else:  # FLASH and CUDNN: the same nine outputs, fed back by name (attn_bias None: no bias)
        forward_args = by_schema(forward, query=q, key=k, value=v, attn_bias=None, compute_log_sumexp=True,
                                 dropout_p=0.0, is_causal=causal, return_debug_mask=False)
        sdpa_o, sdpa_lse, cum_seq_q, cum_seq_k, max_q, max_k, seed, offset, _ = forward(*forward_args)
        backward_args = by_schema(backward, grad_out=d_o, query=q, key=k, value=v, out=sdpa_o, logsumexp=sdpa_lse,
                                  cum_seq_q=cum_seq_q, cum_seq_k=cum_seq_k, max_q=max_q, max_k=max_k, dropout_p=0.0,
                                  is_causal=causal, philox_seed=seed, philox_offset=offset, attn_bias=None)
        calls = {"forward": lambda: forward(*forward_args), "backward": lambda: backward(*backward_args)}
    calls["forward_backward"] = lambda: (calls["forward"](), calls["backward"]())
    sdpa_grads = calls["backward"]()[:3]
    with torch.enable_grad(), sdpa_kernel(getattr(SDPBackend, backend)):
        graph_sdpa = F.scaled_dot_product_attention(*leaves, is_causal=causal)
    calls["autograd"] = lambda: torch.autograd.grad(graph_sdpa, leaves, d_o, retain_graph=True)
    return calls, sdpa_o, sdpa_grads


def measure(fsp, name, dtype, n, d, causal, common, log):
    """The rows of one problem: the step `name` and SDPA's backends for dtype, each call by each method. Returns
    (rows, failures)."""
    import torch
    from check_pytorch import TORCH_DTYPE, CaptureError, short_error, time_sustained

    gen = torch.Generator(device="cuda").manual_seed(2026)
    q, k, v, d_o = (torch.randn(B, H, n, d, device="cuda", generator=gen, dtype=TORCH_DTYPE[dtype]) for _ in range(4))
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]  # autograd's inputs: the same values
    step_op, step_backward = fsp.OPS[name], fsp.BACKWARD_OPS[name]
    try:
        o, lse = step_op(q, k, v, causal, None)
        grads = step_backward(q, k, v, o, lse, d_o, causal, None, False)
        with torch.enable_grad():
            graph_o = step_op(*leaves, causal, None)[0]
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - a step that fails is a failure, said in full
        log(f"backward_compare.py: {name} failed at N={n} d={d} causal={causal}: {type(e).__name__}: {e}")
        return [r for call in CALLS for r in csv_rows(common, name, call, n, d, causal, None,
                                                      note=f"failed: {short_error(e)}")], 1
    failures = 0
    if not all(torch.isfinite(t).all().item() for t in (o, lse, *grads)):  # whatever SDPA does below
        log(f"backward_compare.py: {name} gave a non-finite O, L or gradient at N={n} d={d} causal={causal}")
        failures += 1
    mine = {"forward": lambda: step_op(q, k, v, causal, None),
            "backward": lambda: step_backward(q, k, v, o, lse, d_o, causal, None, False),
            "autograd": lambda: torch.autograd.grad(graph_o, leaves, d_o, retain_graph=True)}
    mine["forward_backward"] = lambda: (mine["forward"](), mine["backward"]())

    # SDPA's backends for the dtype; the step's O and gradients are compared with the first's, the difference taken
    # in fp32 (exact for 16-bit values; .float() of an fp32 tensor is the tensor itself).
    baselines = BASELINES[dtype]
    theirs, errors, diffs = {}, {}, {}
    for kernel, backend, aten_op in baselines:
        try:
            theirs[kernel], sdpa_o, sdpa_grads = sdpa_calls(backend, aten_op, q, k, v, d_o, leaves, causal)
            torch.cuda.synchronize()
            if kernel == baselines[0][0]:
                diffs["forward"] = (o.float() - sdpa_o.float()).abs().max().item()
                diffs["backward"] = diffs["forward_backward"] = diffs["autograd"] = max((a.float() - b.float()).abs().max().item()
                                                            for a, b in zip(grads, sdpa_grads))
            del sdpa_o, sdpa_grads
        except Exception as e:  # noqa: BLE001 - SDPA refusing is recorded, and the step is still timed
            torch.cuda.synchronize()
            errors[kernel] = f"SDPA {backend} failed: {short_error(e)}"
            log(f"backward_compare.py: N={n} d={d} causal={causal}: {errors[kernel]}")
            theirs.pop(kernel, None)  # a call half set up is not timed
    del grads
    # Whom a capture failure's note names: fp32's one backend is plainly "SDPA", as its notes have always said.
    who = {kernel: "SDPA" if len(baselines) == 1 else f"SDPA {backend}" for kernel, backend, _ in baselines}
    rows = []
    for call in CALLS:
        timed, note = time_together(time_sustained, CaptureError,
                                    [("the step", mine[call])]
                                    + [(who[kernel], theirs.get(kernel, {}).get(call)) for kernel, _, _ in baselines],
                                    capture=call != "autograd")
        rows += csv_rows(common, name, call, n, d, causal, timed[0], diffs.get(call),
                         "; ".join(x for x in (note, *errors.values()) if x))
        for (kernel, _, _), timed_theirs in zip(baselines, timed[1:]):
            rows += csv_rows(common, kernel, call, n, d, causal, timed_theirs, None,
                             "; ".join(x for x in (note, errors.get(kernel)) if x))
    return rows, failures


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print(f"backward_compare.py needs PyTorch ({e})", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("backward_compare.py needs a CUDA GPU and PyTorch built with CUDA", file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from check_pytorch import REPETITIONS, commit_of_checkout, picked  # one timing module for every comparison
    sys.path.insert(0, os.path.abspath(args.python_dir))
    try:
        import flash_steps.pytorch as fsp
    except Exception as e:  # noqa: BLE001 - any failure to import is the same answer: which folder, and why
        print(f"backward_compare.py: cannot import flash_steps.pytorch from {args.python_dir} "
              f"({type(e).__name__}: {e}); build the target flash_steps_python, or pass --python-dir", file=sys.stderr)
        return 2
    # The steps that take the dtype: fp32 steps 26 to 29 beside EFFICIENT, 16-bit steps 30 to 33 beside FLASH and CUDNN.
    steps = [s for s in fsp.BACKWARD_OPS
             if picked(s, args.steps) and STEP_DTYPES[args.dtype] in fsp.flash_steps.step(s).dtypes]
    if not steps:
        print(f"backward_compare.py: no backward step's operator takes {args.dtype} in this build"
              f"{' among --steps ' + args.steps if args.steps else ''}"
              f" (backward operators: {' '.join(fsp.BACKWARD_OPS) or 'none'})", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    common = dict(gpu=torch.cuda.get_device_name(), date=datetime.date.today().isoformat(),
                  commit=commit_of_checkout(), dtype=args.dtype, reps=REPETITIONS)
    backends = " and ".join(backend for _, backend, _ in BASELINES[args.dtype])
    print(f"{common['gpu']}, torch {torch.__version__}, commit {common['commit']}: {' '.join(steps)} beside SDPA's "
          f"{backends}, {args.dtype}{' (TF32 off)' if args.dtype == 'fp32' else ''}, B={B}, H={H}; ms per call, "
          f"median of 5")
    print(f"{'kernel':34} {'method':12} {'N':>6} {'d':>4} {'mask':6} {'ms':>9} {'TFLOP/s':>8} {'max|diff|':>9}  note")
    os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
    failures = 0
    with open(args.csv, "w", newline="", encoding="utf-8") as f:  # row by row: a run cut short keeps what it measured
        writer = csv.DictWriter(f, fieldnames=FIELDS, lineterminator="\n")
        writer.writeheader()
        for name in steps:
            for n in args.seq:
                for d in args.head_dims:
                    for causal in (False, True):
                        rows, failed = measure(fsp, name, args.dtype, n, d, causal, common,
                                               lambda m: print(m, file=sys.stderr))
                        failures += failed
                        writer.writerows(rows)
                        f.flush()
                        for r in rows:
                            print(f"{r['kernel']:34} {r['method']:12} {n:>6} {d:>4} {'causal' if causal else 'full':6} "
                                  f"{r['median_ms']:>9} {r['tflops']:>8} {r['max_abs_diff_vs_sdpa']:>9}  {r['note']}")
                        torch.cuda.empty_cache()
    print(f"wrote {args.csv}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
