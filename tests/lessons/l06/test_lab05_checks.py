"""Lab 05 (reproducible training): common wrong answers fail for the right reason.

What every lab must satisfy (reference full marks, judges that never crash, no leaked answers) is in
``test_lab_contract.py``; here are lab 05's wrong answers, above all the three usual ways a resume stops
being exact (optimizer state, RNG state, loader order), and the check that the forked workers of t3 draw
what a real DataLoader's workers draw.
"""

from __future__ import annotations

import random
from typing import Any, Callable

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import get_worker_info

from conftest import checks_by_task, solution_functions
from torchcontracts.checks import Check
from torchcontracts.lessons.l06_training.lab05_parts import DrawDataset, epoch_seed, setup, train_step
from torchcontracts.lessons.l06_training.training import loader_draws, worker_draws

LAB = "lab05_reproducible_training"


@pytest.fixture(scope="module")
def checks() -> dict[str, list[Check]]:
    """Public and hidden checks by task, the way the grader loads them."""
    return checks_by_task(LAB)


@pytest.fixture(scope="module")
def ref() -> dict[str, Callable[..., Any]]:
    return solution_functions(LAB)


def _failures(checks: list[Check], fn: Callable[..., Any], hidden: bool | None = None) -> list[str]:
    chosen = [c for c in checks if hidden is None or c.hidden == hidden]
    return [o.reason for o in (c.run_local(fn, seed=12345) for c in chosen) if not o.ok]


def test_the_reference_passes_public_and_hidden_checks(checks, ref):
    for task, target in (("t1", "accumulate"), ("t2", "amp_step"), ("t3", "seed_worker"), ("t4", "train")):
        assert _failures(checks[task], ref[target]) == [], task


# --- t1 -------------------------------------------------------------------------------------------


def _parts(x, y, k):
    return zip(torch.tensor_split(x, k), torch.tensor_split(y, k))


def t1_no_zero_grad(model, x, y, k):
    for xs, ys in _parts(x, y, k):
        (F.mse_loss(model(xs), ys) * (xs.shape[0] / x.shape[0])).backward()


def t1_one_over_k(model, x, y, k):
    model.zero_grad()
    for xs, ys in _parts(x, y, k):
        (F.mse_loss(model(xs), ys) / k).backward()


def t1_unscaled(model, x, y, k):
    model.zero_grad()
    for xs, ys in _parts(x, y, k):
        F.mse_loss(model(xs), ys).backward()


def t1_whole_batch(model, x, y, k):
    model.zero_grad()
    F.mse_loss(model(x), y).backward()


def t1_zero_inside_the_loop(model, x, y, k):
    for xs, ys in _parts(x, y, k):
        model.zero_grad()
        (F.mse_loss(model(xs), ys) * (xs.shape[0] / x.shape[0])).backward()


def t1_steps_too(model, x, y, k):
    model.zero_grad()
    for xs, ys in _parts(x, y, k):
        (F.mse_loss(model(xs), ys) * (xs.shape[0] / x.shape[0])).backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()


@pytest.mark.parametrize(
    "wrong, reason",
    [
        (t1_no_zero_grad, "stale .grad"),
        (t1_one_over_k, "n_i / N"),
        (t1_unscaled, "scaled by its share"),
        (t1_whole_batch, "never run it whole"),
        (t1_zero_inside_the_loop, "zero once before the loop"),
        (t1_steps_too, "no optimizer step"),
    ],
)
def test_t1_wrong_answers_fail_for_the_right_reason(wrong, reason, checks):
    fails = _failures(checks["t1"], wrong, hidden=False)
    assert fails and reason in fails[0], fails


# --- t2 -------------------------------------------------------------------------------------------


def _amp(
    model,
    opt,
    scaler,
    x,
    y,
    max_norm,
    *,
    autocast=True,
    unscale=True,
    clip=True,
    zero=True,
    via_scaler=True,
    update=True,
    flag="scale",
):
    if zero:
        opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    if unscale:
        scaler.unscale_(opt)
    if clip:
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    before = scaler.get_scale()
    ret = scaler.step(opt) if via_scaler else opt.step()
    if update:
        scaler.update()
    return scaler.get_scale() >= before if flag == "scale" else ret is not False


