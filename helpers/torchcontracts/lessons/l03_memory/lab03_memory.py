"""Lab 03 (memory): the tasks, their call drivers and public checks; hidden checks live in the solution only.

t1 fits a training step under a saved-activation budget (measured by ``SavedTensorMeter``);
t2 fixes three leaks in a training loop (bytes held by its history and by hidden references
must not grow with the number of steps); t3 predicts the caching allocator's numbers for
three traces (judged against ``torchcontracts.lessons.l03_memory.alloc``, the model lesson 03 checks on CUDA).

Public names the hidden-check cells build on: ``budget_case`` / ``judge_budget`` / ``measure_step``
(t1), ``leak_case`` / ``growth_rows`` / ``value_rows`` / ``probe_leaks`` (t2), ``trace_cases`` /
``allocator_rows`` (t3). Judges never raise on an odd answer: they return a failing row.

t3's judge (``allocator_rows``, ``judge_traces``) and the model's answer live in the grader-only
``lab03_judges``, imported here only to register the checks (a graded kernel sees placeholders there);
``TRACES``, the task's input, stays here. No driver or module-level code here calls them.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import torch
import torch._dynamo  # noqa: F401  see below
import torch.nn.functional as F
from torch import nn

# checkpoint(use_reentrant=False) imports torch._dynamo on first use, and that import rebinds torch.manual_seed.
# Importing it here, before any learner code runs, keeps the grader's identity baseline (grading.driver) stable.

from torchcontracts.checks import Case, Check, Comparison, LabSpec, Task, compare, short
from torchcontracts.checks.comparison import not_a_result as _not_a_result
from torchcontracts.lessons.l03_memory.lab03_judges import allocator_rows, judge_traces  # grader-side only
from torchcontracts.lessons.l03_memory.memory import SavedTensorMeter, held_bytes, live_tensor_bytes

__all__ = [
    "DEPTH",
    "TRACES",
    "WIDTH",
    "activation_bytes",
    "allocator_rows",
    "budget_case",
    "growth_rows",
    "judge_budget",
    "judge_traces",
    "lab",
    "leak_case",
    "make_deep_mlp",
    "make_small_mlp",
    "measure_step",
    "probe_leaks",
    "reference_history",
    "trace_cases",
    "train_leaky",
    "value_rows",
]

WIDTH, DEPTH = 128, 8
LR = 0.05
GROWTH_LIMIT = 1024  # bytes a history may grow by between N and 2N steps (floats are fine, graphs are not)


def activation_bytes(batch: int) -> int:
    """Bytes of one (batch, WIDTH) float32 activation of the deep MLP."""
    return batch * WIDTH * 4


def make_deep_mlp(weights: Sequence[torch.Tensor] | None = None, seed: int = 0) -> nn.Sequential:
    """DEPTH blocks of Linear(WIDTH, WIDTH) + GELU; ``weights`` (from ``state_dict().values()``) if given."""
    torch.manual_seed(seed)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.GELU()) for _ in range(DEPTH)])
    if weights is not None:
        _load(model, weights)
    return model


def make_small_mlp(weights: Sequence[torch.Tensor] | None = None, seed: int = 0) -> nn.Sequential:
    """The t2 model: Linear(32, 256) -> ReLU -> Linear(256, 1)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 1))
    if weights is not None:
        _load(model, weights)
    return model


def _load(model: nn.Module, weights: Sequence[torch.Tensor]) -> None:
    with torch.no_grad():
        for p, w in zip(model.state_dict().values(), weights):
            p.copy_(w)


def _weights(model: nn.Module) -> list[torch.Tensor]:
    return [w.detach().clone() for w in model.state_dict().values()]


# --- t1 checkpointed_loss(model, x, y) under a saved-activation budget -------------------------


def budget_case(label: str, seed: int, batch: int, budget_acts: int) -> Case:
    """A t1 case: the deep MLP's weights, a batch of data, and a budget of ``budget_acts`` activations."""
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(batch, WIDTH, generator=g), torch.randn(batch, WIDTH, generator=g)
    return Case(label, (_weights(make_deep_mlp(seed=seed)), x, y, budget_acts * activation_bytes(batch)))


def _t1_cases(seed: int) -> list[Case]:
    return [budget_case("deep MLP, batch 64, budget 4 activations", seed, 64, 4)]


