"""`torchcontracts grade`: grade one submission or a folder of them, in parallel, without being fooled.

Exit codes: 0 when every submission was graded (whatever it scored), 1 when none could be
(a kernel that could not start, a refused file), 2 for a usage or course problem. SIGINT and
SIGTERM stop every kernel and remove the scratch folder before the grader exits.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import json
import os
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from torchcontracts.grading.forkserver import zygote
from torchcontracts.grading.sandbox import MODES, choose_mode
from torchcontracts.grading.submission import (
    GradeSetupError,
    SubmissionError,
    course_labs,
    identify_lab,
    read_submission,
)

if TYPE_CHECKING:
    from torchcontracts.grading.results import GradeOptions, GradeResult

__all__ = ["cli_main", "grade_many"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torchcontracts grade", description="Grade lab notebooks: one file, or a folder into a gradebook."
    )
    p.add_argument("path", type=Path, help="a submitted .ipynb, or a folder of them")
    p.add_argument("--course", type=Path, help="course root (holds labs/ and solutions/); default: found upwards")
    p.add_argument("--lab", help="the lab every submission must be: any other lab is refused (recommended)")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    p.add_argument("--gradescope", type=Path, metavar="RESULTS_JSON", help="write Gradescope's results.json")
    p.add_argument("--out", type=Path, default=Path("gradebook.csv"), help="gradebook CSV (folder mode)")
    p.add_argument("-j", "--jobs", type=int, default=1, help="submissions graded in parallel (folder mode)")
    p.add_argument(
        "--sandbox",
        choices=MODES,
        default="auto",
        help="bwrap: run kernels in a bubblewrap sandbox; none: no OS sandbox; auto (default): bwrap if it works here",
    )
    p.add_argument("--cell-timeout", type=float, default=30.0, help="seconds per cell (default 30)")
    p.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds per submission, its artefact judging included (default 300)",
    )
    p.add_argument("--mem-mb", type=int, default=4096, help="data-segment limit of the kernel in MB (default 4096)")
    p.add_argument("--seed", type=int, help="case seed (default: a fresh random seed per submission)")
    p.add_argument(
        "--public-only", action="store_true", help="grade public checks only (for a student copy without solutions/)"
    )
    p.add_argument(
        "--no-fork-server",
        action="store_true",
        help="start every kernel from scratch (slower; the default forks them from one warm process)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _refused(path: Path, opts: "GradeOptions", reason: str) -> "GradeResult":
    from torchcontracts.grading.results import GradeResult

    return GradeResult(str(path), opts.lab, 0.0, 0.0, [], [reason], opts.seed or 0, 0.0, opts.sandbox, graded=False)


def _worker(path: Path, opts: "GradeOptions") -> "GradeResult":
    """Grade one file; a grader bug becomes a problem row instead of stopping the batch."""
    from torchcontracts.grading.run import grade_file

    warnings.filterwarnings("ignore")
    try:
        return grade_file(path, opts)
    except GradeSetupError:
        raise
    except Exception as err:  # noqa: BLE001 - keep the batch going, say what broke in one line
        return _refused(path, opts, f"grader error: {type(err).__name__} (please report it)")


def graded(result: "GradeResult") -> bool:
    """True when the submission was really graded (not refused, and a kernel ran it)."""
    return result.graded


def _labs_of(paths: list[Path], root: Path) -> dict[Path, str | None]:
    labs: dict[Path, str | None] = {}
    for path in paths:
        try:
            labs[path] = identify_lab(read_submission(path), path, root)[0]
        except SubmissionError:
            labs[path] = None
    return labs


def grade_many(paths: list[Path], opts: "GradeOptions", jobs: int, progress: bool = True) -> list["GradeResult"]:
    """Grade many files, ``jobs`` at a time (a tqdm bar on stderr); order is kept.

    Threads are enough: each submission runs in its own kernel process (forked from one
    server that imported torch once); this process only ships cases and judges outputs.
    """
    from tqdm import tqdm

    results: dict[Path, Any] = {}
    with tqdm(total=len(paths), desc="grading", unit="nb", disable=not progress, file=sys.stderr) as bar:
        with cf.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {pool.submit(_worker, p, opts): p for p in paths}
            for fut in cf.as_completed(futures):
                results[futures[fut]] = fut.result()
                bar.update()
    return [results[p] for p in paths]


def _folder(args: argparse.Namespace, opts: "GradeOptions", root: Path) -> int:
    import pandas as pd

    from torchcontracts.grading.plan import lab_spec
    from torchcontracts.grading.report import gradebook_row

    paths = sorted(p for p in args.path.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    if not paths:
        print(f"grade: no .ipynb files in {args.path}")
        return 1
    labs = _labs_of(paths, root)
    seen = collections.Counter(lab for lab in labs.values() if lab)
    lab = opts.lab or (seen.most_common(1)[0][0] if seen else None)
    if lab is None:
        print(
            f"grade: no notebook in {args.path} names a lab of this course ({', '.join(course_labs(root))}); pass --lab"
        )
        return 1
    spec = lab_spec(root, lab, public_only=opts.public_only)  # fail fast on a course problem
    jobs = max(1, args.jobs)
    opts = type(opts)(**{**opts.__dict__, "lab": lab, "threads": max(1, (os.cpu_count() or 1) // jobs)})
    t0 = time.monotonic()
    results = grade_many(paths, opts, jobs, progress=not args.quiet)
    frame = pd.DataFrame([gradebook_row(r, list(spec.tasks)) for r in results])
    odd = [p.name for p, got in labs.items() if got and got != lab]
    frame.to_csv(args.out, index=False)
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        with_problems = sum(bool(r.problems) for r in results)
        print(frame.drop(columns=["seed", "seconds", "problems"]).to_string(index=False))
        print(
            f"grade: {len(results)} submissions of {lab} in {time.monotonic() - t0:.1f} s with -j {jobs} "
            f"(sandbox: {opts.sandbox}); {with_problems} with problems; wrote {args.out}"
        )
        if odd:
            print(
                f"grade: {len(odd)} notebooks are another lab and scored 0 (the gradebook's problems column "
                f"says which): {', '.join(odd[:5])}{' ...' if len(odd) > 5 else ''}"
            )
    return 0 if any(graded(r) for r in results) else 1


def _clean_stale_scratch() -> None:
    """Remove scratch folders that graders killed with SIGKILL left behind (their pid is gone)."""
    import shutil
    import tempfile

    for old in Path(tempfile.gettempdir()).glob("tc-grade-*-*"):
        pid = old.name.split("-")[2]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists() and sys.platform == "linux":
            shutil.rmtree(old, ignore_errors=True)


def _undumpable() -> None:
    """Make this process's /proc files (environ, mem) unreadable to other processes of the same user."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def _on_signal(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # unwinds every `with GradingKernel`, then atexit removes the scratch folder


