"""Lab 05 (reproducible training): the tasks, their call drivers and public checks; hidden checks live in the solution.

t1 accumulates gradients over micro-batches to equal one large batch; t2 takes a mixed-precision step
(bf16 autocast on the CPU, a GradScaler, clipping after unscaling); t3 seeds DataLoader workers so draws
(the dataset's own ``random.Random`` among them, which lesson 05's ``seed_worker`` does not reach) differ by
worker and by epoch and repeat for a seed; t4 trains with a checkpoint whose resume, in a process that never
ran the first call (the grader: a new kernel of a new sandbox, ``Check.then``), from the checkpoint alone read
back with ``torch.load(weights_only=True)``, is bitwise identical to an uninterrupted run.

Public names the hidden-check cells build on: ``accum_case``/``judge_accum`` (t1), ``amp_case`` (an inf in
the batch) and ``amp_scale_case`` (a finite batch that overflows inside the step)/``judge_amp`` (t2),
``seed_case`` (``subset=True``: the loader's dataset is a ``Subset``)/``judge_seeding`` (t3),
``resume_case``/``run_resume``/``resume_next``/``judge_resume`` (t4). Judges never raise on an odd answer:
they return a failing row.

The judges and their references live in ``lab05_judges``, which a graded kernel cannot see; ``make_mlp`` and the
other parts the kernel runs live in ``lab05_parts``. Every public name is importable from here.
"""

from __future__ import annotations

import gc
import io
import math
from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch.utils.data import Dataset, Subset

from torchcontracts.checks import Case, Check, LabSpec, Task, short
from torchcontracts.lessons.l06_training.lab05_judges import (
    judge_accum,
    judge_amp,
    judge_resume,
    judge_seeding,
    reference_amp_step,
)
from torchcontracts.lessons.l06_training.lab05_parts import (
    BATCH,
    IN,
    LIVE,
    TRACE,
    DrawDataset,
    _amp_parts,
    epoch_seed,
    make_mlp,
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
    "amp_scale_case",
    "epoch_seed",
    "judge_accum",
    "judge_amp",
    "judge_resume",
    "judge_seeding",
    "lab",
    "make_mlp",
    "measure_accumulation",
    "overflow_threshold",
    "reference_amp_step",
    "resume_case",
    "resume_next",
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
    """A t2 case: weights, per-step batches (``overflow`` steps hold an inf in ``x``), a clip norm and the
    scaler's start. ``amp_scale_case`` makes overflows with finite batches."""
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(16, IN, generator=g) * 2 for _ in range(steps)]
    ys = [torch.randn(16, 1, generator=g) * 3 for _ in range(steps)]
    for i in overflow:
        xs[i][0, 0] = math.inf
    return Case(label, (_weights(make_mlp(seed=seed)), xs, ys, 0.5, init_scale))


def _overflows(
    weights: Sequence[torch.Tensor], x: torch.Tensor, y: torch.Tensor, max_norm: float, scale: float
) -> bool:
    """Whether the reference step, from ``weights`` with the scaler at ``scale``, skips on ``(x, y)``."""
    model, opt, scaler = _amp_parts(weights, scale)
    return not reference_amp_step(model, opt, scaler, x, y, max_norm)


def overflow_threshold(weights: Sequence[torch.Tensor], x: torch.Tensor, y: torch.Tensor, max_norm: float) -> float:
    """The loss scale above which the reference step overflows on the finite batch ``(x, y)`` (within 2**(1/64))."""
    lo, hi = 0.0, 127.9  # log2 of the scale; 2**128 is not a float32
    if not _overflows(weights, x, y, max_norm, 2.0**hi):
        raise ValueError("this batch's scaled gradients never overflow: make its targets larger")
    while hi - lo > 1 / 64:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _overflows(weights, x, y, max_norm, 2.0**mid) else (mid, hi)
    return 2.0**hi


def amp_scale_case(label: str, seed: int, steps: int, skips: int = 1, max_norm: float = 0.05) -> Case:
    """A t2 case whose overflows happen inside the step: one finite batch, repeated ``steps`` times.

    The targets are large (about 2e5), so the scaled gradients overflow (inf/NaN) when the scale is too
    high for them, although the batch, the loss and the true (unscaled) gradients are finite. The scaler
    starts ``sqrt(2) * 2**(skips - 1)`` times above the overflow threshold, so the first ``skips`` steps
    overflow and halve the scale, and the next steps fit with a margin of sqrt(2) either way; after
    2 clean steps the scale doubles back and overflows again. Every step sees the same batch (and, the
    clip norm being small, nearly the same weights): only the scaler tells a skipped step from a taken
    one, not the batch. The pattern, ``skips=1``: skipped, taken, taken, skipped, taken, taken.
    """
    g = torch.Generator().manual_seed(seed)
    weights = _weights(make_mlp(seed=seed))
    x = torch.randn(16, IN, generator=g) * 2
    y = torch.randn(16, 1, generator=g) * 3 * 2.0**16
    init_scale = overflow_threshold(weights, x, y, max_norm) * math.sqrt(2) * 2.0 ** (skips - 1)
    return Case(
        label, (weights, [x.clone() for _ in range(steps)], [y.clone() for _ in range(steps)], max_norm, init_scale)
    )


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