def measure_step(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """Call driver: run ``fn(model, x, y)`` under the meter, then backward; return bytes, loss, grads."""
    weights, x, y, _budget = case.args
    model = make_deep_mlp(weights)
    with SavedTensorMeter(exclude=[model, x, y]) as meter:
        loss = fn(model, x, y)
    if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
        raise ValueError(
            "return the loss tensor with its graph (requires_grad=True): no torch.no_grad(), "
            "no .detach(), and use_reentrant=False so parameters get gradients"
        )
    loss.backward()
    grads = [p.grad.clone() if p.grad is not None else torch.full_like(p, math.nan) for p in model.parameters()]
    return {
        "saved_bytes": torch.tensor(meter.bytes),
        "saved_count": torch.tensor(meter.count),
        "loss": loss.detach().reshape(()),
        "grads": grads,
    }


def _count(v: Any) -> int | None:
    """A byte count from the driver (a tensor or an int), or None when it is not one."""
    try:
        n = float(v)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return None
    return int(n) if math.isfinite(n) else None


def judge_budget(case: Case, out: Any) -> list[Comparison]:
    """t1: saved bytes within the budget, and the loss and gradients of a plain step."""
    bad = _not_a_result(out, ("saved_bytes", "saved_count", "loss", "grads"))
    if bad:
        return bad
    weights, x, y, budget = case.args
    saved = _count(out["saved_bytes"])
    if saved is None:
        return [Comparison.plain("saved bytes", False, "not a byte count", got=out["saved_bytes"])]
    rows = [
        Comparison.plain(
            "saved bytes",
            saved <= budget,
            strides=f"{saved} <= {budget}",
            status="within budget"
            if saved <= budget
            else f"saves {saved} B ({_count(out['saved_count'])} activations) > budget {budget} B: checkpoint larger segments "
            "(checkpoint_sequential leaves its last segment un-checkpointed)",
        )
    ]
    model = make_deep_mlp(weights)
    loss = F.mse_loss(model(x), y)
    loss.backward()
    rows.append(compare("loss", out["loss"], loss.detach(), atol=1e-6, rtol=1e-5))
    grads = out["grads"]
    if not isinstance(grads, (list, tuple)) or len(grads) != len(list(model.parameters())):
        return rows + [
            Comparison.plain(
                "grads",
                False,
                "one gradient per parameter expected",
                expected=len(list(model.parameters())),
                got=short(grads),
            )
        ]
    for i, (g, p) in enumerate(zip(grads, model.parameters())):
        rows.append(compare(f"grad {i}", g, p.grad, atol=1e-6, rtol=1e-4))
    return rows


# --- t2 train_fixed(model, xs, ys, val_x, val_y): no leaks ----------------------------------------


def train_leaky(
    model: nn.Module, xs: Sequence[torch.Tensor], ys: Sequence[torch.Tensor], val_x: torch.Tensor, val_y: torch.Tensor
) -> dict[str, list[Any]]:
    """The loop the lab hands out: it trains correctly, and it leaks in three places."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    history: dict[str, list[Any]] = {"train_loss": [], "val_loss": [], "worst": [], "feat_norm": []}
    feats: list[torch.Tensor] = []
    model[0].register_forward_hook(lambda mod, inp, out: feats.append(out))
    for x, y in zip(xs, ys):
        opt.zero_grad()
        pred = model(x)
        err = (pred - y).abs()
        loss = F.mse_loss(pred, y)
        loss.backward()
        opt.step()
        history["train_loss"].append(loss.item())
        history["feat_norm"].append(feats[-1].norm().item())
        history["worst"].append(err[err.argmax()])
        history["val_loss"].append(F.mse_loss(model(val_x), val_y))
    return history


def reference_history(
    weights: Sequence[torch.Tensor],
    xs: Sequence[torch.Tensor],
    ys: Sequence[torch.Tensor],
    val_x: torch.Tensor,
    val_y: torch.Tensor,
) -> dict[str, list[float]]:
    """What the fixed loop must return, as floats (the judge's reference; never the learner's code)."""
    model = make_small_mlp(weights)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    out: dict[str, list[float]] = {"train_loss": [], "val_loss": [], "worst": [], "feat_norm": []}
    for x, y in zip(xs, ys):
        opt.zero_grad()
        h = model[0](x)
        pred = model[2](model[1](h))
        loss = F.mse_loss(pred, y)
        loss.backward()
        opt.step()
        out["train_loss"].append(loss.item())
        out["feat_norm"].append(h.detach().norm().item())
        out["worst"].append((pred - y).abs().max().item())
        with torch.no_grad():
            out["val_loss"].append(F.mse_loss(model(val_x), val_y).item())
    return out


def leak_case(label: str, seed: int, steps: int, val: int) -> Case:
    """A t2 case: the small MLP's weights, ``steps`` training batches and ``val`` validation rows."""
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(64, 32, generator=g) for _ in range(steps)]
    ys = [torch.randn(64, 1, generator=g) for _ in range(steps)]
    vx, vy = torch.randn(val, 32, generator=g), torch.randn(val, 1, generator=g)
    return Case(label, (_weights(make_small_mlp(seed=seed)), xs, ys, vx, vy))


