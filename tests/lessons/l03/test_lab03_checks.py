"""Lab 03 (memory): common wrong answers fail for the right reason.

What every lab must satisfy (reference full marks, judges that never crash, no leaked answers)
is in ``test_lab_contract.py``; here are only lab 03's wrong answers.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

from conftest import checks_by_task
from torchcontracts.checks import Check
from torchcontracts.lessons.l03_memory.lab03_memory import lab, train_leaky

MiB, KiB = 1 << 20, 1 << 10


@pytest.fixture(scope="module")
def checks() -> dict[str, list[Check]]:
    """Public and hidden checks by task, the way the grader loads them."""
    return checks_by_task(lab.lab_id)


def _failures(checks: list[Check], fn: Callable[..., Any], hidden: bool | None = None) -> list[str]:
    chosen = [c for c in checks if hidden is None or c.hidden == hidden]
    return [o.reason for o in (c.run_local(fn, seed=12345) for c in chosen) if not o.ok]


# --- t1 -------------------------------------------------------------------------------------------


def t1_no_checkpoint(model, x, y):
    return F.mse_loss(model(x), y)


def t1_every_block(model, x, y):
    h = x
    for block in model:
        h = checkpoint(block, h, use_reentrant=False)
    return F.mse_loss(h, y)


def t1_checkpoint_sequential(model, x, y):
    return F.mse_loss(checkpoint_sequential(model, 2, x, use_reentrant=False), y)


def t1_reentrant(model, x, y):
    h = checkpoint(model[:4], x, use_reentrant=True)
    return F.mse_loss(checkpoint(model[4:], h, use_reentrant=True), y)


def t1_detached_boundary(model, x, y):
    h = checkpoint(model[:4], x, use_reentrant=False).detach()
    return F.mse_loss(checkpoint(model[4:], h, use_reentrant=False), y)


def t1_no_grad(model, x, y):
    with torch.no_grad():
        return F.mse_loss(model(x), y)


@pytest.mark.parametrize(
    "wrong, reason",
    [
        (t1_no_checkpoint, "budget"),
        (t1_every_block, "budget"),
        (t1_checkpoint_sequential, "last segment"),
        (t1_reentrant, "use_reentrant=False"),
        (t1_detached_boundary, "grad 0"),
        (t1_no_grad, "requires_grad=True"),
    ],
)
def test_t1_wrong_answers_fail_for_the_right_reason(wrong, reason, checks):
    with pytest.warns(UserWarning) if wrong is t1_reentrant else contextlib.nullcontext():
        fails = _failures(checks["t1"], wrong, hidden=False)
    assert fails and reason in fails[0], fails


def test_t1_hidden_budget_is_tighter_than_the_public_one(checks):
    def four_segments(model, x, y):
        h = x
        for start in range(0, 8, 2):
            h = checkpoint(model[start : start + 2], h, use_reentrant=False)
        return F.mse_loss(h, y)

    assert _failures(checks["t1"], four_segments, hidden=False) == []  # 3 boundaries + output = 4 activations
    fails = _failures(checks["t1"], four_segments, hidden=True)
    assert fails and "budget" in fails[0]


# --- t2 -------------------------------------------------------------------------------------------


def _loop(model, xs, ys, vx, vy, *, val_graph=False, worst_view=False, hook=False, keep_hook=False, late_feat=False):
    """A configurable version of the loop: each flag puts one leak (or one mistake) back."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    hist: dict[str, list[Any]] = {"train_loss": [], "val_loss": [], "worst": [], "feat_norm": []}
    feats: list[torch.Tensor] = []
    handle = (
        model[0].register_forward_hook(lambda m, i, o: feats.append(o if hook else o.detach().norm().item()))
        if (hook or keep_hook)
        else None
    )
    for x, y in zip(xs, ys):
        opt.zero_grad()
        h = model[0](x)
        pred = model[2](model[1](h))
        err = (pred - y).abs()
        loss = F.mse_loss(pred, y)
        loss.backward()
        opt.step()
        hist["train_loss"].append(loss.item())
        hist["feat_norm"].append(model[0](x).norm().item() if late_feat else h.detach().norm().item())
        hist["worst"].append(err[err.argmax()] if worst_view else err.max().item())
        if val_graph:
            hist["val_loss"].append(F.mse_loss(model(vx), vy))
        else:
            with torch.no_grad():
                hist["val_loss"].append(F.mse_loss(model(vx), vy).item())
    if handle is not None and not (hook or keep_hook):
        handle.remove()
    return hist


