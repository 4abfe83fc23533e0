"""Lab 05's grader half: the judges of its four tasks, their references, and the model both halves build.

A judge runs in the grader's own process on what a call driver (in ``lab05_reproducible_training``,
which re-exports every public name here) returned, recomputes the answer with plain torch (the full
batch's gradient, ``reference_amp_step``, ``train_plain``), and names the most likely mistake when
they differ. Judges never raise on an odd answer: they return a failing row.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from torchcontracts.checks import Case, Comparison, compare, short
from torchcontracts.checks.comparison import not_a_result as _not_a_result
from torchcontracts.lessons.l06_training.lab05_parts import TRACE, _amp_parts, make_mlp, train_plain
from torchcontracts.lessons.l06_training.training import first_difference

__all__ = ["SOURCES", "judge_accum", "judge_amp", "judge_resume", "judge_seeding", "make_mlp", "reference_amp_step"]


def _tensors(x: Any) -> list[torch.Tensor] | None:
    """``x`` as a list of tensors, or None when it is not one."""
    if isinstance(x, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in x):
        return list(x)
    return None


def _close(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], atol: float, rtol: float) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and torch.allclose(x.double(), y.double(), atol=atol, rtol=rtol) for x, y in zip(a, b)
    )


def _with_status(row: Comparison, why: str) -> Comparison:
    """``row`` with ``why`` as its status when it failed (what the mistake most likely is)."""
    return row if row.ok else dataclasses.replace(row, status=why)


# --- t1 accumulate: the large batch's gradient -----------------------------------------------------------


def _full_batch_grads(
    weights: Sequence[torch.Tensor], parts: Sequence[tuple[torch.Tensor, torch.Tensor, float]]
) -> list[torch.Tensor]:
    model = make_mlp(weights)
    for xs, ys, w in parts:
        (F.mse_loss(model(xs), ys) * w).backward()
    return [p.grad for p in model.parameters()]


def judge_accum(case: Case, out: Any) -> list[Comparison]:
    """t1: ``micro`` forwards of at most ceil(N/micro) rows, parameters untouched, the full-batch gradient."""
    bad = _not_a_result(out, ("grads", "rows", "params"))
    if bad:
        return bad
    weights, x, y, micro, stale = case.args
    n, most = x.shape[0], -(-x.shape[0] // micro)
    try:
        sizes = [int(v) for v in out["rows"]]
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return [Comparison.plain("forward passes", False, "not a list of batch sizes", got=out["rows"])]
    ok = len(sizes) == micro and sum(sizes) == n and max(sizes, default=0) <= most
    rows = [
        Comparison.plain(
            "forward passes",
            ok,
            strides=str(sizes)[:60],
            status="one per micro-batch"
            if ok
            else f"expected {micro} forwards of at most {most} rows covering all {n} (the large batch does "
            f"not fit: never run it whole), got sizes {short(sizes)}",
        )
    ]
    params, grads = _tensors(out["params"]), _tensors(out["grads"])
    if params is None or grads is None or len(grads) != len(weights):
        return rows + [
            Comparison.plain("gradients", False, "one gradient per parameter expected", got=short(out["grads"]))
        ]
    model = make_mlp(weights)
    if not _close(params, list(model.parameters()), 0.0, 0.0):
        rows.append(
            Comparison.plain(
                "parameters", False, "the parameters changed: accumulate gradients only, no optimizer step"
            )
        )
    want = _full_batch_grads(weights, [(x, y, 1.0)])
    if _close(grads, want, 1e-6, 1e-5):
        return rows + [compare(f"grad {i}", g, w, atol=1e-6, rtol=1e-5) for i, (g, w) in enumerate(zip(grads, want))]
    chunks = list(zip(torch.tensor_split(x, micro), torch.tensor_split(y, micro)))
    known = {
        "the model arrived with stale .grad from an earlier step: zero it first (model.zero_grad())": [
            w + s for w, s in zip(want, stale)
        ],
        f"each micro-batch's mean loss must be scaled by its share of the batch (1/{micro} for equal parts)": _full_batch_grads(
            weights, [(a, b, 1.0) for a, b in chunks]
        ),
        "the micro-batches are not all the same size: weight each mean loss by n_i / N, not 1/k": _full_batch_grads(
            weights, [(a, b, 1.0 / micro) for a, b in chunks]
        ),
        "only the last micro-batch's gradient is left: zero once before the loop, not inside it": _full_batch_grads(
            weights, [(chunks[-1][0], chunks[-1][1], chunks[-1][0].shape[0] / n)]
        ),
    }
    why = next(
        (text for text, g in known.items() if _close(grads, g, 1e-5, 1e-4)), "values differ from the large batch's"
    )
    return rows + [
        _with_status(compare(f"grad {i}", g, w, atol=1e-6, rtol=1e-5), why) for i, (g, w) in enumerate(zip(grads, want))
    ]


# --- t2 amp_step: bf16 autocast with a GradScaler -----------------------------------------------------


def reference_amp_step(
    model: nn.Module, opt: torch.optim.Optimizer, scaler: Any, x: torch.Tensor, y: torch.Tensor, max_norm: float
) -> bool:
    """The judge's reference step (never the learner's code)."""
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    before = scaler.get_scale()
    scaler.step(opt)
    scaler.update()
    return scaler.get_scale() >= before


def judge_amp(case: Case, out: Any) -> list[Comparison]:
    """t2: autocast ran the Linear in bf16; the scale, the step taken or skipped, and the parameters per step."""
    bad = _not_a_result(out, ("stepped", "scale", "params", "dtypes"))
    if bad:
        return bad
    weights, xs, ys, max_norm, init_scale = case.args
    model, opt, scaler = _amp_parts(weights, init_scale)
    want_stepped, want_scale, want_params = [], [], []
    for x, y in zip(xs, ys):
        want_stepped.append(reference_amp_step(model, opt, scaler, x, y, max_norm))
        want_scale.append(scaler.get_scale())
        want_params.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    firsts = [c.split(",")[0] for c in str(out["dtypes"]).split("|")[1:]] if isinstance(out["dtypes"], str) else []
    ok = len(firsts) == len(xs) and set(firsts) == {"bfloat16"}
    rows = [
        Comparison.plain(
            "first Linear's output dtype",
            ok,
            "bfloat16 under autocast"
            if ok
            else "the first Linear did not run in bfloat16 at every step: run the forward and the loss "
            "inside torch.autocast('cpu', dtype=torch.bfloat16)",
            expected=None if ok else "bfloat16 at each step",
            got=None if ok else firsts,
        )
    ]
    params = _tensors(out["params"])
    if params is None or len(params) != len(want_params):
        rows.append(Comparison.plain("parameters", False, "one parameter vector per step expected", got=short(params)))
    else:
        for i, (p, w) in enumerate(zip(params, want_params)):
            why = (
                "at an overflow step the parameters must not change: let scaler.step(opt) skip the step"
                if not want_stepped[i]
                else "parameters differ: zero the grads, scale(loss).backward(), unscale_ before clipping to max_norm, "
                "then scaler.step(opt) and scaler.update()"
            )
            rows.append(_with_status(compare(f"parameters after step {i}", p, w, atol=1e-4, rtol=1e-4), why))
    stepped = out["stepped"]
    ok = isinstance(stepped, (list, tuple)) and list(stepped) == want_stepped
    inside = [
        i
        for i, (got, want) in enumerate(zip(stepped if isinstance(stepped, (list, tuple)) else [], want_stepped))
        if got is not want and bool(torch.isfinite(xs[i]).all() and torch.isfinite(ys[i]).all())
    ]
    rows.append(
        Comparison.plain(
            "returned: step taken?",
            ok,
            "right"
            if ok
            else "return True when the optimizer stepped and False when the scaler skipped it "
            "(scaler.step returns None either way: compare the scale before and after update())"
            + (
                f"; the batch of step {inside[0]} was finite: an overflow can happen inside the step (the scaled "
                "gradients), so judge by the scaler, not by the batch or the loss"
                if inside
                else ""
            ),
            expected=None if ok else want_stepped,
            got=None if ok else stepped,
        )
    )
    scale = out["scale"]
    if isinstance(scale, torch.Tensor):
        row = compare("scale after each step", scale, torch.tensor(want_scale, dtype=torch.float64))
        rows.append(
            _with_status(
                row,
                "the scale should halve after an overflow and double after 2 clean steps: "
                "call scaler.update() once per step",
            )
        )
    else:
        rows.append(Comparison.plain("scale after each step", False, "not a tensor", got=scale))
    return rows


# --- t3 seed_worker: distinct, epoch-varying, reproducible draws -------------------------------------------

SOURCES = ("self.rng (the dataset's random.Random)", "np.random", "random", "torch")


def judge_seeding(case: Case, out: Any) -> list[Comparison]:
    """t3: per RNG, distinct across workers, new each epoch, the same for a seed, different for another seed."""
    bad = _not_a_result(out, ("a", "b", "c"))
    if bad:
        return bad
    seed, workers, epochs, n = case.args[:4]
    a, b, c = out["a"], out["b"], out["c"]
    if not all(isinstance(t, torch.Tensor) and t.shape == (epochs, n, 6) for t in (a, b, c)):
        return [Comparison.plain("draws", False, f"expected three tensors of shape ({epochs}, {n}, 6)", got=short(a))]
    rows = []
    for k, src in enumerate(SOURCES, start=2):
        va, vb, vc = a[..., k], b[..., k], c[..., k]
        distinct = all(len(set(va[e].tolist())) == n for e in range(epochs))
        new = all(not set(va[e].tolist()) & set(va[f].tolist()) for e in range(epochs) for f in range(e))
        same = bool(torch.equal(va, vb)) and not torch.isnan(va).any()
        other = not torch.equal(va, vc)
        checks = [
            (
                "distinct across workers",
                distinct,
                "workers drew the same values: each worker got a copy of the "
                "same state; reseed it in worker_init_fn from torch.initial_seed()"
                + (
                    " (here the loader's dataset is a Subset: the DrawDataset is its .dataset)"
                    if len(case.args) > 4 and case.args[4]
                    else ""
                ),
            ),
            (
                "new each epoch",
                new,
                "an epoch repeats another's draws: derive the seed from torch.initial_seed() "
                "(new every epoch), not from worker_id or a constant",
            ),
            (
                "reproducible for a seed",
                same,
                "two runs with the same loader seed differ: derive the seed from "
                "torch.initial_seed(), not from the clock or OS entropy",
            ),
            (
                "changes with the loader's seed",
                other,
                "another loader seed gave the same draws: do not ignore torch.initial_seed()",
            ),
        ]
        for name, ok, why in checks:
            rows.append(Comparison.plain(f"{src}: {name}", ok, "yes" if ok else why))
    return rows


# --- t4 train: a bitwise-exact resume ----------------------------------------------------------------------


def _joined(case: Case, answers: Any) -> dict[str, Any] | list[Comparison]:
    """The answers of a t4 case's calls (``run_resume``: the first, then one per resume) as one result."""
    calls, keys = len(case.args[2]) + 1, {"step", "params", "x", "mask"}
    if not isinstance(answers, list) or not answers or not all(isinstance(a, dict) for a in answers):
        return [Comparison.plain("result", False, "the driver's answers are malformed: rerun the cell")]
    first, last = answers[0], answers[-1]
    bad = _not_a_result(first, ("full_step", "full", "full_x", "full_mask", *sorted(keys)))
    if bad:
        return bad
    if len(answers) != calls or any(not keys <= set(a) for a in answers):
        why = "the run was not resumed at every cut: return a checkpoint dict from every call"
        return [Comparison.plain("resumes", False, why, expected=calls, got=len(answers))]
    if not all(isinstance(v, torch.Tensor) and v.numel() == 1 for v in (first["full_step"], last["step"])):
        return [Comparison.plain("result", False, "the driver's steps are malformed: rerun the cell")]
    parts = {k: [_tensors(a[k]) for a in answers] for k in ("x", "mask")}
    return {
        "steps": torch.stack([first["full_step"].reshape(()), last["step"].reshape(())]),
        **{k: first[k] for k in ("full", "full_x", "full_mask")},
        "resumed": last["params"],
        **{f"resumed_{k}": None if None in p else [t for q in p for t in q] for k, p in parts.items()},
    }


