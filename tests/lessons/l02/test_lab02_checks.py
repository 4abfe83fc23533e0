"""Lab 02 (autograd): common wrong answers fail for the right reason.

What every lab must satisfy (reference full marks, judges that never crash, no leaked answers)
is in ``test_lab_contract.py``; here are only lab 02's wrong answers (and its drivers' own units).
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

from conftest import checks_by_task
from torchcontracts.checks import Case, Check
from torchcontracts.lessons.l02_autograd.lab02_autograd import build_mlp, lab


@pytest.fixture(scope="module")
def checks() -> dict[str, list[Check]]:
    """Public and hidden checks by task, the way the grader loads them."""
    return checks_by_task(lab.lab_id)


def _failures(checks: list[Check], fn: Callable[..., Any], seed: int = 12345) -> list[str]:
    return [o.reason for o in (c.run_local(fn, seed=seed) for c in checks) if not o.ok]


# --- common wrong answers, per task ----------------------------------------------------------


def _function(forward: Callable[..., Any], backward: Callable[..., Any]) -> type[torch.autograd.Function]:
    return type(
        "Wrong", (torch.autograd.Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    )


def _lin_forward(ctx, x, w, b):
    ctx.save_for_backward(x, w)
    ctx.has_bias = b is not None
    return x @ w.T + b if b is not None else x @ w.T


def _lin(backward: Callable[..., Any], forward: Callable[..., Any] = _lin_forward) -> Callable[..., Any]:
    fn = _function(forward, backward)
    return lambda x, w, b=None: fn.apply(x, w, b)


def _bw_missing_transpose(ctx, g):
    x, w = ctx.saved_tensors
    return g @ w, x.T @ g, g.sum(0) if ctx.has_bias else None


def _bw_square_only(ctx, g):
    x, w = ctx.saved_tensors  # g @ w.T only has the right shape when w is square
    return g @ w.T, g.T @ x, g.sum(0) if ctx.has_bias else None


def _bw_bias_always(ctx, g):
    x, w = ctx.saved_tensors
    return g @ w, g.T @ x, g.sum(0)


def _bw_bias_mean(ctx, g):
    x, w = ctx.saved_tensors  # (returning g unsummed would pass: autograd sums a broadcast gradient to b's shape)
    return g @ w, g.T @ x, g.mean(0) if ctx.has_bias else None


T1_WRONG = {
    "grad_w = x.T @ g (missing transpose)": (_lin(_bw_missing_transpose), ("invalid gradient", "values differ")),
    "grad_x = g @ w.T": (_lin(_bw_square_only), ("raised", "values differ")),
    "a gradient for a None bias": (_lin(_bw_bias_always), ("raised",)),
    "grad_b averaged over the batch": (_lin(_bw_bias_mean), ("values differ",)),
    "F.linear without a Function": (lambda x, w, b=None: F.linear(x, w, b), ("built-in op",)),
}


def _lse_naive_forward(ctx, x, dim):
    out = x.exp().sum(dim).log()
    ctx.save_for_backward(x, out)
    ctx.dim = dim
    return out


def _lse_backward(ctx, g):
    x, out = ctx.saved_tensors
    return g.unsqueeze(ctx.dim) * (x - out.unsqueeze(ctx.dim)).exp(), None


def _lse_stable_forward(ctx, x, dim):
    m = x.amax(dim, keepdim=True)
    out = (m + (x - m).exp().sum(dim, keepdim=True).log()).squeeze(dim)
    ctx.save_for_backward(x, out)
    ctx.dim = dim
    return out


def _lse_no_unsqueeze(ctx, g):
    x, out = ctx.saved_tensors
    return g * (x - out.unsqueeze(ctx.dim)).exp(), None


def _lse_no_none(ctx, g):
    return _lse_backward(ctx, g)[0]


def _lse_inplace_forward(ctx, x, dim):
    m = x.amax(dim, keepdim=True)
    x.sub_(m)  # "saves memory", and changes the caller's tensor
    out = (m + x.exp().sum(dim, keepdim=True).log()).squeeze(dim)
    ctx.save_for_backward(x + m, out)
    ctx.dim = dim
    return out


def _lse(forward: Callable[..., Any], backward: Callable[..., Any]) -> Callable[..., Any]:
    fn = _function(forward, backward)
    return lambda x, dim: fn.apply(x, dim)


T2_WRONG = {
    "naive exp overflows": (_lse(_lse_naive_forward, _lse_backward), ("values differ", "NaN")),
    "grad_out not unsqueezed": (_lse(_lse_stable_forward, _lse_no_unsqueeze), ("raised", "values differ")),
    "no None for dim": (_lse(_lse_stable_forward, _lse_no_none), ("incorrect number of gradients",)),
    "x.sub_ in forward": (_lse(_lse_inplace_forward, _lse_backward), ("changed an input in place",)),
    "torch.logsumexp without a Function": (lambda x, dim: torch.logsumexp(x, dim), ("built-in op",)),
}


def _clip(forward: Callable[..., Any], backward: Callable[..., Any]) -> Callable[..., Any]:
    fn = _function(forward, backward)
    return lambda x, bound: fn.apply(x, bound)


def _clip_fw(ctx, x, bound):
    ctx.bound = bound
    return x.clone()


T3_WRONG = {
    "clips the values": (_clip(lambda ctx, x, b: x.clamp(-b, b), lambda ctx, g: (g, None)), ("values differ",)),
    "one-sided clamp(max=bound)": (_clip(_clip_fw, lambda ctx, g: (g.clamp(max=ctx.bound), None)), ("values differ",)),
    "no None for bound": (
        _clip(_clip_fw, lambda ctx, g: g.clamp(-ctx.bound, ctx.bound)),
        ("incorrect number of gradients",),
    ),
    "no clipping": (_clip(_clip_fw, lambda ctx, g: (g, None)), ("values differ",)),
    "returns x itself": (lambda x, bound: x, ("values differ",)),
}


def _ste_fw(ctx, x):
    ctx.save_for_backward(x)
    return torch.sign(x)


def _ste(forward: Callable[..., Any], backward: Callable[..., Any]) -> Callable[..., Any]:
    fn = _function(forward, backward)
    return lambda x: fn.apply(x)


def _ste_saves_output(ctx, x):
    out = torch.sign(x)
    ctx.save_for_backward(out)
    return out


T4_WRONG = {
    "plain torch.sign": (lambda x: torch.sign(x), ("built-in op", "values differ")),
    "identity backward, no mask": (_ste(_ste_fw, lambda ctx, g: g), ("values differ",)),
    "mask from the saved output": (
        _ste(_ste_saves_output, lambda ctx, g: g * (ctx.saved_tensors[0].abs() <= 1)),
        ("values differ",),
    ),
    "strict |x| < 1": (_ste(_ste_fw, lambda ctx, g: g * (ctx.saved_tensors[0].abs() < 1)), ("values differ",)),
}


def _sp_fw(ctx, x):
    ctx.save_for_backward(x)
    return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))


def _sp(forward: Callable[..., Any], backward: Callable[..., Any]) -> Callable[..., Any]:
    fn = _function(forward, backward)
    return lambda x: fn.apply(x)


def _sp_bw_no_grad(ctx, g):
    (x,) = ctx.saved_tensors
    with torch.no_grad():
        return g * torch.sigmoid(x)


def _sp_bw_detach(ctx, g):
    (x,) = ctx.saved_tensors
    return g * torch.sigmoid(x.detach())


def _sp_naive_fw(ctx, x):
    ctx.save_for_backward(x)
    return torch.log(1 + torch.exp(x))


def _sp_bw(ctx, g):
    return g * torch.sigmoid(ctx.saved_tensors[0])


T5_WRONG = {
    "backward under no_grad": (_sp(_sp_fw, _sp_bw_no_grad), ("no graph", "raised", "Jacobian")),
    "backward detaches x": (_sp(_sp_fw, _sp_bw_detach), ("does not depend on x", "no graph", "raised", "Jacobian")),
    "naive log(1 + exp(x))": (_sp(_sp_naive_fw, _sp_bw), ("values differ", "NaN")),
    "derivative sigmoid(-x)": (
        _sp(_sp_fw, lambda ctx, g: g * torch.sigmoid(-ctx.saved_tensors[0])),
        ("values differ", "Jacobian"),
    ),
    "F.softplus without a Function": (lambda x: F.softplus(x), ("built-in op",)),
}


def _norms_after_backward(model, x, y):
    F.mse_loss(model(x), y).backward()
    return {n: p.grad.norm().item() for n, p in model.named_parameters()}


def _norms_hooks_left(model, x, y):
    norms = {}
    for name, p in model.named_parameters():
        p.register_hook(lambda g, name=name: norms.__setitem__(name, g.norm().item()))
    F.mse_loss(model(x), y).backward()
    return norms


def _norms_post_accumulate(model, x, y):
    norms = {}
    handles = [
        p.register_post_accumulate_grad_hook(lambda p, name=name: norms.__setitem__(name, p.grad.norm().item()))
        for name, p in model.named_parameters()
    ]
    F.mse_loss(model(x), y).backward()
    for h in handles:
        h.remove()
    return norms


def _norms_of_weights(model, x, y):
    F.mse_loss(model(x), y).backward()
    return {n: p.detach().norm() for n, p in model.named_parameters()}


def _norms_squared(model, x, y):
    norms = {}
    handles = [
        p.register_hook(lambda g, name=name: norms.__setitem__(name, (g * g).sum().item()))
        for name, p in model.named_parameters()
    ]
    F.mse_loss(model(x), y).backward()
    for h in handles:
        h.remove()
    return norms


def _norms_by_index(model, x, y):
    F.mse_loss(model(x), y).backward()
    return {i: p.grad.norm().item() for i, p in enumerate(model.parameters())}


T6_WRONG = {
    "reads .grad after backward (stale grads count)": (_norms_after_backward, ("values differ",)),
    "hooks never removed": (_norms_hooks_left, ("still registered",)),
    "post-accumulate hook reads .grad": (_norms_post_accumulate, ("values differ",)),
    "norms of the weights": (_norms_of_weights, ("values differ",)),
    "squared norms": (_norms_squared, ("values differ",)),
    "keys are indices": (_norms_by_index, ("keys should be",)),
}

WRONG = {"t1": T1_WRONG, "t2": T2_WRONG, "t3": T3_WRONG, "t4": T4_WRONG, "t5": T5_WRONG, "t6": T6_WRONG}


@pytest.mark.parametrize(
    "task,name", [(t, n) for t, ws in WRONG.items() for n in ws], ids=lambda v: str(v).replace(" ", "-")
)
def test_common_wrong_answer_fails_with_its_reason(task, name, checks):
    fn, reasons = WRONG[task][name]
    fails = _failures(checks[task], fn)
    assert fails, f"{task}: the wrong answer '{name}' passes every check"
    assert any(r in f for f in fails for r in reasons), f"{task} '{name}': expected one of {reasons} in {fails}"


@pytest.mark.parametrize(
    "task,name",
    [
        ("t2", "naive exp overflows"),
        ("t4", "strict |x| < 1"),
        ("t6", "reads .grad after backward (stale grads count)"),
        ("t6", "post-accumulate hook reads .grad"),
    ],
)
def test_edge_case_answers_pass_public_checks_and_fail_hidden_ones(task, name, checks):
    fn, _ = WRONG[task][name]
    public = [c for c in checks[task] if not c.hidden]
    hidden = [c for c in checks[task] if c.hidden]
    assert _failures(public, fn) == [], f"{task} '{name}' already fails the public checks"
    assert _failures(hidden, fn), f"{task} '{name}' passes the hidden checks"


def test_monitor_driver_builds_the_same_model_the_judge_does():
    weights = [
        torch.randn(4, 3, dtype=torch.float64),
        torch.randn(4, dtype=torch.float64),
        torch.randn(2, 4, dtype=torch.float64),
        torch.randn(2, dtype=torch.float64),
    ]
    model = build_mlp(weights)
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert all(torch.equal(p, w) for p, w in zip(model.parameters(), weights))
    x = torch.randn(5, 3, dtype=torch.float64)
    assert torch.allclose(model(x), torch.tanh(x @ weights[0].T + weights[1]) @ weights[2].T + weights[3])


def test_gradcheck_driver_reports_a_wrong_backward_in_one_line(checks):
    wrong = _sp(_sp_fw, lambda ctx, g: g * 0.5)
    case = Case("x", (torch.randn(4, dtype=torch.float64),))
    from torchcontracts.lessons.l02_autograd.lab02_autograd import run_gradcheck

    out = run_gradcheck(wrong, case)
    assert out["passed"] is False and "\n" not in out["message"] and out["message"]
