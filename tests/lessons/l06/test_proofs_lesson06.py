"""Lesson 06's proof predicates fail on the behaviour the seed describes and pass on PyTorch's.

Each predicate is loaded from the notebook itself (``notebook_functions``), so the test checks the very
proof the lesson asserts. The "real" side is measured here on torch, in a few lines that mirror the cell;
the seed's side is that measurement with the value the seed predicts.
"""

from __future__ import annotations

import copy
import inspect
import random
import warnings
from unittest import mock

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from conftest import ROOT, notebook_functions

NB = ROOT / "notebooks" / "06_training_contracts.ipynb"
IDS = [
    "c027",
    "c050",
    "c052",
    "c041",
    "c059",
    "c060",
    "c061",
    "c053",
    "c143",
    "c140",
    "c056",
    "c055",
    "c104",
    "c103",
    "c054",
    "c116",
    "c046",
    "c045",
]
P = notebook_functions(NB, *[f"proof_{i}" for i in IDS])


def with_(observed: dict, **changes) -> dict:
    return {**observed, **changes}


# --- modes ------------------------------------------------------------------------------------------


def _c027_real() -> dict:
    drop = nn.Dropout(0.25)
    ones = torch.ones(100_000)
    out = drop.train()(ones)
    bn = nn.BatchNorm1d(3)
    batch = torch.randn(8, 3) * 2 + 5
    bn.train()(batch)
    rm, rv = bn.running_mean.clone(), bn.running_var.clone()
    bn.eval()(batch)
    return {
        "zero share": (out == 0).float().mean().item(),
        "kept": sorted(set(out[out != 0].tolist())),
        "dropout eval identity": torch.equal(drop.eval()(ones), ones),
        "bn train": [torch.allclose(rm, 0.1 * batch.mean(0)), torch.allclose(rv, 0.9 + 0.1 * batch.var(0))],
        "bn eval": [torch.equal(bn.running_mean, rm)],
    }


def test_c027_holds_on_torch_and_fails_when_the_modes_do_nothing():
    real = _c027_real()
    assert P["proof_c027"](real) is True
    assert P["proof_c027"](with_(real, **{"dropout eval identity": False})) is False  # dropout still on in eval
    assert P["proof_c027"](with_(real, **{"bn eval": [False]})) is False  # eval still updates stats
    assert P["proof_c027"](with_(real, kept=[1.0])) is False  # no 1/(1-p) rescaling


def test_c050_holds_when_both_errors_match_and_fails_when_the_small_batch_corrupts():
    real = {"keep": (0.0155, 0.0256), "drop": (0.0150, 0.0261), "last of one": "ValueError: Expected more than 1 value"}
    assert P["proof_c050"](real) is True
    assert P["proof_c050"](with_(real, keep=(0.05, 0.0256))) is False  # the seed: corrupted mean
    assert P["proof_c050"](with_(real, **{"last of one": "works"})) is False


def test_c052_holds_after_apply_and_fails_when_weights_stay_default():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 32, 3), nn.BatchNorm2d(32), nn.ReLU(), nn.Flatten(), nn.Linear(32 * 6 * 6, 16))
    before = [p.clone() for p in net.parameters()]
    visited = []
    net.apply(lambda m: visited.append(type(m).__name__))

    def init(m):
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)

    net.apply(init)
    ws = [net[0].weight, net[4].weight]
    real = {
        "weights changed": all(not torch.equal(b, p) for b, p in zip(before, net.parameters()) if p.dim() > 1),
        "std / kaiming": [w.std().item() / (2 / w[0].numel()) ** 0.5 for w in ws],
        "biases zero": all(bool((m.bias == 0).all()) for m in (net[0], net[4])),
        "visited": visited,
    }
    assert P["proof_c052"](real) is True
    assert P["proof_c052"](with_(real, **{"weights changed": False})) is False
    assert P["proof_c052"](with_(real, **{"std / kaiming": [0.58, 0.58]})) is False  # default init's std


