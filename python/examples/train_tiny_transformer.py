#!/usr/bin/env python3
"""A model trained through a step's forward and backward: a tiny decoder-only transformer
learns the repository's own Markdown (next byte prediction), once with PyTorch's SDPA as
its attention and once with a step, from the same random initialisation on the same
batches; the two loss curves are compared.

    PYTHONPATH=build/python python3 python/examples/train_tiny_transformer.py [--dtype bf16] [--heads 2] [--step N] [--csv FILE]

The model: 2 layers, d_model 128, 4 heads of d = 32 (--heads 2: 2 heads of d = 64), causal, byte vocabulary (256), 128
tokens a sequence, batches of 32, AdamW, random initialisation from --seed; nothing is
downloaded. The text is every *.md file of the repository, concatenated in sorted order
(the same for both runs).

--dtype fp32 (the default) computes all of it in float32 (TF32 off). --dtype bf16 is mixed
precision as PyTorch trains in bf16: the weights and AdamW stay float32, and the forward and
the loss run under torch.autocast, so the Linear layers compute in bf16 and q, k, v reach
the attention as the qkv layer's bf16 output (the layer norms, the residual stream and the
loss stay float32). (fp16 would need its loss scaled as well, GradScaler: not offered until
a run of it has been checked.) Without --step, the last built GPU step with a backward pass
that takes that dtype and head dimension on this GPU: step 29 for fp32, step 32 for bf16, and
step 33 (Hopper, d = 64 to 128) for bf16 with --heads 2 on an H100 or H200.

The verdict, printed and returned as the exit status: the relative difference of the mean
loss over the last 50 steps of the two runs is at most 2% (--tolerance), and each run's
loss fell by at least a factor 1.8 (--min-drop, the mean of the first 10 steps over the
mean of the last 50). The runs differ only in the attention: SDPA's efficient backend in
fp32, its flash backend (FlashAttention-2) in 16 bits (or --sdpa-backend) against
flash_steps.pytorch.attention with the step, whose dQ is summed by atomics, so the curves
are close but not identical. Exits 0 if they agree, 1 if not, 2 when the step cannot train
(no backward pass in that dtype, or no GPU step built).
"""
import argparse
import contextlib
import csv
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[2]

#: --dtype: the dtypes' names as torch and Step.dtypes spell them.
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}

#: The model's width: its heads split it, --heads 4 into d = 32, --heads 2 into d = 64.
D_MODEL = 128

#: The model's precision, as the first printed line says it, by --dtype.
PRECISION = {"fp32": "all in float32 (TF32 off)",
             "bf16": "bfloat16 under autocast, float32 weights and AdamW"}

#: --sdpa-backend's default: the fastest of SDPA's backends that computes in the dtype
#: (FlashAttention-2 takes only 16-bit inputs; the efficient one takes float32 too).
DEFAULT_SDPA_BACKEND = {"fp32": "efficient", "bf16": "flash"}


def corpus():
    """The repository's Markdown as a uint8 tensor of bytes."""
    files = sorted(p for p in REPO.rglob("*.md") if not any(part.startswith(("build", ".")) for part in
                                                             p.relative_to(REPO).parts))
    data = b"\n".join(p.read_bytes() for p in files)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8), len(files)


