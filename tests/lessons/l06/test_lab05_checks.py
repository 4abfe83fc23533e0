"""Lab 05 (reproducible training): common wrong answers fail for the right reason.

What every lab must satisfy (reference full marks, judges that never crash, no leaked answers) is in
``test_lab_contract.py``; here are lab 05's wrong answers, above all the three usual ways a resume stops
being exact (optimizer state, RNG state, loader order), and the check that the forked workers of t3 draw
what a real DataLoader's workers draw.
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Subset, get_worker_info

from conftest import checks_by_task, solution_functions
from torchcontracts.checks import Check
from torchcontracts.lessons.l06_training.lab05_judges import SOURCES
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


# Issue 24: every overflow of the first hidden cases had an inf in the batch, so a step that judged the batch
# instead of the scaler passed. The hidden checks now also hold finite batches that overflow inside the step
# (the scaled gradients), repeated so that only the scaler tells a skipped step from a taken one.


def t2_input_finiteness(model, opt, scaler, x, y, max_norm):
    """The shortcut: the recipe, but "skipped" read off the batch."""
    _amp(model, opt, scaler, x, y, max_norm)
    return bool(torch.isfinite(x).all() and torch.isfinite(y).all())


def t2_loss_finiteness(model, opt, scaler, x, y, max_norm):
    """Another proxy: "skipped" read off the (unscaled) loss."""
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(opt)
    scaler.update()
    return bool(torch.isfinite(loss))


def t2_scaled_loss_finiteness(model, opt, scaler, x, y, max_norm):
    """And off the scaled loss."""
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        scaled = scaler.scale(F.mse_loss(model(x), y))
    scaled.backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(opt)
    scaler.update()
    return bool(torch.isfinite(scaled))


def t2_simplest_public_pass(model, opt, scaler, x, y, max_norm):
    """The least that passes the public check: the steps it needs, and a flag from the inf it can see."""
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(opt)
    scaler.update()
    return not x.isinf().any().item()


def t2_grads_after_unscale(model, opt, scaler, x, y, max_norm):
    """A real detection without the scale: are the unscaled gradients finite?"""
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(opt)
    scaler.update()
    return finite


def t2_found_inf(model, opt, scaler, x, y, max_norm):
    """Another: the scaler's own record of what unscale_ found."""
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    found = sum(float(v) for v in scaler._found_inf_per_device(opt).values())
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(opt)
    scaler.update()
    return found == 0


@pytest.mark.parametrize(
    "proxy", [t2_simplest_public_pass, t2_input_finiteness, t2_loss_finiteness, t2_scaled_loss_finiteness]
)
def test_t2_a_proxy_for_the_overflow_fails_the_hidden_checks(proxy, checks):
    """Each proxy is right wherever the batch holds an inf, so the first two pass the public check; none passes a
    hidden check, and the failure says why."""
    if proxy in (t2_simplest_public_pass, t2_input_finiteness):
        assert _failures(checks["t2"], proxy, hidden=False) == []
    hidden = [c for c in checks["t2"] if c.hidden]
    assert hidden
    outcomes = [c.run_local(proxy, seed=seed) for c in hidden for seed in (12345, 7, 2024)]
    assert not any(o.ok for o in outcomes)  # 0 points of the hidden t2 checks
    if proxy in (t2_simplest_public_pass, t2_input_finiteness):  # right on every inf batch, wrong inside only
        assert all("overflow can happen inside the step" in o.reason for o in outcomes), [o.reason for o in outcomes]


