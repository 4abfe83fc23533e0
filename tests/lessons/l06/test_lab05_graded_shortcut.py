"""Lab 05's shortcuts, graded end to end.

Issue 24: t2's "skipped" read off the batch (the input-finiteness shortcut). And t4's resume that shares the
first run's process: the checkpoint holds a token or a path while the run's state waits in a module-level dict
or in a file; the grader runs each resume in a new kernel of a new sandbox, so neither is there.

The whole submission goes through ``torchcontracts grade --sandbox bwrap`` (the learner's kernel, the sealer,
the hidden checks from ``solutions/``), so the exact score covers what the unit tests of
``test_lab05_checks.py`` cannot: that the grader's own run of the hidden cases fails it too.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from torchcontracts.grading.sandbox import bwrap_path
from submissions.graded import grade_bwrap

from torchcontracts.labs.build import reference_submission

pytestmark = [
    pytest.mark.slow,  # executes notebooks, grades whole submissions or drives a browser
    pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed"),
]

ROOT = Path(__file__).resolve().parents[3]
LAB = "lab05_reproducible_training"
RIGHT = "    return scaler.get_scale() >= before\n"
SHORTCUT = "    return bool(torch.isfinite(x).all() and torch.isfinite(y).all())  # the batch, not the scaler\n"


def _shortcut_submission() -> nbformat.NotebookNode:
    """The reference answers, except that t2 returns whether the batch was finite."""
    nb = reference_submission(ROOT, LAB)
    (cell,) = [c for c in nb.cells if c.get("metadata", {}).get("torchcontracts", {}).get("task") == "t2"]
    assert RIGHT in cell.source
    cell.source = cell.source.replace(RIGHT, SHORTCUT)
    return nb


def _grade(tmp_path: Path, nb: nbformat.NotebookNode) -> dict:
    return grade_bwrap(tmp_path, nb, LAB, "shortcut.ipynb")


def test_the_input_finiteness_shortcut_gets_only_t2s_public_half(tmp_path):
    got = _grade(tmp_path, _shortcut_submission())
    scored = {t["id"]: (t["score"], t["reason"]) for t in got["tasks"]}
    assert got["sandbox"] == "bwrap"
    assert {t: s for t, (s, _) in scored.items()} == {"t1": 3.0, "t2": 1.5, "t3": 3.0, "t4": 5.0}, scored
    assert scored["t2"][1] == "hidden check 1 of t2: failed (wrong answer)", scored["t2"]
    (t2,) = [t for t in got["tasks"] if t["id"] == "t2"]
    assert [(c["hidden"], c["ok"], c["score"]) for c in t2["checks"]] == [(False, True, 1.5), (True, False, 0.0)]
    assert got["score"] == pytest.approx(12.5)
    assert got["max_score"] == 14


# t4: the run's state kept where a second call of the same process finds it; the checkpoint holds only a key.
# Each stash is a copy (not the live model, which the check already tells in one process), so it passes the
# public check in the notebook: only a resume in a process that never ran the first call can fail it.
T4_STASHES = {
    "module-dict": """
_RUNS = {}  # module-level: the first run and the resume would share it in one kernel


def _save(token, state):
    _RUNS[token] = copy.deepcopy(state)


def _load(token):
    return _RUNS[token]
""",
    "files": """
def _save(token, state):  # /tmp and the working folder: a second kernel of one submission could look there
    for folder in ("/tmp", os.getcwd()):
        torch.save(state, os.path.join(folder, f"run-{token}.pt"))


def _load(token):
    for folder in ("/tmp", os.getcwd()):
        path = os.path.join(folder, f"run-{token}.pt")
        if os.path.exists(path):
            return torch.load(path, weights_only=False)
    raise FileNotFoundError(f"run-{token}.pt")
""",
}

T4_TRAIN = """import copy
import os
{stash}

def train(seed: int, steps: int, ckpt: dict | None = None) -> dict:
    model, opt, sched, loader, gen = setup(seed)
    step = 0
    if ckpt is not None:
        state = _load(ckpt["token"])
        seed, step = state["seed"], ckpt["step"]
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
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
    token = f"{{seed}}-{{step}}"
    state = {{"seed": seed, "model": model.state_dict(), "optimizer": opt.state_dict(),
              "scheduler": sched.state_dict(), "rng": torch.get_rng_state()}}
    _save(token, state)
    return {{"step": step, "model": model.state_dict(), "token": token}}  # a key to the state, not the state
"""


def _t4_shortcut(stash: str) -> nbformat.NotebookNode:
    nb = reference_submission(ROOT, LAB)
    (cell,) = [c for c in nb.cells if c.get("metadata", {}).get("torchcontracts", {}).get("task") == "t4"]
    cell.source = T4_TRAIN.format(stash=T4_STASHES[stash])
    return nb


def test_t4_stashes_pass_in_one_process(tmp_path, monkeypatch):
    """The premise: in one process (the notebook's check), either stash resumes bitwise, so only the grader's
    fresh sandbox can fail it."""
    from conftest import checks_by_task

    monkeypatch.chdir(tmp_path)
    t4 = checks_by_task(LAB)["t4"]
    for stash in T4_STASHES:
        ns: dict = {}
        exec("import torch\nfrom torchcontracts.lessons.l06_training.lab05_parts import *", ns)  # noqa: S102
        exec(T4_TRAIN.format(stash=T4_STASHES[stash]), ns)  # noqa: S102
        assert [o.reason for o in (c.run_local(ns["train"], seed=4242) for c in t4) if not o.ok] == [], stash


@pytest.mark.parametrize("stash, error", [("module-dict", "KeyError"), ("files", "FileNotFoundError")])
def test_a_t4_resume_that_needs_the_first_runs_process_scores_0(stash, error, tmp_path):
    got = _grade(tmp_path, _t4_shortcut(stash))
    scored = {t["id"]: (t["score"], t["reason"]) for t in got["tasks"]}
    assert got["sandbox"] == "bwrap"
    assert {t: s for t, (s, _) in scored.items()} == {"t1": 3.0, "t2": 3.0, "t3": 3.0, "t4": 0.0}, scored
    reason = scored["t4"][1]  # the public check's: the resume, in a fresh sandbox, finds neither dict nor file
    assert f"resuming from the checkpoint alone (a fresh process at grading) raised {error}" in reason, reason
    (t4,) = [t for t in got["tasks"] if t["id"] == "t4"]
    assert [(c["hidden"], c["ok"]) for c in t4["checks"]] == [(False, False), (True, False)], t4["checks"]
    assert got["score"] == pytest.approx(9.0)
    assert got["problems"] == [], got["problems"]
