#!/usr/bin/env python3
"""A real model on the tutorial's kernels: a small Llama from Hugging Face transformers,
run once with PyTorch's SDPA and once with a step as its attention, logits compared.

    PYTHONPATH=build/python python3 python/examples/llama_on_a_step.py [--step step08] [--seq 1024]
    PYTHONPATH=build/python python3 python/examples/llama_on_a_step.py --step step21 --dtype bfloat16

The model is built from a config with random weights (nothing is downloaded): 4 layers,
hidden size 512, 8 query heads of d = 64 sharing 4 key/value heads (grouped-query
attention, as Llama 3 has), causal, in float32 (the fp32 steps, 4 to 8) or, with
--dtype bfloat16 or float16, in that dtype (the steps from 9 on, which compute in
bf16/fp16; the Hopper steps need a Hopper GPU). The step is registered as an attention
implementation (flash_steps.hf.register) and switched on with set_attn_implementation.

The verdict uses the project's tolerance rule on the logits, in the model's dtype: the
same model in float64 (SDPA's math backend, on the very weights of the run, rounded to
the dtype first) is the reference, and the step's max error against it must be at most
twice SDPA's max error in the same dtype, plus 1e-6. Both runs share every other
operation, so the rule judges what the attention changes. Prints the errors, the largest
difference between the two runs, and the median time of one forward pass of each (CUDA
events, after warm-up); exits 1 if the step fails the rule, 2 if it does not compute in
the dtype.
"""
import argparse
import copy
import csv
import functools
import sys

import torch


def median_ms(fn, repeat):
    """Median time of fn() in milliseconds over `repeat` runs after two warm-up runs."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeat):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return sorted(times)[len(times) // 2]


#: The dtypes the model can run in, as torch names them.
DTYPES = ("float32", "bfloat16", "float16")


def require_dtype(step, dtype):
    """ValueError unless ``step`` (a flash_steps.Step) computes in ``dtype``, one of DTYPES."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")
    if dtype not in step.dtypes:
        raise ValueError(f"{step.name} computes in {', '.join(step.dtypes)}, not {dtype}: "
                         + ("pick a step from 9 on (e.g. step21)" if dtype != "float32" else
                            "run it with --dtype " + step.dtypes[0]))


def compare(step="step08_fa2_pipelined", layers=4, hidden=512, heads=8, kv_heads=4, seq=1024, batch=2,
            vocab=4096, repeat=20, seed=0, dtype="float32"):
    """Runs the comparison in ``dtype`` (one of DTYPES and of the step's ``dtypes``); returns a
    dict of its numbers (see the module's help). ValueError for a dtype the step does not take."""
    import transformers

    import flash_steps
    import flash_steps.hf
    import flash_steps.pytorch

    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 here, in both runs
    torch.backends.cudnn.allow_tf32 = False
    step = flash_steps.step(step)
    require_dtype(step, dtype)
    calls = []

    def counted_sdpa(*args, **kwargs):
        calls.append(1)
        return flash_steps.pytorch.scaled_dot_product_attention(*args, step=step.name, **kwargs)

    # [register]
    name = flash_steps.hf.register(step.name, sdpa=counted_sdpa)  # "tutorial_step08_fa2_pipelined"
    # [register]

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                                      num_hidden_layers=layers, num_attention_heads=heads,
                                      num_key_value_heads=kv_heads, max_position_embeddings=max(seq, 128))
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    model = model.to(device="cuda", dtype=getattr(torch, dtype)).eval()
    # The reference: the same weights, already rounded to `dtype`, widened to float64.
    model64 = copy.deepcopy(model).to(torch.float64)
    ids = torch.randint(0, vocab, (batch, seq), device="cuda", generator=torch.Generator("cuda").manual_seed(seed))

    def logits(m):
        with torch.inference_mode():
            return m(input_ids=ids, use_cache=False).logits

    reference = logits(model64)
    with_sdpa = logits(model)
    ms_sdpa = median_ms(functools.partial(logits, model), repeat)
    # [switch]
    flash_steps.hf.set_attention(model, name)  # every attention layer now calls the step
    # [switch]
    calls.clear()
    with_step = logits(model)
    if len(calls) != layers:
        raise RuntimeError(f"the model called {name} {len(calls)} times, not once per layer ({layers}): "
                           f"transformers {transformers.__version__} did not switch its attention")
    ms_step = median_ms(functools.partial(logits, model), repeat)

    err_sdpa = (with_sdpa.double() - reference).abs().max().item()
    err_step = (with_step.double() - reference).abs().max().item()
    tolerance = 2 * err_sdpa + 1e-6
    return dict(step=step.name, dtype=dtype, transformers=transformers.__version__, torch=torch.__version__,
                batch=batch, seq=seq, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                max_abs_logit=reference.abs().max().item(),
                max_diff_step_vs_sdpa=(with_step.double() - with_sdpa.double()).abs().max().item(),
                err_sdpa=err_sdpa, err_step=err_step, tolerance=tolerance, passed=err_step <= tolerance,
                ms_sdpa=ms_sdpa, ms_step=ms_step)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--step", default="step08_fa2_pipelined")
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--dtype", choices=DTYPES, default="float32",
                        help="the model's dtype, one the step computes in (default float32)")
    parser.add_argument("--csv", help="append the numbers as a CSV row to this file")
    args = parser.parse_args()
    import flash_steps

    try:
        require_dtype(flash_steps.step(args.step), args.dtype)
    except (KeyError, ValueError) as error:
        print(f"llama_on_a_step.py: {error}", file=sys.stderr)
        return 2
    r = compare(args.step, layers=args.layers, seq=args.seq, batch=args.batch, repeat=args.repeat,
                dtype=args.dtype)
    print(f"Llama, {r['layers']} layers, hidden {r['hidden']}, {r['heads']} heads ({r['kv_heads']} KV), "
          f"B={r['batch']} N={r['seq']}, {r['dtype']}; transformers {r['transformers']}, torch {r['torch']}")
    print(f"  max |logits|                         {r['max_abs_logit']:.4g}")
    print(f"  max |step - SDPA| (both {r['dtype']:<9s}) {r['max_diff_step_vs_sdpa']:.3g}")
    print(f"  max error vs float64: SDPA           {r['err_sdpa']:.3g}")
    print(f"  max error vs float64: {r['step']:<14s} {r['err_step']:.3g}  "
          f"(tolerance 2 x SDPA + 1e-6 = {r['tolerance']:.3g}: {'pass' if r['passed'] else 'FAIL'})")
    print(f"  time per forward: SDPA {r['ms_sdpa']:.2f} ms, {r['step']} {r['ms_step']:.2f} ms")
    if args.csv:
        with open(args.csv, "a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(r))
            if f.tell() == 0:
                writer.writeheader()
            writer.writerow(r)
    return 0 if r["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
