"""Grade one submission: rebuild it, run it in a limited kernel, judge the saved outputs here, score it.

Scores come only from outputs judged in this process. What the learner's kernel reports about
itself (identity snapshots) can only lower a score: replaced torch or course code => 0 for all tasks.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from ..check import Case, Check, CheckOutcome, LabSpec
from .judge import MAX_CASE_BYTES, judge_check
from .kernel import GradingKernel
from .plan import Plan, lab_spec, plan_run
from .submission import GradeSetupError, SubmissionError, identify_lab, read_submission

__all__ = ["CheckResult", "GradeOptions", "GradeResult", "TaskResult", "grade_file"]


@dataclasses.dataclass(frozen=True)
class GradeOptions:
    """Limits and choices for one grading run."""

    course: Path
    lab: str | None = None  # expected lab (batch mode); None = whatever the notebook says
    cell_timeout: float = 30.0
    total_timeout: float = 300.0
    mem_mb: int = 4096
    threads: int = 1
    seed: int | None = None
    public_only: bool = False
    fork_server: bool = True  # fork kernels from one process that imported torch (Linux); False: launch each


@dataclasses.dataclass
class CheckResult:
    """One check's verdict as shown to the learner (hidden checks carry generic names)."""

    task: str
    name: str
    hidden: bool
    ok: bool
    reason: str
    score: float
    max_score: float


@dataclasses.dataclass
class TaskResult:
    """One task: points earned, the one-line reason, and its checks."""

    id: str
    title: str
    score: float
    max_score: float
    reason: str
    checks: list[CheckResult]


@dataclasses.dataclass
class GradeResult:
    """Everything the reports need about one graded submission."""

    submission: str
    lab: str | None
    score: float
    max_score: float
    tasks: list[TaskResult]
    problems: list[str]
    seed: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class _KernelLog:
    """What happened in one kernel, per task: a reason that zeroes its checks, and notes."""

    fail: dict[str, str] = dataclasses.field(default_factory=dict)
    notes: dict[str, str] = dataclasses.field(default_factory=dict)
    tamper: list[str] = dataclasses.field(default_factory=list)


def _take_snapshot(io: Path, tag: str) -> dict[str, int] | None:
    """Read one identity snapshot the kernel wrote, and delete it (a stale one can never be reused)."""
    path = io / f"snap-{tag}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        path.unlink()
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _changed(base: dict[str, int], now: dict[str, int], into: list[str]) -> None:
    """Add the names whose identity differs from the baseline."""
    for name, ident in base.items():
        if now.get(name) != ident and name not in into:
            into.append(name)


def _describe_tamper(names: list[str]) -> str:
    said = []
    if "reading solutions/" in names:
        said.append("tried to read the course's solutions/ (blocked)")
        names = [n for n in names if n != "reading solutions/"]
    words = [f"{n[len('sys.modules['):-1]} module" if n.startswith("sys.modules[") else n for n in names]
    more = f" and {len(words) - 3} more" if len(words) > 3 else ""
    if words:
        said.insert(0, ", ".join(words[:3]) + more + " replaced")
    return "tampering detected: " + "; ".join(said)


def _collect(out: Path, checks: set[int], into: dict[str, bytes]) -> None:
    """Move the outputs of these checks into memory, and delete every other file the kernel left there."""
    if not out.is_dir():
        return
    for path in out.iterdir():
        try:
            if path.is_file() and path.name.split("-")[0].split(".")[0] in {str(c) for c in checks}:
                if path.stat().st_size <= MAX_CASE_BYTES:
                    into[path.name] = path.read_bytes()
                else:
                    into[path.name] = b"too large"
            path.unlink()
        except OSError:
            continue


