#!/usr/bin/env python3
"""Times SDPA's EFFICIENT_ATTENTION forward and backward in fp32, the baseline of the fp32 backward step.

Usage: scripts/gpu/sdpa_backward.py CSV [--seq 1024,4096] [--head-dims 64,128]

B = 4, H = 16, N_q = N_kv in --seq, d in --head-dims, causal off and on, float32 tensors
(TF32 off), the shapes and the timing of `gpu_bench --sections backward`: the forward by
check_pytorch.py's time_sustained() (back_to_back: K calls between two CUDA events after
~0.75 s of warm-up; cuda_graph: the same K calls captured into a CUDA graph and replayed;
median of 5). The backward alone is torch.autograd.grad of one forward's output, kept
with retain_graph, for a random dO, timed back_to_back only, the same way: autograd's
backward of a graph built outside a capture cannot be captured (the attempt fails and
leaves the CUDA context unusable), so the backward has no cuda_graph row. Appends rows to CSV in gpu_bench's columns (kernel
"sdpa_efficient:forward" and "sdpa_efficient:backward"; backward FLOPs = 2.5 x forward's),
so that scripts/docs/render-pages sets them beside the step's rows of the same GPU run.
A call that cannot be captured is recorded without a cuda_graph row, never timed another way.
"""
import argparse
import csv
import datetime
import os
import sys


import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_pytorch import REPETITIONS, CaptureError, time_sustained  # noqa: E402  (one timing function)

COLUMNS = ["gpu", "date", "section", "method", "kernel", "dtype", "batch", "heads", "seq_q", "seq_kv", "head_dim",
           "causal", "calls", "reps", "median_ms", "tflops", "speedup_vs_cublas", "max_abs_diff_vs_cublas", "threads",
           "registers", "local_bytes", "smem_bytes", "blocks_per_sm", "B_r", "B_c"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv")
    parser.add_argument("--seq", default="1024,4096")
    parser.add_argument("--head-dims", default="64,128")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gpu, date = torch.cuda.get_device_name(0), datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(2026)
    for n in [int(x) for x in args.seq.split(",")]:
        for d in [int(x) for x in args.head_dims.split(",")]:
            for causal in (False, True):
                q, k, v = (torch.rand(4, 16, n, d, device="cuda", generator=gen).mul_(2).sub_(1).requires_grad_()
                           for _ in range(3))
                d_o = torch.rand(4, 16, n, d, device="cuda", generator=gen).mul_(2).sub_(1)
                flops = 4.0 * 4 * 16 * n * n * d / (2 if causal else 1)
                with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                    def forward():
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    out = forward()

                    def backward():
                        torch.autograd.grad(out, (q, k, v), d_o, retain_graph=True)
                    for what, call, f in (("forward", lambda: forward(), flops), ("backward", backward, 2.5 * flops)):
                        try:
                            calls, ms = time_sustained(call, capture=what == "forward")
                        except CaptureError as e:
                            print(f"sdpa_backward: {what} N={n} d={d} causal={causal}: not capturable ({e})",
                                  file=sys.stderr)
                            continue
                        for method, t in ms.items():
                            rows.append({"gpu": gpu, "date": date, "section": "backward", "method": method,
                                         "kernel": f"sdpa_efficient:{what}", "dtype": "fp32", "batch": 4,
                                         "heads": 16, "seq_q": n, "seq_kv": n, "head_dim": d, "causal": int(causal),
                                         "calls": calls, "reps": REPETITIONS, "median_ms": t,
                                         "tflops": f / (t * 1e-3) / 1e12})
                            print(f"sdpa_efficient:{what:9s} {method:12s} N={n:5d} d={d:3d} "
                                  f"{'causal' if causal else '':6s} {t:9.3f} ms {f / (t * 1e-3) / 1e12:7.2f} TFLOP/s")
                del q, k, v, d_o, out
    exists = os.path.exists(args.csv)
    with open(args.csv, "a", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, restval="", lineterminator="\n")
        if not exists:
            writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