@pytest.mark.parametrize(
    "flags, reason",
    [
        ({"val_graph": True}, "bytes held by the returned history"),
        ({"worst_view": True}, "bytes held by the returned history"),
        ({"hook": True}, "bytes still alive after it is dropped"),
        ({"late_feat": True}, "feat_norm"),
    ],
)
def test_t2_loops_with_one_leak_or_mistake_left_fail(flags, reason, checks):
    fails = _failures(checks["t2"], lambda *a: _loop(*a, **flags), hidden=False)
    assert fails and reason in fails[0], fails


def test_t2_the_handed_out_loop_fails():
    fails = _failures(lab.checks_for("t2", hidden=False), train_leaky)
    assert fails and "grows" in fails[0]


def test_t2_a_hook_left_registered_passes_public_but_fails_hidden(checks):
    keep = lambda *a: _loop(*a, keep_hook=True)  # noqa: E731 - a one-line variant of the loop
    assert _failures(checks["t2"], keep, hidden=False) == []
    fails = _failures(checks["t2"], keep, hidden=True)
    assert fails and "hooks left" in fails[0]


def test_t2_logging_detached_scalars_is_not_a_leak(checks):
    def detached(model, xs, ys, vx, vy):
        hist = _loop(model, xs, ys, vx, vy)
        return {k: [torch.tensor(v) for v in vs] for k, vs in hist.items()}

    assert _failures(checks["t2"], detached) == []


# --- t3 -------------------------------------------------------------------------------------------

RIGHT = ((22 * MiB, 600 * KiB + 1536 * KiB), (22 * MiB, 20 * MiB + 500 * KiB), (40 * MiB, 24 * MiB))


@pytest.mark.parametrize(
    "answer, reason",
    [
        # requested bytes instead of whole blocks in B's allocated; right reserved: passes public, fails hidden
        (RIGHT[:1] + ((22 * MiB, 19 * MiB + 500 * KiB),) + RIGHT[2:], "hidden"),
        # buddy-system thinking: a 1.5 MiB tensor in a 2 MiB block, segments of powers of two
        (((4 * MiB, 2 * MiB + 600 * KiB),) + RIGHT[1:], "trace A reserved"),
        # believing empty_cache releases the free holes of C
        (RIGHT[:2] + ((32 * MiB, 24 * MiB),), "trace C reserved"),
        # a new segment for b in trace B (no reuse of the cached 20 MiB block)
        ((RIGHT[0], (42 * MiB, 19 * MiB + 500 * KiB), RIGHT[2]), "trace B reserved"),
        # MiB as floats
        (((22.0, 2.09), (22.0, 20.49), (40.0, 24.0)), "pair of Python ints"),
    ],
)
def test_t3_wrong_predictions_fail(answer, reason, checks):
    fn = lambda: answer  # noqa: E731
    fn.__name__ = "predict_memory"
    if reason == "hidden":
        assert _failures(checks["t3"], fn, hidden=False) == []
        fails = _failures(checks["t3"], fn, hidden=True)
        assert fails and "trace B allocated" in fails[0], fails
    else:
        fails = _failures(checks["t3"], fn)
        assert fails and reason in fails[0], fails


def test_t3_right_answer_written_by_hand_matches_the_model(checks):
    fn = lambda: RIGHT  # noqa: E731
    assert _failures(checks["t3"], fn) == []
