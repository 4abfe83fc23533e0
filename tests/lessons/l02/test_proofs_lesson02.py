"""Lesson 02's proof predicates fail on the behaviour the seed describes and pass on PyTorch's.

Each predicate is loaded from the notebook itself (``notebook_functions``), so the test checks the
very proof the lesson asserts, not a copy of it.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from conftest import ROOT, notebook_functions

NB = ROOT / "notebooks" / "02_autograd_engine.ipynb"
F = notebook_functions(NB, "proof_c004", "clone_facts", "proof_c007", "detach_work", "proof_c012", "relu_facts")


# C004: "tensor.clone() copies the whole contract including grad_fn" ----------------------------


def test_c004_holds_on_torch_clone():
    assert F["proof_c004"](F["clone_facts"](torch.clone)) is True


@pytest.mark.parametrize(
    "seed_side",
    [
        {"clone node": "MulBackward0", "clone has the source's node": True},  # grad_fn copied: the same node
        {"clone node": "MulBackward0", "clone has the source's node": False},  # a copy of the source's node
        {"clone of a leaf is a leaf": True, "clone of a leaf has a .grad": True},  # "the whole contract": .grad too
    ],
)
def test_c004_fails_when_clone_copies_grad_fn_or_grad(seed_side):
    observed = {**F["clone_facts"](torch.clone), **seed_side}
    assert F["proof_c004"](observed) is False


# C007: "cpu() first avoids the cross-device sync that detach() first would cause" ---------------


def _c007_real_cpu() -> dict:
    pred = nn.Linear(4, 2)(torch.randn(3, 4))
    return {
        **F["detach_work"](pred),
        "same values": torch.equal(pred.detach().cpu(), pred.cpu().detach()),
        "copy-first node": type(pred.to("meta").grad_fn).__name__,
        "detach-first node": pred.detach().to("meta").grad_fn,
        "syncs": None,
    }


def test_c007_holds_on_this_cpu_and_on_the_counts_a_gpu_gives():
    real = _c007_real_cpu()
    assert F["proof_c007"](real) is True
    gpu = {**real, "syncs": {"detach() alone": 0, "detach() then cpu()": 1, "cpu() then detach()": 1}}
    assert F["proof_c007"](gpu) is True


@pytest.mark.parametrize(
    "syncs",
    [
        {"detach() alone": 1, "detach() then cpu()": 2, "cpu() then detach()": 1},  # the seed's story: detach syncs
        {"detach() alone": 0, "detach() then cpu()": 2, "cpu() then detach()": 1},  # detach-first costs an extra sync
        {
            "detach() alone": 0,
            "detach() then cpu()": 0,
            "cpu() then detach()": 0,
        },  # a meter that saw nothing proves nothing
    ],
)
def test_c007_fails_on_the_seeds_sync_counts(syncs):
    assert F["proof_c007"]({**_c007_real_cpu(), "syncs": syncs}) is False


def test_c007_fails_when_detach_copies_or_cpu_first_records_nothing():
    real = _c007_real_cpu()
    assert F["proof_c007"]({**real, "detach ops": ["aten::_to_copy", "aten::copy_", "aten::detach"]}) is False
    assert F["proof_c007"]({**real, "detach shares storage": False}) is False
    assert F["proof_c007"]({**real, "copy-first node": "NoneType"}) is False


class _CopyingDetach(torch.Tensor):
    """A tensor whose detach() copies, the way the seed imagines a device-bound detach might work."""

    def detach(self):
        return torch.Tensor.clone(self).as_subclass(torch.Tensor)


def test_c007_probe_sees_a_detach_that_copies():
    """The probe is not blind: a detach() that copies shows its copy, and the proof then fails."""
    pred = (torch.randn(3, requires_grad=True) * 2).detach().as_subclass(_CopyingDetach)
    work = F["detach_work"](pred)
    assert "aten::copy_" in work["detach ops"] and not work["detach shares storage"], work
    assert F["proof_c007"]({**_c007_real_cpu(), **work}) is False


# C012: "nn.ReLU's backward method is grad_input = grad_output.clone(); grad_input[input < 0] = 0" -----


class _SeedReLUFunction(torch.autograd.Function):
    """ReLU with the seed's backward: keeps the gradient where input == 0."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[x < 0] = 0
        return grad_input


class SeedReLU(nn.Module):
    """The module the seed describes: it has a backward method with the seed's mask."""

    def forward(self, x):
        return _SeedReLUFunction.apply(x)

    def backward(self, grad_output, x):
        grad_input = grad_output.clone()
        grad_input[x < 0] = 0
        return grad_input


class SeedMaskOnly(nn.Module):
    """No backward method, but the seed's gradient (1 at input 0)."""

    def forward(self, x):
        return _SeedReLUFunction.apply(x)


class BackwardMethodOnly(nn.ReLU):
    """torch's gradient, but a module with a backward method."""

    def backward(self, grad_output):
        return grad_output


def test_c012_holds_on_nn_relu():
    assert F["proof_c012"](F["relu_facts"](nn.ReLU())) is True


@pytest.mark.parametrize("module", [SeedReLU(), SeedMaskOnly(), BackwardMethodOnly()], ids=type)
def test_c012_fails_on_modules_that_behave_the_seeds_way(module):
    assert F["proof_c012"](F["relu_facts"](module)) is False


def test_c012_measures_the_seed_gradient_at_zero():
    assert F["relu_facts"](SeedMaskOnly())["grad"] == [0.0, 1.0, 1.0]
