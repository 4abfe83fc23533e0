"""Lab 05 (reproducible training): the tasks, their call drivers and public checks; hidden checks live in the solution.

t1 accumulates gradients over micro-batches to equal one large batch; t2 takes a mixed-precision step
(bf16 autocast on the CPU, a GradScaler, clipping after unscaling); t3 seeds DataLoader workers so draws
differ by worker and by epoch and repeat for a seed; t4 trains with a checkpoint whose resume, from a
checkpoint read back as a fresh process reads it, is bitwise identical to an uninterrupted run.

Public names the hidden-check cells build on: ``accum_case``/``judge_accum`` (t1), ``amp_case``/``judge_amp``
(t2), ``seed_case``/``judge_seeding`` (t3), ``resume_case``/``judge_resume`` (t4). Judges never raise on an odd
answer: they return a failing row.

The judges, their references and ``make_mlp`` live in ``lab05_judges``; every public name is importable from here.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import torch
from torch import nn

from torchcontracts.checks import Case, Check, LabSpec, Task, short
from torchcontracts.lessons.l06_training.lab05_judges import (
    _amp_parts,
    judge_accum,
    judge_amp,
    judge_resume,
    judge_seeding,
    make_mlp,
    reference_amp_step,
)
from torchcontracts.lessons.l06_training.lab05_parts import (
    BATCH,
    IN,
    TRACE,
    DrawDataset,
    epoch_seed,
    setup,
    train_plain,
    train_step,
)
from torchcontracts.lessons.l06_training.training import scramble_rngs, through_bytes, worker_draws

__all__ = [
    "BATCH",
    "DrawDataset",
    "IN",
    "accum_case",
    "amp_case",
    "epoch_seed",
    "judge_accum",
    "judge_amp",
    "judge_resume",
    "judge_seeding",
    "lab",
    "make_mlp",
    "measure_accumulation",
    "reference_amp_step",
    "resume_case",
    "run_amp",
    "run_resume",
    "seed_case",
    "seed_draws",
    "setup",
    "train_plain",
    "train_step",
]

NAN = float("nan")


def _weights(model: nn.Module) -> list[torch.Tensor]:
    return [w.detach().clone() for w in model.state_dict().values()]


# --- t1 accumulate(model, x, y, micro_batches): k micro-batches give the large batch's gradient ------------


def accum_case(label: str, seed: int, rows: int, micro: int) -> Case:
    """A t1 case: MLP weights, ``rows`` samples, the number of micro-batches, and stale gradients."""
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(rows, IN, generator=g), torch.randn(rows, 1, generator=g)
    stale = [torch.randn(w.shape, generator=g) for w in _weights(make_mlp(seed=seed))]
    return Case(label, (_weights(make_mlp(seed=seed)), x, y, micro, stale))


def _t1_cases(seed: int) -> list[Case]:
    return [
        accum_case("12 rows in 3 micro-batches", seed, 12, 3),
        accum_case("10 rows in 3 micro-batches (4, 3, 3)", seed + 1, 10, 3),
    ]


def measure_accumulation(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """Call driver: the model arrives with stale ``.grad``; run ``fn``; return its gradients and forward sizes."""
    weights, x, y, micro, stale = case.args
    model = make_mlp(weights)
    for p, s in zip(model.parameters(), stale):
        p.grad = s.clone()
    sizes: list[int] = []
    handle = model.register_forward_pre_hook(lambda mod, args: sizes.append(int(args[0].shape[0])))
    try:
        fn(model, x, y, micro)
    finally:
        handle.remove()
    grads = [p.grad.detach().clone() if p.grad is not None else torch.full_like(p, NAN) for p in model.parameters()]
    return {
        "grads": grads,
        "rows": torch.tensor(sizes, dtype=torch.int64),
        "params": [p.detach().clone() for p in model.parameters()],
    }


# --- t2 amp_step(model, opt, scaler, x, y, max_norm) -> bool: bf16 autocast with a GradScaler ---------------


def amp_case(label: str, seed: int, steps: int, overflow: Sequence[int], init_scale: float = 2.0**12) -> Case:
    """A t2 case: weights, per-step batches (``overflow`` steps hold an inf), a clip norm and the scaler's start."""
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(16, IN, generator=g) * 2 for _ in range(steps)]
    ys = [torch.randn(16, 1, generator=g) * 3 for _ in range(steps)]
    for i in overflow:
        xs[i][0, 0] = math.inf
    return Case(label, (_weights(make_mlp(seed=seed)), xs, ys, 0.5, init_scale))


def _t2_cases(seed: int) -> list[Case]:
    return [amp_case("4 steps, an overflow at step 1", seed, 4, [1])]


