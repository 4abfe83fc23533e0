"""Benchmark the grader against otter-grader (a script, not a test): it prints a table and asserts nothing.

    python benchmarks/bench_grade.py [--n 40] [--repeats 5] [--skip-otter] [--otter-batch] [--json OUT]
                                     [--labs all|none|LAB,LAB] [--lab-repeats 3] [--only-labs]

What it measures (wall-clock seconds of whole commands, started from this script, cwd = course root):

1. one submission of lab01_strides (the reference answers pasted into the student notebook), end to end:
   `python -m torchcontracts grade FILE --sandbox bwrap --json` and `... --sandbox none --json`
   (--json only changes what is printed; it lets the script read the score), median of --repeats runs,
   against otter-grader's `otter run` on an equivalent otter assignment (the same notebook; its five
   functions checked with the same public cases as OK-format doctests, 12 points). The runs of the three
   commands are interleaved so that a change in machine load hits all three alike. Reported: the ratio
   ours/otter for each sandbox mode (goal <= 0.6). `otter generate` (building the autograder zip) is done
   once and not timed, as our course needs no build step at grading time.
2. a folder of --n copies of that submission graded with `-j 1` and `-j 2`, for `--sandbox bwrap` and
   `--sandbox none` (one run each): wall time, seconds per submission, the speedup -j2/-j1 (goal >= 1.6)
   and the sandbox overhead per submission, (bwrap - none) / n (goal <= 0.3 s). Otter has no batch mode
   outside Docker: `otter run` over the n files one after another is measured with --otter-batch, else it is
   EXTRAPOLATED (median of part 1 times n) and labelled as such.

3. every lab (``--labs all``, the default; ``--only-labs`` skips parts 1 and 2): the lab's reference submission,
   graded ``--lab-repeats`` times in each sandbox mode, interleaved: median, min and max wall seconds and the score.

Goals are reported as "met" / "not met"; nothing fails. The machine's load average is printed with the
figures: on a shared machine they are noisy. Otter runs from a throwaway venv that sees torch:

    python3 -m venv --system-site-packages /tmp/otter-venv
    /tmp/otter-venv/bin/pip install "otter-grader[grading]==7.0.*"
    # where torch and the course are not in that Python's site-packages (a venv of their own), point at them:
    printf '%s\n' "$VENV/lib/python3.11/site-packages" "$PWD/helpers" > /tmp/otter-venv/lib/python3.11/site-packages/zz.pth

(its notebook kernel must import otter, so the script points the `python3` kernelspec at that venv's python
through JUPYTER_PATH, for the otter commands only). Otter is never a dependency of the project.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import pprint
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nbformat

ROOT = Path(__file__).resolve().parents[1]
LAB = "lab01_strides"
MODES = ("bwrap", "none")
GOAL_RATIO = 0.6  # one submission: ours / otter
GOAL_SPEEDUP = 1.6  # folder: -j 1 time / -j 2 time
GOAL_OVERHEAD = 0.3  # folder: (bwrap - none) / n, seconds per submission


def _solution_submission() -> nbformat.NotebookNode:
    """The reference answers in the student notebook (no hidden-check cells), as a learner would submit."""
    from torchcontracts.labs.build import reference_submission

    return reference_submission(ROOT, LAB)


def _timed(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    return time.perf_counter() - t0, proc


def _last_line(proc: subprocess.CompletedProcess) -> str:
    lines = (proc.stderr or proc.stdout or "").strip().splitlines()
    return lines[-1][:200] if lines else ""


def _stats(runs: list[float]) -> dict[str, Any]:
    return {
        "runs": [round(r, 3) for r in runs],
        "median": statistics.median(runs) if runs else None,
        "min": min(runs) if runs else None,
        "max": max(runs) if runs else None,
    }


def _num(text: str | None) -> float | None:
    try:
        return float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _met(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "not met")


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


# ---------------------------------------------------------------------------------------------- ours


def _ours_one(sub: Path, mode: str, lab: str = LAB) -> tuple[float, dict[str, Any]]:
    wall, proc = _timed(
        [sys.executable, "-m", "torchcontracts", "grade", str(sub), "--lab", lab, "--sandbox", mode, "--json"], ROOT
    )
    info: dict[str, Any] = {"rc": proc.returncode}
    try:
        data = json.loads(proc.stdout)
        info.update(
            score=data.get("score"),
            max_score=data.get("max_score"),
            graded=data.get("graded"),
            problems=data.get("problems"),
        )
    except (json.JSONDecodeError, AttributeError):
        info["error"] = _last_line(proc)
    return wall, info


def _ours_folder(folder: Path, mode: str, jobs: int, out: Path) -> dict[str, Any]:
    wall, proc = _timed(
        [
            sys.executable,
            "-m",
            "torchcontracts",
            "grade",
            str(folder),
            "--sandbox",
            mode,
            "-j",
            str(jobs),
            "--quiet",
            "--out",
            str(out),
        ],
        ROOT,
    )
    info: dict[str, Any] = {"wall": wall, "rc": proc.returncode}
    if out.exists():
        with out.open(newline="") as f:
            rows = list(csv.DictReader(f))
        info["graded_full_marks"] = sum(
            _num(r.get("total")) == _num(r.get("max_total")) is not None and not r.get("problems") for r in rows
        )
        info["rows"] = len(rows)
    else:
        info["error"] = _last_line(proc)
    return info


# --------------------------------------------------------------------------------------------- otter


OTTER_CASES = {
    "q1": ("contiguous_strides", 2, ["(2, 3, 4)", "(5,)", "(4, 1, 3)"]),
    "q2": (
        "is_contiguous",
        2,
        ["(2, 3, 4), (12, 4, 1)", "(3, 2), (1, 3)", "(2, 3), (0, 1)", "(2, 2), (3, 1)", "(6,), (1,)"],
    ),
    "q3": (
        "sliding_windows",
        3,
        ["torch.arange(10), 3, 1", "torch.arange(10), 4, 2", "torch.arange(12.0), 3, 3", "torch.arange(9), 2, 4"],
    ),
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
    folder.mkdir(parents=True)
    for q, (fn, points, args) in OTTER_CASES.items():
        cases = []
        for a in args:
            want = OTTER_EXPECT[fn].format(a=a)
            code = (
                f">>> import torch\n>>> _got, _want = {fn}({a}), {want}\n"
                f">>> bool(torch.equal(torch.as_tensor(_got), torch.as_tensor(_want)))\nTrue"
            )
            cases.append({"code": code, "hidden": False, "locked": False})
        test = {
            "name": q,
            "points": points,
            "suites": [{"cases": cases, "scored": True, "setup": "", "teardown": "", "type": "doctest"}],
        }
        (folder / f"{q}.py").write_text("OK_FORMAT = True\n\ntest = " + pprint.pformat(test) + "\n")


class Otter:
    """An otter assignment equivalent to lab01's public checks, graded with `otter run` from a venv."""

    def __init__(self, venv: Path, work: Path) -> None:
        self.exe = venv / "bin" / "otter"
        self.python = venv / "bin" / "python"
        self.dir = work / "otter"
        self.version = "?"
        self.error = ""
        self._outs = 0
        if not self.exe.exists():
            self.error = f"{self.exe} not found (see this script's docstring to install it in a throwaway venv)"
            return
        ver = subprocess.run(
            [str(self.python), "-c", "import otter; print(otter.__version__)"], capture_output=True, text=True
        )
        self.version = ver.stdout.strip() or "?"
        # `otter run` executes the notebook in the `python3` kernel, which must import otter: point that
        # kernelspec at the venv's python (JUPYTER_PATH comes first in the kernelspec search path).
        kernel = self.dir / "jupyter" / "kernels" / "python3"
        kernel.mkdir(parents=True)
        (kernel / "kernel.json").write_text(
            json.dumps(
                {
                    "argv": [str(self.python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                    "display_name": "Python 3 (otter venv)",
                    "language": "python",
                }
            )
        )
        self.env = {**os.environ, "JUPYTER_PATH": str(self.dir / "jupyter")}
        _otter_tests(self.dir / "tests")
        gen = subprocess.run(
            [
                str(self.exe),
                "generate",
                "-t",
                "tests",
                "-o",
                "autograder.zip",
                "--no-config",
                "--no-requirements",
                "--no-environment",
            ],
            cwd=self.dir,
            capture_output=True,
            text=True,
            env=self.env,
        )
        if gen.returncode != 0:
            self.error = f"`otter generate` failed: {_last_line(gen)}"

    def run(self, sub: Path) -> tuple[float, dict[str, Any]]:
        self._outs += 1
        out = self.dir / f"out{self._outs}"
        out.mkdir()
        wall, proc = _timed(
            [str(self.exe), "run", "-a", "autograder.zip", "-o", str(out), "--no-logo", str(sub)], self.dir, self.env
        )
        info: dict[str, Any] = {"rc": proc.returncode}
        res = out / "results.json"
        if res.exists():
            tests = json.loads(res.read_text()).get("tests", [])
            info["score"] = sum(t["score"] for t in tests if isinstance(t.get("score"), (int, float)))
            info["max_score"] = sum(t["max_score"] for t in tests if isinstance(t.get("max_score"), (int, float)))
            failed = [t.get("name") for t in tests if t.get("status") == "failed"]
            if failed:
                info["problems"] = failed
        else:
            info["error"] = _last_line(proc)
        shutil.rmtree(out, ignore_errors=True)
        return wall, info


# ---------------------------------------------------------------------------------------------- every lab


def bench_labs(work: Path, labs: list[str], repeats: int) -> dict[str, Any]:
    """Part 3: each lab's reference submission, graded `repeats` times in each sandbox mode, interleaved."""
    from torchcontracts.labs.build import reference_submission

    res: dict[str, Any] = {}
    for lab in labs:
        sub = work / f"{lab}.ipynb"
        sub.write_text(nbformat.writes(reference_submission(ROOT, lab)))
        times: dict[str, list[float]] = {m: [] for m in MODES}
        last: dict[str, dict[str, Any]] = {}
        for i in range(repeats):
            for mode in MODES:
                wall, info = _ours_one(sub, mode, lab)
                times[mode].append(wall)
                last[mode] = info
                print(
                    f"  [labs {i + 1}/{repeats}] {lab:28s} {mode:5s} {wall:6.2f} s  score {info.get('score')}/"
                    f"{info.get('max_score')}  rc {info['rc']}{'  ' + info['error'] if 'error' in info else ''}",
                    flush=True,
                )
        res[lab] = {m: {**_stats(times[m]), "last": last[m]} for m in MODES}
    return res


def report_labs(labs: dict[str, Any], repeats: int) -> None:
    w = 84
    print()
    print(f"EVERY LAB: its reference submission, end to end (median of {repeats} runs, seconds)")
    print("-" * w)
    print(f"{'lab':28s} {'mode':6s} {'median':>7s} {'min':>7s} {'max':>7s}  score")
    for lab, by_mode in labs.items():
        for mode in MODES:
            r = by_mode[mode]
            last = r["last"]
            score = f"{last.get('score')}/{last.get('max_score')}" if "score" in last else "failed"
            print(f"{lab:28s} {mode:6s} {_fmt(r['median']):>7s} {_fmt(r['min']):>7s} {_fmt(r['max']):>7s}  {score}")
    print("=" * w)


# ---------------------------------------------------------------------------------------------- main


def bench_one(sub: Path, repeats: int, otter: Otter | None) -> dict[str, Any]:
    """Part 1: the three commands, interleaved, `repeats` times each."""
    times: dict[str, list[float]] = {m: [] for m in MODES}
    infos: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    if otter:
        times["otter"], infos["otter"] = [], []
    for i in range(repeats):
        for name in times:
            wall, info = otter.run(sub) if name == "otter" else _ours_one(sub, name)  # type: ignore[union-attr]
            times[name].append(wall)
            infos[name].append(info)
            print(
                f"  [one {i + 1}/{repeats}] {name:6s} {wall:6.2f} s  score {info.get('score')}/"
                f"{info.get('max_score')}  rc {info['rc']}{'  ' + info['error'] if 'error' in info else ''}",
                flush=True,
            )
    return {name: {**_stats(times[name]), "last": infos[name][-1]} for name in times}


def bench_folder(work: Path, sub: Path, n: int, otter: Otter | None, otter_batch: bool) -> dict[str, Any]:
    """Part 2: n copies as a folder, -j 1 and -j 2, both sandbox modes; otter sequentially if asked."""
    folder = work / "batch"
    folder.mkdir()
    for i in range(n):
        shutil.copyfile(sub, folder / f"s{i:03d}.ipynb")
    res: dict[str, Any] = {}
    for mode in MODES:
        for jobs in (1, 2):
            info = _ours_folder(folder, mode, jobs, work / f"gb-{mode}-{jobs}.csv")
            res[f"{mode}-j{jobs}"] = info
            print(
                f"  [folder] {mode:5s} -j {jobs}: {info['wall']:7.1f} s  full marks "
                f"{info.get('graded_full_marks', '?')}/{n}  rc {info['rc']}",
                flush=True,
            )
    if otter and otter_batch:
        total, scores = 0.0, []
        for path in sorted(folder.glob("*.ipynb")):
            wall, info = otter.run(path)
            total += wall
            scores.append(info.get("score"))
        res["otter"] = {"wall": total, "measured": True, "full_marks": sum(s == 12 for s in scores)}
        print(f"  [folder] otter sequential: {total:7.1f} s", flush=True)
    return res


def report(
    one: dict[str, Any], folder: dict[str, Any] | None, n: int, repeats: int, otter: Otter | None
) -> dict[str, Any]:
    figures: dict[str, Any] = {"one": one, "goals": {}}
    otter_med = one.get("otter", {}).get("median")
    otter_last = one.get("otter", {}).get("last", {})
    if otter_med and otter_last.get("score") != otter_last.get("max_score"):  # a broken otter run is fast: no ratio
        print(
            f"otter's reference run scored {otter_last.get('score')}/{otter_last.get('max_score')}: its venv cannot run"
        )
        print("the notebook (does it see torch and torchcontracts?); no ratio is computed from it")
        otter_med = None
    w = 84
    print()
    print("=" * w)
    print(f"ONE SUBMISSION, END TO END ({LAB}, reference answers; median of {repeats} runs, seconds)")
    print("-" * w)
    print(f"{'command':46s} {'median':>7s} {'min':>7s} {'max':>7s}  {'score':>7s}  ours/otter")
    rows = [(f"torchcontracts grade --sandbox {m}", m) for m in MODES]
    if "otter" in one:
        rows.append((f"otter run (otter-grader {otter.version})", "otter"))  # type: ignore[union-attr]
    for label, key in rows:
        r = one[key]
        last = r["last"]
        score = (
            f"{last.get('score', '?'):g}/{last.get('max_score', '?'):g}"
            if isinstance(last.get("score"), (int, float)) and isinstance(last.get("max_score"), (int, float))
            else "failed"
        )
        ratio = ""
        if key in MODES:
            if otter_med:
                q = r["median"] / otter_med
                figures["goals"][f"ratio_{key}"] = {"value": q, "goal": f"<= {GOAL_RATIO}", "met": q <= GOAL_RATIO}
                ratio = f"{q:.2f}  (goal <= {GOAL_RATIO}: {_met(q <= GOAL_RATIO)})"
            else:
                ratio = "n/a (no otter)"
        print(f"{label:46s} {_fmt(r['median']):>7s} {_fmt(r['min']):>7s} {_fmt(r['max']):>7s}  {score:>7s}  {ratio}")
    if otter is not None and "otter" not in one:
        print(f"otter: skipped ({otter.error})")
    if folder is None:
        print("=" * w)
        return figures
    figures["folder"] = folder
    print()
    print(f"{n} SUBMISSIONS AS A FOLDER (one run each, seconds)")
    print("-" * w)
    print(f"{'command':46s} {'wall':>8s} {'s/sub':>7s}  full marks  rc")
    for mode in MODES:
        for jobs in (1, 2):
            r = folder[f"{mode}-j{jobs}"]
            print(
                f"{f'torchcontracts grade DIR --sandbox {mode} -j {jobs}':46s} {r['wall']:8.1f} "
                f"{r['wall'] / n:7.2f}  {r.get('graded_full_marks', '?'):>5}/{n:<4}  {r['rc']}"
            )
    if "otter" in folder:
        r = folder["otter"]
        print(
            f"{'otter run x ' + str(n) + ', sequential (measured)':46s} {r['wall']:8.1f} {r['wall'] / n:7.2f}  "
            f"{r['full_marks']:>5}/{n:<4}"
        )
    elif otter_med:
        est = otter_med * n
        folder["otter"] = {"wall": est, "measured": False}
        print(
            f"{'otter run x ' + str(n) + ' (EXTRAPOLATED: median x n)':46s} {est:8.1f} {otter_med:7.2f}  "
            f"{'not run':>10s}"
        )
    print("-" * w)
    for mode in MODES:
        sp = folder[f"{mode}-j1"]["wall"] / folder[f"{mode}-j2"]["wall"]
        figures["goals"][f"speedup_{mode}"] = {"value": sp, "goal": f">= {GOAL_SPEEDUP}", "met": sp >= GOAL_SPEEDUP}
        print(
            f"speedup -j2/-j1, --sandbox {mode:5s}: {sp:5.2f}x    (goal >= {GOAL_SPEEDUP}: {_met(sp >= GOAL_SPEEDUP)})"
        )
    for jobs in (1, 2):
        ov = (folder[f"bwrap-j{jobs}"]["wall"] - folder[f"none-j{jobs}"]["wall"]) / n
        figures["goals"][f"sandbox_overhead_j{jobs}"] = {
            "value": ov,
            "goal": f"<= {GOAL_OVERHEAD} s",
            "met": ov <= GOAL_OVERHEAD,
        }
        print(
            f"sandbox overhead (bwrap - none)/{n}, -j {jobs}: {ov:+6.3f} s/submission    (goal <= {GOAL_OVERHEAD} s: "
            f"{_met(ov <= GOAL_OVERHEAD)})"
        )
    if "otter" in folder:
        o = folder["otter"]["wall"]
        tag = "measured" if folder["otter"]["measured"] else "otter EXTRAPOLATED"
        best = min(folder[f"{m}-j{j}"]["wall"] for m in MODES for j in (1, 2))
        print(
            f"folder vs otter sequential ({tag}): bwrap -j1 {folder['bwrap-j1']['wall'] / o:.2f}, "
            f"bwrap -j2 {folder['bwrap-j2']['wall'] / o:.2f}, best of ours {best / o:.2f}"
        )
    print("=" * w)
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=40, help="submissions in the folder (default 40)")
    p.add_argument("--repeats", type=int, default=5, help="runs per command for one submission (default 5)")
    p.add_argument("--skip-otter", action="store_true", help="do not run otter-grader")
    p.add_argument("--skip-folder", action="store_true", help="only part 1 (one submission)")
    p.add_argument(
        "--otter-batch",
        action="store_true",
        help="run `otter run` over the n files one by one (default: extrapolate from part 1)",
    )
    p.add_argument("--otter-venv", type=Path, default=Path("/tmp/otter-venv"), help="venv holding otter-grader")
    p.add_argument("--json", type=Path, metavar="OUT", help="write the figures as JSON to OUT")
    p.add_argument(
        "--labs",
        default="all",
        help="part 3: labs whose reference is graded, comma-separated, 'all' (default) or 'none'",
    )
    p.add_argument("--lab-repeats", type=int, default=3, help="runs per lab and mode in part 3 (default 3)")
    p.add_argument("--only-labs", action="store_true", help="run part 3 only (no otter, no folder)")
    args = p.parse_args()
    from torchcontracts.course import lab_ids

    labs = lab_ids() if args.labs == "all" else [] if args.labs == "none" else args.labs.split(",")
    if not Path("/usr/bin/bwrap").exists() and not shutil.which("bwrap"):
        print("note: bwrap not found; the --sandbox bwrap runs will fail and say so")
    work = Path(tempfile.mkdtemp(prefix="bench-grade-"))
    load0 = os.getloadavg()
    env = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loadavg_start": load0,
        "n": args.n,
        "repeats": args.repeats,
        "lab": LAB,
    }
    try:
        import torch

        env["torch"] = torch.__version__
    except ImportError:
        pass
    print(
        f"bench_grade: {LAB}, python {env['python']}, torch {env.get('torch', '?')}, {env['cpus']} CPUs, "
        f"load average {load0[0]:.1f} {load0[1]:.1f} {load0[2]:.1f}",
        flush=True,
    )
    try:
        sub = work / "one.ipynb"
        sub.write_text(nbformat.writes(_solution_submission()))
        figures: dict[str, Any] = {}
        if not args.only_labs:
            otter = None if args.skip_otter else Otter(args.otter_venv, work)
            if otter:
                print(f"otter-grader {otter.version}{': ' + otter.error if otter.error else ''}", flush=True)
                env["otter"] = otter.version
            live = otter if otter and not otter.error else None
            one = bench_one(sub, args.repeats, live)
            folder = None if args.skip_folder else bench_folder(work, sub, args.n, live, args.otter_batch)
        every = bench_labs(work, labs, args.lab_repeats) if labs else None
        load1 = os.getloadavg()
        env["loadavg_end"] = load1
        if not args.only_labs:
            figures = report(one, folder, args.n, args.repeats, otter)
        if every is not None:
            report_labs(every, args.lab_repeats)
            figures["labs"] = every
        print(
            f"load average at the end: {load1[0]:.1f} {load1[1]:.1f} {load1[2]:.1f} "
            f"(on {env['cpus']} CPUs; a load above the CPU count inflates every figure)"
        )
        if args.json:
            args.json.write_text(json.dumps({"environment": env, **figures}, indent=2, default=str))
            print(f"wrote {args.json}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