def cli_main(argv: list[str] | Sequence[str]) -> int:
    """Entry point of ``torchcontracts grade``; returns the exit code."""
    warnings.filterwarnings("ignore")
    args = _parser().parse_args(list(argv))
    from torchcontracts.labs.format import find_root

    try:
        sandbox = choose_mode(args.sandbox)
    except RuntimeError as err:
        print(f"grade: {err}")
        return 2
    try:
        root = (args.course or find_root()).resolve()
    except FileNotFoundError as err:
        print(f"grade: {err}, or pass --course DIR")
        return 2
    if not (root / "labs").is_dir():
        print(f"grade: {root} is not a course folder (it has no labs/): pass --course")
        return 2
    _undumpable()
    _clean_stale_scratch()
    if not args.no_fork_server and sys.platform == "linux":
        zygote(sandbox, root, wait=False)  # the fork server imports torch while this process reads the course
    if threading_main():
        signal.signal(signal.SIGTERM, _on_signal)
        # SIGINT too: a grader started in the background of a script (`cmd &`) inherits SIGINT ignored, and Python
        # then installs no handler of its own, so Ctrl-C or `kill -INT` would be lost while kernels loop
        signal.signal(signal.SIGINT, _on_signal)
    from torchcontracts.grading.report import gradescope, render, to_json
    from torchcontracts.grading.run import GradeOptions

    opts = GradeOptions(
        course=root,
        lab=args.lab,
        cell_timeout=args.cell_timeout,
        total_timeout=args.timeout,
        mem_mb=args.mem_mb,
        seed=args.seed,
        public_only=args.public_only,
        fork_server=not args.no_fork_server,
        threads=max(1, os.cpu_count() or 1),
        sandbox=sandbox,
    )
    try:
        if args.lab and args.lab not in course_labs(root):
            print(f"grade: unknown lab {args.lab!r}: this course has {', '.join(course_labs(root)) or 'no labs'}")
            return 2
        if args.path.is_dir():
            if args.gradescope:
                print("grade: --gradescope writes one submission's results; for a folder use --out gradebook.csv")
                return 2
            return _folder(args, opts, root)
        if not args.path.exists() and not args.gradescope:
            print(f"grade: {args.path} does not exist")
            return 2
        result = (
            _worker(args.path, opts)
            if args.path.exists()
            else _refused(args.path, opts, f"the file {args.path.name} does not exist: check the submission's path")
        )
    except GradeSetupError as err:
        print(f"grade: {err}")
        return 2
    except KeyboardInterrupt:
        print("grade: interrupted; kernels stopped and the scratch folder removed")
        return 130
    print(to_json(result) if args.json else render(result))
    if args.gradescope:  # a refusal still writes a results file: score 0 and the one-line reason
        args.gradescope.parent.mkdir(parents=True, exist_ok=True)
        args.gradescope.write_text(json.dumps(gradescope(result), indent=2), encoding="utf-8")
    return 0 if graded(result) else 1


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
