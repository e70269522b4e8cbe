"""flash_steps.hf without transformers or torch: the registration and the rules of the
attention and mask functions, with fake registries and NumPy arrays as tensors.

The real thing (a Llama model from transformers on a GPU step) is test_transformers_gpu.py.
"""
from types import SimpleNamespace

import numpy as np
import pytest

import flash_steps
import flash_steps.hf as hf
from conftest import random_qkv


class FakeTensor:
    """Just enough of torch.Tensor for the attention function: shape, transpose, contiguous."""

    def __init__(self, array):
        self.array = array
        self.shape = array.shape

    def transpose(self, a, b):
        return FakeTensor(np.swapaxes(self.array, a, b))

    def contiguous(self):
        return FakeTensor(np.ascontiguousarray(self.array))


def fake_sdpa(calls):
    """SDPA-shaped, computed by step01 on NumPy arrays; records each call's arguments."""

    def sdpa(query, key, value, is_causal=False, scale=None, enable_gqa=False):
        calls.append(dict(is_causal=is_causal, scale=scale, enable_gqa=enable_gqa))
        k, v = key.array, value.array
        if enable_gqa:
            groups = query.shape[1] // k.shape[1]
            k, v = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)
        o, _ = flash_steps.step01.attention_forward(query.array, k, v, causal=is_causal, scale=scale)
        return FakeTensor(o)

    return sdpa


def fake_registry():
    class Registry:  # like transformers' GeneralInterface: a class-wide mapping
        mapping = {}

        @classmethod
        def register(cls, key, value):
            cls.mapping[key] = value

    return Registry


@pytest.fixture
def registered():
    attention, mask, calls = fake_registry(), fake_registry(), []
    name = hf.register("step01_naive", sdpa=fake_sdpa(calls), attention_interface=attention, mask_interface=mask)
    return name, attention.mapping[name], mask.mapping[name], calls


def test_register_puts_an_attention_and_a_mask_function_under_one_name(registered):
    name, attention, mask, _ = registered
    assert name == "tutorial_step01_naive"
    assert callable(attention) and callable(mask)
    with pytest.raises(ValueError, match="contains 'flash'"):
        hf.register("step01_naive", name="flash_mine", sdpa=fake_sdpa([]), attention_interface=fake_registry(),
                    mask_interface=fake_registry())
    attention_registry, mask_registry = fake_registry(), fake_registry()
    assert hf.register("step01_naive", name="mine", sdpa=fake_sdpa([]), attention_interface=attention_registry,
                       mask_interface=mask_registry) == "mine"
    assert set(attention_registry.mapping) == set(mask_registry.mapping) == {"mine"}


def test_the_attention_function_is_sdpa_shaped_with_gqa_and_the_layers_causal_flag(registered, rng):
    _, attention, _, calls = registered
    q, k, v = random_qkv(rng, 2, 4, 9, 9, 8)
    k, v = k[:, :2], v[:, :2]  # 2 key/value heads for 4 query heads
    layer = SimpleNamespace(is_causal=True, num_key_value_groups=2)
    o, weights = attention(layer, FakeTensor(q), FakeTensor(k), FakeTensor(v), None, dropout=0.0, scaling=0.25)
    assert weights is None
    assert o.shape == (2, 9, 4, 8)  # [B, N, H, d], as transformers' layers expect
    assert calls[-1] == dict(is_causal=True, scale=0.25, enable_gqa=True)
    ref, _ = flash_steps.reference_attention(q, np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1), causal=True,
                                             scale=0.25)
    np.testing.assert_allclose(o.array, ref.swapaxes(1, 2), rtol=0, atol=1e-5)


def test_one_query_row_sees_every_key_and_a_call_may_override_the_layer(registered, rng):
    _, attention, _, calls = registered
    q, k, v = random_qkv(rng, 1, 2, 1, 6, 8)
    attention(SimpleNamespace(is_causal=True), FakeTensor(q), FakeTensor(k), FakeTensor(v), None)
    assert calls[-1]["is_causal"] is False  # decoding: the new token sees the whole cache
    q, k, v = random_qkv(rng, 1, 2, 6, 6, 8)
    attention(SimpleNamespace(is_causal=True), FakeTensor(q), FakeTensor(k), FakeTensor(v), None, is_causal=False)
    assert calls[-1]["is_causal"] is False and calls[-1]["enable_gqa"] is False
    attention(SimpleNamespace(is_causal=False), FakeTensor(q), FakeTensor(k), FakeTensor(v), None)
    assert calls[-1]["is_causal"] is False  # an encoder layer


def test_the_attention_function_refuses_what_a_step_cannot_compute(registered, rng):
    _, attention, _, calls = registered
    layer = SimpleNamespace(is_causal=True)
    q, k, v = (FakeTensor(x) for x in random_qkv(rng, 1, 2, 3, 7, 8))
    with pytest.raises(ValueError, match="top-left aligned"):  # 3 queries after 4 cached keys
        attention(layer, q, k, v, None)
    with pytest.raises(ValueError, match="only the causal mask; this layer was given a mask tensor"):
        attention(layer, q, k, v, np.ones((1, 1, 3, 7), bool))
    with pytest.raises(ValueError, match="without dropout"):
        attention(layer, q, k, v, None, dropout=0.1)
    with pytest.raises(ValueError, match="asks for sliding_window"):
        attention(layer, q, k, v, None, sliding_window=4096)
    assert not calls


def test_the_mask_function_builds_no_mask_and_refuses_padding_and_other_patterns(registered):
    _, _, mask, _ = registered

    def causal_mask_function(b, h, q, kv):  # named like transformers' own
        return kv <= q

    def and_mask(b, h, q, kv):  # what and_masks() returns: e.g. a sliding window
        return kv <= q

    assert mask(batch_size=2, q_length=5, kv_length=5, mask_function=causal_mask_function, attention_mask=None) is None
    assert mask(batch_size=2, q_length=5, kv_length=5, mask_function=causal_mask_function,
                attention_mask=np.ones((2, 5), bool)) is None
    with pytest.raises(ValueError, match="cannot skip padding"):
        mask(batch_size=2, q_length=5, kv_length=5, mask_function=causal_mask_function,
             attention_mask=np.array([[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]], bool))
    with pytest.raises(ValueError, match=r"only a causal mask or none.*\(and_mask:"):
        mask(batch_size=2, q_length=5, kv_length=5, mask_function=and_mask, attention_mask=None)


def test_set_attention_uses_the_models_setter_or_its_config():
    chosen = []
    with_setter = SimpleNamespace(set_attn_implementation=chosen.append)
    hf.set_attention(with_setter, "tutorial_step06_fa2")
    assert chosen == ["tutorial_step06_fa2"]
    older = SimpleNamespace(config=SimpleNamespace(_attn_implementation="sdpa"))
    hf.set_attention(older, "tutorial_step06_fa2")
    assert older.config._attn_implementation == "tutorial_step06_fa2"