@pytest.mark.parametrize("detect", [t2_grads_after_unscale, t2_found_inf])
def test_t2_any_real_detection_passes_the_hidden_checks(detect, checks):
    for seed in (12345, 7, 2024):
        assert [o.reason for c in checks["t2"] if not (o := c.run_local(detect, seed=seed)).ok] == [], seed


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**31 - 1])
def test_t2_the_finite_overflow_cases_skip_as_designed(seed, ref):
    """The finite-batch cases: every batch finite (and the same), the loss finite, and the reference skips
    steps 0 and 3 (1 skip), or 0, 1 and 4 (2 skips): with a margin of sqrt(2), not by a hair."""
    from torchcontracts.lessons.l06_training.lab05_judges import _amp_parts, reference_amp_step
    from torchcontracts.lessons.l06_training.lab05_reproducible_training import amp_scale_case, run_amp

    for skips, steps, want in (
        (1, 6, [False, True, True, False, True, True]),
        (2, 5, [False, False, True, True, False]),
    ):
        case = amp_scale_case("c", seed, steps, skips=skips)
        weights, xs, ys, max_norm, init_scale = case.args
        assert all(torch.isfinite(x).all() and torch.equal(x, xs[0]) for x in xs)
        assert all(torch.isfinite(y).all() and torch.equal(y, ys[0]) for y in ys)
        assert run_amp(ref["amp_step"], case)["stepped"] == want
        threshold = init_scale / (math.sqrt(2) * 2 ** (skips - 1))  # the scales used are 2**(+-1/2) off it
        for factor, skipped in ((2**0.4, True), (2**-0.4, False)):
            model, opt, scaler = _amp_parts(weights, threshold * factor)
            assert reference_amp_step(model, opt, scaler, xs[0], ys[0], max_norm) is not skipped
        model, _, _ = _amp_parts(weights, init_scale)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.isfinite(F.mse_loss(model(xs[0]), ys[0]))


# --- t3 -------------------------------------------------------------------------------------------


def t3_nothing(worker_id):
    pass


def t3_docs_recipe(worker_id):  # seeds NumPy's and Python's globals only: the dataset's random.Random stays a copy
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)


def t3_worker_id(worker_id):
    get_worker_info().dataset.rng = random.Random(worker_id)


def t3_the_seeds_fix(worker_id):  # the seed article's worker_init_fn, extended to the dataset's generator
    torch.manual_seed(42 + worker_id)
    get_worker_info().dataset.rng = random.Random(42 + worker_id)


def t3_os_entropy(worker_id):
    get_worker_info().dataset.rng = random.Random()


def t3_lesson_05s_helper(worker_id):  # issue 24's shortcut: the package's own seed_worker, which lesson 05 teaches
    from torchcontracts.lessons.l05_data.data_pipeline import seed_worker

    seed_worker(worker_id)


def t3_simplest(worker_id):  # the least that passes the public checks: reseeds the worker's dataset's generator
    get_worker_info().dataset.rng = random.Random(torch.initial_seed())


def t3_64_bit_legacy_seed(worker_id):
    np.random.seed(torch.initial_seed())