def judge_resume(case: Case, out: Any) -> list[Comparison]:
    """t4: the uninterrupted run follows the recipe; after each resume (at grading, in a process that never ran
    the earlier calls), the same batches, the same dropout masks, and bitwise-equal parameters."""
    out = _joined(case, out)
    if isinstance(out, list):
        return out
    keys = ("steps", "full", "resumed", "full_x", "resumed_x", "full_mask", "resumed_mask")
    seed, steps, stops = case.args
    lists = {k: _tensors(out[k]) for k in keys[1:]}
    if (
        any(v is None for v in lists.values())
        or not isinstance(out["steps"], torch.Tensor)
        or out["steps"].numel() != 2
    ):
        return [Comparison.plain("result", False, "the driver's lists of tensors are malformed: rerun the cell")]
    got_steps = [int(v) if math.isfinite(float(v)) else -1 for v in out["steps"].double()]
    ok = got_steps == [steps, steps]
    rows = [
        Comparison.plain(
            "checkpoint 'step'",
            ok,
            "right" if ok else "'step' must count the steps trained so far",
            expected=None if ok else [steps, steps],
            got=None if ok else got_steps,
        )
    ]
    want = list(train_plain(seed, steps)["model"].values())
    TRACE["x"].clear()
    TRACE["mask"].clear()
    full = lists["full"]
    ok = _close(full, want, 1e-6, 1e-5)
    rows.append(
        Comparison.plain(
            "uninterrupted run = the recipe",
            ok,
            "right"
            if ok
            else "train(seed, steps) without a checkpoint must compute what train_plain does: keep "
            "setup(), epoch_seed() for every epoch and train_step()",
        )
    )
    for what, fk, rk, why in (
        (
            "batches after the resume",
            "full_x",
            "resumed_x",
            "the loader order was not restored: reseed the generator for the checkpoint's epoch and skip the "
            "batches that epoch already gave",
        ),
        (
            "dropout masks after the resume",
            "full_mask",
            "resumed_mask",
            "the RNG state was not restored: save torch.get_rng_state() and set it after building the model",
        ),
    ):
        at = first_difference(lists[fk], lists[rk])
        rows.append(
            Comparison.plain(
                what,
                at is None,
                "the same at every step" if at is None else f"from step {at}: {why}",
                strides=f"{len(lists[rk])} steps",
            )
        )
    res = lists["resumed"]
    same = len(res) == len(full) and all(
        a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b)) for a, b in zip(res, full)
    )
    diff = max(
        (float((a.double() - b.double()).abs().max()) for a, b in zip(res, full) if a.shape == b.shape),
        default=math.nan,
    )
    rows.append(
        Comparison.plain(
            "parameters: resumed == uninterrupted (torch.equal)",
            same,
            diff=diff,
            status="bitwise equal"
            if same
            else "they differ: restore the optimizer's and the scheduler's state_dict as well",
        )
    )
    return rows