def _run_kernel(plan: Plan, spec: LabSpec, jobs: dict[str, list[dict[str, Any]]], opts: GradeOptions,
                scratch: Path, name: str, deadline: float, collected: dict[str, bytes]) -> _KernelLog:
    """Run the plan in one fresh kernel, with a driver cell for each task that has jobs here."""
    log = _KernelLog()
    io = scratch / f"io-{name}"
    io.mkdir()
    labchecks = f"torchcontracts.labchecks.{plan.lab}"
    tasks_here = [t for t in spec.tasks if jobs.get(t)]
    with GradingKernel(scratch / f"work-{name}", mem_mb=opts.mem_mb, threads=opts.threads,
                       fork=opts.fork_server) as kernel:
        guard = str(opts.course / "solutions")
        start = (f"__import__('torchcontracts.grading.driver', fromlist=['start']).start({str(io)!r}, {labchecks!r}, "
                 f"{opts.threads}, {guard!r})")
        first = kernel.run(start, max(60.0, opts.cell_timeout))
        base = _take_snapshot(io, "baseline")  # read before any learner code runs
        if first.status != "ok" or base is None:
            why = kernel.dead_reason or first.one_line()
            for t in tasks_here:
                log.fail[t] = f"not graded: the grading kernel could not start ({why})"
            return log
        done: set[str] = set()
        guard_log = io / "guard.log"
        for step in plan.steps:
            for stale in io.glob("snap-*.json"):  # only a snapshot written during this step counts
                stale.unlink()
            if step.kind == "driver" and not jobs.get(step.task):
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                for t in tasks_here:
                    if t not in done:
                        log.fail[t] = f"not graded: the total time limit of {opts.total_timeout:g} s ran out"
                break
            if step.kind == "driver":
                spec_path = io / f"jobs-{step.task}.json"
                spec_path.write_text(json.dumps({"tag": step.task, "jobs": jobs[step.task]}), encoding="utf-8")
                code = f"__import__('torchcontracts.grading.driver', fromlist=['drive']).drive({str(spec_path)!r})"
            else:
                code = step.source
            run = kernel.run(code, min(opts.cell_timeout, left))
            if guard_log.exists() and guard_log.stat().st_size and "reading solutions/" not in log.tamper:
                log.tamper.append("reading solutions/")
            if step.kind == "driver":  # take the outputs now: no later learner code can touch them
                _collect(io / "out", {j["check"] for j in jobs[step.task]}, collected)
                snap = _take_snapshot(io, step.task)
                if snap is not None:
                    _changed(base, snap, log.tamper)
            where = f"the {step.task} cell" if step.kind == "student" else (
                f"the {step.task} checks" if step.kind == "driver" else "a course cell")
            if step.kind == "driver":
                done.add(step.task)
                if run.status in ("ok", "error") and snap is None and "the grader's driver" not in log.tamper:
                    log.tamper.append("the grader's driver")
                if run.status == "timeout":
                    log.fail[step.task] = f"timed out after {min(opts.cell_timeout, left):.3g} s"
                elif run.status == "error":
                    log.fail[step.task] = f"the grading driver failed ({run.one_line()}): was the kernel disturbed?"
            elif step.kind == "student" and run.status in ("error", "timeout") and step.task not in log.notes:
                said = f"timed out after {run.seconds:.0f} s" if run.status == "timeout" else f"raised {run.ename}"
                log.notes[step.task] = f"its cell {said}"
            if not kernel.alive:
                why = kernel.dead_reason or run.evalue
                for t in tasks_here:
                    if t not in done or t == step.task and step.kind == "driver" and t not in log.fail:
                        log.fail.setdefault(t, f"not graded: {why} in {where}")
                break
        if kernel.alive:
            kernel.run("__import__('torchcontracts.grading.driver', fromlist=['snapshot']).snapshot('final')",
                       max(10.0, min(opts.cell_timeout, 30.0)))
            final = _take_snapshot(io, "final")
            if final is not None:
                _changed(base, final, log.tamper)
    drivers = [n for n in log.tamper if n == "the grader's driver"]  # said last: the replaced names come first
    log.tamper = [n for n in log.tamper if n != "the grader's driver"] + drivers
    return log


def _jobs(spec: LabSpec, checks: list[tuple[int, Check]], cases: dict[int, list[Case]], io: Path) -> dict[str, list[dict[str, Any]]]:
    """Ship the cases with torch.save; hidden labels stay in the grader."""
    jobs: dict[str, list[dict[str, Any]]] = {}
    io.mkdir(exist_ok=True)
    for idx, check in checks:
        path = io / f"cases-{idx}.pt"
        torch.save([("" if check.hidden else c.label, c.args) for c in cases[idx]], path)
        jobs.setdefault(check.task, []).append({"check": idx, "target": check.target, "cases": str(path),
                                                "call": check.call.__name__ if check.call else None})
    return jobs


