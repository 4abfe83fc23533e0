"""Lab 05's pieces a learner builds on: the data, a training run's set-up, one step, and the plain recipe.

``setup(seed)`` starts a run (a model with Dropout, AdamW, StepLR, and a shuffling DataLoader driven by a
``torch.Generator``); ``train_step`` trains on one batch; ``train_plain`` is the recipe without checkpoints
that an uninterrupted ``train`` must compute. Hooks that ``setup`` registers record each training
forward's batch and dropout mask in ``TRACE``, which the t4 checks compare. ``DrawDataset`` (t3) draws
from four RNGs the way augmentations do, one of them its own ``random.Random`` (``self.rng``), which lesson 05's
``seed_worker`` does not reseed. ``LIVE`` holds a weak reference to each model ``setup`` builds, so the t4
driver can tell a ``train`` that keeps its run alive after it returns. The checks live in
``lab05_reproducible_training``.
"""

from __future__ import annotations

import random
import weakref
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset, get_worker_info

__all__ = [
    "BATCH",
    "make_mlp",
    "IN",
    "HIDDEN",
    "LIVE",
    "N_POINTS",
    "POINTS",
    "TRACE",
    "DrawDataset",
    "epoch_seed",
    "setup",
    "train_plain",
    "train_step",
]

IN, HIDDEN = 6, 32


class DrawDataset(Dataset):
    """Each item draws from four RNGs, as augmentations do; ``self.rng`` is the dataset's own ``random.Random``,
    made (and seeded) once in ``__init__``, so every worker process starts with a copy of the same state."""

    def __init__(self, n: int = 8) -> None:
        self.n = n
        self.rng = random.Random(0)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[float, ...]:
        info = get_worker_info()
        return (
            float(index),
            float(-1 if info is None else info.id),
            self.rng.random(),
            float(np.random.random()),
            random.random(),
            float(torch.rand(())),
        )


# --- t4: a run, one step, the plain recipe ---------------------------------------------------------------

N_POINTS, BATCH = 40, 8
TRACE: dict[str, list[torch.Tensor]] = {"x": [], "mask": []}  # what each training forward saw (hooks of setup)
LIVE: list[weakref.ref] = []  # the models setup() built (weakly): does one outlive the call that built it?


def _points() -> TensorDataset:
    g = torch.Generator().manual_seed(2024)
    x = torch.randn(N_POINTS, IN, generator=g)
    y = x @ torch.randn(IN, 1, generator=g) + 0.1 * torch.randn(N_POINTS, 1, generator=g)
    return TensorDataset(x, y)


POINTS = _points()


def _log_batch(module: nn.Module, args: tuple[Any, ...]) -> None:
    TRACE["x"].append(args[0].detach().clone())


def _log_mask(module: nn.Module, args: tuple[Any, ...], out: torch.Tensor) -> None:
    if module.training:  # Dropout sits before ReLU (the same function): its input is never exactly 0
        TRACE["mask"].append(out == 0)


def setup(seed: int) -> tuple[nn.Sequential, torch.optim.Optimizer, Any, DataLoader, torch.Generator]:
    """A new run: model (with Dropout), AdamW, StepLR, and a shuffling DataLoader driven by ``gen``."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.Dropout(0.25), nn.ReLU(), nn.Linear(HIDDEN, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=0.02)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.8)
    gen = torch.Generator()
    loader = DataLoader(POINTS, batch_size=BATCH, shuffle=True, generator=gen)
    model[0].register_forward_pre_hook(_log_batch)
    model[1].register_forward_hook(_log_mask)
    LIVE.append(weakref.ref(model))
    return model, opt, sched, loader, gen


def epoch_seed(seed: int, epoch: int) -> int:
    """The loader generator's seed for one epoch of one run: the order is a function of (seed, epoch)."""
    return 1009 * seed + epoch


def train_step(model: nn.Module, opt: torch.optim.Optimizer, sched: Any, x: torch.Tensor, y: torch.Tensor) -> float:
    """One training step (dropout on), then one scheduler step."""
    model.train()
    opt.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    sched.step()
    return loss.item()


def train_plain(seed: int, steps: int) -> dict[str, Any]:
    """The recipe without checkpoints: what an uninterrupted ``train(seed, steps)`` must compute."""
    model, opt, sched, loader, gen = setup(seed)
    step = 0
    while step < steps:
        gen.manual_seed(epoch_seed(seed, step // len(loader)))
        for x, y in loader:
            train_step(model, opt, sched, x, y)
            step += 1
            if step == steps:
                break
    return {"step": step, "model": model.state_dict()}


def make_mlp(weights: Sequence[torch.Tensor] | None = None, seed: int = 0) -> nn.Sequential:
    """Linear(6, 32) -> Tanh -> Linear(32, 1), with ``weights`` (``state_dict().values()``) if given."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))
    if weights is not None:
        with torch.no_grad():
            for p, w in zip(model.state_dict().values(), weights):
                p.copy_(w)
    return model


def _amp_parts(weights: Sequence[torch.Tensor], init_scale: float) -> tuple[nn.Sequential, Any, Any]:
    model = make_mlp(weights)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=2)
    return model, opt, scaler