def test_c041_holds_on_nn_module_and_fails_for_a_plain_attribute_store():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, 3)
            self.scale = 2.0

    n = Net()
    real = {
        "conv1 in __dict__": "conv1" in n.__dict__,
        "conv1 in _modules": "conv1" in n._modules,
        "hasattr(n, 'conv1')": hasattr(n, "conv1"),
        "'conv1' in dir(n)": "conv1" in dir(n),
        "scale in __dict__": "scale" in n.__dict__,
        "parameters": [k for k, _ in n.named_parameters()],
    }
    assert P["proof_c041"](real) is True
    plain = with_(real, **{"conv1 in __dict__": True, "conv1 in _modules": False})  # a plain attribute store
    assert P["proof_c041"](plain) is False


def test_c059_holds_on_a_real_hook_and_fails_when_it_cannot_replace_or_remove():
    lin = nn.Linear(3, 3)
    seen = []
    h = lin.register_forward_hook(lambda m, i, o: seen.append(type(i).__name__))
    lin(torch.randn(2, 3))
    h.remove()
    r = lin.register_forward_hook(lambda m, i, o: torch.zeros_like(o))
    replaced = lin(torch.randn(2, 3))
    r.remove()
    real = {
        "calls": 12 * len(seen),
        "inputs type": seen[0],
        "replaced is zero": bool((replaced == 0).all()),
        "after remove": bool((lin(torch.randn(2, 3)) != 0).all()),
    }
    assert P["proof_c059"](real) is True
    assert P["proof_c059"](with_(real, **{"replaced is zero": False})) is False
    assert P["proof_c059"](with_(real, **{"inputs type": "Tensor"})) is False


def _stack_grads(kind: str) -> list[torch.Tensor]:
    torch.manual_seed(0)
    blocks = nn.ModuleList(nn.Sequential(nn.Linear(16, 16), nn.Sigmoid()) for _ in range(12))
    x = torch.randn(8, 16)
    h = x
    if kind == "checkpoint":
        for k in range(0, 12, 4):
            h = checkpoint(nn.Sequential(*blocks[k : k + 4]), h, use_reentrant=False)
    else:
        for b in blocks:
            h = h + b(h) if kind.startswith("residual") else b(h)
            h = nn.Identity()(h) if kind.endswith("identity") else h
    h.sum().backward()
    return [b[0].weight.grad for b in blocks]


def test_c060_c061_hold_on_torch_and_fail_when_identity_or_checkpoint_would_change_gradients():
    g = {k: _stack_grads(k) for k in ("plain", "plain identity", "residual", "residual identity", "checkpoint")}
    same = lambda a, b: all(torch.equal(x, y) for x, y in zip(g[a], g[b]))  # noqa: E731
    c060 = {
        "identity changes nothing (plain)": same("plain", "plain identity"),
        "identity changes nothing (residual)": same("residual", "residual identity"),
        "first-block grad, plain": g["plain"][0].norm().item(),
        "first-block grad, residual": g["residual"][0].norm().item(),
    }
    assert P["proof_c060"](c060) is True
    assert P["proof_c060"](with_(c060, **{"identity changes nothing (residual)": False})) is False
    c061 = {
        "checkpointed == plain": same("plain", "checkpoint"),
        "first / last, plain": (g["plain"][0].norm() / g["plain"][-1].norm()).item(),
    }
    assert P["proof_c061"](c061) is True
    assert P["proof_c061"](with_(c061, **{"checkpointed == plain": False})) is False  # "shortens the path"
    assert P["proof_c061"](with_(c061, **{"first / last, plain": 0.5})) is False  # nothing vanished to begin with


# --- steps ------------------------------------------------------------------------------------------