def _score(spec: LabSpec, plan: Plan, outcomes: dict[int, CheckOutcome], logs: dict[int, _KernelLog],
           tamper: str) -> list[TaskResult]:
    results = []
    for task in spec.tasks.values():
        checks = [(i, c) for i, c in enumerate(spec.checks) if c.task == task.id]
        each = task.points / len(checks) if checks else 0.0
        rows: list[CheckResult] = []
        hidden_n = 0
        first, judged = "", True
        for idx, check in checks:
            hidden_n += check.hidden
            name = f"hidden check {hidden_n} of {task.id}" if check.hidden else check.name
            log = logs[idx]
            if tamper:
                ok, reason, whole = False, tamper, True
            elif task.id in plan.missing:
                ok, reason, whole = False, f"not implemented: its solution cell ({plan.lab}/{task.id}) is missing", True
            elif task.id in log.fail:
                ok, reason, whole = False, log.fail[task.id], True
            else:
                out = outcomes[idx]
                ok, reason, whole = out.ok, out.reason, out.reason == "not implemented" or out.reason.startswith("`")
            rows.append(CheckResult(task.id, name, check.hidden, ok, reason, round(each if ok else 0.0, 4), round(each, 4)))
            if not ok and not first:
                first = reason if whole else f"{name}: {reason}"
                judged = not (tamper or task.id in plan.missing or task.id in log.fail)
        passed = sum(r.ok for r in rows)
        score = round(task.points * passed / len(rows), 4) if rows else 0.0
        bad = [r for r in rows if not r.ok]
        reason = f"all {len(rows)} checks pass" if not bad else first
        note = next((lg.notes[task.id] for lg in logs.values() if task.id in lg.notes), "")
        if note and bad and judged and "NotImplementedError" not in note:
            reason += f" ({note})"
        results.append(TaskResult(task.id, task.title, score, task.points, reason, rows))
    return results


def grade_file(path: Path, opts: GradeOptions) -> GradeResult:
    """Grade one notebook; never raises for a bad submission (the reason goes to ``problems``)."""
    t0 = time.monotonic()
    seed = opts.seed if opts.seed is not None else secrets.randbelow(2**31)
    lab: str | None = None
    problems: list[str] = []
    spec: LabSpec | None = None
    try:
        nb = read_submission(path)
        lab, note = identify_lab(nb, path, opts.course, opts.lab)
        if note:
            problems.append(note)
        spec = lab_spec(opts.course, lab, public_only=opts.public_only)
        plan = plan_run(opts.course, lab, nb, list(spec.tasks))
    except SubmissionError as err:
        if opts.lab and spec is None:
            try:
                spec = lab_spec(opts.course, opts.lab, public_only=opts.public_only)
            except GradeSetupError:
                spec = None
        tasks = [TaskResult(t.id, t.title, 0.0, t.points, str(err), []) for t in (spec.tasks.values() if spec else [])]
        return GradeResult(str(path), opts.lab or lab, 0.0, spec.total_points if spec else 0.0, tasks,
                           [str(err)], seed, time.monotonic() - t0)
    if opts.public_only:
        problems.append("public checks only: hidden checks were not run")
    indexed = list(enumerate(spec.checks))
    cases = {}
    for idx, check in indexed:
        try:
            cases[idx] = list(check.cases(seed))
        except Exception as err:  # noqa: BLE001 - a course bug, not the learner's
            raise GradeSetupError(f"check {check.name!r}: cases({seed}) failed: {type(err).__name__}: {err}") from None
    scratch = Path(tempfile.mkdtemp(prefix="tc-grade-"))
    try:
        deadline = t0 + opts.total_timeout
        groups = {"main": [(i, c) for i, c in indexed if not c.fresh_kernel],
                  "fresh": [(i, c) for i, c in indexed if c.fresh_kernel]}
        logs: dict[int, _KernelLog] = {}
        outcomes: dict[int, CheckOutcome] = {}
        for name, members in groups.items():
            if not members:
                continue
            jobs = _jobs(spec, members, cases, scratch / f"cases-{name}")
            collected: dict[str, bytes] = {}
            log = _run_kernel(plan, spec, jobs, opts, scratch, name, deadline, collected)
            for idx, check in members:
                logs[idx] = log
                outcomes[idx] = judge_check(check, idx, cases[idx], collected, opts.mem_mb)
        tamper_names = [n for lg in {id(v): v for v in logs.values()}.values() for n in lg.tamper]
        tamper = _describe_tamper(list(dict.fromkeys(tamper_names))) if tamper_names else ""
        if tamper:
            problems.append(tamper)
        tasks = _score(spec, plan, outcomes, logs, tamper)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for t in tasks:
        if t.reason.startswith("not graded: the kernel") and t.reason not in problems:
            problems.append(t.reason)
    total = round(sum(t.score for t in tasks), 4)
    return GradeResult(str(path), lab, total, spec.total_points, tasks, problems, seed, time.monotonic() - t0)
