"""The path for PyTorch tensors without torch or a GPU: what one forward call asks of PyTorch.

A small problem's time is the host's (scripts/gpu/per_call.py), so flash_steps._Torch.forward,
the torch operator's body, lends every tensor as a capsule made by ``to_dlpack`` (0.2 us) and
never through ``Tensor.__dlpack__(stream=...)`` (Python that looks up two streams: 12 us or
more a tensor on an H200's host). Stand-ins play torch, its tensors and the step; the real
thing is test_torch_gpu.py.
"""
from types import SimpleNamespace

import pytest

import flash_steps


class FakeTensor:
    """Just enough of a CUDA torch.Tensor for _Torch.forward; its __dlpack__ must not be called."""

    requires_grad = False
    is_cuda = True

    def __init__(self, name, shape):
        self.name, self.shape = name, shape

    def get_device(self):
        return 0

    def new_empty(self, shape, dtype=None):
        return FakeTensor("workspace" if dtype == "uint8" else "lse", shape)

    def __dlpack__(self, stream=None):
        raise AssertionError(f"{self.name}.__dlpack__ was called: 12 us or more of Python where to_dlpack takes 0.2")


def fake_step(calls, workspace_bytes):
    """A GPU step that records what its check_inputs and its native launch receive."""

    def check_inputs(q, k, v, *, stream=None):
        calls.append(("check_inputs", q, k, v))
        return "shape"

    def launch(q, k, v, o, lse, workspace, **options):
        calls.append(("launch", q, k, v, o, lse, workspace))

    return SimpleNamespace(name=f"fake_step_{workspace_bytes}", needs_workspace=workspace_bytes > 0, workspace_bytes=lambda shape, causal: workspace_bytes,
                           check_inputs=check_inputs, _native=SimpleNamespace(launch=launch))


@pytest.fixture
def fake_torch(monkeypatch):
    """flash_steps' torch calls (torch, to_dlpack, the current stream's handle), played by stand-ins:
    a capsule is ("capsule", the tensor's name)."""
    torch = SimpleNamespace(uint8="uint8", float32="float32", empty_like=lambda x: FakeTensor("o", x.shape))
    monkeypatch.setattr(flash_steps, "_TORCH_CALLS", (torch, lambda x: ("capsule", x.name), lambda device: 0))


@pytest.mark.parametrize("workspace_bytes", [0, 4], ids=["no workspace", "step 24's tile counter"])
def test_torch_forward_lends_every_tensor_as_a_capsule(fake_torch, workspace_bytes, monkeypatch):
    calls = []
    q, k, v = (FakeTensor(name, (1, 1, 128, 64)) for name in "qkv")
    step = fake_step(calls, workspace_bytes)
    monkeypatch.setattr(flash_steps, "_WORKSPACE_BYTES", {})
    o, lse = flash_steps._Torch.forward(step, q, k, v, False, None)
    assert (o.name, lse.name, lse.shape) == ("o", "lse", (1, 1, 128))
    capsules = [("capsule", name) for name in ("q", "k", "v", "o", "lse")]
    workspace = ("capsule", "workspace") if workspace_bytes else None
    # A step with a workspace checks q, k, v first, to size it: capsules too, never __dlpack__.
    expected = [("check_inputs", *capsules[:3])] if workspace_bytes else []
    assert calls == expected + [("launch", *capsules, workspace)]
    # The workspace's size is asked once per step and shapes: a second call only launches.
    calls.clear()
    flash_steps._Torch.forward(step, q, k, v, False, None)
    assert calls == [("launch", *capsules, workspace)]
    calls.clear()
    longer = FakeTensor("q", (1, 1, 256, 64))  # another shape: asked again
    flash_steps._Torch.forward(step, longer, k, v, False, None)
    assert calls[0][0] == ("check_inputs" if workspace_bytes else "launch")
