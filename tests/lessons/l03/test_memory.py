"""The memory meters: saved activations without parameters, bytes held by graphs, live tensors."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from torchcontracts.lessons.l03_memory.memory import (
    SavedTensorMeter,
    graph_saved_tensors,
    held_bytes,
    live_tensor_bytes,
    tensor_bytes,
)


def _mlp(width: int = 64, depth: int = 4) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth)])


def test_meter_counts_activations_but_not_parameters_or_excluded_inputs():
    model, x = _mlp(), torch.randn(8, 64)
    with SavedTensorMeter(exclude=[model, x]) as meter:
        model(x).sum()
    act = 8 * 64 * 4
    # each Linear saves its input, each GELU its input: 2 * 4 - 1 (x is excluded)
    assert meter.count == 7 and meter.bytes == 7 * act
    # skipped: x, plus the weights of Linear 2-4 (saved because their inputs need grad; Linear 1's input does not)
    assert meter.skipped == 4


def test_meter_counts_a_storage_once_even_when_saved_twice():
    x = torch.randn(100, requires_grad=True)
    h = x * 2
    with SavedTensorMeter(exclude=[x]) as meter:
        (h * h).sum()  # mul saves both operands: the same storage
    assert meter.count == 1 and meter.bytes == 400


def test_meter_sees_nothing_under_no_grad():
    model, x = _mlp(), torch.randn(8, 64)
    with torch.no_grad(), SavedTensorMeter(exclude=[model, x]) as meter:
        model(x)
    assert meter.bytes == 0


def test_checkpointing_saves_fewer_activations_and_keeps_gradients():
    model, x = _mlp(depth=8), torch.randn(16, 64)
    with SavedTensorMeter(exclude=[model, x]) as plain:
        loss = model(x).square().mean()
    loss.backward()
    ref = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    with SavedTensorMeter(exclude=[model, x]) as ck:
        h = checkpoint(model[:4], x, use_reentrant=False)
        loss = checkpoint(model[4:], h, use_reentrant=False).square().mean()
    loss.backward()
    assert ck.bytes < plain.bytes / 4
    assert all(torch.allclose(p.grad, r, atol=1e-6) for p, r in zip(model.parameters(), ref))


def test_tensor_bytes_counts_the_whole_storage_of_a_view():
    big = torch.zeros(1000)
    assert tensor_bytes(big[:1]) == 4000


def test_held_bytes_sees_the_graph_behind_a_logged_loss():
    model, x = _mlp(), torch.randn(32, 64)
    loss = model(x).square().mean()
    held_graph = held_bytes([loss], exclude=[model, x])
    assert held_graph >= 7 * 32 * 64 * 4
    assert held_bytes([loss.detach()], exclude=[model, x]) == 4
    loss.backward()  # frees the saved tensors
    assert graph_saved_tensors(loss) == []
    assert held_bytes({"loss": [loss]}, exclude=[model, x]) == 4


def test_live_tensor_bytes_grows_with_a_hidden_cache_and_shrinks_when_it_goes():
    before = live_tensor_bytes()[1]
    cache = [torch.zeros(10_000) for _ in range(3)]
    grown = live_tensor_bytes()[1] - before
    del cache
    assert grown >= 3 * 40_000
    assert live_tensor_bytes()[1] - before < 40_000


def test_live_tensor_bytes_sees_activations_kept_by_a_hook_closure():
    model, x = _mlp(), torch.randn(32, 64)
    feats: list[torch.Tensor] = []
    handle = model[0].register_forward_hook(lambda m, i, o: feats.append(o))
    base = live_tensor_bytes(exclude=[model, x])[1]
    for _ in range(3):
        model(x)
    grown = live_tensor_bytes(exclude=[model, x])[1] - base
    handle.remove()
    assert grown >= 3 * 32 * 64 * 4


def test_live_tensor_bytes_skips_fake_tensors_that_compile_and_export_leave_alive():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.empty(1000)  # no data pointer: asking for one raises
    base = live_tensor_bytes()[1]
    real = torch.zeros(250_000)
    assert live_tensor_bytes()[1] - base == 1_000_000 and fake.shape == (1000,)
    del real