@pytest.mark.parametrize(
    "wrong, reason",
    [
        (t3_nothing, "self.rng (the dataset's random.Random): distinct across workers"),
        (t3_docs_recipe, "self.rng (the dataset's random.Random): distinct across workers"),
        (t3_lesson_05s_helper, "self.rng (the dataset's random.Random): distinct across workers"),
        (t3_worker_id, "self.rng (the dataset's random.Random): new each epoch"),
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


THREE_WORKERS = "3 workers, 3 epochs, 9 items"
SUBSET = "a Subset of the dataset: 2 workers, 2 epochs, 7 items"


@pytest.mark.parametrize(
    "shortcut, failing", [(t3_simplest, [SUBSET]), (t3_lesson_05s_helper, [THREE_WORKERS, SUBSET])]
)
def test_t3_the_simplest_answer_and_lesson_05s_helper_fail_the_hidden_checks(shortcut, failing, checks):
    """Issue 24: the package's seed_worker reseeds the global RNGs and a NumPy Generator, not the dataset's
    random.Random; the simplest public pass reseeds ``get_worker_info().dataset.rng``, which for a Subset
    (the second hidden case) is an attribute of the wrapper that no item reads."""
    (hidden,) = [c for c in checks["t3"] if c.hidden]
    assert [c.label for c in hidden.cases(12345)] == [THREE_WORKERS, SUBSET]
    out = hidden.run_local(shortcut, seed=12345)
    assert len(out.rows) == 2 * 4 * len(SOURCES)  # judge_seeding: four rows per RNG source and case
    rng = "self.rng (the dataset's random.Random)"
    want = [f"{case}: {rng}: {row}" for case in failing for row in ("distinct across workers", "new each epoch")]
    want += [f"{case}: {rng}: changes with the loader's seed" for case in failing]
    assert not out.ok
    assert sorted(r.name for r in out.rows if not r.ok) == sorted(want)
    assert out.reason.startswith(f"{failing[0]}: {rng}: distinct across workers"), out.reason


def test_t3_forked_workers_of_a_subset_draw_what_a_real_dataloader_draws(ref):
    def subset():
        return Subset(DrawDataset(9), list(range(3, 9)))

    real = loader_draws(subset(), ref["seed_worker"], seed=7, workers=2, epochs=2)
    forked = worker_draws(subset(), ref["seed_worker"], seed=7, workers=2, epochs=2)
    assert [[tuple(item) for item in epoch] for epoch in real] == forked
    assert len({item[2] for epoch in forked for item in epoch}) == 12  # the DrawDataset's own generator, reseeded


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


def test_t3_the_simplest_answer_passes_the_public_checks(checks):
    assert _failures(checks["t3"], t3_simplest, hidden=False) == []


# --- t4: a resume that shares the first run's process (issue: the resume is judged in a fresh process) ---------

_STASH: dict[Any, Any] = {}


def _stashing_train(key: Callable[[int, int], Any], store: dict) -> Callable[..., dict]:
    """The module-dict shortcut: the live run waits in ``store``; the checkpoint holds only a key to it."""

    def train(seed, steps, ckpt=None):
        if ckpt is None:
            run, step = (*setup(seed), seed), 0
        else:
            run, step = store[ckpt["token"]], int(ckpt["step"])
        model, opt, sched, loader, gen, seed = run
        while step < steps:
            epoch, done = divmod(step, len(loader))
            gen.manual_seed(epoch_seed(seed, epoch))
            for i, (x, y) in enumerate(loader):
                if i < done:
                    continue
                train_step(model, opt, sched, x, y)
                step += 1
                if step == steps:
                    break
        token = key(seed, step)
        store[token] = run
        return {"step": step, "model": model.state_dict(), "token": token}

    return train


@pytest.mark.parametrize(
    "key, store",
    [
        (lambda seed, step: f"run-{seed}-{step}", _STASH),  # a module-level dict keyed by a token
        (lambda seed, step: seed, _STASH),  # keyed by the seed
        (lambda seed, step: step, None),  # an attribute of torch
    ],
    ids=["token", "seed", "torch-attribute"],
)
def test_t4_a_run_kept_alive_between_calls_fails_here_too(key, store, checks, monkeypatch):
    """In the notebook every call shares one process: the check still tells a train whose live model outlives
    the call (the grader runs each resume in a new sandbox, where the store is empty: see the graded test)."""
    if store is None:
        store = {}
        monkeypatch.setattr(torch, "_tc_stash", store, raising=False)
    train = _stashing_train(key, store)
    fails = _failures(checks["t4"], train, hidden=False)
    assert fails and "keeps its live model after it returns: a resume runs in a fresh process" in fails[0], fails
    hidden = _failures(checks["t4"], train, hidden=True)
    assert hidden and "keeps its live model" in hidden[0], hidden
    store.clear()


def test_t4_each_resume_is_a_call_of_its_own(checks, ref):
    """``then`` chains the calls of a case: the first (uninterrupted run and first cut), then one per resume,
    each handed only the previous call's checkpoint, sealed as bytes."""
    from torchcontracts.lessons.l06_training.lab05_reproducible_training import resume_case, resume_next, run_resume

    case = resume_case("cut at 2 and 9", 5, 13, [2, 9])
    first = run_resume(ref["train"], case)
    assert first["ckpt"].dtype == torch.uint8 and int(first["step"]) == 2
    second = resume_next(case, [first])
    assert second is not None and second.args[:2] == (5 + 1001, 9) and torch.equal(second.args[2], first["ckpt"])
    answers = [first, run_resume(ref["train"], second)]
    third = resume_next(case, answers)
    assert third is not None and third.args[1] == 13
    answers.append(run_resume(ref["train"], third))
    assert resume_next(case, answers) is None
    (check,) = [c for c in checks["t4"] if not c.hidden]
    assert all(row.ok for row in check.judge(case, answers))
    assert not check.judge(case, answers[:2])[0].ok  # a resume missing: not a full answer