class Block(nn.Module):
    """Pre-norm attention and MLP, each with a residual."""

    def __init__(self, d_model, heads, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        b, n, c = x.shape
        # [B, N, 3, H, d] -> three [B, H, N, d] views (the operator copies them to contiguous)
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        o = self.attention(q, k, v)  # [B, H, N, d]
        x = x + self.proj(o.transpose(1, 2).reshape(b, n, c))
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Module):
    def __init__(self, attention, vocab=256, seq=128, d_model=D_MODEL, heads=4, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.position = nn.Parameter(torch.randn(seq, d_model) * 0.02)
        self.blocks = nn.ModuleList(Block(d_model, heads, attention) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def sdpa_attention(backend):
    from torch.nn.attention import sdpa_kernel

    def attention(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return attention


def step_attention(step):
    import flash_steps.pytorch as fsp

    def attention(q, k, v):
        return fsp.attention(q, k, v, True, step=step)[0]
    return attention


def train(attention, data, args):
    """The loss of every step of one training run (the same seed: same weights, same batches)."""
    torch.manual_seed(args.seed)
    model = TinyTransformer(attention, seq=args.seq, heads=args.heads).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    # 16 bits: the forward and the loss under autocast over the float32 model (fp32: no autocast).
    autocast = (contextlib.nullcontext() if args.dtype == "fp32"
                else torch.autocast("cuda", dtype=getattr(torch, DTYPES[args.dtype])))
    warmup = 20
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: min(1.0, (i + 1) / warmup))
    batches = torch.Generator().manual_seed(args.seed)
    data = data.cuda()
    losses = []
    for _ in range(args.steps):
        starts = torch.randint(0, len(data) - args.seq - 1, (args.batch,), generator=batches).cuda()
        window = data[starts[:, None] + torch.arange(args.seq + 1, device="cuda")].long()
        with autocast:
            logits = model(window[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), window[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    return losses


def verdict(sdpa, step, tolerance, min_drop):
    """(passed, lines): the final means' relative difference and both runs' drop."""
    tail = min(50, len(sdpa))
    final_sdpa, final_step = sum(sdpa[-tail:]) / tail, sum(step[-tail:]) / tail
    first_sdpa, first_step = sum(sdpa[:10]) / 10, sum(step[:10]) / 10
    relative = abs(final_step - final_sdpa) / final_sdpa
    drops = first_sdpa / final_sdpa, first_step / final_step
    ok = relative <= tolerance and min(drops) >= min_drop and all(map(math.isfinite, sdpa + step))
    return ok, [
        f"mean loss of the last {tail} steps: SDPA {final_sdpa:.4f}, step {final_step:.4f}: relative difference "
        f"{relative:.2%} (allowed {tolerance:.0%})",
        f"loss fell by a factor SDPA {drops[0]:.2f}, step {drops[1]:.2f} (first 10 steps over last {tail}; "
        f"at least {min_drop})",
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", choices=list(DTYPES), default="fp32",
                        help="the precision: fp32, or bf16 under autocast (float32 weights)")
    parser.add_argument("--step", help="a GPU step with a backward pass in the dtype (default: the last built)")
    parser.add_argument("--steps", type=int, default=300, help="training steps of each run")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--heads", type=int, choices=[2, 4], default=4,
                        help="attention heads of d_model 128: 4 of d = 32 (the default) or 2 of d = 64")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sdpa-backend", choices=["efficient", "flash", "math"],
                        help="SDPA's backend for the baseline (default: efficient for fp32, flash for 16 bits)")
    parser.add_argument("--tolerance", type=float, default=0.02, help="allowed relative difference of the final means")
    parser.add_argument("--min-drop", type=float, default=1.8, help="the factor each run's loss must fall by")
    parser.add_argument("--csv", help="write step, loss_sdpa, loss_step to this file")
    args = parser.parse_args(argv)
    if args.steps < 60:
        parser.error("--steps must be at least 60 (the verdict compares the last 50 steps with the first 10)")
    if args.sdpa_backend is None:
        args.sdpa_backend = DEFAULT_SDPA_BACKEND[args.dtype]
    if args.sdpa_backend == "flash" and args.dtype == "fp32":
        parser.error("--sdpa-backend flash computes in 16 bits only: use it with --dtype bf16")

    import flash_steps
    from torch.nn.attention import SDPBackend

    if not torch.cuda.is_available():
        print("train_tiny_transformer: needs a CUDA GPU", file=sys.stderr)
        return 2
    dtype = DTYPES[args.dtype]
    # The GPU steps that can train the model in this dtype, head dimension and GPU, in ladder
    # order: the last, the fastest, is the default.
    head_dim = D_MODEL // args.heads
    major, minor = torch.cuda.get_device_capability()
    with_backward = [s.name for s in flash_steps.capable_steps(head_dim, dtype, 10 * major + minor, backward=True)]
    if args.step is None and not with_backward:
        print(f"train_tiny_transformer: no GPU step of this build can train this {dtype} model (none has a "
              f"{dtype} backward at d = {head_dim} on this GPU)", file=sys.stderr)
        return 2
    try:
        step = flash_steps.step(args.step if args.step is not None else with_backward[-1])
    except KeyError as error:
        print(f"train_tiny_transformer: {error.args[0]}", file=sys.stderr)
        return 2
    if step.name not in with_backward:
        print(f"train_tiny_transformer: {step.name} cannot train this {dtype} model of d = {head_dim} here; the "
              f"GPU steps that can: {', '.join(with_backward) or 'none in this build'}", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    data, files = corpus()
    backend = {"efficient": SDPBackend.EFFICIENT_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
               "math": SDPBackend.MATH}[args.sdpa_backend]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; {len(data)} bytes of Markdown from "
          f"{files} files; 2 layers, d_model {D_MODEL}, {args.heads} heads of d = {D_MODEL // args.heads}, "
          f"{PRECISION[args.dtype]}; "
          f"{args.steps} steps of {args.batch} x {args.seq}")
    runs = {}
    for name, attention in (("sdpa", sdpa_attention(backend)), ("step", step_attention(step.name))):
        start = time.perf_counter()
        runs[name] = train(attention, data, args)
        print(f"{name:>4}: {time.perf_counter() - start:.1f} s "
              f"({'SDPA ' + args.sdpa_backend if name == 'sdpa' else step.name})")

    print(f"{'step':>6} {'loss SDPA':>10} {'loss ' + step.short_name:>12}")
    for i in list(range(0, args.steps, 25)) + [args.steps - 1]:
        print(f"{i:>6} {runs['sdpa'][i]:>10.4f} {runs['step'][i]:>12.4f}")
    if args.csv:
        with open(args.csv, "w", newline="") as out:
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(["step", "loss_sdpa", "loss_step"])
            writer.writerows(zip(range(args.steps), runs["sdpa"], runs["step"]))
    ok, lines = verdict(runs["sdpa"], runs["step"], args.tolerance, args.min_drop)
    print("\n".join(lines))
    print("the loss curves agree" if ok else "FAILED: the loss curves disagree")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
