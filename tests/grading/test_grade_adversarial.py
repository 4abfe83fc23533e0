"""The grader is not fooled: every adversarial submission gets its exact score and reason, in both sandbox modes
(the none batch leaves out the attacks on defences shared by both modes when the bwrap batch runs them).

All submissions of a mode go through ONE `torchcontracts grade DIR -j 2` run (the expensive part: one kernel per
submission), then each test asserts its own row. The two batches stay in this one file, so they never grade at
the same time: together on 2 cores they pushed a course cell past the cell timeout. The grader runs with a canary
in its environment, which no feedback may contain.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from submissions.adversarial import CELL_TIMEOUT, LAB, MEM_MB, TASKS, build, cases, matches
from torchcontracts.grading.sandbox import bwrap_path

pytestmark = pytest.mark.slow  # executes notebooks, grades whole submissions or drives a browser

ROOT = Path(__file__).resolve().parents[2]
NAMES = sorted(cases())
CANARY = "tc-canary-3f9a1c77e2"
# Attacks on defences that are the same code in both sandbox modes: tamper detection inside the kernel, the
# serialization of answers, the judge's own inputs, the notebook's shape. Where bubblewrap is installed the bwrap
# batch grades them and the none batch leaves them out (a third of its kernels); without it, the none batch is
# the only one and grades every case. Whatever reaches outside the kernel (files, processes, signals, the
# environment, time and memory limits) is graded in both modes.
SAME_DEFENCE_IN_BOTH_MODES = frozenset(
    {
        "tamper_allclose",
        "tamper_assert_close",
        "tamper_check_module",
        "tamper_data_ptr",
        "tamper_isinstance",
        "code_swap",
        "copyreg_reducer",
        "serialization_swap",
        "set_storage_view",
        "package_tagger",
        "leak_by_class_name",
        "huge_answer",
        "checks_edited_deleted",
        "renamed_and_deleted",
        "forge_earlier_record",
        "forge_other_check_record",
        "replace_earlier_record",
        "gc_replace_record",
    }
)


def graded_in(mode: str) -> list[str]:
    """The cases a batch in this mode grades."""
    if mode == "none" and bwrap_path() is not None:
        return [n for n in NAMES if n not in SAME_DEFENCE_IN_BOTH_MODES]
    return NAMES


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


MODES = [
    pytest.param("bwrap", marks=pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed")),
    "none",
]


@pytest.fixture(scope="module", params=MODES)
def batch(request, tmp_path_factory):
    """Grade every submission once per sandbox mode, in a folder run with two workers, from an unrelated cwd."""
    mode = request.param
    base = tmp_path_factory.mktemp(f"grade-{mode}")
    subs = base / "subs"
    expected = build(subs)
    for name in set(NAMES) - set(graded_in(mode)):
        (subs / f"{name}.ipynb").unlink()
        del expected[f"{name}.ipynb"]
    hashes = {p.name: _sha(p) for p in subs.iterdir()}
    out = base / "gradebook.csv"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchcontracts",
            "grade",
            str(subs),
            "--course",
            str(ROOT),
            "--lab",
            LAB,
            "--out",
            str(out),
            "-j",
            "2",
            "--json",
            "--quiet",
            "--cell-timeout",
            str(CELL_TIMEOUT),
            "--mem-mb",
            str(MEM_MB),
            "--sandbox",
            mode,
            "--seed",
            "4242",
        ],
        capture_output=True,
        text=True,
        cwd=base,
        timeout=600,
        env={**os.environ, "TC_CANARY_TOKEN": CANARY},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = {Path(r["submission"]).name: r for r in json.loads(proc.stdout)}
    time.sleep(2.5)  # give anything that outlived its kernel the time to try something
    return {
        "expected": expected,
        "results": results,
        "proc": proc,
        "gradebook": out,
        "subs": subs,
        "hashes": hashes,
        "base": base,
        "mode": mode,
    }


@pytest.mark.parametrize("name", NAMES)
def test_submission_gets_its_exact_score_and_reason(batch, name):
    if name not in graded_in(batch["mode"]):
        pytest.skip("same defence in both modes: graded in the bwrap batch")
    expect = batch["expected"][f"{name}.ipynb"].in_mode(batch["mode"])
    got = batch["results"][f"{name}.ipynb"]
    scored = {t["id"]: (t["score"], t["reason"]) for t in got["tasks"]}
    assert set(scored) == set(expect.tasks), scored
    assert all(matches(expect.tasks[t], scored[t]) for t in scored), scored
    assert got["score"] == pytest.approx(expect.total)
    assert got["sandbox"] == batch["mode"]
    assert got["max_score"] == 12
    for needle in expect.problems:
        assert any(needle in p for p in got["problems"]), got["problems"]


def test_gradebook_has_one_row_per_submission_with_task_columns_total_and_problems(batch):
    book = pd.read_csv(batch["gradebook"])
    assert list(book.columns[:8]) == ["submission", "lab", *TASKS, "total"]
    assert "problems" in book.columns
    assert sorted(book["submission"]) == sorted(f"{n}.ipynb" for n in graded_in(batch["mode"]))
    row = book.set_index("submission").loc["partial.ipynb"]
    assert (row["t1"], row["t3"], row["total"]) == (2.0, 1.0, 5.0)  # t3: one of its three checks passes
    assert (
        "tampering detected: torch.equal replaced" in book.set_index("submission").loc["tamper_equal.ipynb", "problems"]
    )


def test_submissions_are_never_modified(batch):
    assert {p.name: _sha(p) for p in batch["subs"].iterdir()} == batch["hashes"]


def test_fake_results_files_land_in_the_scratch_folder_not_near_the_grader(batch):
    base = batch["base"]
    assert not (base / "results.json").exists() and not (base / "results").exists()
    assert not (batch["subs"] / "results.json").exists() and not (ROOT / "results.json").exists()
    assert not list((ROOT / "solutions").glob("results*")) and not list((ROOT / "labs").glob("results*"))
    book = pd.read_csv(batch["gradebook"]).set_index("submission")
    assert book.loc["fake_outputs.ipynb", "total"] == 0


def test_kernel_noise_and_tracebacks_stay_out_of_the_output(batch):
    text = batch["proc"].stdout + batch["proc"].stderr
    assert "ZMQError" not in text and "Traceback" not in text
    assert "score: 100" not in text and "x" * 1000 not in text


def test_hidden_cases_and_code_never_reach_the_feedback(batch):
    from torchcontracts.grading.plan import lab_spec

    spec = lab_spec(ROOT, LAB)
    hidden = [c for c in spec.checks if c.hidden]
    assert hidden, "lab01 should have hidden checks"
    text = json.dumps(batch["results"])
    public = {case.label for c in spec.checks if not c.hidden for case in c.cases(4242)}
    for check in hidden:
        assert check.name not in text
        for case in check.cases(4242):
            if not any(case.label in label for label in public):  # a public case may share it (an announced trap)
                assert case.label not in text, case.label


def test_hidden_checks_say_what_failed_but_not_where(batch):
    tasks = {t["id"]: t for t in batch["results"]["bomb_mutate_numpy.ipynb"]["tasks"]}
    hidden = {tid: [c["reason"] for c in t["checks"] if c["hidden"]] for tid, t in tasks.items()}
    assert hidden["t2"] == ["failed (returned a numpy.bool)"]
    assert hidden["t4"] == ["failed (ran out of memory)"]
    assert hidden["t5"] == ["failed (changed its input in place)"]
    assert hidden["t1"] == ["passed"]
    names = [c["name"] for t in tasks.values() for c in t["checks"] if c["hidden"]]
    assert names == [f"hidden check 1 of t{n}" for n in range(1, 6)]


def test_no_feedback_carries_the_graders_environment_or_a_hidden_input(batch):
    from torchcontracts.grading.plan import lab_spec

    text = batch["proc"].stdout + batch["proc"].stderr
    assert CANARY not in text
    spec = lab_spec(ROOT, LAB)
    hidden_inputs = {
        repr(tuple(c.args[0])) for ch in spec.checks if ch.hidden and ch.task == "t1" for c in ch.cases(4242)
    }
    public_inputs = {
        repr(tuple(c.args[0])) for ch in spec.checks if not ch.hidden and ch.task == "t1" for c in ch.cases(4242)
    }
    leaked = batch["results"]["leak_hidden_inputs.ipynb"]["tasks"][1]["reason"]
    assert any(p in leaked for p in public_inputs), leaked  # the echo works...
    assert not [h for h in hidden_inputs - public_inputs if h in leaked], leaked  # ...but no hidden input was there yet


def test_the_grade_says_which_sandbox_graded_it(batch):
    book = pd.read_csv(batch["gradebook"])
    assert set(book["sandbox"]) == {batch["mode"]}