def seed_case(label: str, seed: int, workers: int, epochs: int, n: int = 8, subset: bool = False) -> Case:
    """A t3 case: the loader's seed, workers, epochs and items; with ``subset`` the loader's dataset is a
    ``Subset`` of a larger ``DrawDataset`` (as ``random_split`` returns), so the worker's dataset wraps it."""
    return Case(label, (seed, workers, epochs, n, subset))


def _t3_cases(seed: int) -> list[Case]:
    return [seed_case("2 workers, 2 epochs, 8 items", seed % 10_000, 2, 2)]


def _draw_data(n: int, subset: bool) -> Dataset:
    if not subset:
        return DrawDataset(n)
    return Subset(DrawDataset(n + 3), list(range(3, n + 3)))


def seed_draws(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """Call driver: draws of two runs with the loader seed and one with another seed, shape (epochs, n, 6)."""
    seed, workers, epochs, n, subset = (*case.args, False)[:5]
    runs = {}
    for name, s in (("a", seed), ("b", seed), ("c", seed + 1)):
        draws = worker_draws(_draw_data(n, bool(subset)), fn, s, workers, epochs)
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
    LIVE.clear()
    out = fn(*args)
    return out, list(TRACE["x"]), list(TRACE["mask"])


def _nothing_kept(where: str) -> None:
    """Raise when a model the last call built is still alive once its checkpoint is all that is left of it."""
    gc.collect()
    if any(ref() is not None for ref in LIVE):
        raise ValueError(
            f"{where} keeps its live model after it returns: a resume runs in a fresh process, so the checkpoint "
            "must hold all it needs"
        )


def _part(fn: Callable[..., Any], args: tuple[Any, ...], key: int, where: str) -> dict[str, Any]:
    """One call of ``train`` that returns a checkpoint: its batches and masks, its model, and the checkpoint
    sealed as bytes (what the next call, in another process, reads back)."""
    out, xs, masks = _logged_call(fn, args, key)
    ckpt = through_bytes(out, "train's checkpoint")
    del out
    step, _, params = _model_of(ckpt, where)
    _nothing_kept(where)
    buf = io.BytesIO()
    torch.save(ckpt, buf)
    sealed = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8).clone()
    return {"step": torch.tensor(step), "params": params, "x": xs, "mask": masks, "ckpt": sealed}


def run_resume(fn: Callable[..., Any], case: Case) -> dict[str, Any]:
    """Call driver of one call of a t4 case (``resume_next`` chains them).

    The first call of a case ``(seed, steps, stops)`` runs the uninterrupted ``train(seed, steps)``, then
    the same run cut at the first stop. Each later call, ``(seed', stop, checkpoint bytes, key)``, reads the
    checkpoint back as a fresh process would (``torch.load(weights_only=True)``) and resumes it to ``stop``,
    with scrambled global RNGs and another ``seed`` argument (with a checkpoint, everything must come from it).
    The grader runs each later call in a new kernel of a new sandbox, which never ran the earlier ones."""
    if len(case.args) == 4:
        seed, stop, sealed, key = case.args
        ckpt = torch.load(io.BytesIO(sealed.numpy().tobytes()), weights_only=True)

        def resume(*args: Any) -> Any:
            try:
                return fn(*args)
            except Exception as err:  # noqa: BLE001 - said with what a resume has to go on
                raise RuntimeError(
                    f"resuming from the checkpoint alone (a fresh process at grading) raised {type(err).__name__}: "
                    f"{str(err)[:50]}"
                ) from None

        return _part(resume, (seed, stop, ckpt), key, f"train(..., {stop}, ckpt)")
    seed, steps, stops = case.args
    full, full_x, full_mask = _logged_call(fn, (seed, steps), 1)
    full = through_bytes(full, "train's checkpoint")
    full_step, names, full_params = _model_of(full, f"train({seed}, {steps})")
    _nothing_kept(f"train({seed}, {steps})")
    first = _part(fn, (seed, stops[0]), 2, f"train({seed}, {stops[0]})")
    return {
        "full_step": torch.tensor(full_step),
        "names": names,
        "full": full_params,
        "full_x": full_x,
        "full_mask": full_mask,
        **first,
    }


def resume_next(case: Case, answers: list[Any]) -> Case | None:
    """The next call of a t4 case: resume the last checkpoint to the next stop (the last one: ``steps``)."""
    seed, steps, stops = case.args
    cuts = [*stops, steps]
    done = len(answers)
    last = answers[-1] if answers else None
    sealed = last.get("ckpt") if isinstance(last, dict) else None
    if done >= len(cuts) or not isinstance(sealed, torch.Tensor) or sealed.dtype != torch.uint8:
        return None
    return Case(case.label, (seed + 1000 + done, cuts[done], sealed, 2 + done))


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
            "t4",
            "t4 resume equals the uninterrupted run",
            _t4_cases,
            judge_resume,
            call=run_resume,
            fresh_kernel=True,
            then=resume_next,
        ),
    ],
)
