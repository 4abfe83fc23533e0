"""Benchmark the grader (a script, not a test): it prints numbers and asserts none.

    python benchmarks/bench_grade.py [--n 40] [--skip-otter]

1. one submission: in-process (cold: includes the kernel fork server's start; warm: median of 3),
   and the `torchcontracts grade FILE` command end to end;
2. a folder of N submissions graded with -j 1 and -j 2, and the speedup;
3. side by side, otter-grader's `otter run` on an equivalent lab (the same notebook, its five
   functions checked with the same public cases as OK-format doctests), if /tmp/otter-venv exists:
       python -m venv /tmp/otter-venv && /tmp/otter-venv/bin/pip install "otter-grader[grading]==7.0.*"
   (that venv needs torch: give it --system-site-packages, or pip install torch into it).
"""

from __future__ import annotations

import argparse
import json
import pprint
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
LAB = "lab01_strides"
OTTER = Path("/tmp/otter-venv/bin/otter")


def _solution_submission() -> nbformat.NotebookNode:
    """The reference answers in the student notebook (no hidden-check cells), as a learner would submit."""
    sol = nbformat.read(ROOT / "solutions" / f"{LAB}.ipynb", as_version=4)
    answers = {c.metadata["torchcontracts"]["id"]: c.source for c in sol.cells
               if c.metadata.get("torchcontracts", {}).get("role") == "solution"}
    nb = nbformat.read(ROOT / "labs" / f"{LAB}.ipynb", as_version=4)
    for cell in nb.cells:
        cid = cell.metadata.get("torchcontracts", {}).get("id")
        if cid in answers:
            cell.source = answers[cid]
    return nb


def _timed(cmd: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    return time.perf_counter() - t0, proc


def bench_one(work: Path) -> None:
    from torchcontracts.grading.run import GradeOptions, grade_file

    sub = work / "one.ipynb"
    sub.write_text(nbformat.writes(_solution_submission()))
    opts = GradeOptions(course=ROOT)
    t0 = time.perf_counter()
    first = grade_file(sub, opts)
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(3):
        t0 = time.perf_counter()
        grade_file(sub, opts)
        warm.append(time.perf_counter() - t0)
    wall, proc = _timed([sys.executable, "-m", "torchcontracts", "grade", str(sub)], ROOT)
    print(f"one submission ({first.score:g}/{first.max_score:g} points):")
    print(f"  in-process, cold (fork server start included): {cold:.2f} s")
    print(f"  in-process, warm, median of 3:                 {statistics.median(warm):.2f} s "
          f"(min {min(warm):.2f}, max {max(warm):.2f})")
    print(f"  `torchcontracts grade FILE`, end to end:        {wall:.2f} s (rc {proc.returncode})")


def bench_batch(work: Path, n: int) -> None:
    folder = work / "batch"
    folder.mkdir()
    good = nbformat.writes(_solution_submission())
    blank = (ROOT / "labs" / f"{LAB}.ipynb").read_text()
    for i in range(n):
        (folder / f"s{i:03d}.ipynb").write_text(good if i % 2 == 0 else blank)
    times = {}
    for jobs in (1, 2):
        wall, proc = _timed([sys.executable, "-m", "torchcontracts", "grade", str(folder), "--out",
                             str(work / f"gb{jobs}.csv"), "-j", str(jobs), "--quiet"], ROOT)
        times[jobs] = wall
        print(f"{n} submissions, -j {jobs}: {wall:.1f} s ({wall / n:.2f} s each; rc {proc.returncode})")
    print(f"speedup -j 2 vs -j 1: {times[1] / times[2]:.2f}x")


OTTER_CASES = {
    "q1": ("contiguous_strides", 2, ["(2, 3, 4)", "(5,)", "(4, 1, 3)"]),
    "q2": ("is_contiguous", 2, ["(2, 3, 4), (12, 4, 1)", "(3, 2), (1, 3)", "(2, 3), (0, 1)", "(2, 2), (3, 1)",
                                "(6,), (1,)"]),
    "q3": ("sliding_windows", 3, ["torch.arange(10), 3, 1", "torch.arange(10), 4, 2", "torch.arange(12.0), 3, 3",
                                  "torch.arange(9), 2, 4"]),
    "q4": ("im2col", 3, ["torch.arange(16.0).reshape(1, 4, 4), 2", "torch.arange(30.0).reshape(2, 3, 5), 3"]),
    "q5": ("diagonal_view", 2, ["torch.arange(16).reshape(4, 4)", "torch.arange(9.0).reshape(3, 3)"]),
}
OTTER_EXPECT = {
    "contiguous_strides": "tuple(torch.empty({a}).stride())",
    "is_contiguous": "torch.empty(10**4).as_strided({a}).is_contiguous()",
    "sliding_windows": "(lambda x, s, t: x.unfold(0, s, t))({a})",
    "im2col": "(lambda x, k: x.unfold(1, k, 1).unfold(2, k, 1))({a})",
    "diagonal_view": "torch.diagonal({a})",
}


def _otter_tests(folder: Path) -> None:
    folder.mkdir()
    for q, (fn, points, args) in OTTER_CASES.items():
        cases = []
        for a in args:
            want = OTTER_EXPECT[fn].format(a=a)
            code = (f">>> import torch\n>>> _got, _want = {fn}({a}), {want}\n"
                    f">>> bool(torch.equal(torch.as_tensor(_got), torch.as_tensor(_want)))\nTrue")
            cases.append({"code": code, "hidden": False, "locked": False})
        test = {"name": q, "points": points,
                "suites": [{"cases": cases, "scored": True, "setup": "", "teardown": "", "type": "doctest"}]}
        (folder / f"{q}.py").write_text("OK_FORMAT = True\n\ntest = " + pprint.pformat(test) + "\n")


def bench_otter(work: Path) -> None:
    if not OTTER.exists():
        print(f"otter: skipped ({OTTER} not found; see this script's docstring to install it in a throwaway venv)")
        return
    ow = work / "otter"
    ow.mkdir()
    _otter_tests(ow / "tests")
    gen = subprocess.run([str(OTTER), "generate", "-t", "tests", "-o", "autograder.zip", "--no-config",
                          "--no-requirements", "--no-environment"], cwd=ow, capture_output=True, text=True)
    if gen.returncode != 0:
        print(f"otter: `otter generate` failed: {gen.stderr.strip().splitlines()[-1:]}")
        return
    sub = ow / "submission.ipynb"
    sub.write_text(nbformat.writes(_solution_submission()))
    runs, score = [], "?"
    for i in range(3):
        out = ow / f"out{i}"
        out.mkdir()
        wall, proc = _timed([str(OTTER), "run", "-a", "autograder.zip", "-o", str(out), "--no-logo",
                             str(sub)], ow)
        runs.append(wall)
        res = out / "results.json"
        if res.exists():
            data = json.loads(res.read_text())
            score = f"{sum(t.get('score', 0) for t in data.get('tests', [])):g}"
        elif proc.returncode != 0:
            print(f"otter run failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
            return
    print(f"`otter run` (otter-grader 7.0, same notebook, public cases only, score {score}/12): "
          f"median {statistics.median(runs):.2f} s (min {min(runs):.2f}, max {max(runs):.2f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=40, help="submissions in the batch (default 40)")
    p.add_argument("--skip-otter", action="store_true")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-grade-"))
    try:
        bench_one(work)
        bench_batch(work, args.n)
        if not args.skip_otter:
            bench_otter(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