@pytest.mark.parametrize(
    "options, reason",
    [
        ({"autocast": False}, "did not run in bfloat16"),
        ({"unscale": False}, "unscale_ before clipping"),
        ({"clip": False}, "parameters differ"),
        ({"zero": False}, "parameters differ"),
        ({"via_scaler": False}, "at an overflow step the parameters must not change"),
        ({"flag": "step() is not False"}, "scaler.step returns None either way"),
        ({"update": False}, "call scaler.update()"),
    ],
)
def test_t2_wrong_answers_fail_for_the_right_reason(options, reason, checks):
    def amp_step(model, opt, scaler, x, y, max_norm):
        return _amp(model, opt, scaler, x, y, max_norm, **options)

    fails = _failures(checks["t2"], amp_step, hidden=False)
    assert fails and reason in fails[0], fails


def test_t2_backward_inside_autocast_is_fine(checks):
    """C103 of lesson 06: backward inside the autocast block gives the same step."""

    def amp_step(model, opt, scaler, x, y, max_norm):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            scaler.scale(F.mse_loss(model(x), y)).backward()
        scaler.unscale_(opt)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        before = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        return scaler.get_scale() >= before

    assert _failures(checks["t2"], amp_step) == []


# --- t3 -------------------------------------------------------------------------------------------


def t3_nothing(worker_id):
    pass


def t3_docs_recipe(worker_id):  # seeds NumPy's and Python's globals only: the dataset's Generator stays a copy
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)


def t3_worker_id(worker_id):
    get_worker_info().dataset.rng = np.random.default_rng(worker_id)


def t3_the_seeds_fix(worker_id):  # the seed article's worker_init_fn, extended to the dataset's Generator
    torch.manual_seed(42 + worker_id)
    get_worker_info().dataset.rng = np.random.default_rng(42 + worker_id)


def t3_os_entropy(worker_id):
    get_worker_info().dataset.rng = np.random.default_rng()


def t3_64_bit_legacy_seed(worker_id):
    np.random.seed(torch.initial_seed())


@pytest.mark.parametrize(
    "wrong, reason",
    [
        (t3_nothing, "self.rng (the dataset's Generator): distinct across workers"),
        (t3_docs_recipe, "self.rng (the dataset's Generator): distinct across workers"),
        (t3_worker_id, "self.rng (the dataset's Generator): new each epoch"),
        (t3_the_seeds_fix, "new each epoch"),
        (t3_os_entropy, "reproducible for a seed"),
        (t3_64_bit_legacy_seed, "Seed must be between 0 and 2**32 - 1"),
    ],
)
def test_t3_wrong_answers_fail_for_the_right_reason(wrong, reason, checks):
    fails = _failures(checks["t3"], wrong, hidden=False)
    assert fails and reason in fails[0], fails


@pytest.mark.parametrize("init", ["reference", "nothing", "the seed's fix"])
def test_t3_forked_workers_draw_what_a_real_dataloader_draws(init, ref):
    fn = {"reference": ref["seed_worker"], "nothing": t3_nothing, "the seed's fix": t3_the_seeds_fix}[init]
    real = loader_draws(DrawDataset(6), fn, seed=7, workers=2, epochs=2)
    forked = worker_draws(DrawDataset(6), fn, seed=7, workers=2, epochs=2)
    assert [[tuple(item) for item in epoch] for epoch in real] == forked


def test_t3_a_stub_reads_as_not_implemented(checks):
    def seed_worker(worker_id):
        raise NotImplementedError("Task t3")

    fails = _failures(checks["t3"], seed_worker, hidden=False)
    assert fails and "not implemented" in fails[0], fails


# --- t4 -------------------------------------------------------------------------------------------