def _t2_cases(seed: int) -> list[Case]:
    return [leak_case("8 steps (measured after 4 and after 8)", seed, 8, 512)]


def probe_leaks(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """Call driver: run ``fn`` for N/2 and N steps; return bytes held and leaked, hooks left, and the history."""
    weights, xs, ys, vx, vy = case.args
    held, leaked, hooks, history = [], [], [], {}
    for n in (len(xs) // 2, len(xs)):
        model = make_small_mlp(weights)
        base = live_tensor_bytes()[1]
        out = fn(model, xs[:n], ys[:n], vx, vy)
        if not isinstance(out, dict):
            raise TypeError(f"return the history dict, got {type(out).__name__}")
        held.append(held_bytes(out, exclude=[model, vx, vy, *xs, *ys]))
        missing = {"train_loss", "val_loss", "worst", "feat_norm"} - set(out)
        if missing:
            raise KeyError(f"the history lacks {sorted(missing)}: keep the keys of train_leaky's history")
        history = {
            k: torch.tensor(
                [float(v.detach()) if isinstance(v, torch.Tensor) else float(v) for v in out[k]], dtype=torch.float64
            )
            for k in sorted(out)
        }
        del out
        leaked.append(live_tensor_bytes()[1] - base)
        hooks.append(sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()))
        del model
    return {"held": torch.tensor(held), "leaked": torch.tensor(leaked), "hooks": torch.tensor(hooks), **history}


def growth_rows(out: Any) -> list[Comparison]:
    """t2: the bytes held by the history, and leaked after it is dropped, must not grow with the run."""
    bad = _not_a_result(out, ("held", "leaked"))
    if bad:
        return bad
    rows = []
    for key, what in (
        ("held", "bytes held by the returned history"),
        ("leaked", "bytes still alive after it is dropped"),
    ):
        pair = [_count(v) for v in out[key]] if isinstance(out[key], (torch.Tensor, list, tuple)) else []
        if len(pair) != 2 or None in pair:
            rows.append(Comparison.plain(what, False, "not two byte counts", got=out[key]))
            continue
        a, b = pair
        grow = b - a
        rows.append(
            Comparison.plain(
                what,
                grow <= GROWTH_LIMIT,
                strides=f"{a} -> {b}",
                status="does not grow"
                if grow <= GROWTH_LIMIT
                else f"grows by {grow} B when the run doubles: something still holds tensors or graphs "
                "(log Python floats with .item())",
                diff=float(grow),
            )
        )
    return rows


def value_rows(case: Case, out: Any) -> list[Comparison]:
    """t2: each logged series equals the fixed loop's, as float64 values."""
    bad = _not_a_result(out, ())
    if bad:
        return bad
    ref = reference_history(*case.args)
    return [
        compare(key, out.get(key), torch.tensor(ref[key], dtype=torch.float64), atol=1e-5, rtol=1e-4)
        for key in ("train_loss", "val_loss", "worst", "feat_norm")
    ]


def _t2_judge(case: Case, out: Any) -> list[Comparison]:
    return growth_rows(out) + value_rows(case, out) if isinstance(out, dict) else growth_rows(out)


# --- t3 predict_memory(): the allocator's numbers for three traces --------------------------------

TRACES: dict[str, str] = {
    "A": "alloc a 300KiB\nalloc b 300KiB\nalloc c 1.5MiB",
    "B": "alloc a 19.5MiB\nfree a\nalloc b 19MiB\nalloc c 500KiB",
    "C": "alloc t0 6MiB\nalloc t1 6MiB\nalloc t2 6MiB\nalloc t3 6MiB\nfree t0\nfree t2\nalloc big 12MiB\nempty_cache",
}


def trace_cases(seed: int) -> list[Case]:
    """t3's one case: ``predict_memory()`` takes no arguments."""
    return [Case("traces A, B, C", ())]


lab = LabSpec(
    "lab03_memory",
    "Memory: fit a step under an activation budget, fix three leaks, predict the caching allocator",
    tasks=[
        Task("t1", "checkpointed_loss(model, x, y) under a saved-activation budget", 4, "checkpointed_loss"),
        Task("t2", "train_fixed(model, xs, ys, val_x, val_y) without leaks", 4, "train_fixed"),
        Task("t3", "predict_memory(): reserved and allocated bytes for three traces", 3, "predict_memory"),
    ],
    checks=[
        Check("t1", "t1 budget, loss and gradients", _t1_cases, judge_budget, call=measure_step, fresh_kernel=True),
        Check(
            "t2", "t2 memory does not grow; history matches", _t2_cases, _t2_judge, call=probe_leaks, fresh_kernel=True
        ),
        Check("t3", "t3 reserved bytes per trace", trace_cases, judge_traces),
    ],
)