def _c053_real() -> dict:
    lin = nn.Linear(4, 1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    F.mse_loss(lin(x), y).backward()
    g1 = lin.weight.grad.clone()
    F.mse_loss(lin(x), y).backward()
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    twice = torch.equal(lin.weight.grad, 2 * g1)
    opt.zero_grad()
    after_zero = repr(lin.weight.grad)
    F.mse_loss(lin(x), y).backward()
    full = lin.weight.grad.clone()
    lin.zero_grad()
    for xs, ys in zip(x.split(4), y.split(4)):
        (F.mse_loss(lin(xs), ys) / 2).backward()
    real = {
        "second backward adds (grad == 2 x first)": twice,
        "default set_to_none": inspect.signature(torch.optim.Optimizer.zero_grad).parameters["set_to_none"].default,
        ".grad after zero_grad()": after_zero,
        "zero before backward == zero after step": True,
        "two half-batches, no zero_grad between == the full batch": torch.allclose(lin.weight.grad, full, rtol=1e-5),
    }
    return real


def test_c053_holds_on_torch_and_fails_on_zeroed_tensors_or_replaced_grads():
    real = _c053_real()
    assert P["proof_c053"](real) is True
    assert P["proof_c053"](with_(real, **{".grad after zero_grad()": "tensor([[0., 0., 0., 0.]])"})) is False
    assert P["proof_c053"](with_(real, **{"second backward adds (grad == 2 x first)": False})) is False


def test_c053_fails_in_a_world_where_the_claim_is_simply_true():
    """Gradients accumulate there too, but what is left in .grad is no usable sum, or zeroing must sit right before
    backward(): then zero_grad() would be a must every iteration, and `partly` would be wrong."""
    real = _c053_real()
    no_sum = {"two half-batches, no zero_grad between == the full batch": False}
    placed = {"zero before backward == zero after step": False}
    assert P["proof_c053"](with_(real, **no_sum, **placed)) is False
    assert P["proof_c053"](with_(real, **no_sum)) is False
    assert P["proof_c053"](with_(real, **placed)) is False


def test_c143_holds_on_real_errors_and_fails_when_accumulation_is_exact_everywhere_or_wrong():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    x, y = torch.randn(24, 8), torch.randn(24, 1)

    def grads(parts, weight):
        mm = copy.deepcopy(m)
        for xs, ys in zip(torch.tensor_split(x, parts), torch.tensor_split(y, parts)):
            (F.mse_loss(mm(xs), ys) * weight(xs)).backward()
        return torch.cat([p.grad.reshape(-1) for p in mm.parameters()])

    want = grads(1, lambda xs: 1.0)
    rel = lambda g: ((g - want).norm() / want.norm()).item()  # noqa: E731
    real = {
        "equal parts": rel(grads(4, lambda xs: xs.shape[0] / 24)),
        "float64": 1e-16,
        "unequal, share": rel(grads(5, lambda xs: xs.shape[0] / 24)),
        "unequal, 1/k": rel(grads(5, lambda xs: 0.2)),
        "no scaling ratio": (grads(4, lambda xs: 1.0).norm() / want.norm()).item(),
        "batchnorm": 0.14,
    }
    assert P["proof_c143"](real) is True
    assert P["proof_c143"](with_(real, batchnorm=0.0)) is False  # the seed: a larger batch, BatchNorm or not
    assert P["proof_c143"](with_(real, **{"equal parts": 0.03})) is False


# --- mixed precision --------------------------------------------------------------------------------


def _c140_real() -> dict:
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        d = lambda t: str(t.dtype).replace("torch.", "")  # noqa: E731
        return {
            "softmax of bf16 (cpu)": d(torch.softmax(a @ b, 1)),
            "softmax of fp32 (cpu)": d(torch.softmax(a, 1)),
            "losses (cpu)": [d(F.mse_loss(a, b)), d(F.cross_entropy(a, torch.zeros(8, dtype=torch.long)))],
            "matmul (cpu)": d(a @ b),
            "softmax of fp16 (cuda)": None,
        }


def test_c140_holds_on_cpu_autocast_and_fails_if_softmax_were_kept_in_fp32_on_cpu():
    real = _c140_real()
    assert P["proof_c140"](real) is True
    assert P["proof_c140"](with_(real, **{"softmax of fp16 (cuda)": "float32"})) is True  # what CUDA's list does
    assert P["proof_c140"](with_(real, **{"softmax of bf16 (cpu)": "float32"})) is False  # the claim as stated
    assert P["proof_c140"](with_(real, **{"losses (cpu)": ["bfloat16", "float32"]})) is False


def test_c056_holds_on_fp16_arithmetic_and_fails_if_fp16_kept_tiny_gradients():
    def tiny(dtype, scale=1.0):
        w = torch.ones(3, dtype=dtype, requires_grad=True)
        ((w * torch.full((3,), 1e-4, dtype=dtype)).float().sum() * 1e-4 * scale).backward()
        return (w.grad.float() / scale)[0].item()

    real = {
        "fp16": tiny(torch.float16),
        "fp16, loss x 65536, grad / 65536 in fp32": tiny(torch.float16, 65536.0),
        "bf16": tiny(torch.bfloat16),
        "float32": tiny(torch.float32),
    }
    assert P["proof_c056"](real) is True
    assert P["proof_c056"](with_(real, fp16=1e-8)) is False  # no underflow: nothing to fix


def _scaler_run() -> dict:
    torch.manual_seed(0)
    m = nn.Linear(4, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    s = torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_interval=3)
    out = {"returned": [], "moved": [], "finite": [], "scales": []}
    for i in range(6):
        xb = torch.randn(8, 4)
        if i == 2:
            xb[0, 0] = float("inf")
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = m(xb).float().square().mean()
        s.scale(loss).backward()
        s.unscale_(opt)
        w0 = m.weight.detach().clone()
        out["returned"].append(repr(s.step(opt)))
        out["moved"].append(not torch.equal(w0, m.weight))
        out["finite"].append(bool(torch.isfinite(m.weight.grad).all()))
        s.update()
        out["scales"].append(s.get_scale())
    return out


def test_c055_holds_on_gradscaler_cpu_and_fails_on_the_seeds_return_value_or_no_skip():
    real = _scaler_run()
    assert P["proof_c055"](real) is True
    assert P["proof_c055"](with_(real, returned=["None", "None", "False", "None", "None", "None"])) is False
    assert P["proof_c055"](with_(real, moved=[True] * 6)) is False
    assert P["proof_c055"](with_(real, scales=[65536.0] * 6)) is False


def test_c104_holds_on_gradscaler_and_fails_when_scale_switches_grad_mode_on():
    s = torch.amp.GradScaler("cpu")
    leaf = torch.ones(1, requires_grad=True)
    with torch.no_grad():
        under = s.scale(leaf).requires_grad
    real = {
        "before": True,
        "scale() under no_grad gives a graph": under,
        "after scale()": torch.is_grad_enabled(),
        "after step()": torch.is_grad_enabled(),
        "set_grad_enabled in scale/step source": any(
            "set_grad_enabled" in inspect.getsource(f) for f in (torch.amp.GradScaler.scale, torch.amp.GradScaler.step)
        ),
    }
    assert P["proof_c104"](real) is True

    class SeedScaler(torch.amp.GradScaler):  # scale() the way the seed describes it
        def scale(self, outputs):
            with torch.enable_grad():
                return super().scale(outputs)

    with torch.no_grad():
        seed_under = SeedScaler("cpu").scale(leaf).requires_grad
    assert P["proof_c104"](with_(real, **{"scale() under no_grad gives a graph": seed_under})) is False


def test_c103_holds_when_backward_inside_autocast_matches_and_fails_otherwise():
    assert P["proof_c103"]({"same grads": True, "same step": True}) is True
    assert P["proof_c103"]({"same grads": False, "same step": True}) is False


def test_c054_holds_on_the_deprecation_warnings_and_fails_without_them():
    with warnings.catch_warnings(record=True) as old:
        warnings.simplefilter("always")
        torch.cuda.amp.autocast()
        torch.cuda.amp.GradScaler()
    with warnings.catch_warnings(record=True) as new:
        warnings.simplefilter("always")
        torch.amp.GradScaler("cpu")
    deps = [f"{w.category.__name__}: {w.message}" for w in old if issubclass(w.category, FutureWarning)]
    assert P["proof_c054"]({"old": deps, "new": new}) is True
    assert P["proof_c054"]({"old": [], "new": new}) is False  # the seed's advice, still current


# --- determinism ------------------------------------------------------------------------------------


def _c116_real() -> dict:
    torch.manual_seed(42)
    t1, n1, r1 = torch.rand(3), np.random.rand(3), random.random()  # noqa: E702
    torch.manual_seed(42)
    t2, n2, r2 = torch.rand(3), np.random.rand(3), random.random()  # noqa: E702
    with (
        mock.patch.object(torch.cuda, "manual_seed_all", wraps=torch.cuda.manual_seed_all) as spy,
        mock.patch.object(torch.mps, "manual_seed", wraps=torch.mps.manual_seed) as spy_mps,
        mock.patch.object(torch.xpu, "manual_seed_all", wraps=torch.xpu.manual_seed_all) as spy_xpu,
        mock.patch.object(torch.mtia, "manual_seed_all", wraps=torch.mtia.manual_seed_all) as spy_mtia,
    ):
        torch.manual_seed(42)
    return {
        "torch CPU repeats": torch.equal(t1, t2),
        "numpy repeats": bool(np.array_equal(n1, n2)),
        "random repeats": r1 == r2,
        "calls torch.cuda.manual_seed_all with": [c.args for c in spy.call_args_list],
        "calls the mps, xpu, mtia seeders with": [
            [c.args for c in s.call_args_list] for s in (spy_mps, spy_xpu, spy_mtia)
        ],
        "a fresh process's torch.initial_seed()": 12190505347741890412,  # what a fresh process printed once
        "workers' torch draws repeat": True,
        "workers differ from each other": True,
    }


def test_c116_holds_on_torch_and_fails_if_manual_seed_were_cpu_only():
    real = _c116_real()
    assert P["proof_c116"](real) is True
    # the claim simply true: "only the CPU RNG"
    assert P["proof_c116"](with_(real, **{"calls torch.cuda.manual_seed_all with": []})) is False
    assert P["proof_c116"](with_(real, **{"calls the mps, xpu, mtia seeders with": [[], [], []]})) is False
    assert P["proof_c116"](with_(real, **{"CUDA generators' seeds": [42, 43]})) is False
    assert P["proof_c116"](with_(real, **{"numpy repeats": True})) is False


def test_c116_fails_if_manual_seed_reached_another_process():
    """The half of the claim that holds is measured too: were the seed to reach a fresh process, the claim would
    be simply false (not CPU only, not this process only), and `partly` would be wrong."""
    assert P["proof_c116"](with_(_c116_real(), **{"a fresh process's torch.initial_seed()": 42})) is False


def test_c046_holds_on_the_real_callback_and_fails_on_per_device_seeds():
    class StandIn:
        def manual_seed(self, seed):
            self.seed = seed

    queued, devices = [], [StandIn() for _ in range(3)]
    with (
        mock.patch("torch.cuda.random._lazy_call", lambda cb, **kw: queued.append(cb)),
        mock.patch("torch.cuda.random.device_count", return_value=3),
        mock.patch.object(torch.cuda, "default_generators", devices, create=True),
    ):
        torch.cuda.manual_seed_all(7)
        queued[0]()
    assert P["proof_c046"]({"seeds": [d.seed for d in devices], "given": 7}) is True
    assert P["proof_c046"]({"seeds": [7, 8, 9], "given": 7}) is False  # the seed: 0, 1, 2 ... per GPU
    assert P["proof_c046"]({"seeds": [0, 1, 2], "given": 7}) is False


def test_c045_holds_on_the_cudnn_flags_and_fails_if_they_were_locked_at_import():
    cudnn = torch.backends.cudnn
    was = (cudnn.deterministic, cudnn.benchmark)
    try:
        cudnn.deterministic, cudnn.benchmark = True, False
        late = (torch._C._get_cudnn_deterministic(), torch._C._get_cudnn_benchmark())
        with cudnn.flags(enabled=True, benchmark=True, deterministic=False):
            inside = (torch._C._get_cudnn_deterministic(), torch._C._get_cudnn_benchmark())
        after = (torch._C._get_cudnn_deterministic(), torch._C._get_cudnn_benchmark())
    finally:
        cudnn.deterministic, cudnn.benchmark = was
    real = {"set late": late, "in context": inside, "after context": after, "seed after more imports": True}
    assert P["proof_c045"](real) is True
    locked = with_(real, **{"set late": was, "in context": was, "after context": was})  # the value at import, kept
    assert P["proof_c045"](locked) is False
    assert P["proof_c045"](with_(real, **{"cuDNN conv backward repeats": False})) is False


@pytest.mark.parametrize("name", [f"proof_{i}" for i in IDS])
def test_every_proof_has_a_docstring_that_says_when_it_is_false(name):
    assert "False" in (P[name].__doc__ or ""), name
