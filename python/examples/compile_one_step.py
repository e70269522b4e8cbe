#!/usr/bin/env python3
"""One step under torch.compile(fullgraph=True): an attention block traced into one graph.

    PYTHONPATH=build/python python3 python/examples/compile_one_step.py [--step step06]

The block projects x to Q, K, V, computes attention with a step's PyTorch operator
(flash_steps.pytorch.scaled_dot_product_attention) and projects back. torch.compile
with fullgraph=True must trace it whole: it fails instead of breaking the graph, which
it would at any Python call it cannot see through. The operator is a torch.library
custom op with a fake implementation, so Dynamo puts it in the graph as one node. The
script prints that node, the graph and break counts, the largest difference from the
same block with F.scaled_dot_product_attention, and eager and compiled times.
"""
import argparse
import sys

import torch
import torch.nn.functional as F


# [attention block]
def attention_block(x, w_qkv, w_o, heads, sdpa):
    """x [B, N, D] -> [B, N, D]: causal self-attention with ``sdpa`` computing O."""
    b, n, dim = x.shape
    q, k, v = (x @ w_qkv).view(b, n, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)  # 3 x [B, H, N, d]
    o = sdpa(q, k, v, is_causal=True)
    return o.transpose(1, 2).reshape(b, n, dim) @ w_o
# [attention block]


def run(step="step08_fa2_pipelined", batch=4, seq=1024, heads=8, head_dim=64, repeat=20, inductor=True,
        dtype=None):
    """Compiles the block with the step; returns a dict of what it found.

    dtype: the block's torch dtype (None: the one the step computes in natively, e.g.
    torch.bfloat16 for a tensor-core step).

    The graph is traced twice, by torch._dynamo.explain (graph and break counts) and by
    torch.compile(fullgraph=True) with a backend that keeps the FX graph (the operator's
    node); with ``inductor`` it is also compiled by Inductor, the default backend, run
    and timed (some seconds of code generation: a test may leave it to one step).
    """
    import flash_steps
    import flash_steps.pytorch as fsp

    torch.backends.cuda.matmul.allow_tf32 = False
    step = flash_steps.step(step)
    dtype = getattr(torch, step.dtypes[0]) if dtype is None else dtype
    dim = heads * head_dim
    gen = torch.Generator("cuda").manual_seed(0)
    x = torch.randn(batch, seq, dim, device="cuda", generator=gen).to(dtype)
    w_qkv = (torch.randn(dim, 3 * dim, device="cuda", generator=gen) / dim**0.5).to(dtype)
    w_o = (torch.randn(dim, dim, device="cuda", generator=gen) / dim**0.5).to(dtype)

    # [with step]
    def with_step(x, w_qkv, w_o):
        return attention_block(x, w_qkv, w_o, heads, lambda *a, **kw: fsp.scaled_dot_product_attention(
            *a, step=step.name, **kw))
    # [with step]

    def with_sdpa(x, w_qkv, w_o):
        return attention_block(x, w_qkv, w_o, heads, F.scaled_dot_product_attention)

    graphs = []

    def keep_graph(gm, example_inputs):  # a backend that records the FX graph, then runs it as is
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()  # each of the three traces below starts from nothing cached
    explanation = torch._dynamo.explain(with_step)(x, w_qkv, w_o)
    torch._dynamo.reset()
    traced = torch.compile(with_step, fullgraph=True, backend=keep_graph)(x, w_qkv, w_o)
    op_nodes = [str(node.target) for gm in graphs for node in gm.graph.nodes
                if node.op == "call_function" and "flash_steps" in str(node.target)]
    torch._dynamo.reset()
    # [compile]
    compiled = torch.compile(with_step, fullgraph=True) if inductor else None  # the default backend
    # [compile]
    eager = with_step(x, w_qkv, w_o)
    out = compiled(x, w_qkv, w_o) if inductor else traced
    reference = with_sdpa(x, w_qkv, w_o)

    def median_ms(fn):
        for _ in range(3):
            fn(x, w_qkv, w_o)
        times = []
        for _ in range(repeat):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(x, w_qkv, w_o)
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        return sorted(times)[len(times) // 2]

    return dict(step=step.name, dtype=str(dtype).replace("torch.", ""), graphs=explanation.graph_count, graph_breaks=explanation.graph_break_count,
                op_nodes=op_nodes, max_diff_compiled_vs_eager=(out - eager).abs().max().item(),
                max_diff_traced_vs_eager=(traced - eager).abs().max().item(),
                max_diff_vs_sdpa=(out - reference).abs().max().item(),
                max_abs=reference.abs().max().item(),
                ms_eager=median_ms(with_step), ms_compiled=median_ms(compiled) if inductor else None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--step", default="step08_fa2_pipelined")
    parser.add_argument("--seq", type=int, default=1024)
    args = parser.parse_args()
    r = run(args.step, seq=args.seq)
    print(f"torch.compile(fullgraph=True) of an attention block on {r['step']} ({r['dtype']}):")
    print(f"  graphs {r['graphs']}, graph breaks {r['graph_breaks']}, operator nodes {r['op_nodes']}")
    print(f"  max |compiled - eager| {r['max_diff_compiled_vs_eager']:.3g}, max |step - SDPA block| "
          f"{r['max_diff_vs_sdpa']:.3g} (outputs up to {r['max_abs']:.3g})")
    print(f"  time: eager {r['ms_eager']:.3f} ms, compiled {r['ms_compiled']:.3f} ms")
    return 0 if r["graph_breaks"] == 0 and r["op_nodes"] else 1


if __name__ == "__main__":
    sys.exit(main())