def run_amp(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """Call driver: one ``fn`` call per batch; record what it returned, the scale, the parameters and the dtypes."""
    weights, xs, ys, max_norm, init_scale = case.args
    model, opt, scaler = _amp_parts(weights, init_scale)
    dtypes: list[str] = []
    handle = model[0].register_forward_hook(lambda mod, inp, out: dtypes.append(str(out.dtype)))
    stepped, scales, params = [], [], []
    try:
        for x, y in zip(xs, ys):
            dtypes.append("|")
            try:
                got = fn(model, opt, scaler, x, y, max_norm)
            except RuntimeError as err:  # torch's words for a missing update(), with what to do about it
                if "after step()" not in str(err):
                    raise
                raise RuntimeError(
                    "GradScaler: unscale_() ran after step() without scaler.update() in between: "
                    "call scaler.update() once after scaler.step(opt), every step"
                ) from None
            stepped.append(got if isinstance(got, bool) else None)
            scales.append(float(scaler.get_scale()))
            params.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    finally:
        handle.remove()
    return {
        "stepped": stepped,
        "scale": torch.tensor(scales, dtype=torch.float64),
        "params": params,
        "dtypes": "".join(d if d == "|" else f"{d.replace('torch.', '')}," for d in dtypes),
    }


# --- t3 seed_worker(worker_id): distinct, epoch-varying, reproducible draws -------------------------------


def seed_case(label: str, seed: int, workers: int, epochs: int, n: int = 8) -> Case:
    return Case(label, (seed, workers, epochs, n))


def _t3_cases(seed: int) -> list[Case]:
    return [seed_case("2 workers, 2 epochs, 8 items", seed % 10_000, 2, 2)]


def seed_draws(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """Call driver: draws of two runs with the loader seed and one with another seed, shape (epochs, n, 6)."""
    seed, workers, epochs, n = case.args
    runs = {}
    for name, s in (("a", seed), ("b", seed), ("c", seed + 1)):
        draws = worker_draws(DrawDataset(n), fn, s, workers, epochs)
        runs[name] = torch.tensor(draws, dtype=torch.float64)
    return runs


# --- t4 train(seed, steps, ckpt=None): a bitwise-exact resume ----------------------------------------------


def resume_case(label: str, seed: int, steps: int, stops: Sequence[int]) -> Case:
    """A t4 case: a seed, the total steps, and the steps at which the run is interrupted and resumed."""
    return Case(label, (seed, steps, list(stops)))


def _t4_cases(seed: int) -> list[Case]:
    s = seed % 10_000
    return [
        resume_case("12 steps, interrupted at step 7 (mid-epoch)", s, 12, [7]),
        resume_case("12 steps, interrupted at step 10 (epoch boundary)", s + 1, 12, [10]),
    ]


def _model_of(ckpt: Any, where: str) -> tuple[int, list[str], list[torch.Tensor]]:
    if not isinstance(ckpt, dict) or "step" not in ckpt or not isinstance(ckpt.get("model"), dict):
        raise ValueError(
            f"{where} must return a checkpoint dict with 'step' and 'model' (model.state_dict()), "
            f"got {short(ckpt if not isinstance(ckpt, dict) else sorted(map(str, ckpt)))}"
        )
    model = ckpt["model"]
    return int(ckpt["step"]), [str(k) for k in model], [v for v in model.values() if isinstance(v, torch.Tensor)]


def _logged_call(
    fn: Callable[..., Any], args: tuple[Any, ...], key: int
) -> tuple[Any, list[torch.Tensor], list[torch.Tensor]]:
    scramble_rngs(key)
    TRACE["x"].clear()
    TRACE["mask"].clear()
    out = fn(*args)
    return out, list(TRACE["x"]), list(TRACE["mask"])


def run_resume(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """Call driver: an uninterrupted run, then the same run cut at each stop and resumed from the checkpoint,
    read back as a fresh process would (``torch.load(weights_only=True)``), with scrambled global RNGs and a
    different ``seed`` argument (with a checkpoint, everything must come from it)."""
    seed, steps, stops = case.args
    full, full_x, full_mask = _logged_call(fn, (seed, steps), 1)
    full_step, names, full_params = _model_of(through_bytes(full, "train's checkpoint"), f"train({seed}, {steps})")
    ckpt, res_x, res_mask = None, [], []
    for n, stop in enumerate([*stops, steps]):
        args = (seed, stop) if ckpt is None else (seed + 1000 + n, stop, ckpt)
        out, xs, masks = _logged_call(fn, args, 2 + n)
        res_x += xs
        res_mask += masks
        ckpt = through_bytes(out, "train's checkpoint")
        _model_of(ckpt, f"train(..., {stop})")
    res_step, _, res_params = _model_of(ckpt, "the resumed train")
    return {
        "steps": torch.tensor([full_step, res_step]),
        "names": names,
        "full": full_params,
        "resumed": res_params,
        "full_x": full_x,
        "resumed_x": res_x,
        "full_mask": full_mask,
        "resumed_mask": res_mask,
    }


lab = LabSpec(
    "lab05_reproducible_training",
    "Reproducible training: accumulation, a mixed-precision step, worker seeding, a bitwise-exact resume",
    tasks=[
        Task("t1", "accumulate(model, x, y, micro_batches) equals the large batch", 3, "accumulate"),
        Task("t2", "amp_step(model, opt, scaler, x, y, max_norm) with bf16 autocast and a GradScaler", 3, "amp_step"),
        Task("t3", "seed_worker(worker_id): distinct, epoch-varying, reproducible draws", 3, "seed_worker"),
        Task("t4", "train(seed, steps, ckpt=None) whose resume is bitwise exact", 5, "train"),
    ],
    checks=[
        Check("t1", "t1 gradients equal the large batch's", _t1_cases, judge_accum, call=measure_accumulation),
        Check("t2", "t2 dtypes, scale, skipped step, parameters", _t2_cases, judge_amp, call=run_amp),
        Check("t3", "t3 draws per worker and epoch", _t3_cases, judge_seeding, call=seed_draws),
        Check(
            "t4", "t4 resume equals the uninterrupted run", _t4_cases, judge_resume, call=run_resume, fresh_kernel=True
        ),
    ],
)