def make_train(
    *,
    optimizer=True,
    scheduler=True,
    rng=True,
    loader=True,
    rng_before_setup=False,
    seed_from="ckpt",
    live_optimizer=False,
) -> Callable[..., dict]:
    """The reference ``train`` with one thing not saved or not restored."""

    def train(seed, steps, ckpt=None):
        if ckpt is not None and rng_before_setup:
            torch.set_rng_state(ckpt["rng"])  # setup() reseeds the global RNG afterwards
        model, opt, sched, data, gen = setup(seed)
        step = 0
        if ckpt is not None:
            seed = ckpt["seed"] if seed_from == "ckpt" else seed
            step = ckpt["step"]
            model.load_state_dict(ckpt["model"])
            if optimizer:
                opt.load_state_dict(ckpt["optimizer"])
            if scheduler:
                sched.load_state_dict(ckpt["scheduler"])
            if rng and not rng_before_setup:
                torch.set_rng_state(ckpt["rng"])
        resumed = ckpt is not None
        while step < steps:
            epoch, done = divmod(step, len(data))
            if resumed and not loader:
                epoch, done = 0, 0  # the epoch starts over, in epoch 0's order
            resumed = False
            gen.manual_seed(epoch_seed(seed, epoch))
            for i, (x, y) in enumerate(data):
                if i < done:
                    continue
                train_step(model, opt, sched, x, y)
                step += 1
                if step == steps:
                    break
        return {
            "seed": seed,
            "step": step,
            "model": model.state_dict(),
            "optimizer": opt if live_optimizer else opt.state_dict(),
            "scheduler": sched.state_dict(),
            "rng": torch.get_rng_state(),
        }

    return train


@pytest.mark.parametrize(
    "mistake, options, reason",
    [
        ("optimizer state not saved", {"optimizer": False}, "restore the optimizer's"),
        ("RNG state not saved", {"rng": False}, "the RNG state was not restored"),
        ("loader order not restored", {"loader": False}, "the loader order was not restored"),
    ],
)
def test_t4_the_three_usual_mistakes_break_the_bitwise_resume(mistake, options, reason, checks):
    fails = _failures(checks["t4"], make_train(**options), hidden=False)
    assert fails and reason in fails[0], (mistake, fails)
    hidden = _failures(checks["t4"], make_train(**options), hidden=True)
    assert hidden and reason in hidden[0], (mistake, hidden)


@pytest.mark.parametrize(
    "options, reason",
    [
        ({"scheduler": False}, "scheduler's state_dict"),
        ({"rng_before_setup": True}, "the RNG state was not restored"),
        ({"seed_from": "argument"}, "the loader order was not restored"),
        ({"live_optimizer": True}, "cannot be read back with torch.load(weights_only=True)"),
    ],
)
def test_t4_other_mistakes_fail_for_the_right_reason(options, reason, checks):
    fails = _failures(checks["t4"], make_train(**options), hidden=False)
    assert fails and reason in fails[0], fails


def test_t4_a_train_that_ignores_its_checkpoint_fails(checks):
    """Recomputing from the seed instead of resuming would match the uninterrupted run, so the check resumes
    with another seed argument."""

    def train(seed, steps, ckpt=None):
        return make_train()(seed, steps)  # never reads ckpt

    fails = _failures(checks["t4"], train, hidden=False)
    assert fails and "from step" in fails[0], fails


def test_t4_a_train_that_does_not_follow_the_recipe_fails(checks):
    """A run that never trains is trivially resumable: the check also compares it with the recipe."""

    def train(seed, steps, ckpt=None):
        model, *_ = setup(seed)
        return {"step": steps, "model": model.state_dict()}

    fails = _failures(checks["t4"], train, hidden=False)
    assert fails and "train_plain does" in fails[0], fails


def test_t3_lesson_05s_recipe_passes_lab_05s_checks(checks):
    """Lesson 05 teaches the recipe (torchcontracts.lessons.l05_data.data_pipeline.seed_worker); lab 05 grades it."""
    from torchcontracts.lessons.l05_data.data_pipeline import seed_worker

    assert _failures(checks["t3"], seed_worker) == []
