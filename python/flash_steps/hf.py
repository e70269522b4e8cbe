"""A step as an attention implementation of Hugging Face transformers.

    import flash_steps.hf
    name = flash_steps.hf.register("step08")            # -> "tutorial_step08_fa2_pipelined"
    model = AutoModelForCausalLM.from_config(config, attn_implementation=name)
    # or, for a model already built:  flash_steps.hf.set_attention(model, name)

transformers (4.48 and later; this is written against 5.x) looks attention functions up
by name in a registry, ``AttentionInterface`` (``ALL_ATTENTION_FUNCTIONS``): each attention
layer calls ``function(module, query, key, value, attention_mask, dropout=..., scaling=...,
**kwargs)`` with [B, H, N, d] tensors and expects ([B, N, H, d] output, weights or None).
The mask comes from the function registered under the same name in
``AttentionMaskInterface`` (4.53 and later); a name registered there is also what tells
transformers to build a mask at all, so ``register`` puts a function in both registries.

The steps apply no mask but the causal one, top-left aligned. So the mask function
builds no tensor: it refuses padding (a 2-D mask with zeros) and any mask pattern other
than causal or bidirectional (sliding windows, chunks, packed sequences); the attention
function refuses a causal mask that is not top-left aligned (a query block after cached
keys: N_q > 1 and N_q != N_kv). Decoding one token (N_q = 1) sees every cached key, as
with SDPA. All of this is plain Python; torch is needed only when ``register`` is not
given an ``sdpa`` to call (it then uses ``flash_steps.pytorch``).
"""

import functools

__all__ = ["attention_function", "mask_function", "register", "set_attention"]

# The mask patterns a step applies itself: those of transformers' masking_utils.
_MASKS_A_STEP_APPLIES = ("causal_mask_function", "bidirectional_mask_function")
# Attention variants some layers pass as keyword arguments, which no step computes:
# sliding windows (Mistral), attention sinks (gpt-oss), logit soft-capping (Gemma 2).
_VARIANTS_A_STEP_LACKS = ("sliding_window", "s_aux", "softcap")


def attention_function(sdpa, step_name="flash_steps"):
    """An attention function for transformers' registry that computes O with ``sdpa``.

    ``sdpa(query, key, value, is_causal=..., scale=..., enable_gqa=...)`` returns O
    [B, H, N_q, d], like ``flash_steps.pytorch.scaled_dot_product_attention``.
    """

    def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                  **kwargs):
        if attention_mask is not None:
            raise ValueError(f"{step_name} applies only the causal mask; this layer was given a mask tensor")
        if dropout:
            raise ValueError(f"{step_name} computes the forward pass without dropout (use model.eval())")
        # What some models hand flash-attention-style functions directly: a window, sinks, a cap.
        extras = [key for key in _VARIANTS_A_STEP_LACKS if kwargs.get(key) not in (None, 0, 0.0)]
        if extras:
            raise ValueError(f"{step_name} computes plain softmax attention; this layer asks for {', '.join(extras)}")
        # As transformers' SDPA function decides it: the layer's own flag, never for one query row.
        is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
        is_causal = bool(is_causal) and query.shape[2] > 1
        if is_causal and query.shape[2] != key.shape[2]:
            raise ValueError(
                f"{step_name} masks causally top-left aligned (query i sees keys j <= i); N_q={query.shape[2]} "
                f"queries after N_kv={key.shape[2]} cached keys need a bottom-right mask")
        groups = getattr(module, "num_key_value_groups", 1)
        o = sdpa(query, key, value, is_causal=is_causal, scale=scaling, enable_gqa=groups != 1)
        return o.transpose(1, 2).contiguous(), None

    return attention


def mask_function(step_name="flash_steps"):
    """A mask function for ``AttentionMaskInterface``: no tensor (the step masks causally
    itself), and a ValueError for any mask it cannot apply."""

    def no_mask(*args, mask_function=None, attention_mask=None, **kwargs):
        pattern = getattr(mask_function, "__name__", None)
        if mask_function is not None and pattern not in _MASKS_A_STEP_APPLIES:
            raise ValueError(f"{step_name} applies only a causal mask or none; the model asked for another "
                             f"pattern ({pattern}: a sliding window, chunks or packed sequences)")
        if attention_mask is not None and not bool(attention_mask.all()):
            raise ValueError(f"{step_name} cannot skip padding tokens; pass sequences of one length "
                             f"without an attention_mask")
        return None

    return no_mask


def register(step="step08_fa2_pipelined", *, name=None, sdpa=None, attention_interface=None,
             mask_interface=None):
    """Registers a GPU step as an attention implementation; returns its name.

    step: a step's name, short name or number. name: the implementation's name
    (default ``tutorial_<step name>``). sdpa: what computes O (default: the step's
    PyTorch operator). attention_interface, mask_interface: the registries (default:
    transformers' ``AttentionInterface`` and ``AttentionMaskInterface``).
    """
    step_name = step if isinstance(step, str) else getattr(step, "name", str(step))
    if sdpa is None:
        import flash_steps
        from flash_steps import pytorch

        step_name = flash_steps.step(step).name
        sdpa = functools.partial(pytorch.scaled_dot_product_attention, step=step_name)
    # Not "flash_...": transformers takes any implementation name that contains "flash"
    # for a FlashAttention kernel and looks for it among its hub kernels instead.
    name = name or f"tutorial_{step_name}"
    if "flash" in name:
        raise ValueError(f"attention implementation name {name!r} contains 'flash', which transformers "
                         "reserves for FlashAttention kernels from its hub; choose another name")
    if attention_interface is None:
        try:
            from transformers import AttentionInterface as attention_interface
        except ImportError:  # where the top level does not export it
            from transformers.modeling_utils import AttentionInterface as attention_interface
    if mask_interface is None:
        try:
            from transformers.masking_utils import AttentionMaskInterface as mask_interface
        except ImportError:  # before 4.53: masks were built for SDPA, and the attention function refuses them
            mask_interface = None
    attention_interface.register(name, attention_function(sdpa, step_name))
    if mask_interface is not None:
        mask_interface.register(name, mask_function(step_name))
    return name


def set_attention(model, name):
    """Makes ``model`` use the attention implementation ``name`` from now on."""
    if hasattr(model, "set_attn_implementation"):  # transformers >= 4.56
        model.set_attn_implementation(name)
    else:
        model.config._attn_implementation = name
