"""`torchcontracts grade`: grade one submission or a folder of them, in parallel, without being fooled.

How it works (details in grade_source, grade_kernel, grade_driver, grade_judge, grade_core):
rebuild the notebook from labs/ with only the learner's solution cells, run it in a fresh
kernel with memory and time limits in a scratch folder, call the learner's functions on inputs
made here with a fresh seed, and judge the saved outputs in this process. Hidden checks come
from solutions/ only.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Sequence

from .run import GradeOptions, GradeResult, grade_file
from .report import gradebook_row, gradescope, render, to_json
from .plan import lab_spec
from .submission import GradeSetupError, SubmissionError, course_labs, identify_lab, read_submission
from .forkserver import zygote

__all__ = ["cli_main", "grade_many"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="torchcontracts grade",
                                description="Grade lab notebooks: one file, or a folder into a gradebook.")
    p.add_argument("path", type=Path, help="a submitted .ipynb, or a folder of them")
    p.add_argument("--course", type=Path, help="course root (holds labs/ and solutions/); default: found upwards")
    p.add_argument("--lab", help="the lab every submission should be (default: from the notebooks)")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    p.add_argument("--gradescope", type=Path, metavar="RESULTS_JSON", help="write Gradescope's results.json")
    p.add_argument("--out", type=Path, default=Path("gradebook.csv"), help="gradebook CSV (folder mode)")
    p.add_argument("-j", "--jobs", type=int, default=1, help="submissions graded in parallel (folder mode)")
    p.add_argument("--cell-timeout", type=float, default=30.0, help="seconds per cell (default 30)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per submission (default 300)")
    p.add_argument("--mem-mb", type=int, default=4096, help="address-space limit of the kernel (default 4096)")
    p.add_argument("--seed", type=int, help="case seed (default: a fresh random seed per submission)")
    p.add_argument("--public-only", action="store_true",
                   help="grade public checks only (for a student copy without solutions/)")
    p.add_argument("--no-fork-server", action="store_true",
                   help="launch every kernel from scratch (slower; the default forks them from one warm process)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _worker(path: Path, opts: GradeOptions) -> GradeResult:
    """Grade one file; a grader bug becomes a problem row instead of stopping the batch."""
    warnings.filterwarnings("ignore")
    try:
        return grade_file(path, opts)
    except GradeSetupError:
        raise
    except Exception as err:  # noqa: BLE001 - keep the batch going, say what broke in one line
        return GradeResult(str(path), opts.lab, 0.0, 0.0, [],
                           [f"grader error: {type(err).__name__}: {str(err)[:160]} (please report it)"],
                           opts.seed or 0, 0.0)


def _expected_lab(paths: list[Path], root: Path) -> str | None:
    """The lab most of the folder's notebooks say they are."""
    seen: collections.Counter[str] = collections.Counter()
    for path in paths:
        try:
            seen[identify_lab(read_submission(path), path, root)[0]] += 1
        except SubmissionError:
            continue
    return seen.most_common(1)[0][0] if seen else None


def grade_many(paths: list[Path], opts: GradeOptions, jobs: int, progress: bool = True) -> list[GradeResult]:
    """Grade many files, ``jobs`` at a time (a tqdm bar on stderr); order is kept.

    Threads are enough: each submission runs in its own kernel process (forked from one
    server that imported torch once); this process only ships cases and judges outputs.
    """
    from tqdm import tqdm

    if opts.fork_server:
        zygote(wait=False)  # start the fork server while the first submissions are read
    results: dict[Path, GradeResult] = {}
    with tqdm(total=len(paths), desc="grading", unit="nb", disable=not progress, file=sys.stderr) as bar:
        with cf.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {pool.submit(_worker, p, opts): p for p in paths}
            for fut in cf.as_completed(futures):
                results[futures[fut]] = fut.result()
                bar.update()
    return [results[p] for p in paths]


def _folder(args: argparse.Namespace, opts: GradeOptions, root: Path) -> int:
    import pandas as pd

    paths = sorted(p for p in args.path.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    if not paths:
        print(f"grade: no .ipynb files in {args.path}")
        return 1
    lab = opts.lab or _expected_lab(paths, root)
    if lab is None:
        print(f"grade: no notebook in {args.path} names a lab of this course ({', '.join(course_labs(root))}); pass --lab")
        return 1
    spec = lab_spec(root, lab, public_only=opts.public_only)  # fail fast on a course problem
    jobs = max(1, args.jobs)
    opts = GradeOptions(**{**opts.__dict__, "lab": lab, "threads": max(1, (os.cpu_count() or 1) // jobs)})
    t0 = time.monotonic()
    results = grade_many(paths, opts, jobs, progress=not args.quiet)
    frame = pd.DataFrame([gradebook_row(r, list(spec.tasks)) for r in results])
    frame.to_csv(args.out, index=False)
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        with_problems = sum(bool(r.problems) for r in results)
        print(frame.drop(columns=["seed", "seconds", "problems"]).to_string(index=False))
        print(f"grade: {len(results)} submissions of {lab} in {time.monotonic() - t0:.1f} s with -j {jobs}; "
              f"{with_problems} with problems; wrote {args.out}")
    return 0


def cli_main(argv: list[str] | Sequence[str]) -> int:
    """Entry point of ``torchcontracts grade``; returns the exit code."""
    warnings.filterwarnings("ignore")
    args = _parser().parse_args(list(argv))
    try:
        from ..labformat import find_root

        try:
            root = (args.course or find_root()).resolve()
        except FileNotFoundError as err:
            print(f"grade: {err}, or pass --course DIR")
            return 2
        if not (root / "labs").is_dir():
            print(f"grade: {root} is not a course folder (it has no labs/): pass --course")
            return 2
        opts = GradeOptions(course=root, lab=args.lab, cell_timeout=args.cell_timeout, total_timeout=args.timeout,
                            mem_mb=args.mem_mb, seed=args.seed, public_only=args.public_only,
                            fork_server=not args.no_fork_server,
                            threads=max(1, os.cpu_count() or 1))
        if opts.fork_server:
            zygote(wait=False)  # the kernel fork server imports torch while this process reads the course
        if args.lab and args.lab not in course_labs(root):
            print(f"grade: unknown lab {args.lab!r}: this course has {', '.join(course_labs(root)) or 'no labs'}")
            return 2
        if args.path.is_dir():
            if args.gradescope:
                print("grade: --gradescope writes one submission's results; for a folder use --out gradebook.csv")
                return 2
            return _folder(args, opts, root)
        if not args.path.exists():
            print(f"grade: {args.path} does not exist")
            return 2
        result = _worker(args.path, opts)
    except (GradeSetupError, FileNotFoundError) as err:
        print(f"grade: {err}")
        return 2
    except KeyboardInterrupt:
        print("grade: interrupted")
        return 130
    print(to_json(result) if args.json else render(result))
    if args.gradescope:
        args.gradescope.parent.mkdir(parents=True, exist_ok=True)
        args.gradescope.write_text(json.dumps(gradescope(result), indent=2), encoding="utf-8")
    return 0 if result.tasks else 1
